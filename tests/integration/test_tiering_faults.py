"""Tiering under faults: the bucket goes away and comes back, the local disk is lost, the
broker is killed with uploads in flight. Each time nothing acknowledged is lost, nothing is
read twice, and no uncommitted upload becomes visible.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from metadata import RemoteSegmentState, open_metadata_store

from .conftest import ON_EVERY_METADATA_BACKEND, metadata_args
from .moto_s3 import MotoS3
from .test_tiering_reads import (
    DEADLINE_S,
    HOUR_MS,
    SMALL_SEGMENTS,
    BucketView,
    Rec,
    as_log,
    consume,
    create_topic,
    local_log_bytes,
    local_segments,
    make_records,
    moto,  # noqa: F401  (the module-scoped moto server fixture)
    open_bucket,
    produce,
    start_broker,
    tiered,
    wait_until,
)


@pytest.fixture(params=["file", "s3"])
def bucket(request, tmp_path) -> Iterator[BucketView]:
    """A fresh bucket per test (outside the broker's data dir), each test run once per backend."""
    moto = request.getfixturevalue("moto") if request.param == "s3" else None
    view = open_bucket(request.param, moto, tmp_path / "bucket")
    try:
        yield view
    finally:
        view.close()


def catalogue_rows(metadata_url: str, topic: str, partition: int, state: RemoteSegmentState) -> list[str]:
    """Object keys of the partition's metadata catalogue rows in `state`, by base offset."""

    async def rows() -> list[str]:
        store = await open_metadata_store(metadata_url)
        try:
            return [row.object_key for row in await store.list_remote_segments(topic, partition, states=(state,))]
        finally:
            await store.close()

    return asyncio.run(rows())


def sqlite_url(data_dir: Path) -> str:
    return f"sqlite:///{(data_dir / 'metadata.db').resolve()}"


def recent(i: int, base_ms: int = int(time.time() * 1000) - HOUR_MS) -> int:
    return base_ms + i


# --- the bucket goes away -----------------------------------------------------------------


@pytest.fixture
def own_moto() -> Iterator[MotoS3]:
    """A moto server of this test's own, to stop and restart."""
    server = MotoS3()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def produce_until_refused(bootstrap: str, topic: str, records: list[Rec], first_offset: int, acks: str) -> tuple[list[Rec], KafkaError]:
    """Produce records one at a time (no retries) until the broker refuses one; the records
    acknowledged before, at consecutive offsets from `first_offset`, and the error."""
    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0, "retries": 0,
        "request.timeout.ms": 2000, "message.timeout.ms": 10000,
    })  # fmt: skip
    reports: list[tuple[KafkaError | None, int]] = []
    for rec in records:
        producer.produce(topic, rec.value, rec.key, partition=0, headers=rec.headers, timestamp=rec.timestamp,
                         on_delivery=lambda err, msg: reports.append((err, msg.offset())))  # fmt: skip
        assert producer.flush(DEADLINE_S) == 0
        err, offset = reports[-1]
        if err is not None:
            return records[: len(reports) - 1], err
        assert offset == first_offset + len(reports) - 1
    raise AssertionError(f"all {len(records)} records were accepted")


def high_watermark(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=DEADLINE_S, cached=False)[1]
    finally:
        consumer.close()


def test_bucket_outage_acks_all_fails_acks_1_continues_to_the_disk_limit_then_recovery(own_moto, tmp_path) -> None:
    """moto stops. acks=all produce cannot become durable: it fails with REQUEST_TIMED_OUT
    (retriable; the batch was appended and becomes durable later, as Kafka's
    NOT_ENOUGH_REPLICAS_AFTER_APPEND). acks=1 produce goes on while write-ahead commits retry
    (segments wait for them: one goes to the bucket once its batches are durable), and
    consumers see nothing above the durable offset; past
    --local-disk-limit-bytes it fails with KAFKA_STORAGE_ERROR. moto returns: everything
    appended becomes durable and tiered, produce works again, every record reads back once."""
    limit = 12_000
    bucket = open_bucket("s3", own_moto, tmp_path / "unused")
    broker = start_broker(tmp_path / "data", bucket, "--local-disk-limit-bytes", str(limit), "--upload-concurrency", "2")
    try:
        topic = create_topic(broker.bootstrap, 1, SMALL_SEGMENTS)
        data_dir = broker.data_dir
        before = make_records(0, 0, 100, recent)
        assert produce(broker.bootstrap, topic, {0: before}) == {0: list(range(100))}
        catalogue = wait_until(lambda: tiered(bucket, data_dir, topic, 0), "the first segments to be tiered")
        bucket_end = catalogue[-1].next_offset

        own_moto.stop()
        stalled = make_records(0, 100, 1, recent)
        acked, refusal = produce_until_refused(broker.bootstrap, topic, stalled, 100, "all")
        assert (acked, refusal.code()) == ([], KafkaError.REQUEST_TIMED_OUT)
        during, refusal = produce_until_refused(broker.bootstrap, topic, make_records(0, 101, 1000, recent), 101, "1")
        assert refusal.code() == KafkaError.KAFKA_STORAGE_ERROR
        # Refused only once more than the limit waits for the bucket: every rolled segment
        # since the outage, none of them uploaded.
        waiting = [base for base in local_segments(data_dir, topic, 0)[:-1] if base >= bucket_end]
        assert local_segments(data_dir, topic, 0)[0] == bucket_end
        sizes = [local_log_bytes(data_dir, topic, 0, base) for base in waiting]
        assert sum(sizes) > limit >= sum(sizes[:-1])
        wait_until(lambda: re.search(r"write-ahead object .* failed .*; retrying in \d+ ms", broker.log_text()), "write-ahead commits to retry")
        # Nothing above the durable offset is visible meanwhile.
        assert high_watermark(broker.bootstrap, topic) == 100

        own_moto.restart()  # moto kept the bucket and its objects in memory
        end = 101 + len(during)
        wait_until(lambda: high_watermark(broker.bootstrap, topic) == end, f"the high watermark to reach {end}")
        wait_until(lambda: (c := tiered(bucket, data_dir, topic, 0)) and c[-1].next_offset > bucket_end and c, "the backlog to upload")
        after = make_records(0, end, 50, recent)
        assert produce(broker.bootstrap, topic, {0: after}) == {0: list(range(end, end + 50))}
        catalogue = wait_until(lambda: tiered(bucket, data_dir, topic, 0), "everything to be tiered")
        assert local_segments(data_dir, topic, 0)[0] == catalogue[-1].next_offset > bucket_end

        everything = before + stalled + during + after
        assert consume(broker.bootstrap, topic, {0: 0}, {0: len(everything)}) == {0: as_log(everything)}
        # The failed tries left nothing behind: no rows still `uploading`, no partial objects.
        url = sqlite_url(data_dir)
        assert catalogue_rows(url, topic, 0, RemoteSegmentState.UPLOADING) == []
        assert catalogue_rows(url, topic, 0, RemoteSegmentState.COMMITTED) == [s.commit_key for s in bucket.catalogue(topic, 0)]
        assert bucket.orphans(topic, 0) == []
    finally:
        broker.close()
        bucket.close()


# --- the local disk is lost ---------------------------------------------------------------


def assert_catalogue_is_the_buckets(metadata_url: str, bucket: BucketView, topic: str, partitions: int = 2) -> None:
    """The store's committed segments are the bucket's commit objects; none is left `uploading`."""
    for p in range(partitions):
        assert catalogue_rows(metadata_url, topic, p, RemoteSegmentState.COMMITTED) == [s.commit_key for s in bucket.catalogue(topic, p)]
        assert catalogue_rows(metadata_url, topic, p, RemoteSegmentState.UPLOADING) == []


@ON_EVERY_METADATA_BACKEND
@pytest.mark.parametrize("lost", ["logs", "data-dir"])
def test_local_disk_lost_history_served_from_the_bucket(bucket, tmp_path, lost, metadata_url) -> None:
    """The broker stops and its disk goes: only <data-dir>/logs (SQLite metadata in the data
    dir, or PostgreSQL), or the whole data dir (metadata elsewhere: a SQLite file, or
    PostgreSQL). Restarted, it serves every committed segment from the bucket and rebuilds the
    tail above them from the write-ahead objects: nothing acknowledged is lost, and new
    records follow the last acknowledged offset. The store's catalogue of committed segments
    is the bucket's, before and after."""
    data_dir = tmp_path / "data"
    (tmp_path / "metadata").mkdir()
    if metadata_url is None:
        metadata_url = sqlite_url(data_dir if lost == "logs" else tmp_path / "metadata")
    args = [] if metadata_url == sqlite_url(data_dir) else metadata_args(metadata_url)
    broker = start_broker(data_dir, bucket, *args)
    try:
        topic = create_topic(broker.bootstrap, 2, SMALL_SEGMENTS)
        history = {p: make_records(p, 0, 150, recent) for p in (0, 1)}
        assert produce(broker.bootstrap, topic, history) == {p: list(range(150)) for p in (0, 1)}
        for p in (0, 1):
            wait_until(lambda: tiered(bucket, data_dir, topic, p), f"partition {p} to be tiered")
        # A tail above the bucket for certain: 5 records (under 4 KiB) never fill a segment,
        # though they may roll the one before them, and with it the first of them.
        tail = {p: make_records(p, 150, 5, recent) for p in (0, 1)}
        assert produce(broker.bootstrap, topic, tail) == {p: list(range(150, 155)) for p in (0, 1)}
        records = {p: history[p] + tail[p] for p in (0, 1)}
        ends = {p: wait_until(lambda: tiered(bucket, data_dir, topic, p), f"partition {p} to be tiered")[-1].next_offset for p in (0, 1)}
        assert all(0 < end < 155 for end in ends.values()), ends
        broker.stop()
        assert_catalogue_is_the_buckets(metadata_url, bucket, topic)

        shutil.rmtree(data_dir / "logs" if lost == "logs" else data_dir)
        broker.start()
        assert local_segments(data_dir, topic, 0)[0] == ends[0]  # the local log restarts at the bucket's end
        assert "rebuilt" in broker.log_text()
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "watermarks"})
        try:
            for p in (0, 1):
                assert consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=DEADLINE_S, cached=False) == (0, 155)
        finally:
            consumer.close()
        assert consume(broker.bootstrap, topic, {0: 0, 1: 0}, {0: 155, 1: 155}) == {p: as_log(records[p]) for p in (0, 1)}

        more = {p: make_records(p, 155, 40, recent) for p in (0, 1)}
        assert produce(broker.bootstrap, topic, more) == {p: list(range(155, 195)) for p in (0, 1)}
        expected = {p: as_log(records[p] + more[p]) for p in (0, 1)}
        assert consume(broker.bootstrap, topic, {0: 0, 1: 0}, {0: 195, 1: 195}) == expected
        for p in (0, 1):
            wait_until(lambda: tiered(bucket, data_dir, topic, p), f"partition {p}'s new segments to be tiered")
        assert_catalogue_is_the_buckets(metadata_url, bucket, topic)
    finally:
        broker.close()


# --- kill -9 with uploads in flight --------------------------------------------------------

PARTITIONS = 6
PER_PARTITION = 40
ATTEMPTS = 20


def test_kill_9_with_uploads_in_flight(bucket, tmp_path) -> None:
    """Many partitions of tiny segments, two uploads at a time: kill -9 while an upload is
    `uploading`. Restarted, the broker settles every half-done upload: the bucket's catalogue
    (its commit objects) is exactly the committed rows, no partial objects are left, and every
    acknowledged record reads back once, in order."""
    data_dir = tmp_path / "data"
    broker = start_broker(data_dir, bucket, "--upload-concurrency", "2")
    url = sqlite_url(data_dir)
    try:
        topic = create_topic(broker.bootstrap, PARTITIONS, {"segment.bytes": "1024", "local.retention.ms": "0"})
        records: dict[int, list[Rec]] = {p: [] for p in range(PARTITIONS)}

        def uploading() -> list[str]:
            return [key for p in range(PARTITIONS) for key in catalogue_rows(url, topic, p, RemoteSegmentState.UPLOADING)]

        # An upload of a 1 KiB segment to a local directory takes milliseconds, so the kill
        # can land between two uploads; then produce another round and try again. acks=1: the
        # produce returns at the local append, while the rolls it caused are still uploading
        # (acks=all would wait for the write-ahead commit, by which time they are done); the
        # local log keeps the records across the kill, and start-up makes them durable.
        for _attempt in range(ATTEMPTS):
            batch = {p: make_records(p, len(records[p]), PER_PARTITION, recent) for p in range(PARTITIONS)}
            produce(broker.bootstrap, topic, batch, **{"batch.num.messages": 4, "acks": "1"})
            for p in range(PARTITIONS):
                records[p] += batch[p]
            # Kill as soon as a row is `uploading`; on a busy machine the uploads of a round
            # may all finish between two looks: then the next round tries again.
            deadline = time.monotonic() + 10
            while not uploading() and time.monotonic() < deadline:
                time.sleep(0.002)  # polling the catalogue: nothing to wait on
            broker.kill()
            if uploading():
                break
            broker.start()
        else:
            pytest.fail(f"no kill in {ATTEMPTS} attempts came while an upload was in flight")
        total = len(records[0])
        waiting = sum(
            1 for p in range(PARTITIONS)
            for base in local_segments(data_dir, topic, p)[:-1]
            if base >= max((s.next_offset for s in bucket.catalogue(topic, p)), default=0)
        )  # fmt: skip
        assert waiting > 1  # the kill left uploads undone

        broker.start()
        for p in range(PARTITIONS):
            catalogue = wait_until(lambda: tiered(bucket, data_dir, topic, p), f"partition {p} to be tiered")
            # Each interrupted upload was committed at start-up (its commit object had landed)
            # or removed with its objects; none is left `uploading`, none half in the bucket.
            assert catalogue_rows(url, topic, p, RemoteSegmentState.UPLOADING) == []
            assert catalogue_rows(url, topic, p, RemoteSegmentState.COMMITTED) == [s.commit_key for s in catalogue]
            assert bucket.orphans(topic, p) == []
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "watermarks"})
        try:
            for p in range(PARTITIONS):
                wait_until(
                    lambda: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=DEADLINE_S, cached=False) == (0, total),
                    f"partition {p}'s high watermark to reach {total} once the local tail is durable again",
                )
        finally:
            consumer.close()
        got = consume(broker.bootstrap, topic, {p: 0 for p in range(PARTITIONS)}, {p: total for p in range(PARTITIONS)})
        assert got == {p: as_log(records[p]) for p in range(PARTITIONS)}
    finally:
        broker.close()
