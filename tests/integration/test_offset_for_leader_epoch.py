"""OffsetForLeaderEpoch (KIP-101, KIP-320) on a real broker: the history of a partition's
leaderships read from the bucket's epoch marks, answered as Kafka answers it, across restarts
(each takes the partition at a new epoch) and after the data directory is lost; the current
leader epoch checked (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH); and librdkafka, which
validates its position with it after a leader change, reading everything once."""

from __future__ import annotations

import asyncio
import shutil
import time
import urllib.request
import uuid

from confluent_kafka import Consumer, Producer
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as metadata_v12
from kio.schema.offset_for_leader_epoch.v4 import request as ofle_v4

from cold_tier.layout import epoch_key
from cold_tier.local import LocalObjectStore
from diskless.broker.partition.epoch_checkpoint import record_leader_epoch
from diskless.broker.partition.epoch_history import epoch_starts

from .broker_process import BrokerProcess, free_port
from .conftest import WireClient


def leader_epoch(client: WireClient, topic: str, partition: int = 0) -> int:
    request = metadata_v12.MetadataRequest(
        topics=(metadata_v12.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=topic),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False,
    )  # fmt: skip
    (found,) = client.request(request).topics
    return next(p.leader_epoch for p in found.partitions if p.partition_index == partition)


def end_offsets(client: WireClient, topic: str, asked: list[tuple[int, int, int]]) -> list[tuple[int, ErrorCode, int, int]]:
    """(partition, error, leader epoch, end offset) for each (partition, current leader epoch, leader epoch)."""
    request = ofle_v4.OffsetForLeaderEpochRequest(
        replica_id=-1,
        topics=(ofle_v4.OffsetForLeaderTopic(topic=topic, partitions=tuple(
            ofle_v4.OffsetForLeaderPartition(partition=p, current_leader_epoch=current, leader_epoch=epoch) for p, current, epoch in asked
        )),),
    )  # fmt: skip
    (result,) = client.request(request).topics
    return [(p.partition, p.error_code, p.leader_epoch, p.end_offset) for p in result.partitions]


def produce(bootstrap: str, topic: str, values: list[bytes]) -> list[int]:
    offsets: list[int] = []
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for value in values:
        producer.produce(topic, value=value, partition=0, on_delivery=lambda err, m: offsets.append(-1 if err else m.offset()))
    assert producer.flush(30) == 0
    return offsets


def test_each_leadership_ends_where_the_next_began(tmp_path, wire, create_topic) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        topic = create_topic(broker.bootstrap, partitions=1)
        client = wire(broker.bootstrap)
        first = leader_epoch(client, topic)
        assert produce(broker.bootstrap, topic, [b"a%d" % i for i in range(5)]) == list(range(5))
        assert end_offsets(client, topic, [(0, first, first)]) == [(0, ErrorCode.none, first, 5)]

        broker.stop()  # a restart takes the partition at a new epoch, from offset 5
        broker.start()
        client = wire(broker.bootstrap)
        second = leader_epoch(client, topic)
        assert second > first
        assert produce(broker.bootstrap, topic, [b"b%d" % i for i in range(3)]) == [5, 6, 7]

        broker.stop()  # and again, with the local disk lost: the history is in the bucket
        shutil.rmtree(broker.data_dir / "logs")
        broker.start()
        client = wire(broker.bootstrap)
        third = leader_epoch(client, topic)
        assert third > second
        assert produce(broker.bootstrap, topic, [b"c0"]) == [8]
        assert end_offsets(client, topic, [(0, third, first), (0, third, second), (0, -1, third), (0, third, third + 1), (0, third, first - 1)]) == [
            (0, ErrorCode.none, first, 5),
            (0, ErrorCode.none, second, 8),
            (0, ErrorCode.none, third, 9),
            (0, ErrorCode.none, -1, -1),  # above every known epoch
            (0, ErrorCode.none, first - 1, 5),  # below every known epoch: Kafka answers it, ended at the first known start
        ]  # fmt: skip
        assert end_offsets(client, topic, [(0, second, second), (0, third + 1, third), (1, -1, third)]) == [
            (0, ErrorCode.fenced_leader_epoch, -1, -1),
            (0, ErrorCode.unknown_leader_epoch, -1, -1),
            (1, ErrorCode.unknown_topic_or_partition, -1, -1),
        ]
    finally:
        broker.close()


def test_librdkafka_validates_its_position_after_a_restart_and_reads_everything_once(tmp_path, create_topic) -> None:
    http = f"127.0.0.1:{free_port()}"
    broker = BrokerProcess(tmp_path / "data", "--http", http).start()
    try:
        topic = create_topic(broker.bootstrap, partitions=1)
        assert produce(broker.bootstrap, topic, [b"v%d" % i for i in range(10)]) == list(range(10))
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest",
                             "enable.auto.commit": False, "topic.metadata.refresh.interval.ms": 500})  # fmt: skip
        seen: list[tuple[int, bytes]] = []
        errors: list[str] = []
        try:
            consumer.subscribe([topic])

            def read_until(count: int) -> None:
                deadline = time.monotonic() + 60
                while len(seen) < count and time.monotonic() < deadline:
                    message = consumer.poll(0.2)
                    if message is None:
                        continue
                    if message.error() is not None:
                        errors.append(str(message.error()))
                    else:
                        seen.append((message.offset(), message.value()))

            read_until(10)
            broker.stop()
            broker.start()  # the same port: the consumer reconnects, sees a new leader epoch and validates
            assert produce(broker.bootstrap, topic, [b"w%d" % i for i in range(5)]) == list(range(10, 15))
            read_until(15)
        finally:
            consumer.close()
        assert seen == [(i, b"v%d" % i) for i in range(10)] + [(10 + i, b"w%d" % i) for i in range(5)]
        assert not [e for e in errors if "truncat" in e.lower()]
        with urllib.request.urlopen(f"http://{http}/metrics", timeout=10) as response:
            metrics = response.read().decode()
        assert 'kafka_network_requestmetrics_requests_total{request="OffsetForLeaderEpoch",version="2"}' in metrics  # it validated
    finally:
        broker.close()


def test_history_is_read_from_this_topics_marks_the_checkpoint_and_the_current_leadership(tmp_path) -> None:
    topic_id, other_id = uuid.uuid4(), uuid.uuid4()
    bucket = LocalObjectStore(tmp_path / "bucket")
    log_dir = tmp_path / "t-0"
    log_dir.mkdir()

    async def main() -> list[tuple[int, int]]:
        for epoch, start, owner in [(2, 10, topic_id), (4, 30, topic_id), (4, 35, topic_id), (9, 0, other_id)]:
            await bucket.put(epoch_key("t", 0, epoch, start, owner), b"")
        return await epoch_starts(bucket, "t", 0, topic_id, log_dir, (6, 50))

    record_leader_epoch(log_dir, 1, 0)
    record_leader_epoch(log_dir, 4, 44)  # this broker began epoch 4 above the mark: it kept a tail
    assert asyncio.run(main()) == [(1, 0), (2, 10), (4, 44), (6, 50)]
