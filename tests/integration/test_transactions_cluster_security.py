"""Two brokers (PostgreSQL, moto's S3 server) whose only privileged way in is SASL over TLS:
the authorizer is on, nobody but `admin` and `broker` is allowed anything, and the anonymous
PLAINTEXT listener every broker also has is refused. Transactions over partitions of both
brokers still commit and abort everywhere, because the brokers reach each other on their
inter-broker listener (--inter-broker-listener-name SASL_SSL) as `broker` (--sasl-jaas-config):
the coordinator's WriteTxnMarkers to the other leader (CLUSTER_ACTION), and the group
coordinator's TxnOffsetCommit hand-on to the transaction's coordinator (WRITE on the
transactional id), would both be refused to an anonymous peer."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from .broker_process import BrokerProcess, free_port
from .security_certs import make_pki
from .test_cluster import HEARTBEAT_MS, SESSION_MS, moto_bucket, wait_until  # noqa: F401 (fixture)

DEADLINE_S = 30.0
PARTITIONS = 4
JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="broker-pw";'


def diskless(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "diskless.cli.main", *args], capture_output=True, text=True, timeout=60)


class SecuredCluster:
    def __init__(self, root: Path, metadata_url: str, bucket_url: str, env: dict[str, str]) -> None:
        self.pki = make_pki(root / "pki")
        self.ports = {node: free_port() for node in (1, 2)}
        self.brokers = {
            node: BrokerProcess(
                root / f"broker-{node}", "--node-id", str(node), "--metadata", metadata_url, "--object-store", bucket_url,
                "--broker-session-timeout-ms", str(SESSION_MS), "--broker-heartbeat-interval-ms", str(HEARTBEAT_MS),
                "--group-initial-rebalance-delay-ms", "0",
                "--listeners", f"SASL_SSL://127.0.0.1:{port}", "--ssl-keystore-location", str(self.pki.server),
                "--ssl-truststore-location", str(self.pki.ca), "--inter-broker-listener-name", "SASL_SSL", "--sasl-jaas-config", JAAS,
                "--authorizer", "acl", "--allow-everyone-if-no-acl-found", "false", "--super-users", "User:broker;User:admin",
                env=env,
            )  # fmt: skip
            for node, port in self.ports.items()
        }

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.ports.values())

    def config(self, **extra: object) -> dict:
        return {"bootstrap.servers": self.bootstrap, "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": "admin", "sasl.password": "admin-pw", "ssl.ca.location": str(self.pki.ca), **extra}  # fmt: skip


@pytest.fixture
def secured(tmp_path, postgres_database, moto_bucket) -> Iterator[SecuredCluster]:
    moto, bucket_url = moto_bucket
    for user in ("broker", "admin"):  # made in the store before any broker starts, as an operator would
        made = diskless("users", "create", user, "--password", f"{user}-pw", "--mechanism", "SCRAM-SHA-512", "--metadata", postgres_database)
        assert made.returncode == 0, made.stderr
    cluster = SecuredCluster(tmp_path, postgres_database, bucket_url, moto.env())
    try:
        for broker in cluster.brokers.values():
            broker.start()
        admin = AdminClient(cluster.config())
        wait_until(lambda: len(admin.list_topics(timeout=DEADLINE_S).brokers) == 2, "both brokers in the cluster")
        yield cluster
    finally:
        for broker in cluster.brokers.values():
            broker.close()


def consume_committed(config: dict, topic: str, expected: int) -> dict[int, list[str]]:
    consumer = Consumer({**config, "group.id": f"reader-{uuid.uuid4().hex[:8]}", "isolation.level": "read_committed",
                         "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + DEADLINE_S
    try:
        while sum(map(len, got.values())) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None:
                assert message.error() is None, message.error()
                got[message.partition()].append(message.value().decode())
    finally:
        consumer.close()
    return got


def test_brokers_reach_each_other_over_sasl_ssl_for_markers_and_offsets(secured: SecuredCluster) -> None:
    admin = AdminClient(secured.config())
    source, sink = (f"t-{uuid.uuid4().hex[:10]}" for _ in range(2))
    for future in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in (source, sink)]).values():
        future.result(DEADLINE_S)
    leaders = wait_until(
        lambda: (found := {p.id: p.leader for p in admin.list_topics(sink, timeout=DEADLINE_S).topics[sink].partitions.values()})
        and set(found.values()) == {1, 2} and found,
        "the sink's partitions led by both brokers",
    )
    assert sorted(leaders) == list(range(PARTITIONS))
    plain = Producer(secured.config(**{"enable.idempotence": True}))
    for i in range(40):
        plain.produce(source, value=str(i).encode(), partition=i % PARTITIONS)
    assert plain.flush(DEADLINE_S) == 0

    transactional_id = f"tx-{uuid.uuid4().hex[:8]}"
    producer = Producer(secured.config(**{"transactional.id": transactional_id, "linger.ms": 5}))
    producer.init_transactions(DEADLINE_S)
    # A group coordinated by the broker that does not coordinate the transactional id: its
    # TxnOffsetCommit is handed on between the brokers.
    producer.begin_transaction()
    producer.produce(sink, value=b"first", partition=0)
    producer.commit_transaction(DEADLINE_S)
    (txn_coordinator,) = {node for node in _coordinators(secured, [transactional_id], transactions=True).values()}
    candidates = [f"g-{uuid.uuid4().hex[:8]}" for _ in range(16)]
    group = next(g for g, node in _coordinators(secured, candidates).items() if node != txn_coordinator)

    consumer = Consumer(secured.config(**{"group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest"}))
    consumer.assign([TopicPartition(source, p, 0) for p in range(PARTITIONS)])
    committed: dict[int, list[str]] = {p: ["first"] if p == 0 else [] for p in range(PARTITIONS)}
    read = 0
    for attempt in ("abort", "commit"):
        for p in range(PARTITIONS):
            consumer.seek(TopicPartition(source, p, 0))
        producer.begin_transaction()
        read = 0
        deadline = time.monotonic() + DEADLINE_S
        while read < 40:
            assert time.monotonic() < deadline, f"{read} of 40 source records read"
            for message in consumer.consume(40, 0.5):
                assert message.error() is None
                producer.produce(sink, value=f"{attempt}-{message.value().decode()}".encode(), partition=message.partition())
                if attempt == "commit":
                    committed[message.partition()].append(f"commit-{message.value().decode()}")
                read += 1
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), DEADLINE_S)
        if attempt == "abort":
            producer.abort_transaction(DEADLINE_S)
        else:
            producer.commit_transaction(DEADLINE_S)
    consumer.close()

    assert consume_committed(secured.config(), sink, 41) == committed
    checker = Consumer(secured.config(**{"group.id": group}))
    try:
        offsets = checker.committed([TopicPartition(source, p) for p in range(PARTITIONS)], timeout=DEADLINE_S)
        assert [tp.offset for tp in offsets] == [40 // PARTITIONS] * PARTITIONS
    finally:
        checker.close()


def _coordinators(secured: SecuredCluster, keys: list[str], *, transactions: bool = False) -> dict[str, int]:
    """Each group's (or transactional id's) coordinator, as the brokers answer FindCoordinator."""
    if not transactions:
        admin = AdminClient(secured.config())  # kept alive until the results are in
        described = admin.describe_consumer_groups(keys)
        return {k: f.result(DEADLINE_S).coordinator.id for k, f in described.items()}
    import asyncio

    from diskless.client import Admin, ClientSecurity

    security = ClientSecurity(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", sasl_username="admin",
                              sasl_password="admin-pw", ssl_cafile=str(secured.pki.ca))  # fmt: skip

    async def find() -> dict[str, int]:
        async with Admin(bootstrap_servers=secured.bootstrap, security=security) as client:
            return {k: d.coordinator_id for k, d in (await client.describe_transactions(keys)).items()}

    return asyncio.run(find())
