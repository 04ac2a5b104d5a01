"""Authentication on a real `diskless serve`: SCRAM-SHA-512 over TLS (SASL_SSL) with
confluent-kafka (librdkafka), aiokafka, kafka-python and kcat, each producing and consuming;
wrong passwords, unknown users and plaintext clients on a TLS listener refused with the errors
Kafka gives; Metadata advertising the listener a client came in on.

One broker for the module, with four listeners: PLAINTEXT (where the users are created with
AlterUserScramCredentials, as on a Kafka internal listener), SASL_SSL, SSL and SASL_PLAINTEXT.
The CA and the server certificate are made in the test (security_certs.py).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import subprocess
import time
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError as AioConnectionError
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError as KpKafkaError
from kio.schema.metadata.v12.request import MetadataRequest

from tests.integration.broker_process import BrokerProcess, free_port
from tests.integration.security_certs import make_pki

DEADLINE_S = 30.0
PASSWORD = "alice-secret"
DELAY_MS = 300  # connection.failed.authentication.delay.ms for this broker


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    work = tmp_path_factory.mktemp("secured")
    pki = make_pki(work / "pki")
    ports = {name: free_port() for name in ("SASL_SSL", "SSL", "SASL_PLAINTEXT")}
    broker = BrokerProcess(
        work / "data",
        "--listeners", ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "--ssl-keystore-location", str(pki.server), "--ssl-truststore-location", str(pki.ca), "--ssl-client-auth", "requested",
        "--connection-failed-authentication-delay-ms", str(DELAY_MS),
    ).start()  # fmt: skip
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    upserts = [UserScramCredentialUpsertion("alice", ScramCredentialInfo(m, 4096), PASSWORD.encode())
               for m in (ScramMechanism.SCRAM_SHA_512, ScramMechanism.SCRAM_SHA_256)]  # fmt: skip
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(timeout=20)
    yield broker, pki, ports
    broker.close()


def _topic(bootstrap: str) -> str:
    name = f"t-{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer: a destroyed client fails its futures
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=20)
    return name


def _librdkafka(port: int, ca: str, user: str = "alice", password: str = PASSWORD, **extra: str) -> dict:
    return {
        "bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user, "sasl.password": password, "ssl.ca.location": ca, **extra,
    }  # fmt: skip


def _consume_confluent(config: dict, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({**config, "group.id": f"g-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


def test_confluent_kafka_scram_sha_512_over_tls(secured) -> None:
    broker, pki, ports = secured
    topic = _topic(broker.bootstrap)
    config = _librdkafka(ports["SASL_SSL"], str(pki.ca))
    producer = Producer(config)
    failures: list = []
    for i in range(20):
        producer.produce(topic, f"v{i}".encode(), on_delivery=lambda err, _m: err and failures.append(err))
    assert producer.flush(DEADLINE_S) == 0 and failures == []
    assert _consume_confluent(config, topic, 20) == [f"v{i}".encode() for i in range(20)]
    # Metadata on the SASL_SSL listener names the SASL_SSL listener's address.
    admin = AdminClient(config)
    metadata = admin.list_topics(timeout=10)
    assert [(b.host, b.port) for b in metadata.brokers.values()] == [("127.0.0.1", ports["SASL_SSL"])]
    assert f"authenticated as User:alice with SCRAM-SHA-512 on listener SASL_SSL" in broker.log_text()


def test_aiokafka_scram_sha_512_over_tls(secured) -> None:
    broker, pki, ports = secured
    topic = _topic(broker.bootstrap)
    context = ssl.create_default_context(cafile=str(pki.ca))
    settings = dict(bootstrap_servers=f"127.0.0.1:{ports['SASL_SSL']}", security_protocol="SASL_SSL", ssl_context=context,
                    sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice", sasl_plain_password=PASSWORD)  # fmt: skip

    async def run() -> list[bytes]:
        async with AIOKafkaProducer(**settings) as producer:
            for i in range(10):
                await producer.send_and_wait(topic, f"a{i}".encode())
        async with AIOKafkaConsumer(topic, auto_offset_reset="earliest", **settings) as consumer:
            values: list[bytes] = []
            async with asyncio.timeout(DEADLINE_S):
                async for message in consumer:
                    values.append(message.value)
                    if len(values) == 10:
                        return values
        return values

    assert asyncio.run(run()) == [f"a{i}".encode() for i in range(10)]


def test_kafka_python_scram_sha_512_over_tls(secured) -> None:
    broker, pki, ports = secured
    topic = _topic(broker.bootstrap)
    settings = dict(bootstrap_servers=f"127.0.0.1:{ports['SASL_SSL']}", security_protocol="SASL_SSL", ssl_cafile=str(pki.ca),
                    sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice", sasl_plain_password=PASSWORD)  # fmt: skip
    producer = KafkaProducer(**settings)
    for i in range(10):
        producer.send(topic, f"k{i}".encode()).get(timeout=DEADLINE_S)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=int(DEADLINE_S * 1000), **settings)
    values = []
    for message in consumer:
        values.append(message.value)
        if len(values) == 10:
            break
    consumer.close()
    assert values == [f"k{i}".encode() for i in range(10)]


def test_kcat_scram_sha_512_over_tls(secured) -> None:
    broker, pki, ports = secured
    topic = _topic(broker.bootstrap)
    common = ["kcat", "-b", f"127.0.0.1:{ports['SASL_SSL']}", "-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=SCRAM-SHA-512",
              "-X", "sasl.username=alice", "-X", f"sasl.password={PASSWORD}", "-X", f"ssl.ca.location={pki.ca}", "-t", topic]  # fmt: skip
    subprocess.run([*common, "-P"], input=b"one\ntwo\nthree\n", check=True, timeout=DEADLINE_S)
    out = subprocess.run([*common, "-C", "-o", "beginning", "-e", "-c", "3"], capture_output=True, check=True, timeout=DEADLINE_S)
    assert out.stdout.split() == [b"one", b"two", b"three"]


@pytest.mark.parametrize(("user", "password", "reason"), [("alice", "wrong", "wrong password"), ("mallory", PASSWORD, "unknown user")])
def test_wrong_password_and_unknown_user_are_refused_after_the_delay(secured, user: str, password: str, reason: str) -> None:
    broker, pki, ports = secured
    errors: list[KafkaError] = []
    producer = Producer(_librdkafka(ports["SASL_SSL"], str(pki.ca), user, password, error_cb=errors.append))
    producer.produce(f"t-{uuid.uuid4().hex[:8]}", b"x")
    deadline = time.monotonic() + DEADLINE_S
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
        producer.poll(0.2)
    producer.purge()
    refused = [e for e in errors if e.code() == KafkaError._AUTHENTICATION][0]
    assert ("SASL authentication error: Authentication failed during authentication due to invalid credentials "
            "with SASL mechanism SCRAM-SHA-512") in refused.str()  # fmt: skip
    elapsed_ms = int(refused.str().split("(after ")[1].split("ms")[0])
    assert elapsed_ms >= DELAY_MS  # librdkafka reports how long the exchange took
    line = f"authentication failed: client 127.0.0.1:"
    assert any(line in text and f"user {user}, mechanism SCRAM-SHA-512, listener SASL_SSL: {reason}" in text
               for text in broker.log_text().splitlines())  # fmt: skip


def test_kafka_python_wrong_password_gets_kafkas_error(secured, caplog) -> None:
    """kafka-python retries the bootstrap until its timeout (5 s here, 30 s by default); each refusal is logged with Kafka's error."""
    broker, pki, ports = secured
    caplog.set_level(logging.ERROR, logger="kafka")
    with pytest.raises(KpKafkaError):
        KafkaProducer(bootstrap_servers=f"127.0.0.1:{ports['SASL_SSL']}", security_protocol="SASL_SSL", ssl_cafile=str(pki.ca),
                      sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice", sasl_plain_password="nope",
                      max_block_ms=5000, bootstrap_timeout_ms=5000)  # fmt: skip
    refusals = [r.getMessage() for r in caplog.records if "SaslAuthenticationFailedError" in r.getMessage()]
    assert refusals
    assert ("SaslAuthenticationFailedError: Authentication failed during authentication due to invalid credentials "
            "with SASL mechanism SCRAM-SHA-512") in refusals[0]  # fmt: skip


def test_plaintext_client_on_a_tls_listener_is_refused(secured) -> None:
    broker, pki, ports = secured
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{ports['SASL_SSL']}", "error_cb": errors.append})
    producer.produce(f"t-{uuid.uuid4().hex[:8]}", b"x")
    deadline = time.monotonic() + DEADLINE_S
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    producer.purge()
    assert errors and errors[0].code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
    assert "Disconnected while requesting ApiVersion" in errors[0].str() or "brokers are down" in errors[0].str()
    deadline = time.monotonic() + DEADLINE_S
    while "TLS handshake failed: SSLError" not in broker.log_text() and time.monotonic() < deadline:
        time.sleep(0.05)  # the broker logs the refusal in its own time: poll its log with a deadline
    assert "TLS handshake failed: SSLError: [SSL: WRONG_VERSION_NUMBER] wrong version number" in broker.log_text()

    async def aiokafka_plain() -> None:
        async with AIOKafkaProducer(bootstrap_servers=f"127.0.0.1:{ports['SSL']}", request_timeout_ms=5000):
            pass

    with pytest.raises(AioConnectionError):
        asyncio.run(aiokafka_plain())


def test_ssl_listener_without_sasl_serves_tls_clients(secured) -> None:
    broker, pki, ports = secured
    topic = _topic(broker.bootstrap)
    config = {"bootstrap.servers": f"127.0.0.1:{ports['SSL']}", "security.protocol": "SSL", "ssl.ca.location": str(pki.ca),
              "ssl.certificate.location": str(pki.client_cert), "ssl.key.location": str(pki.client_key)}  # fmt: skip
    producer = Producer(config)
    producer.produce(topic, b"over-tls")
    assert producer.flush(DEADLINE_S) == 0
    assert _consume_confluent(config, topic, 1) == [b"over-tls"]


def test_requests_before_authentication_close_the_connection(secured, wire) -> None:
    broker, _pki, ports = secured
    client = wire(f"127.0.0.1:{ports['SASL_PLAINTEXT']}")
    client.send(MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    with pytest.raises(ConnectionError):
        client.recv_frame(timeout_s=10)
    assert "request before SASL authentication completed (state handshake)" in broker.log_text()


def _plain_delivery(port: int, topic: str, password: str) -> list:
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                         "sasl.username": "alice", "sasl.password": password, "message.timeout.ms": 5000})  # fmt: skip
    reports: list = []
    producer.produce(topic, b"plain", on_delivery=lambda err, _m: reports.append(None if err is None else err.code()))
    assert producer.flush(DEADLINE_S) == 0
    return reports


def test_sasl_plain_checks_the_stored_scram_credentials(secured) -> None:
    broker, _pki, ports = secured
    topic = _topic(broker.bootstrap)
    assert _plain_delivery(ports["SASL_PLAINTEXT"], topic, PASSWORD) == [None]
    assert _plain_delivery(ports["SASL_PLAINTEXT"], topic, "bad") == [KafkaError._MSG_TIMED_OUT]
    assert "authenticated as User:alice with PLAIN on listener SASL_PLAINTEXT" in broker.log_text()
    assert "user alice, mechanism PLAIN, listener SASL_PLAINTEXT: wrong password" in broker.log_text()


def test_mutual_tls_required_and_the_certificate_subject_is_the_principal(tmp_path) -> None:
    """ssl.client.auth=required: no certificate, no connection; with one, the principal is
    User: and the subject in RFC 2253 order, which ACLs name."""
    pki = make_pki(tmp_path / "pki")
    ssl_port = free_port()
    broker = BrokerProcess(
        tmp_path / "data", "--listeners", f"SSL://127.0.0.1:{ssl_port}", "--ssl-keystore-location", str(pki.server_cert),
        "--ssl-key-location", str(pki.server_key), "--ssl-truststore-location", str(pki.ca), "--ssl-client-auth", "required",
        "--authorizer", "acl", "--allow-everyone-if-no-acl-found", "false", "--super-users", "User:ANONYMOUS",
    ).start()  # fmt: skip
    try:
        topic = _topic(broker.bootstrap)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

        binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:CN=client,O=Diskless tests", "*",
                             AclOperation.WRITE, AclPermissionType.ALLOW)  # fmt: skip
        for future in admin.create_acls([binding]).values():
            future.result(timeout=20)
        tls = {"bootstrap.servers": f"127.0.0.1:{ssl_port}", "security.protocol": "SSL", "ssl.ca.location": str(pki.ca),
               "message.timeout.ms": 5000}  # fmt: skip
        with_cert = {**tls, "ssl.certificate.location": str(pki.client_cert), "ssl.key.location": str(pki.client_key)}
        for config, expected in ((with_cert, None), (tls, KafkaError._MSG_TIMED_OUT)):
            reports: list = []
            producer = Producer(config)
            producer.produce(topic, b"mtls", on_delivery=lambda err, _m: reports.append(None if err is None else err.code()))
            assert producer.flush(DEADLINE_S) == 0
            assert reports == [expected]
        deadline = time.monotonic() + DEADLINE_S
        while "TLS handshake failed" not in broker.log_text() and time.monotonic() < deadline:
            time.sleep(0.05)  # the broker logs the refusal in its own time: poll its log with a deadline
        assert "PEER_DID_NOT_RETURN_A_CERTIFICATE" in broker.log_text()
    finally:
        broker.close()
