"""Write-ahead objects leave nothing behind, and an unreadable one is said, not hidden.

- The store tells which write-ahead objects it records (SQLite and PostgreSQL alike).
- The writer's garbage collection, against moto's S3 server and a real store: committed
  objects whose batches are all in segments go; objects PUT but never committed go once older
  than the grace period (by the time in their key), young ones stay, another node's stay, and
  an object this writer is still committing stays however old.
- A real broker whose tiered topic's segments all reach the bucket ends with no write-ahead
  object left (exact key listing).
- Recovery from a write-ahead object with a flipped byte: CorruptWalBatch, one ERROR line
  naming the partition, the offsets and the key, the counter moved, and the local log not
  extended past the hole.
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from cold_tier.url import open_object_store
from cold_tier.wal_format import WAL_PREFIX, decode_wal_object, wal_object_key
from diskless.broker import metrics
from diskless.broker.errors import CorruptWalBatch
from diskless.broker.wal.recovery import recover_tail
from diskless.broker.wal.writer import WalSettings, WalWriter
from hot_tier import Log, LogConfig
from hot_tier.records.batch import Record, encode_batch
from metadata import MetadataStore, WalBatch, open_metadata_store, sqlite_url

from .moto_s3 import MotoS3
from .test_metadata_store import backend, store, url  # noqa: F401  (fixtures: both backends)
from .test_tiering_reads import DEADLINE_S, BucketView, create_topic, moto, open_bucket, set_topic_config, start_broker, wait_until  # noqa: F401

GRACE_MS = 600_000
NOW_MS = 1_800_000_000_000


def batch_bytes(base_offset: int, count: int, value: bytes = b"v" * 100) -> bytes:
    return encode_batch([Record(base_offset + i, NOW_MS, None, value) for i in range(count)], base_offset=base_offset, partition_leader_epoch=0)


# --- the store ---------------------------------------------------------------------------------


async def test_the_store_tells_which_wal_objects_it_records(store: MetadataStore) -> None:
    topic = f"t-{uuid.uuid4().hex[:10]}"
    await store.create_topic(topic, 1, {})
    committed, gone, never = (wal_object_key(1, NOW_MS + i, uuid.uuid4().hex[:16]) for i in range(3))
    await store.commit_wal_object(committed, [WalBatch(topic, 0, 0, 9, 0, committed, 0, 640)])
    await store.commit_wal_object(gone, [WalBatch(topic, 0, 10, 19, 0, gone, 0, 640)])
    await store.delete_wal_batches_below(topic, 0, 20, leader_epoch=0)
    await store.delete_wal_object(gone)
    # Recorded until its own deletion, even with no batch left (then it is the collector's).
    assert await store.recorded_wal_objects([committed, gone, never]) == {committed}
    assert await store.recorded_wal_objects([]) == set()
    many = [wal_object_key(1, NOW_MS, f"{i:016x}") for i in range(1200)]  # past SQLite's bound parameters
    assert await store.recorded_wal_objects([*many, committed]) == {committed}


# --- the writer's garbage collection ------------------------------------------------------------


@pytest.fixture
async def s3_and_store(moto: MotoS3, tmp_path: Path):
    bucket = open_object_store(moto.url(moto.create_bucket(), prefix="cluster"), env=moto.env())
    metadata = await open_metadata_store(sqlite_url(tmp_path / "metadata.db"))
    yield bucket, metadata
    await bucket.close()
    await metadata.close()


async def wal_keys(bucket) -> list[str]:
    return sorted(info.key for info in await bucket.list(WAL_PREFIX))


async def test_uncommitted_objects_go_after_the_grace_period_and_young_ones_stay(s3_and_store) -> None:
    bucket, metadata = s3_and_store
    topic = f"t-{uuid.uuid4().hex[:10]}"
    await metadata.create_topic(topic, 1, {})
    now = [NOW_MS]
    writer = WalWriter(bucket, metadata, 1, lambda: now[0], WalSettings(commit_interval_ms=1, orphan_grace_ms=GRACE_MS))
    writer.start()
    try:
        # A committed object, sealed long ago, whose batch is still needed: it stays.
        await writer.submit(topic, 0, 0, 0, 4, batch_bytes(0, 5))
        [committed] = await wal_keys(bucket)
        # Orphans: PUT, never committed (a crash between the PUT and the commit).
        old = wal_object_key(1, NOW_MS - 1, "0" * 16)  # sealed before the committed one: older than the grace once time moves
        young = wal_object_key(1, NOW_MS + GRACE_MS, "1" * 16)
        other_node = wal_object_key(2, NOW_MS - GRACE_MS * 10, "2" * 16)
        in_flight = wal_object_key(1, NOW_MS - GRACE_MS * 10, "3" * 16)
        for key in (old, young, other_node, in_flight):
            await bucket.put(key, b"torn")
        writer._keys_in_flight.add(in_flight)  # a commit this writer still retries (the store was down)
        now[0] = NOW_MS + GRACE_MS + 1
        assert await writer.collect_garbage() == 1
        assert await wal_keys(bucket) == sorted([committed, young, other_node, in_flight])
        # The committed object's batch moves into a segment: the object goes too.
        await metadata.delete_wal_batches_below(topic, 0, 5, leader_epoch=0)
        assert await writer.collect_garbage() == 1
        assert await wal_keys(bucket) == sorted([young, other_node, in_flight])
        # Time passes for the young one; the in-flight one gives up (its commit failed).
        writer._keys_in_flight.discard(in_flight)
        now[0] = NOW_MS + 2 * GRACE_MS + 1
        assert await writer.collect_garbage() == 2
        assert await wal_keys(bucket) == [other_node]
    finally:
        await writer.stop()


# --- a real broker: segments in the bucket, no write-ahead object left --------------------------


def test_a_topic_whose_segments_all_reach_the_bucket_leaves_no_wal_object(moto: MotoS3, tmp_path: Path) -> None:
    bucket = open_bucket("s3", moto, tmp_path / "bucket")
    broker = start_broker(tmp_path / "data", bucket)
    try:
        topic = create_topic(broker.bootstrap, 1, {"segment.bytes": "16384"})
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5})
        for n in range(400):
            producer.produce(topic, b"%04d" % n + b"x" * 200, partition=0)
        assert producer.flush(DEADLINE_S) == 0
        # Roll the active segment too (segment.ms), so that every record ends up in the bucket.
        set_topic_config(broker.bootstrap, topic, "segment.ms", "100")

        def every_record_in_segments():
            catalogue = bucket.catalogue(topic, 0)
            return catalogue and catalogue[-1].last_offset == 399

        wait_until(every_record_in_segments, "every record in committed segments")

        def wal_objects() -> list[str]:
            async def keys() -> list[str]:
                return sorted(info.key for info in await bucket._store.list(WAL_PREFIX))

            return bucket.run(keys())

        assert wal_objects(), "acks=all went through write-ahead objects"
        wait_until(lambda: wal_objects() == [], "no write-ahead object left", deadline_s=DEADLINE_S)
        assert wal_objects() == []
        assert bucket.orphans(topic, 0) == []
    finally:
        broker.close()
        bucket.close()


# --- corruption at rest -------------------------------------------------------------------------


async def test_a_flipped_byte_in_a_wal_object_is_logged_counted_and_not_served(s3_and_store, tmp_path: Path, caplog) -> None:
    bucket, metadata = s3_and_store
    topic = f"t-{uuid.uuid4().hex[:10]}"
    await metadata.create_topic(topic, 1, {})
    writer = WalWriter(bucket, metadata, 1, lambda: NOW_MS, WalSettings(commit_interval_ms=1))
    writer.start()
    try:
        await writer.submit(topic, 0, 0, 0, 9, batch_bytes(0, 10))
        await writer.submit(topic, 0, 0, 10, 19, batch_bytes(10, 10))
    finally:
        await writer.stop()
    batches = await metadata.list_wal_batches(topic, 0)
    assert [(b.base_offset, b.last_offset) for b in batches] == [(0, 9), (10, 19)]
    # Flip one byte inside the second batch's records (covered by its CRC), in the real object.
    key = batches[1].object_key
    data = bytearray(await bucket.get(key))
    assert [(e.base_offset, e.position) for e in decode_wal_object(bytes(data)) if e.base_offset == 10] == [(10, batches[1].position)]
    data[batches[1].position + batches[1].size_bytes - 3] ^= 0x01
    await bucket.put(key, bytes(data))

    counted = metrics.WAL_CORRUPT_BATCHES.labels(topic)._value.get()
    log_ = Log.open(tmp_path / f"{topic}-0", LogConfig(), NOW_MS)  # an empty disk: everything comes from the bucket
    try:
        with caplog.at_level(logging.ERROR, logger="diskless.broker.wal.recovery"):
            with pytest.raises(CorruptWalBatch) as raised:
                await recover_tail(log_, metadata, bucket, topic, 0, 0, NOW_MS)
        assert (raised.value.topic, raised.value.partition, raised.value.base_offset, raised.value.object_key) == (topic, 0, 10, key)
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1
        assert f"{topic}-0: durable batch(es) at offsets 10-19 in write-ahead object {key}" in errors[0]
        assert "offline" in errors[0]
        assert metrics.WAL_CORRUPT_BATCHES.labels(topic)._value.get() == counted + 1
        # What comes before the hole is back; nothing at or past it.
        assert log_.log_end_offset == 10
    finally:
        log_.close()
