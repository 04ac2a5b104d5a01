"""Offsets through real clients: by time, watermarks, earliest and latest, out of range and
auto.offset.reset, and DeleteRecords (which survives a restart)."""

from __future__ import annotations

import asyncio
import datetime
import time

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AioTopicPartition
from aiokafka.errors import OffsetOutOfRangeError
from confluent_kafka import OFFSET_END, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_v12

DEADLINE_S = 20.0


def produce(bootstrap: str, topic: str, timestamps: list[int], *, partition: int = 0, first: int = 0, one_batch: bool = False) -> None:
    """Values b"r<first + i>" with the given timestamps; one batch, or a batch per record."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 100 if one_batch else 0, "acks": "all"})
    for i, ts in enumerate(timestamps):
        producer.produce(topic, value=f"r{first + i}".encode(), partition=partition, timestamp=ts)
        if not one_batch:
            assert producer.flush(DEADLINE_S) == 0
    assert producer.flush(DEADLINE_S) == 0


def consumer(bootstrap: str, reset: str = "error") -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": "offsets-test", "enable.auto.commit": False, "auto.offset.reset": reset})


def consume(c: Consumer, count: int) -> list[tuple[int, bytes]]:
    """(offset, value) of the next `count` records; fails on an error or at the deadline."""
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < count:
        assert time.monotonic() < deadline, f"got {len(got)} of {count} records"
        msg = c.poll(0.1)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        got.append((msg.offset(), msg.value()))
    return got


def next_error(c: Consumer) -> KafkaError:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        msg = c.poll(0.1)
        if msg is not None:
            assert msg.error() is not None, f"expected an error, got record at offset {msg.offset()}"
            return msg.error()
    raise AssertionError("no error reported")


def list_offsets(admin: AdminClient, topic: str, spec: OffsetSpec, partition: int = 0) -> tuple[int, int]:
    tp = TopicPartition(topic, partition)
    info = admin.list_offsets({tp: spec}, request_timeout=DEADLINE_S)[tp].result()
    return info.offset, info.timestamp


def test_offsets_for_times_watermarks_earliest_latest(shared_broker, create_topic) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=2)
    base = int(time.time() * 1000) - 100_000
    # Offsets 0-4 in one batch, 5-9 one per batch. Offset 4 carries the largest timestamp, out of
    # order, as CreateTime allows.
    timestamps = [base + 10 * i for i in range(10)]
    timestamps[4] = base + 1000
    produce(shared_broker.bootstrap, topic, timestamps[:5], one_batch=True)
    produce(shared_broker.bootstrap, topic, timestamps[5:], first=5)

    c = consumer(shared_broker.bootstrap)
    try:
        queries = {
            base - 50: 0, base: 0, base + 1: 1, base + 25: 3, base + 30: 3, base + 31: 4, base + 45: 4,
            base + 1000: 4, base + 90: 4, base + 1001: OFFSET_END,
        }  # fmt: skip
        for target, expected in queries.items():
            (found,) = c.offsets_for_times([TopicPartition(topic, 0, target)], timeout=DEADLINE_S)
            assert (found.error, found.offset) == (None, expected), target - base
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=DEADLINE_S) == (0, 10)
        assert c.get_watermark_offsets(TopicPartition(topic, 1), timeout=DEADLINE_S) == (0, 0)
    finally:
        c.close()

    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    assert list_offsets(admin, topic, OffsetSpec.earliest())[0] == 0
    assert list_offsets(admin, topic, OffsetSpec.latest())[0] == 10
    assert list_offsets(admin, topic, OffsetSpec.max_timestamp()) == (4, base + 1000)
    assert list_offsets(admin, topic, OffsetSpec.for_timestamp(base + 55))[0] == 4
    assert list_offsets(admin, topic, OffsetSpec.for_timestamp(base + 85)) == (4, base + 1000)
    assert list_offsets(admin, topic, OffsetSpec.latest(), partition=1)[0] == 0


def test_out_of_range_fetch_and_auto_offset_reset(shared_broker, create_topic) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=1)
    now = int(time.time() * 1000)
    produce(shared_broker.bootstrap, topic, [now] * 5, one_batch=True)
    values = [(i, f"r{i}".encode()) for i in range(5)]

    # No reset policy: the broker's OFFSET_OUT_OF_RANGE reaches the application.
    c = consumer(shared_broker.bootstrap, "error")
    try:
        c.assign([TopicPartition(topic, 0, 100)])
        error = next_error(c)
        assert error.code() == KafkaError._AUTO_OFFSET_RESET
        assert "out of range" in error.str().lower()
    finally:
        c.close()

    # earliest: back to offset 0.
    c = consumer(shared_broker.bootstrap, "earliest")
    try:
        c.assign([TopicPartition(topic, 0, 100)])
        assert consume(c, 5) == values
    finally:
        c.close()

    # latest: to the log end. The client does not say when its reset is done, so records are
    # produced one at a time until one arrives: it must be one of those, never 0-4.
    c = consumer(shared_broker.bootstrap, "latest")
    try:
        c.assign([TopicPartition(topic, 0, 100)])
        next_offset, first = 5, None
        deadline = time.monotonic() + DEADLINE_S
        while first is None:
            assert time.monotonic() < deadline, "nothing arrived after the reset to latest"
            produce(shared_broker.bootstrap, topic, [now], first=next_offset)
            next_offset += 1
            msg = c.poll(0.3)
            if msg is not None:
                assert msg.error() is None, msg.error()
                first = (msg.offset(), msg.value())
        assert 5 <= first[0] < next_offset
        assert first[1] == f"r{first[0]}".encode()
        rest = consume(c, next_offset - first[0] - 1)
        assert rest == [(i, f"r{i}".encode()) for i in range(first[0] + 1, next_offset)]
    finally:
        c.close()

    # aiokafka: OffsetOutOfRangeError with no policy, offset 0 with earliest.
    async def aiokafka_side() -> None:
        tp = AioTopicPartition(topic, 0)
        async with AIOKafkaConsumer(bootstrap_servers=shared_broker.bootstrap, enable_auto_commit=False, auto_offset_reset="none") as strict:
            strict.assign([tp])
            strict.seek(tp, 100)
            with pytest.raises(OffsetOutOfRangeError):
                await asyncio.wait_for(strict.getone(), DEADLINE_S)
        async with AIOKafkaConsumer(bootstrap_servers=shared_broker.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest") as lenient:
            lenient.assign([tp])
            lenient.seek(tp, 100)
            first = await asyncio.wait_for(lenient.getone(), DEADLINE_S)
            assert (first.offset, first.value) == (0, b"r0")

    asyncio.run(aiokafka_side())


def raw_fetch(client, topic: str, offset: int):
    """Partition 0's result of a Fetch v12 from `offset`, sent over a raw connection."""
    part = fetch_v12.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)
    request = fetch_v12.FetchRequest(
        max_wait=datetime.timedelta(0), min_bytes=1, forgotten_topics_data=(),
        topics=(fetch_v12.FetchTopic(topic=topic, partitions=(part,)),),
    )  # fmt: skip
    return client.request(request).responses[0].partitions[0]


def test_delete_records_moves_log_start_and_survives_restart(broker, create_topic, wire) -> None:
    topic = create_topic(broker.bootstrap, partitions=1)
    now = int(time.time() * 1000)
    produce(broker.bootstrap, topic, [now] * 6, one_batch=True)
    produce(broker.bootstrap, topic, [now] * 4, first=6)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    # Inside a batch: Kafka allows it; the batch stays on disk, reads below 4 are out of range.
    deleted = admin.delete_records([TopicPartition(topic, 0, 4)], request_timeout=DEADLINE_S)
    assert next(iter(deleted.values())).result().low_watermark == 4
    # Past the high watermark: refused, nothing moves.
    beyond = admin.delete_records([TopicPartition(topic, 0, 11)], request_timeout=DEADLINE_S)
    with pytest.raises(KafkaException) as refused:
        next(iter(beyond.values())).result()
    assert refused.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE

    def check() -> None:
        assert list_offsets(admin, topic, OffsetSpec.earliest())[0] == 4
        # Fetch answers carry the new log start offset too; below it is out of range.
        client = wire(broker.bootstrap)
        below, at = raw_fetch(client, topic, 3), raw_fetch(client, topic, 4)
        assert (below.error_code, below.log_start_offset, below.high_watermark) == (ErrorCode.offset_out_of_range, 4, 10)
        assert (at.error_code, at.log_start_offset, at.high_watermark) == (ErrorCode.none, 4, 10)
        c = consumer(broker.bootstrap, "error")
        try:
            assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=DEADLINE_S) == (4, 10)
            c.assign([TopicPartition(topic, 0, 2)])
            assert next_error(c).code() == KafkaError._AUTO_OFFSET_RESET
        finally:
            c.close()
        c = consumer(broker.bootstrap, "earliest")
        try:
            c.assign([TopicPartition(topic, 0, 0)])
            # Reset to the new log start: offsets 4.. exactly, nothing below it.
            assert consume(c, 6) == [(i, f"r{i}".encode()) for i in range(4, 10)]
        finally:
            c.close()

    check()
    broker.restart()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    check()
