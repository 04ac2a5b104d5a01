"""Tiering when the metadata store's answer is lost or its write fails, with a real SQLite store,
a real directory bucket, a real local log and the uploader's and leader's own steps.

- The commit of a segment upload is not idempotent. When it took effect but its answer was
  lost, the uploader's retry found the row committed and was refused (committed -> committed)
  forever: the partition's uploads stopped until it was opened again.
- Retention that empties the bucket leaves the log start offset in the store as the only record
  of where the log begins. Written after the last segment went, a failed write was never tried
  again, and a next leader on another broker started the log at the stale offset, handing out
  offsets consumers had already read."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

from cold_tier.local import LocalObjectStore
from cold_tier.remote_log import RemoteLogReader
from diskless.broker.partition.leader import PartitionLeader
from diskless.broker.partition.rules import PartitionRules
from diskless.broker.tiering import uploader as uploader_module
from diskless.broker.tiering.remote_log import RemoteLog, RemoteStorage
from diskless.broker.tiering.uploader import Uploader
from hot_tier import Log, LogConfig
from hot_tier.records import Record, encode_batch
from metadata import RemoteSegmentState, open_metadata_store

TOPIC = "answers"
NOW_MS = 10**12  # records are stamped 0: far past a retention.ms of an hour


class FlakyStore:
    """The metadata store, with faults to arm: a commit that takes effect and then raises (its
    answer lost), a log start offset write that fails, a deletion mark that fails."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.lose_commit_answers = 0
        self.fail_log_start_at: int | None = None  # fail once a write of at least this offset
        self.fail_marks = 0
        self.log_start_writes: list[tuple[int, bool]] = []  # (offset, succeeded)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def commit_remote_segment(self, *args: Any, **kwargs: Any) -> Any:
        committed = await self._store.commit_remote_segment(*args, **kwargs)
        if self.lose_commit_answers:
            self.lose_commit_answers -= 1
            raise ConnectionError("connection reset before the answer arrived")
        return committed

    async def set_log_start_offset(self, topic: str, partition: int, offset: int, **kwargs: Any) -> int:
        if self.fail_log_start_at is not None and offset >= self.fail_log_start_at:
            self.fail_log_start_at = None
            self.log_start_writes.append((offset, False))
            raise ConnectionError("the metadata store does not answer")
        self.log_start_writes.append((offset, True))
        return await self._store.set_log_start_offset(topic, partition, offset, **kwargs)

    async def mark_remote_segment_deleting(self, *args: Any, **kwargs: Any) -> Any:
        if self.fail_marks:
            self.fail_marks -= 1
            raise ConnectionError("the broker stopped here")
        return await self._store.mark_remote_segment_deleting(*args, **kwargs)


@pytest.fixture
async def parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    async def no_wait(bucket: Any, seconds: float) -> None:
        await asyncio.sleep(0)

    monkeypatch.setattr(uploader_module, "retry_wait", no_wait)
    real = await open_metadata_store(f"sqlite:///{tmp_path / 'metadata.db'}")
    await real.create_topic(TOPIC, 1, {})
    bucket = LocalObjectStore(tmp_path / "bucket")
    reader = RemoteLogReader(bucket)
    store = FlakyStore(real)
    try:
        yield RemoteStorage(bucket, store, reader), store, tmp_path  # type: ignore[arg-type]
    finally:
        await reader.close()
        await real.close()


RULES = PartitionRules(max_message_bytes=1 << 20, log_append_time=False, tiered=True, retention=(3_600_000, -1), local_retention=(-1, -1))


async def open_leader(storage: RemoteStorage, store: FlakyStore, directory: Path, leaders: list, uploader: Uploader) -> PartitionLeader:
    """A leader as registry.py opens one: its log at the log start offset the store holds."""
    log_start_offset = (await store.get_log_start_offsets(TOPIC)).get(0)
    log = Log.open(directory, LogConfig(segment_bytes=1024), NOW_MS, log_start_offset=log_start_offset)
    leader = await PartitionLeader.open(
        TOPIC, uuid.uuid4(), 0, log, RULES, RemoteLog(storage, TOPIC, 0), store, uploader, None, lambda: True,  # type: ignore[arg-type]
        leader_epoch=0, log_start_offset=log_start_offset, producer_id_expiration_ms=10**9, now_ms=NOW_MS,
    )  # fmt: skip
    leaders[:] = [leader]
    return leader


def produce(leader: PartitionLeader, count: int) -> list[int]:
    return [leader.append(encode_batch([Record(0, 0, None, b"v" * 100)]), NOW_MS).first_offset for _ in range(count)]


async def two_rolled_segments(leader: PartitionLeader) -> int:
    """Append until a segment rolled, then roll the active one too; the end offset."""
    while len(leader.local_segments) < 2:
        produce(leader, 1)
    leader._log.roll(NOW_MS)
    return leader.log_end_offset


async def committed_rows(store: FlakyStore) -> list[tuple[int, int]]:
    return [(r.base_offset, r.last_offset) for r in await store.list_remote_segments(TOPIC, 0)]


async def test_a_commit_whose_answer_was_lost_is_not_retried_forever(parts) -> None:
    storage, store, tmp_path = parts
    leaders: list[PartitionLeader] = []
    uploader = Uploader(storage.bucket, lambda: leaders, lambda: NOW_MS)
    leader = await open_leader(storage, store, tmp_path / "broker-a" / f"{TOPIC}-0", leaders, uploader)
    while len(leader.local_segments) < 3:  # two rolled segments wait for the bucket
        produce(leader, 1)
    store.lose_commit_answers = 1
    await asyncio.wait_for(uploader._upload_all(leader), timeout=10)
    assert store.lose_commit_answers == 0  # the first commit's answer was lost
    rolled = leader.local_segments[:2]
    assert [(s.base_offset, s.next_offset) for s in leader.remote.segments] == [(s.base_offset, s.next_offset) for s in rolled]
    assert await committed_rows(store) == [(s.base_offset, s.next_offset - 1) for s in rolled]
    assert await store.list_remote_segments(TOPIC, 0, states=(RemoteSegmentState.UPLOADING,)) == []
    # The next segment uploads too: the partition's uploads go on.
    leader._log.roll(NOW_MS)
    await asyncio.wait_for(uploader._upload_all(leader), timeout=10)
    assert leader.remote.end_offset == leader.log_end_offset
    leader.close()


async def test_a_failed_log_start_write_is_retried_until_the_store_has_it(parts) -> None:
    storage, store, tmp_path = parts
    leaders: list[PartitionLeader] = []
    uploader = Uploader(storage.bucket, lambda: leaders, lambda: NOW_MS)
    leader = await open_leader(storage, store, tmp_path / "broker-a" / f"{TOPIC}-0", leaders, uploader)
    end = await two_rolled_segments(leader)
    await asyncio.wait_for(uploader._upload_all(leader), timeout=10)
    assert leader.remote.end_offset == end
    store.fail_log_start_at = end  # the write that follows the bucket's last segment fails
    with pytest.raises(ConnectionError):
        await leader.enforce_remote_retention(NOW_MS)
    await leader.enforce_remote_retention(NOW_MS)  # the next pass
    assert leader.remote.segments == ()
    assert (await store.get_log_start_offsets(TOPIC))[0] == end
    assert (end, False) in store.log_start_writes and store.log_start_writes[-1] == (end, True)
    leader.close()
    # A next leader on another broker (an empty disk, an empty bucket) continues at the end.
    leader = await open_leader(storage, store, tmp_path / "broker-b" / f"{TOPIC}-0", leaders, uploader)
    assert (leader.log_start_offset, leader.log_end_offset) == (end, end)
    assert produce(leader, 1) == [end]
    leader.close()


async def test_a_retention_pass_stopped_after_the_log_start_write_hides_what_it_left(parts) -> None:
    storage, store, tmp_path = parts
    leaders: list[PartitionLeader] = []
    uploader = Uploader(storage.bucket, lambda: leaders, lambda: NOW_MS)
    leader = await open_leader(storage, store, tmp_path / "broker-a" / f"{TOPIC}-0", leaders, uploader)
    end = await two_rolled_segments(leader)
    await asyncio.wait_for(uploader._upload_all(leader), timeout=10)
    store.fail_marks = 1  # the pass stops (a crash) once the log start offset is written
    with pytest.raises(ConnectionError):
        await leader.enforce_remote_retention(NOW_MS)
    leader.close()
    leader = await open_leader(storage, store, tmp_path / "broker-b" / f"{TOPIC}-0", leaders, uploader)
    assert len(leader.remote.segments) == 2  # still in the bucket, below the log start offset
    assert (leader.log_start_offset, leader.log_end_offset) == (end, end)
    await leader.enforce_remote_retention(NOW_MS)
    assert leader.remote.segments == () and await committed_rows(store) == []
    assert produce(leader, 1) == [end]
    leader.close()


async def test_local_copies_that_outlive_the_buckets_go_with_retention(parts) -> None:
    """Local copies kept (local.retention -1, as a compacted topic's) of segments retention
    deleted from the bucket go too: the local log never starts below the log start offset, so a
    lookup by timestamp finds the first record at or above it, not one fetches refuse."""
    storage, store, tmp_path = parts
    leaders: list[PartitionLeader] = []
    uploader = Uploader(storage.bucket, lambda: leaders, lambda: NOW_MS)
    leader = await open_leader(storage, store, tmp_path / "broker-a" / f"{TOPIC}-0", leaders, uploader)
    end = await two_rolled_segments(leader)
    await asyncio.wait_for(uploader._upload_all(leader), timeout=10)
    assert produce(leader, 2) == [end, end + 1]
    await leader.enforce_remote_retention(NOW_MS)
    assert leader.remote.segments == ()
    assert (leader.log_start_offset, leader.local_log_start_offset) == (end, end)
    assert await leader.offset_for_timestamp(0, fetchable_below=end + 2) == (0, end)
    leader.close()
