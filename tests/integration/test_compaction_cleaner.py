"""The log cleaner on a real broker: a compacted topic with a few hundred keys written many
times and tombstones for some, cleaned on local segments; read back from the earliest offset
by librdkafka and by our asyncio client; DescribeConfigs of the broker's log.cleaner.*."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from diskless.client import Consumer as AsyncConsumer
from diskless.client import TopicPartition as AsyncTopicPartition
from cold_tier.layout import parse_catalogue
from hot_tier.records import decode_batches

from .broker_process import BrokerProcess

DEADLINE_S = 60.0
KEYS = 300
ROUNDS = 8
TOMBSTONED = range(0, KEYS, 7)  # keys whose last record is a tombstone
CLEANER_FLAGS = ("--log-cleaner-backoff-ms", "100", "--log-retention-check-interval-ms", "100")


@pytest.fixture(scope="module")
def cleaner_broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("compaction") / "data", *CLEANER_FLAGS).start()
    try:
        yield process
    finally:
        process.close()


def compacted_topic(bootstrap: str, **configs: str) -> str:
    from confluent_kafka.admin import NewTopic

    name = f"c-{uuid.uuid4().hex[:12]}"
    settings = {"cleanup.policy": "compact", "segment.bytes": "16384", "segment.ms": "300", "min.cleanable.dirty.ratio": "0.01", **configs}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config=settings)])[name].result(timeout=20)
    return name


def produce_rounds(bootstrap: str, topic: str, rounds: int = ROUNDS) -> dict[bytes, tuple[int, bytes | None]]:
    """Every key written `rounds` times (then tombstones for TOMBSTONED); key -> (offset, value)
    of its last acknowledged record."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    last: dict[bytes, tuple[int, bytes | None]] = {}
    failures = []

    def on_delivery(err, msg) -> None:
        if err:
            failures.append(err)
        else:
            last[msg.key()] = max(last.get(msg.key(), (-1, None)), (msg.offset(), msg.value()), key=lambda item: item[0])

    for round_ in range(rounds):
        for k in range(KEYS):
            producer.produce(topic, key=b"key-%03d" % k, value=b"value-%03d-%d" % (k, round_) + b"x" * 60, partition=0, on_delivery=on_delivery)
        producer.flush(DEADLINE_S)
    for k in TOMBSTONED:
        producer.produce(topic, key=b"key-%03d" % k, value=None, partition=0, on_delivery=on_delivery)
    assert producer.flush(DEADLINE_S) == 0 and not failures
    return last


def read_all_librdkafka(bootstrap: str, topic: str, last_offset: int) -> list[tuple[int, bytes, bytes | None]]:
    """Every record from the earliest offset: until `last_offset` (the newest the reader expects,
    a compacted log may end in a gap below the high watermark), then until a poll finds nothing."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        records: list[tuple[int, bytes, bytes | None]] = []
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                if records and records[-1][0] >= last_offset:
                    break
                continue
            assert message.error() is None, message.error()
            records.append((message.offset(), message.key(), message.value()))
        return records
    finally:
        consumer.close()


async def read_all_ours(bootstrap: str, topic: str, last_offset: int) -> list[tuple[int, bytes, bytes | None]]:
    tp = AsyncTopicPartition(topic, 0)
    async with AsyncConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        records: list[tuple[int, bytes, bytes | None]] = []
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            batch = (await consumer.getmany(tp, timeout_ms=500)).get(tp, [])
            if not batch and records and records[-1][0] >= last_offset:
                break
            records += [(r.offset, r.key, r.value) for r in batch]
        return records


def wait_until(condition, what: str, deadline_s: float = DEADLINE_S):
    deadline = time.monotonic() + deadline_s
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {deadline_s}s: {what}")
        time.sleep(0.2)  # polling a broker's state with a deadline


def is_compacted(records, expected: dict[bytes, tuple[int, bytes | None]]) -> bool:
    return sorted((offset, key, value) for key, (offset, value) in expected.items()) == records


def compacted_read(bootstrap: str, topic: str, expected: dict[bytes, tuple[int, bytes | None]]):
    """The records from the earliest offset once they are exactly `expected`, else None."""
    records = read_all_librdkafka(bootstrap, topic, max(offset for offset, _ in expected.values()))
    return records if is_compacted(records, expected) else None


@pytest.mark.parametrize("remote_storage", ["default", "true"])
def test_cleaning_keeps_each_live_key_once_at_its_last_offset_then_drops_tombstones(cleaner_broker, remote_storage) -> None:
    """Tiered (remote.storage.enable is true by default): the segments go to the bucket as
    written, their local copies, kept, are what the cleaner compacts, and the cleaned copies
    then replace them in the bucket."""
    tiering = {} if remote_storage == "default" else {"remote.storage.enable": "true"}
    topic = compacted_topic(cleaner_broker.bootstrap, **{"delete.retention.ms": "10000"}, **tiering)
    last = produce_rounds(cleaner_broker.bootstrap, topic)
    produced = sum(1 for _ in range(ROUNDS * KEYS)) + len(TOMBSTONED)
    # Cleaned: each key exactly once, with its last value (tombstones still there), at the offset
    # it was acknowledged at; offsets increase.
    records = wait_until(lambda: compacted_read(cleaner_broker.bootstrap, topic, last), "each key once, at its last offset")
    assert len(records) == KEYS < produced
    assert [o for o, _, _ in records] == sorted({o for o, _, _ in records})
    assert sum(1 for _, _, v in records if v is None) == len(TOMBSTONED)
    ours = asyncio.run(read_all_ours(cleaner_broker.bootstrap, topic, records[-1][0]))
    assert ours == records
    # After delete.retention.ms the tombstones go; live keys stay where they were.
    live = {key: found for key, found in last.items() if found[1] is not None}
    records = wait_until(lambda: compacted_read(cleaner_broker.bootstrap, topic, live), "tombstones gone after delete.retention.ms")
    assert len(records) == KEYS - len(TOMBSTONED)
    assert asyncio.run(read_all_ours(cleaner_broker.bootstrap, topic, records[-1][0])) == records
    # The bucket is compacted too (compaction/bucket.py): once the tail is uploaded, its
    # committed segments hold exactly what a consumer reads.
    wait_until(lambda: bucket_records(cleaner_broker.data_dir / "bucket", topic) == records, "the bucket compacted")
    # More writes to a cleaned log continue at the log end offset.
    again = produce_rounds(cleaner_broker.bootstrap, topic, rounds=1)
    assert min(offset for offset, _ in again.values()) > max(offset for offset, _, _ in records)


def bucket_records(root: Path, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of partition 0's data records, from its committed segments alone."""
    catalogue = parse_catalogue(str(path.relative_to(root)) for path in root.glob(f"{topic}/0/commits/*.commit"))
    return [
        (r.offset, r.key, r.value)
        for segment in catalogue
        for batch in decode_batches((root / segment.log_key).read_bytes())
        if not batch.header.is_control
        for r in batch.records
    ]


def test_broker_describe_configs_reports_the_cleaner_settings(cleaner_broker) -> None:
    admin = AdminClient({"bootstrap.servers": cleaner_broker.bootstrap})
    resource = ConfigResource(ResourceType.BROKER, "1")
    entries = admin.describe_configs([resource])[resource].result(timeout=20)
    cleaner_settings = ("enable", "threads", "dedupe.buffer.size", "io.max.bytes.per.second", "backoff.ms")
    assert {f"log.cleaner.{name}": entries[f"log.cleaner.{name}"].value for name in cleaner_settings} == {
        "log.cleaner.enable": "true",
        "log.cleaner.threads": "1",
        "log.cleaner.dedupe.buffer.size": "134217728",
        "log.cleaner.io.max.bytes.per.second": "1.7976931348623157E308",
        "log.cleaner.backoff.ms": "100",
    }
