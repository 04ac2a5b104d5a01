"""Reads from a broker in the consumer's rack (KIP-392's preferred read replica), served from
the bucket: three brokers in racks a, b and c with replica.selector.class set; each leads one
partition. A consumer with client.rack=rack-b is sent by the other leaders to broker 2, which
serves their partitions from committed segments and write-ahead objects. Every record is read
exactly once, in order, including records produced while it follows the tail; the other two
brokers send it no record bytes.

Three brokers, one PostgreSQL, one bucket (moto's S3 server).
"""

from __future__ import annotations

import datetime
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

from hot_tier.records import decode_batches

from .broker_process import BrokerProcess, free_port
from .conftest import WireClient
from .test_cluster import DEADLINE_S, HEARTBEAT_MS, SESSION_MS, moto_bucket, wait_until  # noqa: F401 (fixture)
from .test_metrics import scrape, value


@pytest.fixture
def racks(tmp_path, postgres_database, moto_bucket):  # noqa: F811
    moto, bucket_url = moto_bucket
    started: dict[int, BrokerProcess] = {}
    try:
        for node in (1, 2, 3):
            http = free_port()
            broker = BrokerProcess(
                tmp_path / f"broker-{node}", "--node-id", str(node), "--metadata", postgres_database, "--object-store", bucket_url,
                "--broker-session-timeout-ms", str(SESSION_MS), "--broker-heartbeat-interval-ms", str(HEARTBEAT_MS),
                "--broker-rack", f"rack-{'abc'[node - 1]}", "--replica-selector-class", "rack", "--http", f"127.0.0.1:{http}",
                env=moto.env(),
            )  # fmt: skip
            broker.http = f"127.0.0.1:{http}"  # type: ignore[attr-defined]
            started[node] = broker.start()
        for broker in started.values():
            wait_until(lambda: len(AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=DEADLINE_S).brokers) == 3,
                       f"broker at {broker.bootstrap} to see the cluster")  # fmt: skip
        yield started
    finally:
        for broker in started.values():
            broker.close()


def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=DEADLINE_S)
    return {p.id: p.leader for p in md.topics[topic].partitions.values()}


def _topic_on_every_broker(brokers: dict[int, BrokerProcess]) -> tuple[str, dict[int, int]]:
    bootstrap = brokers[1].bootstrap
    name = f"t-{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 3, 1, config={"segment.bytes": "4096"})])[name].result(DEADLINE_S)
    led = wait_until(lambda: (found := _leaders(bootstrap, name)) and sorted(found.values()) == [1, 2, 3] and found,
                     "one partition led by each broker")  # fmt: skip
    return name, led


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    failures: list = []
    for i, value_ in enumerate(values):
        producer.produce(topic, value_, partition=i % 3, on_delivery=lambda err, _m: err and failures.append(err))
    assert producer.flush(DEADLINE_S) == 0
    assert failures == []


def test_a_consumer_reads_every_partition_from_a_broker_of_its_rack(racks) -> None:
    topic, led = _topic_on_every_broker(racks)
    bootstrap = ",".join(b.bootstrap for b in racks.values())
    first = [f"first-{i:04d}-{'x' * 80}".encode() for i in range(600)]  # several 4 KiB segments per partition
    _produce(bootstrap, topic, first)

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest",
                         "client.rack": "rack-b", "enable.auto.commit": False})  # fmt: skip
    consumer.subscribe([topic])
    got: dict[int, list[tuple[int, bytes]]] = {0: [], 1: [], 2: []}
    later = [f"later-{i:04d}".encode() for i in range(150)]

    def read_until(count: int) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while sum(map(len, got.values())) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got[message.partition()].append((message.offset(), message.value()))

    try:
        read_until(len(first))
        _produce(bootstrap, topic, later)  # the tail, followed through write-ahead objects
        read_until(len(first) + len(later))
    finally:
        consumer.close()
    sent = first + later
    for partition in range(3):
        expected = [v for i, v in enumerate(sent) if i % 3 == partition]
        assert [v for _, v in got[partition]] == expected
        assert [o for o, _ in got[partition]] == list(range(len(expected)))
    samples = {node: scrape(b.http) for node, b in racks.items()}  # type: ignore[attr-defined]
    assert (value(samples[1], "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) or 0) == 0
    assert (value(samples[3], "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) or 0) == 0
    served = value(samples[2], "diskless_replica_read_bytes_total", topic=topic)
    assert served is not None and served > 0
    assert (value(samples[1], "diskless_replica_read_bytes_total", topic=topic) or 0) == 0


def test_the_leader_names_the_replica_and_the_replica_serves_the_durable_log(racks) -> None:
    topic, led = _topic_on_every_broker(racks)
    partition = next(p for p, node in led.items() if node == 1)
    bootstrap = ",".join(b.bootstrap for b in racks.values())
    values = [f"v{i}".encode() for i in range(90)]
    _produce(bootstrap, topic, values)
    expected = [v for i, v in enumerate(values) if i % 3 == partition]

    def fetch(node: int, offset: int, rack: str = "rack-b"):
        client = WireClient(racks[node].bootstrap)
        try:
            request = FetchRequest(
                replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                topics=(FetchTopic(topic=topic, partitions=(FetchPartition(partition=partition, current_leader_epoch=-1, fetch_offset=offset,
                                                                            last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20),)),),
                forgotten_topics_data=(), rack_id=rack,
            )  # fmt: skip
            return client.request(request).responses[0].partitions[0]
        finally:
            client.close()

    at_leader = fetch(1, 0)
    assert (at_leader.error_code, at_leader.preferred_read_replica, at_leader.high_watermark) == (ErrorCode.none, 2, len(expected))
    assert not at_leader.records
    assert fetch(1, 0, rack="rack-a").preferred_read_replica == -1  # the leader's own rack: served there
    at_replica = fetch(2, 0)
    assert (at_replica.error_code, at_replica.high_watermark, at_replica.log_start_offset) == (ErrorCode.none, len(expected), 0)
    records = [r for batch in decode_batches(at_replica.records) for r in batch.records]
    assert [r.value for r in records] == expected
    assert [r.offset for r in records] == list(range(len(expected)))
    assert not fetch(2, len(expected)).records  # at the durable end: nothing yet
    assert fetch(2, len(expected) + 5).error_code == ErrorCode.offset_out_of_range  # past it
