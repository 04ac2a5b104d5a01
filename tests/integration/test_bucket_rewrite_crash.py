"""A bucket rewrite (compaction/bucket.py) stopped at each step, as a crash stops it: the next
leader's `RemoteLog.load` finds either the old segments or the rewritten copy, never both and
never neither, and removes whatever the stopped rewrite left behind. A real SQLite store and
a real directory bucket; the rewrite's steps are RemoteLog's, called in the broker's order."""

from __future__ import annotations

from pathlib import Path

import pytest

from cold_tier.layout import parse_catalogue
from cold_tier.local import LocalObjectStore
from cold_tier.remote_log import RemoteLogReader
from cold_tier.segments import list_catalogue, upload_committed
from diskless.broker.tiering.remote_log import RemoteLog, RemoteStorage
from metadata import FencedLeaderEpoch, RemoteSegmentState, open_metadata_store

TOPIC = "rewritten"


@pytest.fixture
async def parts(tmp_path: Path):
    store = await open_metadata_store(f"sqlite:///{tmp_path / 'metadata.db'}")
    await store.create_topic(TOPIC, 1, {})
    bucket = LocalObjectStore(tmp_path / "bucket")
    reader = RemoteLogReader(bucket)
    try:
        yield RemoteStorage(bucket, store, reader), tmp_path
    finally:
        await reader.close()
        await store.close()


def files(tmp_path: Path, name: str, size: int) -> dict[str, Path]:
    paths = {suffix: tmp_path / f"{name}.{suffix}" for suffix in ("log", "index", "timeindex")}
    paths["log"].write_bytes(b"r" * size)
    paths["index"].write_bytes(b"")
    paths["timeindex"].write_bytes(b"")
    return {"log_path": paths["log"], "index_path": paths["index"], "timeindex_path": paths["timeindex"]}


async def two_segments(storage: RemoteStorage, tmp_path: Path) -> tuple[RemoteLog, list]:
    remote = RemoteLog(storage, TOPIC, 0)
    await remote.load(0)
    for base in (0, 100):
        segment = await remote.begin_upload(base_offset=base, last_offset=base + 99, base_timestamp=base, max_timestamp=base + 99, size_bytes=1000, leader_epoch=0)
        await upload_committed(storage.bucket, segment, **files(tmp_path, f"s{base}", 1000))
        await remote.commit(segment, 0)
    return remote, list(remote.segments)


async def rewrite(remote: RemoteLog, storage: RemoteStorage, tmp_path: Path, epoch: int = 0):
    copy = await remote.begin_rewrite(base_offset=0, last_offset=199, base_timestamp=3, max_timestamp=190, size_bytes=300, leader_epoch=epoch)
    await upload_committed(storage.bucket, copy, **files(tmp_path, "copy", 300))
    return copy


async def keys(storage: RemoteStorage) -> set[str]:
    return {info.key for info in await storage.bucket.list(f"{TOPIC}/0/")}


async def rows(storage: RemoteStorage, state: RemoteSegmentState) -> list[tuple[int, str]]:
    return [(r.base_offset, r.object_key) for r in await storage.store.list_remote_segments(TOPIC, 0, [state])]


async def test_stopped_before_the_swap_the_old_segments_stay_and_the_copy_goes(parts) -> None:
    storage, tmp_path = parts
    remote, old = await two_segments(storage, tmp_path)
    before = await keys(storage)
    copy = await rewrite(remote, storage, tmp_path)
    # Between its commit object and the swap, a bucket reader sees one whole set or the other.
    listed = parse_catalogue(await keys(storage))
    assert listed in (old, [copy])

    restarted = RemoteLog(storage, TOPIC, 0)
    await restarted.load(0)
    assert list(restarted.segments) == old
    assert await list_catalogue(storage.bucket, TOPIC, 0) == old
    assert await keys(storage) == before  # the copy's objects are gone, the old ones all there
    assert await rows(storage, RemoteSegmentState.UPLOADING) == []


async def test_after_the_swap_the_replaced_objects_wait_out_the_grace_period(parts) -> None:
    storage, tmp_path = parts
    remote, old = await two_segments(storage, tmp_path)
    copy = await rewrite(remote, storage, tmp_path)
    await remote.replace(copy, old, 0, delete_at_ms=5_000)
    assert list(remote.segments) == [copy]
    assert await list_catalogue(storage.bucket, TOPIC, 0) == [copy]  # old commit objects gone at once
    old_data = {key for s in old for key in (s.log_key, s.index_key, s.time_index_key)}
    assert old_data <= await keys(storage)  # readers in flight still find their data
    assert await remote.collect_replaced(4_999, 0) == 0 and old_data <= await keys(storage)
    assert await remote.collect_replaced(5_000, 0) == 2
    assert await keys(storage) == {copy.log_key, copy.index_key, copy.time_index_key, copy.txn_index_key, copy.commit_key}
    assert await rows(storage, RemoteSegmentState.DELETING) == []
    assert await rows(storage, RemoteSegmentState.COMMITTED) == [(0, copy.commit_key)]


async def test_stopped_after_the_swap_the_next_load_deletes_the_replaced_objects(parts) -> None:
    storage, tmp_path = parts
    remote, old = await two_segments(storage, tmp_path)
    copy = await rewrite(remote, storage, tmp_path)
    await remote.replace(copy, old, 0, delete_at_ms=10**15)
    restarted = RemoteLog(storage, TOPIC, 0)
    await restarted.load(0)
    assert list(restarted.segments) == [copy]
    assert await keys(storage) == {copy.log_key, copy.index_key, copy.time_index_key, copy.txn_index_key, copy.commit_key}
    assert await rows(storage, RemoteSegmentState.DELETING) == []


async def test_stopped_after_the_swap_a_compacted_topic_gives_readers_the_grace_period_again(parts) -> None:
    storage, tmp_path = parts
    remote, old = await two_segments(storage, tmp_path)
    copy = await rewrite(remote, storage, tmp_path)
    await remote.replace(copy, old, 0, delete_at_ms=10**15)
    restarted = RemoteLog(storage, TOPIC, 0)
    await restarted.load(0, deleting_data_at_ms=7_000)  # the leader: now + file.delete.delay.ms
    assert list(restarted.segments) == [copy]
    assert await list_catalogue(storage.bucket, TOPIC, 0) == [copy]
    old_data = {key for s in old for key in (s.log_key, s.index_key, s.time_index_key)}
    assert old_data <= await keys(storage)  # a Spark job that listed before the crash reads on
    assert await restarted.collect_replaced(6_999, 0) == 0
    assert await restarted.collect_replaced(7_000, 0) == 2
    assert await keys(storage) == {copy.log_key, copy.index_key, copy.time_index_key, copy.txn_index_key, copy.commit_key}
    assert await rows(storage, RemoteSegmentState.DELETING) == []


async def test_a_deposed_leader_cannot_swap_its_rewrite_in(parts) -> None:
    storage, tmp_path = parts
    remote, old = await two_segments(storage, tmp_path)
    copy = await rewrite(remote, storage, tmp_path)
    assert await storage.store.bump_leader_epoch(TOPIC, 0) == 1
    with pytest.raises(FencedLeaderEpoch):
        await remote.replace(copy, old, 0, delete_at_ms=0)
    assert await rows(storage, RemoteSegmentState.COMMITTED) == [(s.base_offset, s.commit_key) for s in old]
    # The new leader's load removes the copy; the old segments are its catalogue.
    successor = RemoteLog(storage, TOPIC, 0)
    await successor.load(1)
    assert list(successor.segments) == old
    assert await list_catalogue(storage.bucket, TOPIC, 0) == old


async def test_a_failed_rewrite_is_abandoned_unless_its_swap_took_place_after_all(parts) -> None:
    storage, tmp_path = parts
    remote, old = await two_segments(storage, tmp_path)
    before = await keys(storage)
    failed = await rewrite(remote, storage, tmp_path)
    await remote.abandon_rewrite(failed, 0)  # still `uploading`: it goes
    assert list(remote.segments) == old and await keys(storage) == before
    assert await rows(storage, RemoteSegmentState.UPLOADING) == []
    # The store made the swap but its answer was lost: the catalogue is read again, the copy
    # kept; the replaced objects wait for the next load.
    lost = await rewrite(remote, storage, tmp_path)
    await storage.store.replace_remote_segments(TOPIC, 0, 0, lost.commit_key, [(s.base_offset, s.commit_key) for s in old], leader_epoch=0)
    await remote.abandon_rewrite(lost, 0)
    assert list(remote.segments) == [lost]
    copy_keys = {lost.log_key, lost.index_key, lost.time_index_key, lost.txn_index_key, lost.commit_key}
    assert await keys(storage) == before | copy_keys
    restarted = RemoteLog(storage, TOPIC, 0)
    await restarted.load(0)
    assert list(restarted.segments) == [lost] and await keys(storage) == copy_keys
