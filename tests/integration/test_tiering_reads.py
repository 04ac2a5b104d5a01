"""Tiered history read back through real Kafka clients, against moto's S3 server and a local
directory: rolled segments go to the bucket, their local copies go, and consumers,
ListOffsets and retention see one log from offset 0 (or the log start offset) to the end.

The helpers here (bucket views, produce, consume, waits) are shared with the other
test_tiering_* modules.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, OffsetSpec

from cold_tier.layout import CommittedSegment, partition_prefix
from cold_tier.segments import find_orphans, list_catalogue
from cold_tier.url import open_object_store

from .broker_process import BrokerProcess
from .moto_s3 import MotoS3

DEADLINE_S = 45.0
HOUR_MS = 3_600_000


# --- the bucket, seen from the test -------------------------------------------------------


class BucketView:
    """The broker's bucket read by the test through cold_tier, on a loop thread of its own so
    one store (and its HTTP connections) serves every look."""

    def __init__(self, kind: str, url: str, env: dict[str, str]) -> None:
        self.kind = kind
        self.url = url
        self.env = env
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name=f"bucket-view-{kind}")
        self._thread.start()
        self._store = open_object_store(url, env=env)

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(DEADLINE_S)

    def catalogue(self, topic: str, partition: int) -> list[CommittedSegment]:
        return self.run(list_catalogue(self._store, topic, partition))

    def keys(self, topic: str, partition: int) -> list[str]:
        async def keys() -> list[str]:
            return sorted(info.key for info in await self._store.list(partition_prefix(topic, partition)))

        return self.run(keys())

    def get(self, key: str) -> bytes:
        return self.run(self._store.get(key))

    def orphans(self, topic: str, partition: int) -> list[str]:
        async def orphans() -> list[str]:
            return await find_orphans(self._store, topic, partition, await list_catalogue(self._store, topic, partition))

        return self.run(orphans())

    def close(self) -> None:
        try:
            self.run(self._store.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
            self._loop.close()


def objects_of(catalogue: list[CommittedSegment], listed: list[str]) -> list[str]:
    """Every object key of the segments, sorted: data, indexes and commit, and the producer
    snapshots among `listed` (a segment has one when its broker had a snapshot to give)."""
    keys = [key for s in catalogue for key in (s.log_key, s.index_key, s.time_index_key, s.txn_index_key, s.commit_key)]
    return sorted(keys + [s.producer_snapshot_key for s in catalogue if s.producer_snapshot_key in listed])


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoS3]:
    server = MotoS3()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def open_bucket(kind: str, moto: MotoS3 | None, directory: Path) -> BucketView:
    """A fresh bucket: a moto bucket under a prefix, or a local directory."""
    if kind == "s3":
        assert moto is not None
        return BucketView(kind, moto.url(moto.create_bucket(), prefix="cluster"), moto.env())
    directory.mkdir(parents=True, exist_ok=True)
    return BucketView(kind, f"file://{directory.resolve()}", {})


def start_broker(data_dir: Path, bucket: BucketView, *args: str) -> BrokerProcess:
    return BrokerProcess(
        data_dir, "--object-store", bucket.url, "--log-retention-check-interval-ms", "200", *args, env=bucket.env
    ).start()


# --- records ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rec:
    """One record as produced, and as a consumer must see it."""

    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] | None
    timestamp: int


def make_records(partition: int, start: int, count: int, timestamp: Callable[[int], int]) -> list[Rec]:
    """Records `start` .. `start + count - 1` of a partition: null keys, null values, no
    headers and several headers all occur; values are 40 to 200 bytes of hash output."""
    records = []
    for i in range(start, start + count):
        seed = hashlib.sha256(b"%d-%d" % (partition, i)).digest()
        value = None if i % 13 == 12 else (seed * 7)[: 40 + seed[0] % 160]
        headers = None if i % 5 == 0 else [("i", b"%d" % i), ("p", b"%d" % partition), ("h", seed[:8])][: 1 + i % 3]
        records.append(Rec(None if i % 7 == 3 else b"k-%d-%d" % (partition, i), value, headers, timestamp(i)))
    return records


def produce(bootstrap: str, topic: str, records: dict[int, list[Rec]], **config: Any) -> dict[int, list[int]]:
    """Produce every record (acks=all) to its partition; the offsets acknowledged, per
    partition in produce order. Fails the test on any delivery error."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.num.messages": 10, **config})
    acked: dict[int, list[int]] = {p: [] for p in records}
    errors: list[KafkaError] = []

    def delivered(err: KafkaError | None, msg: Any) -> None:
        if err is None:
            acked[msg.partition()].append(msg.offset())
        else:
            errors.append(err)

    for partition, recs in records.items():
        for rec in recs:
            producer.produce(topic, rec.value, rec.key, partition=partition, headers=rec.headers, timestamp=rec.timestamp, on_delivery=delivered)
            producer.poll(0)
    assert producer.flush(DEADLINE_S) == 0
    assert errors == []
    return acked


def consume(bootstrap: str, topic: str, starts: dict[int, int], counts: dict[int, int], *, reset: str = "error") -> dict[int, list[tuple[int, Rec]]]:
    """Exactly counts[p] records of each partition p, read from starts[p] by a confluent-kafka
    consumer, as (offset, Rec). Fails on any consumer error or on a deadline."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
        "auto.offset.reset": reset, "max.partition.fetch.bytes": 16384,
    })  # fmt: skip
    got: dict[int, list[tuple[int, Rec]]] = {p: [] for p in starts}
    try:
        consumer.assign([TopicPartition(topic, p, offset) for p, offset in starts.items()])
        deadline = time.monotonic() + DEADLINE_S
        while any(len(got[p]) < counts[p] for p in got):
            assert time.monotonic() < deadline, {p: len(got[p]) for p in got}
            msg = consumer.poll(0.1)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            kind, timestamp = msg.timestamp()
            assert kind == 1  # TIMESTAMP_CREATE_TIME
            got[msg.partition()].append((msg.offset(), Rec(msg.key(), msg.value(), msg.headers(), timestamp)))
    finally:
        consumer.close()
    return got


def as_log(records: list[Rec], first_offset: int = 0) -> list[tuple[int, Rec]]:
    return [(first_offset + i, rec) for i, rec in enumerate(records)]


def set_topic_config(bootstrap: str, topic: str, name: str, value: str) -> None:
    """IncrementalAlterConfigs SET of one topic config."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(DEADLINE_S)


def create_topic(bootstrap: str, partitions: int, configs: dict[str, str]) -> str:
    name = f"t-{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=configs)], operation_timeout=10)[name].result(DEADLINE_S)
    return name


def offset_for_time(consumer: Consumer, topic: str, partition: int, timestamp: int) -> int:
    """ListOffsets by timestamp: the first offset whose timestamp is >= `timestamp` (-1: none)."""
    (found,) = consumer.offsets_for_times([TopicPartition(topic, partition, timestamp)], timeout=DEADLINE_S)
    assert found.error is None, found.error
    return found.offset


# --- local disk, waits --------------------------------------------------------------------


def local_segments(data_dir: Path, topic: str, partition: int) -> list[int]:
    """Base offsets of the partition's local segments (its .log files), ascending."""
    return sorted(int(path.stem) for path in (data_dir / "logs" / f"{topic}-{partition}").glob("*.log"))


def local_log_bytes(data_dir: Path, topic: str, partition: int, base_offset: int) -> int:
    return (data_dir / "logs" / f"{topic}-{partition}" / f"{base_offset:020d}.log").stat().st_size


def wait_until(condition: Callable[[], Any], what: str, deadline_s: float = DEADLINE_S) -> Any:
    """Poll `condition` until it returns something true; fail after `deadline_s`."""
    deadline = time.monotonic() + deadline_s
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {deadline_s}s waiting for {what}")
        time.sleep(0.05)  # polling a condition with a deadline: nothing to wait on instead


def tiered(bucket: BucketView, data_dir: Path, topic: str, partition: int) -> list[CommittedSegment] | None:
    """The catalogue once every rolled segment is committed and no local copy of one is left
    (local.retention.ms=0): the local log is the active segment alone, starting where the
    bucket ends. None before then."""
    catalogue = bucket.catalogue(topic, partition)
    if catalogue and local_segments(data_dir, topic, partition) == [catalogue[-1].next_offset]:
        return catalogue
    return None


def assert_contiguous(catalogue: list[CommittedSegment], first_offset: int = 0) -> None:
    assert catalogue[0].base_offset == first_offset
    for before, after in zip(catalogue, catalogue[1:]):
        assert after.base_offset == before.next_offset


# --- scenarios ----------------------------------------------------------------------------

SMALL_SEGMENTS = {"segment.bytes": "4096", "local.retention.ms": "0"}


@pytest.fixture(scope="module", params=["file", "s3"])
def bucket(request, tmp_path_factory) -> Iterator[BucketView]:
    """One bucket per backend for this module's tests (each uses topics of its own)."""
    moto = request.getfixturevalue("moto") if request.param == "s3" else None
    view = open_bucket(request.param, moto, tmp_path_factory.mktemp("bucket"))
    try:
        yield view
    finally:
        view.close()


@pytest.fixture(scope="module")
def broker_on(bucket, tmp_path_factory) -> Iterator[BrokerProcess]:
    """One broker per backend for this module's tests, which neither stop nor kill it."""
    process = start_broker(tmp_path_factory.mktemp("tiering") / "data", bucket)
    try:
        yield process
    finally:
        process.close()


def test_history_from_the_bucket_reads_back_exactly(bucket, broker_on) -> None:
    """Many small segments tiered, local copies gone: a consumer from offset 0 sees every record
    as produced (key, value, headers, timestamp, offset), through both tiers."""
    topic = create_topic(broker_on.bootstrap, 2, SMALL_SEGMENTS)
    base_ms = int(time.time() * 1000) - 2 * HOUR_MS
    records = {p: make_records(p, 0, 500, lambda i: base_ms + 10 * i) for p in (0, 1)}
    acked = produce(broker_on.bootstrap, topic, records, **{"compression.type": "lz4"})
    assert acked == {0: list(range(500)), 1: list(range(500))}

    data_dir = broker_on.data_dir
    for p in (0, 1):
        catalogue = wait_until(lambda: tiered(bucket, data_dir, topic, p), f"partition {p} to be tiered")
        assert len(catalogue) >= 5
        assert_contiguous(catalogue)
        assert 0 < catalogue[-1].next_offset < 500
        # Each committed segment's objects are all in the bucket, and nothing else is.
        assert (listed := bucket.keys(topic, p)) == objects_of(catalogue, listed)

    got = consume(broker_on.bootstrap, topic, {0: 0, 1: 0}, {0: 500, 1: 500})
    assert got == {p: as_log(records[p]) for p in (0, 1)}


def test_list_offsets_take_tiered_data_into_account(bucket, broker_on) -> None:
    """ListOffsets earliest is 0 while the local log starts later; by-timestamp lookups find
    offsets in the bucket and on disk; max timestamp finds a record in the bucket."""
    topic = create_topic(broker_on.bootstrap, 2, SMALL_SEGMENTS)
    base_ms = int(time.time() * 1000) - 2 * HOUR_MS
    outlier_ms = base_ms + HOUR_MS  # partition 1, offset 7: the largest timestamp, in the bucket
    records = {
        0: make_records(0, 0, 300, lambda i: base_ms + 10 * i),
        1: make_records(1, 0, 300, lambda i: outlier_ms if i == 7 else base_ms + 10 * i),
    }
    produce(broker_on.bootstrap, topic, records)
    for p in (0, 1):
        wait_until(lambda: tiered(bucket, broker_on.data_dir, topic, p), f"partition {p} to be tiered")
    local_start = {p: local_segments(broker_on.data_dir, topic, p)[0] for p in (0, 1)}
    assert all(0 < start < 300 for start in local_start.values())

    consumer = Consumer({"bootstrap.servers": broker_on.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}"})
    try:
        for p in (0, 1):
            assert consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=DEADLINE_S, cached=False) == (0, 300)
        # The first offset whose timestamp is >= the target.
        targets = [base_ms - 1, base_ms, base_ms + 1, base_ms + 10 * 55, base_ms + 10 * local_start[0], base_ms + 10 * 299, base_ms + 10 * 299 + 1]
        assert [offset_for_time(consumer, topic, 0, t) for t in targets] == [0, 0, 1, 55, local_start[0], 299, -1]
        # In partition 1 offset 7 outranks everything after base_ms + 70.
        targets = [base_ms + 10 * 6, base_ms + 10 * 6 + 1, base_ms + 10 * 250, outlier_ms, outlier_ms + 1]
        assert [offset_for_time(consumer, topic, 1, t) for t in targets] == [6, 7, 7, 7, -1]
    finally:
        consumer.close()

    admin = AdminClient({"bootstrap.servers": broker_on.bootstrap})
    specs = {TopicPartition(topic, p): spec for p, spec in ((0, OffsetSpec.earliest()), (1, OffsetSpec.max_timestamp()))}
    results = {tp.partition: future.result(DEADLINE_S) for tp, future in admin.list_offsets(specs).items()}
    assert results[0].offset == 0
    assert (results[1].offset, results[1].timestamp) == (7, outlier_ms)


def test_retention_deletes_from_the_bucket_and_moves_the_log_start(bucket, broker_on) -> None:
    """retention.ms, then retention.bytes, shrunk once data is tiered, then DeleteRecords,
    delete the oldest segments from the bucket (commit and data objects); the low watermark
    and ListOffsets by timestamp follow, and a fetch below it resets
    (auto.offset.reset=earliest) to the new log start offset."""
    topic = create_topic(broker_on.bootstrap, 1, SMALL_SEGMENTS)
    now_ms = int(time.time() * 1000)
    # The first 150 records are 3 hours old, the rest a minute old: retention.ms of 1 hour
    # lets exactly the segments go that hold only old records.
    records = make_records(0, 0, 400, lambda i: now_ms - 3 * HOUR_MS + i if i < 150 else now_ms - 60_000 + i)
    produce(broker_on.bootstrap, topic, {0: records})
    before = wait_until(lambda: tiered(bucket, broker_on.data_dir, topic, 0), "the partition to be tiered")
    assert_contiguous(before)
    kept_from = next(i for i, segment in enumerate(before) if segment.max_timestamp >= now_ms - HOUR_MS)
    assert 0 < kept_from < len(before) - 4

    set_topic_config(broker_on.bootstrap, topic, "retention.ms", str(HOUR_MS))
    after_ms = wait_until(lambda: deleted_to(bucket, topic, before[kept_from].base_offset), "retention.ms to delete")
    assert after_ms == before[kept_from:]
    wait_until(lambda: (listed := bucket.keys(topic, 0)) == objects_of(after_ms, listed), "the data objects to go (after the commits)")
    assert_low_watermark(broker_on.bootstrap, topic, after_ms[0].base_offset, records)

    # retention.bytes over the whole log (bucket + local): keep all but the 3 oldest segments.
    active_bytes = local_log_bytes(broker_on.data_dir, topic, 0, after_ms[-1].next_offset)
    total = sum(segment.size_bytes for segment in after_ms) + active_bytes
    limit = total - sum(segment.size_bytes for segment in after_ms[:3])
    set_topic_config(broker_on.bootstrap, topic, "retention.bytes", str(limit))
    after_bytes = wait_until(lambda: deleted_to(bucket, topic, after_ms[3].base_offset), "retention.bytes to delete")
    assert after_bytes == after_ms[3:]
    wait_until(lambda: (listed := bucket.keys(topic, 0)) == objects_of(after_bytes, listed), "the data objects to go (after the commits)")
    assert_low_watermark(broker_on.bootstrap, topic, after_bytes[0].base_offset, records)
    assert local_segments(broker_on.data_dir, topic, 0) == [after_bytes[-1].next_offset]

    # DeleteRecords into the middle of the second segment in the bucket: the first goes from
    # the bucket, the second stays but nothing below the new start is served or found.
    low = after_bytes[1].base_offset + 2
    admin = AdminClient({"bootstrap.servers": broker_on.bootstrap})
    (future,) = admin.delete_records([TopicPartition(topic, 0, low)]).values()
    assert future.result(DEADLINE_S).low_watermark == low
    assert wait_until(lambda: deleted_to(bucket, topic, after_bytes[1].base_offset), "DeleteRecords to delete") == after_bytes[1:]
    wait_until(lambda: (listed := bucket.keys(topic, 0)) == objects_of(after_bytes[1:], listed), "the data objects to go (after the commits)")
    assert_low_watermark(broker_on.bootstrap, topic, low, records)


def deleted_to(bucket: BucketView, topic: str, base_offset: int) -> list[CommittedSegment] | None:
    """Partition 0's catalogue once retention deleted every segment below `base_offset`
    (it deletes oldest first, one segment at a time)."""
    catalogue = bucket.catalogue(topic, 0)
    return catalogue if catalogue and catalogue[0].base_offset >= base_offset else None


def assert_low_watermark(bootstrap: str, topic: str, low: int, records: list[Rec]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=DEADLINE_S, cached=False) == (low, len(records))
        assert offset_for_time(consumer, topic, 0, records[0].timestamp) == low
    finally:
        consumer.close()
    got = consume(bootstrap, topic, {0: 0}, {0: len(records) - low}, reset="earliest")
    assert got == {0: as_log(records[low:], low)}
    assert consume(bootstrap, topic, {0: low}, {0: len(records) - low}) == got


def test_deleting_a_topic_mid_upload_leaves_nothing_in_the_bucket(bucket, broker_on) -> None:
    """DeleteTopics while its segments are uploading: once the broker settles, no object of
    the topic is left in the bucket (an upload in flight must not land after the deletion)."""
    topic = create_topic(broker_on.bootstrap, 4, {"segment.bytes": "1024", "local.retention.ms": "0"})
    produce(broker_on.bootstrap, topic, {p: make_records(p, 0, 60, lambda i: int(time.time() * 1000) + i - HOUR_MS) for p in range(4)}, **{"batch.num.messages": 4})
    wait_until(lambda: bucket.catalogue(topic, 0), "a first segment in the bucket")
    admin = AdminClient({"bootstrap.servers": broker_on.bootstrap})
    admin.delete_topics([topic], operation_timeout=10)[topic].result(DEADLINE_S)
    # Uploads in flight finish, then go with the rest: on a busy machine moto takes its time.
    wait_until(lambda: all(bucket.keys(topic, p) == [] for p in range(4)), "the topic's objects to be gone", deadline_s=DEADLINE_S)
    # ... and they stay gone: the broker has stopped uploading (its uploads stop being logged).
    wait_until(lambda: _quiet(broker_on), "the broker to stop uploading", deadline_s=DEADLINE_S)
    assert all(bucket.keys(topic, p) == [] for p in range(4))


def _quiet(broker: BrokerProcess, quiet_s: float = 1.0) -> bool:
    """Whether the broker's log has not grown for `quiet_s`."""
    return time.time() - broker.log_path.stat().st_mtime > quiet_s
