"""Write-ahead objects commit in the order they were sealed, whatever order their PUTs end in;
a PUT that stalls is hedged.

Out of order, a broker killed between two commits would leave the store recording a
partition's later batch without the earlier one: a hole the next leader cannot fill (seen in
bench/failover.py as a partition left offline after a SIGKILL). Against moto's S3 server and
a real SQLite store; the first object's PUT is held back at the bucket until the test lets it go.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from cold_tier.url import open_object_store
from diskless.broker import metrics
from diskless.broker.wal import hedge
from diskless.broker.wal.writer import WalSettings, WalWriter
from metadata import open_metadata_store, sqlite_url

from .moto_s3 import MotoS3
from .test_tiering_reads import moto  # noqa: F401  (fixture)
from .test_wal_garbage import batch_bytes

DEADLINE_S = 10.0


class HeldFirstPut:
    """A bucket whose first PUT waits for `release`; every other call goes straight through."""

    def __init__(self, bucket) -> None:
        self._bucket = bucket
        self.release = asyncio.Event()
        self.first_started = asyncio.Event()
        self.puts_done = 0

    async def put(self, key: str, data: bytes, **kwargs) -> None:
        if not self.first_started.is_set():
            self.first_started.set()
            await self.release.wait()
        await self._bucket.put(key, data, **kwargs)
        self.puts_done += 1

    def __getattr__(self, name: str):
        return getattr(self._bucket, name)


class CountedCommits:
    """A store that counts commit_wal_object calls as they are made (before they run)."""

    def __init__(self, store) -> None:
        self._store = store
        self.commits = 0

    def commit_wal_object(self, *args, **kwargs):
        self.commits += 1
        return self._store.commit_wal_object(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._store, name)


async def wait_until(condition, what: str) -> None:
    async with asyncio.timeout(DEADLINE_S):
        while not condition():
            await asyncio.sleep(0.005)  # polling with a deadline: the writer has nothing to wait on
    assert condition(), what


async def test_a_later_object_commits_only_after_the_one_sealed_before_it(moto: MotoS3, tmp_path: Path) -> None:
    real = open_object_store(moto.url(moto.create_bucket(), prefix="cluster"), env=moto.env())
    store = await open_metadata_store(sqlite_url(tmp_path / "metadata.db"))
    bucket = HeldFirstPut(real)
    topic = f"t-{uuid.uuid4().hex[:10]}"
    await store.create_topic(topic, 2, {})
    counted = CountedCommits(store)
    writer = WalWriter(bucket, counted, 1, lambda: 1_800_000_000_000, WalSettings(commit_interval_ms=1, max_in_flight=4))  # type: ignore[arg-type]
    writer.start()
    try:
        first = writer.submit(topic, 0, 0, 0, 4, batch_bytes(0, 5))
        await asyncio.wait_for(bucket.first_started.wait(), DEADLINE_S)
        second = writer.submit(topic, 0, 0, 5, 9, batch_bytes(5, 5))  # the same partition, the next batch
        other = writer.submit(topic, 1, 0, 0, 2, batch_bytes(0, 3))  # another partition, in the same object
        await wait_until(lambda: bucket.puts_done == 1, "the second object's PUT ends first")
        # Out of order, its commit would have been called in the same step as the PUT's end.
        assert counted.commits == 0
        assert not second.done() and not other.done() and not first.done()
        assert await store.list_wal_batches(topic, 0) == []
        assert await store.list_wal_batches(topic, 1) == []
        bucket.release.set()
        await asyncio.wait_for(asyncio.gather(first, second, other), DEADLINE_S)
        assert [(b.base_offset, b.last_offset) for b in await store.list_wal_batches(topic, 0)] == [(0, 4), (5, 9)]
        assert [(b.base_offset, b.last_offset) for b in await store.list_wal_batches(topic, 1)] == [(0, 2)]
        assert (bucket.puts_done, counted.commits) == (2, 2)
    finally:
        bucket.release.set()
        await writer.stop()
        await real.close()
        await store.close()


class StalledPut:
    """A bucket whose PUT number `stall_at` waits for `release`; the others go straight through."""

    def __init__(self, bucket, stall_at: int) -> None:
        self._bucket = bucket
        self.stall_at = stall_at
        self.release = asyncio.Event()
        self.puts = 0

    async def put(self, key: str, data: bytes, **kwargs) -> None:
        self.puts += 1
        if self.puts == self.stall_at:
            await self.release.wait()
        await self._bucket.put(key, data, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._bucket, name)


async def test_a_stalled_put_is_hedged_and_its_batch_becomes_durable(moto: MotoS3, tmp_path: Path) -> None:
    """Once enough PUTs were timed, a PUT that stalls is sent again; the batch is durable from
    the hedge, while the first PUT is still held, and the object holds it exactly."""
    real = open_object_store(moto.url(moto.create_bucket(), prefix="cluster"), env=moto.env())
    store = await open_metadata_store(sqlite_url(tmp_path / "metadata.db"))
    timed = hedge.MIN_SAMPLES
    bucket = StalledPut(real, stall_at=timed + 1)
    topic = f"t-{uuid.uuid4().hex[:10]}"
    await store.create_topic(topic, 1, {})
    writer = WalWriter(bucket, store, 1, lambda: 1_800_000_000_000, WalSettings(commit_interval_ms=1))  # type: ignore[arg-type]
    hedged_before = metrics.EVENTS.get_sample_value("diskless_wal_hedged_puts_total") or 0.0
    writer.start()
    try:
        for i in range(timed):  # one object each: each PUT is timed
            await asyncio.wait_for(writer.submit(topic, 0, 0, i * 5, i * 5 + 4, batch_bytes(i * 5, 5)), DEADLINE_S)
        stalled = batch_bytes(timed * 5, 5)
        await asyncio.wait_for(writer.submit(topic, 0, 0, timed * 5, timed * 5 + 4, stalled), DEADLINE_S)
        assert not bucket.release.is_set()
        assert bucket.puts == timed + 2  # the stalled one and its hedge
        assert metrics.EVENTS.get_sample_value("diskless_wal_hedged_puts_total") == hedged_before + 1
        batches = await store.list_wal_batches(topic, 0)
        assert [(b.base_offset, b.last_offset) for b in batches] == [(i * 5, i * 5 + 4) for i in range(timed + 1)]
        last = batches[-1]
        assert await real.get(last.object_key, start=last.position, end=last.position + last.size_bytes) == stalled
    finally:
        bucket.release.set()
        await writer.stop()
        await real.close()
        await store.close()
