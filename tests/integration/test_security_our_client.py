"""Our asyncio Producer and Consumer over SASL_SSL against a real `diskless serve`: TLS from a
CA made in the test (security_certs.py), SASL PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 with the
same `security=ClientSecurity(...)` the Admin client takes; one producer and one consumer kept
across several rounds of sends and reads (one login each); a wrong password and an unknown
user refused with Kafka's SASL_AUTHENTICATION_FAILED in one line.

One broker for the module: PLAINTEXT (where our Admin creates the users, as on a Kafka internal
listener) and SASL_SSL.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from diskless.client import Admin, ClientSecurity, Consumer, Producer, SaslAuthenticationFailedError, TopicPartition
from tests.integration.broker_process import BrokerProcess, free_port
from tests.integration.security_certs import make_pki

DEADLINE_S = 30.0
PASSWORD = "alice-secret"
DELAY_MS = 100  # connection.failed.authentication.delay.ms for this broker
REFUSAL = "Authentication failed during authentication due to invalid credentials with SASL mechanism"


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    work = tmp_path_factory.mktemp("secured-our-client")
    pki = make_pki(work / "pki")
    port = free_port()
    broker = BrokerProcess(
        work / "data", "--listeners", f"SASL_SSL://127.0.0.1:{port}", "--ssl-keystore-location", str(pki.server),
        "--connection-failed-authentication-delay-ms", str(DELAY_MS),
    ).start()  # fmt: skip

    async def create_users() -> None:
        async with Admin(broker.bootstrap) as admin:
            for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
                await admin.upsert_user_scram_credential("alice", PASSWORD, mechanism)

    asyncio.run(create_users())
    yield broker, pki, port
    broker.close()


def _security(pki, mechanism: str = "SCRAM-SHA-512", user: str = "alice", password: str = PASSWORD) -> ClientSecurity:
    return ClientSecurity(security_protocol="SASL_SSL", sasl_mechanism=mechanism, sasl_username=user, sasl_password=password,
                          ssl_cafile=str(pki.ca))  # fmt: skip


async def _read(consumer: Consumer, count: int) -> list[tuple[int, int, bytes | None, bytes | None, tuple]]:
    """`count` records (partition, offset, key, value, headers) in the order getmany hands them out."""
    got: list[tuple[int, int, bytes | None, bytes | None, tuple]] = []
    async with asyncio.timeout(DEADLINE_S):
        while len(got) < count:
            batches = await consumer.getmany(timeout_ms=500)
            got += [(r.partition, r.offset, r.key, r.value, r.headers) for batch in batches.values() for r in batch]
    return got


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
def test_producer_and_consumer_over_sasl_ssl(secured, mechanism: str) -> None:
    broker, pki, port = secured
    security = _security(pki, mechanism)
    bootstrap = f"127.0.0.1:{port}"
    topic, group = f"t-{uuid.uuid4().hex[:10]}", f"g-{uuid.uuid4().hex[:8]}"
    login = f"authenticated as User:alice with {mechanism} on listener SASL_SSL"
    logins_before = broker.log_text().count(login)

    async def run() -> tuple[list, list, int | None]:
        async with Admin(bootstrap, security=security) as admin:
            await admin.create_topics(topic, num_partitions=2)
        async with (
            Producer(bootstrap, security=security, linger_ms=0) as producer,
            Consumer(topic, bootstrap_servers=bootstrap, security=security, group_id=group, auto_offset_reset="earliest",
                     enable_auto_commit=False) as consumer,
        ):  # fmt: skip
            # Round one: one record at a time, acknowledged before the next.
            first = [await producer.send_and_wait(topic, f"one-{i}".encode(), key=b"k", partition=0, headers=[("n", str(i).encode())])
                     for i in range(5)]  # fmt: skip
            assert [(m.partition, m.offset) for m in first] == [(0, i) for i in range(5)]
            round_one = await _read(consumer, 5)
            # Round two, through the same objects: many in flight, then one flush.
            deliveries = [await producer.send(topic, f"two-{i}".encode(), key=None, partition=1) for i in range(20)]
            await producer.flush()
            assert [(d.result().partition, d.result().offset) for d in deliveries] == [(1, i) for i in range(20)]
            round_two = await _read(consumer, 20)
            await consumer.commit()
            committed = await consumer.committed(TopicPartition(topic, 1))
        return round_one, round_two, committed

    round_one, round_two, committed = asyncio.run(run())
    assert round_one == [(0, i, b"k", f"one-{i}".encode(), (("n", str(i).encode()),)) for i in range(5)]
    assert round_two == [(1, i, None, f"two-{i}".encode(), ()) for i in range(20)]
    assert committed == 20
    # The admin client and the producer logged in once each, the consumer twice (its group
    # coordinator has a connection of its own): connections are kept.
    assert broker.log_text().count(login) - logins_before == 4


@pytest.mark.parametrize(("user", "password", "reason"), [("alice", "wrong", "wrong password"), ("mallory", PASSWORD, "unknown user")])
def test_a_refused_login_is_kafkas_error_in_one_line(secured, user: str, password: str, reason: str) -> None:
    broker, pki, port = secured
    security = _security(pki, "SCRAM-SHA-512", user, password)
    bootstrap = f"127.0.0.1:{port}"
    expected = f"SASL_AUTHENTICATION_FAILED (host=127.0.0.1, port={port}): {REFUSAL} SCRAM-SHA-512"

    async def start(client: Producer | Consumer) -> None:
        async with asyncio.timeout(DEADLINE_S):  # refused at once (after the broker's delay), not retried until a timeout
            async with client:
                pass

    for client in (Producer(bootstrap, security=security), Consumer(bootstrap_servers=bootstrap, security=security, group_id="g")):
        with pytest.raises(SaslAuthenticationFailedError) as refused:
            asyncio.run(start(client))
        assert str(refused.value) == expected
        assert refused.value.errno == 58 and not refused.value.retriable
        assert refused.value.__cause__ is None and refused.value.__context__ is None
    assert sum(f"user {user}, mechanism SCRAM-SHA-512, listener SASL_SSL: {reason}" in line
               for line in broker.log_text().splitlines()) == 2  # logged before the answer  # fmt: skip
