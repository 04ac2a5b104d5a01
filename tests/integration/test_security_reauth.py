"""KIP-368 re-authentication against a real `diskless serve` with connections.max.reauth.ms set:
librdkafka (confluent-kafka), told the session lifetime, re-authenticates and produces and
consumes exact records across several lifetimes on the same connections; raw clients show the
broker's side: SaslAuthenticate v1 answers session_lifetime_ms, a connection that does not
re-authenticate is closed at its first request after expiry (unanswered, as Kafka), one that
re-authenticates goes on, re-authenticating as another user is refused, and a v0 client (which
cannot re-authenticate) is told no lifetime and never cut. /metrics counts re-authentications
and expired connections killed per listener, as Kafka's socket-server-metrics.

The lifetimes are short (seconds) so that a test sees several; waits are conditions polled
with deadlines (a request answered or refused), never sleeps.
"""

from __future__ import annotations

import asyncio
import base64
import select
import time
import urllib.request
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_authenticate.v0.request import SaslAuthenticateRequest as SaslAuthenticateV0
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from prometheus_client.parser import text_string_to_metric_families

from diskless.client import ClientSecurity
from diskless.client import Consumer as OurConsumer
from diskless.client import Producer as OurProducer
from tests.integration.broker_process import BrokerProcess, free_port
from tests.integration.security_certs import make_pki

DEADLINE_S = 30.0
REAUTH_MS = 1500  # connections.max.reauth.ms of this broker
PASSWORD = "alice-secret"
METADATA = MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)


@pytest.fixture(scope="module")
def reauth_broker(tmp_path_factory):
    work = tmp_path_factory.mktemp("reauth")
    pki = make_pki(work / "pki")
    ports = {"SASL_SSL": free_port(), "SASL_PLAINTEXT": free_port()}
    http = f"127.0.0.1:{free_port()}"
    broker = BrokerProcess(
        work / "data", "--listeners", ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "--ssl-keystore-location", str(pki.server), "--connections-max-reauth-ms", str(REAUTH_MS),
        "--connection-failed-authentication-delay-ms", "100", "--http", http,
    ).start()  # fmt: skip
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    upserts = [UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), PASSWORD.encode())
               for user in ("alice", "bob")]  # fmt: skip
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(timeout=20)
    yield broker, pki, ports, http
    broker.close()


def _lines(broker: BrokerProcess, text: str) -> list[str]:
    return [line for line in broker.log_text().splitlines() if text in line]


def test_librdkafka_reauthenticates_and_keeps_producing_across_lifetimes(reauth_broker) -> None:
    broker, pki, ports, _http = reauth_broker
    topic = f"t-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept until the answer: a destroyed client fails its futures
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=20)
    config = {"bootstrap.servers": f"127.0.0.1:{ports['SASL_SSL']}", "security.protocol": "SASL_SSL",
              "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": PASSWORD,
              "ssl.ca.location": str(pki.ca), "client.id": "reauth-producer"}  # fmt: skip
    reauthenticated_before = len(_lines(broker, "re-authenticated as User:alice with SCRAM-SHA-512 on listener SASL_SSL"))
    closes_before = len(_lines(broker, "SASL session expired without re-authentication"))
    producer = Producer({**config, "linger.ms": 0})
    reports: list = []
    sent = 0
    # Produce, one acknowledged record at a time, for four lifetimes on the same producer.
    start = time.monotonic()
    while time.monotonic() - start < 4 * REAUTH_MS / 1000:
        producer.produce(topic, f"r{sent}".encode(), on_delivery=lambda err, m: reports.append(err or m.offset()))
        sent += 1
        assert producer.flush(DEADLINE_S) == 0
    producer.flush(DEADLINE_S)
    assert reports == list(range(sent))  # every record delivered once, in order, no error

    consumer = Consumer({**config, "client.id": "reauth-consumer", "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        # Read slowly enough that the consumer's session, too, lives through lifetimes: one
        # record per poll, and then keep polling (and fetching) for two more lifetimes.
        while len(values) < sent and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
        idle_until = time.monotonic() + 2 * REAUTH_MS / 1000
        while time.monotonic() < idle_until:
            message = consumer.poll(0.2)
            assert message is None or message.error() is None, message.error()
    finally:
        consumer.close()
    assert values == [f"r{i}".encode() for i in range(sent)]
    producer.produce(topic, b"last", on_delivery=lambda err, m: reports.append(err or m.offset()))
    assert producer.flush(DEADLINE_S) == 0 and reports[-1] == sent

    reauthentications = _lines(broker, "re-authenticated as User:alice with SCRAM-SHA-512 on listener SASL_SSL")
    assert len(reauthentications) - reauthenticated_before >= 3  # the producer alone lived through four lifetimes
    assert all(f"(session lifetime {REAUTH_MS} ms)" in line for line in reauthentications)
    assert len(_lines(broker, "SASL session expired without re-authentication")) == closes_before  # nobody was cut


def test_our_asyncio_client_reauthenticates_and_keeps_producing_across_lifetimes(reauth_broker) -> None:
    broker, pki, ports, _http = reauth_broker
    topic, group = f"t-{uuid.uuid4().hex[:10]}", f"g-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=20)
    security = ClientSecurity(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", sasl_username="alice",
                              sasl_password=PASSWORD, ssl_cafile=str(pki.ca))  # fmt: skip
    bootstrap = f"127.0.0.1:{ports['SASL_SSL']}"
    reauthenticated_before = len(_lines(broker, "re-authenticated as User:alice with SCRAM-SHA-512 on listener SASL_SSL"))
    closes_before = len(_lines(broker, "SASL session expired without re-authentication"))

    async def run() -> tuple[list[int], list[bytes]]:
        offsets: list[int] = []
        values: list[bytes] = []
        async with (
            OurProducer(bootstrap, security=security, linger_ms=0) as producer,
            # A connection re-authenticates once its requests in flight are answered (as Java's
            # client does): a 500 ms long poll would eat most of this short lifetime's margin.
            OurConsumer(topic, bootstrap_servers=bootstrap, security=security, group_id=group, auto_offset_reset="earliest",
                        fetch_max_wait_ms=100) as consumer,
        ):  # fmt: skip
            # Four lifetimes of one acknowledged record at a time, read back as they come: both
            # clients' connections re-authenticate with requests in flight and arriving.
            start = time.monotonic()
            while time.monotonic() - start < 4 * REAUTH_MS / 1000:
                offsets.append((await producer.send_and_wait(topic, f"o{len(offsets)}".encode())).offset)
                batches = await consumer.getmany(timeout_ms=0)
                values += [r.value for batch in batches.values() for r in batch]
            async with asyncio.timeout(DEADLINE_S):
                while len(values) < len(offsets):
                    batches = await consumer.getmany(timeout_ms=500)
                    values += [r.value for batch in batches.values() for r in batch]
        return offsets, values

    offsets, values = asyncio.run(run())
    assert offsets == list(range(len(offsets)))
    assert values == [f"o{i}".encode() for i in range(len(offsets))]
    reauthentications = len(_lines(broker, "re-authenticated as User:alice with SCRAM-SHA-512 on listener SASL_SSL"))
    assert reauthentications - reauthenticated_before >= 6  # each client's connection, at least three times
    assert len(_lines(broker, "SASL session expired without re-authentication")) == closes_before  # nobody was cut


def _login(wire, port: int, user: str = "alice", version: int = 2) -> tuple[object, object]:
    client = wire(f"127.0.0.1:{port}")
    assert client.request(SaslHandshakeRequest(mechanism="PLAIN")).error_code == ErrorCode.none
    request = (SaslAuthenticateRequest if version == 2 else SaslAuthenticateV0)(auth_bytes=f"\0{user}\0{PASSWORD}".encode())
    return client, client.request(request)


def _paced(client) -> None:
    """Between two requests of a raw client: 50 ms, or less if the broker closes the connection."""
    select.select([client.sock], [], [], 0.05)


def _until_cut(client, deadline_s: float) -> tuple[int, float]:
    """Send Metadata until the broker closes the connection: (requests answered, when cut)."""
    answered = 0
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            client.request(METADATA, timeout_s=10)
        except ConnectionError:
            return answered, time.monotonic()
        answered += 1
        _paced(client)
    raise AssertionError(f"not cut within {deadline_s} s ({answered} requests answered)")


def test_a_client_that_does_not_reauthenticate_is_cut_at_its_first_request_after_expiry(reauth_broker, wire) -> None:
    broker, _pki, ports, _http = reauth_broker
    # Before the login: the broker's session starts after this, so its expiry is at least
    # REAUTH_MS later (after the answer arrives would be up to a round trip late).
    logging_in_at = time.monotonic()
    client, answer = _login(wire, ports["SASL_PLAINTEXT"])
    assert (answer.error_code, answer.session_lifetime.total_seconds() * 1000) == (ErrorCode.none, REAUTH_MS)
    answered, cut_at = _until_cut(client, DEADLINE_S)
    assert answered >= 1  # served while the session held
    assert cut_at - logging_in_at >= REAUTH_MS / 1000  # and cut only after it expired
    deadline = time.monotonic() + DEADLINE_S
    while not _lines(broker, "SASL session expired without re-authentication") and time.monotonic() < deadline:
        time.sleep(0.05)  # the broker logs the close in its own time: poll its log with a deadline
    line = _lines(broker, "SASL session expired without re-authentication")[-1]
    assert f"(api key 3 version 12): SASL session expired without re-authentication (connections.max.reauth.ms={REAUTH_MS})" in line


def test_a_client_that_reauthenticates_goes_on_and_cannot_become_someone_else(reauth_broker, wire) -> None:
    broker, _pki, ports, _http = reauth_broker
    client, answer = _login(wire, ports["SASL_PLAINTEXT"])
    assert answer.error_code == ErrorCode.none
    expiries = 0
    renewed_at = time.monotonic()
    # Re-authenticate at half the lifetime, three times: past three original lifetimes in all.
    while expiries < 3:
        deadline = renewed_at + REAUTH_MS / 2000
        while time.monotonic() < deadline:
            assert client.request(METADATA).brokers  # served all along
            _paced(client)
        assert client.request(SaslHandshakeRequest(mechanism="PLAIN")).error_code == ErrorCode.none
        again = client.request(SaslAuthenticateRequest(auth_bytes=f"\0alice\0{PASSWORD}".encode()))
        assert (again.error_code, again.session_lifetime.total_seconds() * 1000) == (ErrorCode.none, REAUTH_MS)
        renewed_at = time.monotonic()
        expiries += 1
    assert client.request(METADATA).brokers
    # Re-authenticating as bob on alice's connection is refused, and the connection closed.
    assert client.request(SaslHandshakeRequest(mechanism="PLAIN")).error_code == ErrorCode.none
    refused = client.request(SaslAuthenticateRequest(auth_bytes=f"\0bob\0{PASSWORD}".encode()))
    assert refused.error_code == ErrorCode.sasl_authentication_failed
    with pytest.raises(ConnectionError):
        client.request(METADATA)
    assert _lines(broker, "cannot change principals during re-authentication from User:alice: User:bob")


def test_a_v0_client_is_told_no_lifetime_and_never_cut(reauth_broker, wire) -> None:
    _broker, _pki, ports, _http = reauth_broker
    client, answer = _login(wire, ports["SASL_PLAINTEXT"], version=0)
    assert answer.error_code == ErrorCode.none  # v0 has no session_lifetime_ms field
    until = time.monotonic() + 2 * REAUTH_MS / 1000
    answered = 0
    while time.monotonic() < until:
        assert client.request(METADATA).brokers
        answered += 1
        _paced(client)
    assert answered >= 2


SOCKET_SERVER = "kafka_server_socket_server_metrics_"


def _socket_server_metrics(http: str, listener: str) -> dict[str, float]:
    """The socket-server samples of one listener on /metrics, by name without the prefix (the
    admin endpoint asks for a SCRAM user: a listener uses SASL)."""
    request = urllib.request.Request(f"http://{http}/metrics")
    request.add_header("Authorization", "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode())
    with urllib.request.urlopen(request, timeout=10) as answer:
        text = answer.read().decode()
    return {
        s.name.removeprefix(SOCKET_SERVER): s.value for f in text_string_to_metric_families(text) for s in f.samples
        if s.name.startswith(SOCKET_SERVER) and s.labels.get("listener") == listener
    }  # fmt: skip


AUTHENTICATION_METRICS = (
    "successful_authentication_total", "failed_authentication_total", "successful_reauthentication_total",
    "failed_reauthentication_total", "expired_connections_killed_count",
)  # fmt: skip


def test_reauthentications_and_expired_connections_are_counted_per_listener(reauth_broker, wire) -> None:
    _broker, _pki, ports, http = reauth_broker

    def moved_since(before: dict[str, float]) -> dict[str, float]:
        now = _socket_server_metrics(http, "SASL_PLAINTEXT")
        return {name: now.get(name, 0.0) - before.get(name, 0.0) for name in AUTHENTICATION_METRICS}

    before = _socket_server_metrics(http, "SASL_PLAINTEXT")
    client, answer = _login(wire, ports["SASL_PLAINTEXT"])
    assert answer.error_code == ErrorCode.none
    for _ in range(2):  # two re-authentications, well inside the lifetime
        assert client.request(SaslHandshakeRequest(mechanism="PLAIN")).error_code == ErrorCode.none
        again = client.request(SaslAuthenticateRequest(auth_bytes=f"\0alice\0{PASSWORD}".encode()))
        assert again.error_code == ErrorCode.none
        assert client.request(METADATA).brokers
    assert moved_since(before) == {
        "successful_authentication_total": 1, "failed_authentication_total": 0, "successful_reauthentication_total": 2,
        "failed_reauthentication_total": 0, "expired_connections_killed_count": 0,
    }  # fmt: skip

    # Re-authenticating as someone else is a failed re-authentication, not a failed authentication.
    assert client.request(SaslHandshakeRequest(mechanism="PLAIN")).error_code == ErrorCode.none
    refused = client.request(SaslAuthenticateRequest(auth_bytes=f"\0bob\0{PASSWORD}".encode()))
    assert refused.error_code == ErrorCode.sasl_authentication_failed
    assert moved_since(before)["failed_reauthentication_total"] == 1

    # One connection that lets its session expire, cut at its next request.
    cut, answer = _login(wire, ports["SASL_PLAINTEXT"])
    assert answer.error_code == ErrorCode.none
    _until_cut(cut, DEADLINE_S)
    deadline = time.monotonic() + DEADLINE_S
    while moved_since(before)["expired_connections_killed_count"] < 1 and time.monotonic() < deadline:
        time.sleep(0.05)  # counted just before the broker closes, so normally already there: poll with a deadline
    assert moved_since(before) == {
        "successful_authentication_total": 2, "failed_authentication_total": 0, "successful_reauthentication_total": 2,
        "failed_reauthentication_total": 1, "expired_connections_killed_count": 1,
    }  # fmt: skip
