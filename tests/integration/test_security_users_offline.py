"""The first user of a secured cluster, made without a broker: `diskless users create --metadata
URL` (or `--data-dir DIR`) writes the SCRAM credential into the metadata store, as Kafka's
`kafka-storage format --add-scram` does. A broker then started on that store, whose anonymous
clients may do nothing (ACLs on, allow.everyone.if.no.acl.found false), lets that user log in
with confluent-kafka over SASL_SSL (both SCRAM mechanisms) and produce and consume; a user added
offline while the broker runs logs in at once. On both metadata backends.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic, ResourcePatternType, ResourceType,
)  # fmt: skip

from tests.integration.broker_process import BrokerProcess, free_port
from tests.integration.conftest import ON_EVERY_METADATA_BACKEND
from tests.integration.security_certs import make_pki

DEADLINE_S = 30.0


def diskless(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "diskless.cli.main", *args], capture_output=True, text=True, timeout=60)


def _client(port: int, ca: str, user: str, password: str, mechanism: str) -> dict:
    return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_SSL", "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password, "ssl.ca.location": ca, "message.timeout.ms": 20000}  # fmt: skip


def _produce(config: dict, topic: str, values: list[bytes]) -> list:
    reports: list = []
    producer = Producer(config)
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, m: reports.append(err or (m.partition(), m.offset())))
    assert producer.flush(DEADLINE_S) == 0
    return reports


def _consume(config: dict, topic: str, count: int) -> list[tuple[int, bytes]]:
    consumer = Consumer({**config, "group.id": f"g-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append((message.offset(), message.value()))
    finally:
        consumer.close()
    return got


@ON_EVERY_METADATA_BACKEND
def test_a_user_made_offline_logs_in_over_sasl_ssl(tmp_path, metadata_url) -> None:
    pki = make_pki(tmp_path / "pki")
    data_dir = tmp_path / "data"
    # SQLite: the broker's default store in its data directory (--data-dir); PostgreSQL: --metadata URL.
    store = ["--metadata", metadata_url] if metadata_url else ["--data-dir", str(data_dir)]

    made = diskless("users", "create", "admin", "--password", "admin-pw", "--mechanism", "SCRAM-SHA-512",
                    "--mechanism", "SCRAM-SHA-256", *store)  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert made.stdout.splitlines() == ["set SCRAM-SHA-512 credential of user admin (4096 iterations)",
                                        "set SCRAM-SHA-256 credential of user admin (4096 iterations)"]  # fmt: skip
    listed = diskless("users", "list", *store)
    assert listed.returncode == 0, listed.stderr
    assert [line.split() for line in listed.stdout.splitlines()] == [
        ["USER", "MECHANISM", "ITERATIONS"], ["admin", "SCRAM-SHA-256", "4096"], ["admin", "SCRAM-SHA-512", "4096"],
    ]  # fmt: skip

    port = free_port()
    broker = BrokerProcess(
        data_dir, "--listeners", f"SASL_SSL://127.0.0.1:{port}", "--ssl-keystore-location", str(pki.server),
        "--authorizer", "acl", "--super-users", "User:admin", "--allow-everyone-if-no-acl-found", "false",
        *(["--metadata", metadata_url] if metadata_url else []),
    ).start()  # fmt: skip
    try:
        # Nobody without a login may manage users: the wire path could not have made the first one.
        anonymous = diskless("users", "create", "mallory", "--password", "x", "-b", broker.bootstrap)
        assert anonymous.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in anonymous.stderr

        ca = str(pki.ca)
        topic = f"t-{uuid.uuid4().hex[:10]}"
        admin = AdminClient(_client(port, ca, "admin", "admin-pw", "SCRAM-SHA-512"))
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=DEADLINE_S)
        values = [f"v{i}".encode() for i in range(10)]
        assert _produce(_client(port, ca, "admin", "admin-pw", "SCRAM-SHA-256"), topic, values) == [(0, i) for i in range(10)]
        assert _consume(_client(port, ca, "admin", "admin-pw", "SCRAM-SHA-512"), topic, 10) == list(enumerate(values))
        assert "authenticated as User:admin with SCRAM-SHA-512 on listener SASL_SSL" in broker.log_text()
        assert "authenticated as User:admin with SCRAM-SHA-256 on listener SASL_SSL" in broker.log_text()

        # A user added offline while the broker runs: read from the store at its next login.
        added = diskless("users", "create", "bob", "--password", "bob-pw", "--iterations", "8192", *store)
        assert added.returncode == 0, added.stderr
        grant = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:bob", "*", AclOperation.WRITE,
                           AclPermissionType.ALLOW)  # fmt: skip
        admin.create_acls([grant])[grant].result(timeout=DEADLINE_S)
        bob = _client(port, ca, "bob", "bob-pw", "SCRAM-SHA-512")
        assert _produce(bob, topic, [b"from-bob"]) == [(0, 10)]
        assert "authenticated as User:bob with SCRAM-SHA-512 on listener SASL_SSL" in broker.log_text()
        # The broker describes the credentials written offline as its own.
        described = admin.describe_user_scram_credentials(["admin", "bob"])
        infos = {user: sorted((str(i.mechanism), i.iterations) for i in f.result(timeout=DEADLINE_S).scram_credential_infos)
                 for user, f in described.items()}  # fmt: skip
        assert infos == {"admin": [("ScramMechanism.SCRAM_SHA_256", 4096), ("ScramMechanism.SCRAM_SHA_512", 4096)],
                         "bob": [("ScramMechanism.SCRAM_SHA_512", 8192)]}  # fmt: skip
    finally:
        broker.close()
