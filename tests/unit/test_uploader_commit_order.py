"""What the store must hold before a segment's commit makes it part of the bucket: the
producer state at its end and its aborted transactions. A leader whose log begins at the
bucket's end (another broker, or this one on an empty disk) learns both only from the store;
recorded after the commit, a crash in between (or a failed write, kept only in memory) left a
read_committed consumer served an aborted transaction's records as committed.

The uploader's steps against a leader that records what it is asked, in order; the bucket's
writes (cold_tier.segments.upload_committed) are stood in for, as this is about the order."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from diskless.broker.tiering import uploader as uploader_module
from diskless.broker.tiering.uploader import Uploader
from hot_tier import SegmentInfo


class StoreDown(Exception):
    pass


class Leader:
    """A partition leader with one rolled, durable segment [100, 200) to upload."""

    topic, index, leader_epoch, tiered = "t", 0, 3, True

    def __init__(self, tmp_path: Path, failures: int) -> None:
        self.steps: list[str] = []
        self.failures = failures  # of record_aborted_transactions, before it succeeds
        self.closed = False
        segment = SegmentInfo(100, 200, 4096, 1_000, tmp_path / "a.log", tmp_path / "a.index", tmp_path / "a.timeindex", False)
        self.segments = [segment]
        leader = self

        class Remote:
            end_offset = 100

            async def begin_upload(self, **kwargs):
                leader.steps.append("begin")
                return SimpleNamespace(base_offset=kwargs["base_offset"], next_offset=kwargs["last_offset"] + 1, last_offset=kwargs["last_offset"], size_bytes=kwargs["size_bytes"])

            async def commit(self, committed, epoch):
                leader.steps.append(f"commit {committed.next_offset}")
                Remote.end_offset = committed.next_offset

        self.remote = Remote()

    def segments_ready_to_upload(self):
        return [s for s in self.segments if s.next_offset > self.remote.end_offset]

    segments_to_upload = segments_ready_to_upload  # the uploader's lag figures

    def producer_state_after(self, end):
        return None

    def txn_index(self, base, end):
        return b""

    async def publish_producer_state(self, state):
        self.steps.append("publish")

    async def record_aborted_transactions(self, end=None):
        if self.failures:
            self.failures -= 1
            self.steps.append(f"record {end} failed")
            raise StoreDown("the metadata store does not answer")
        self.steps.append(f"record {end}")

    async def segment_committed(self):
        self.steps.append("committed")

    def drop_uploaded_local_copies(self, now):
        pass


@pytest.fixture
def no_bucket_writes(monkeypatch):
    async def upload_committed(*args, **kwargs):
        pass

    async def retry_wait(bucket, seconds):
        pass

    monkeypatch.setattr(uploader_module, "upload_committed", upload_committed)
    monkeypatch.setattr(uploader_module, "retry_wait", retry_wait)
    monkeypatch.setattr(uploader_module, "first_timestamp", lambda path: 1_000)


@pytest.mark.parametrize("failures", [0, 2])
def test_aborted_transactions_are_recorded_before_the_segment_commits(tmp_path, no_bucket_writes, failures) -> None:
    leader = Leader(tmp_path, failures)
    uploader = Uploader(bucket=None, leaders=lambda: [leader], clock=lambda: 0)  # type: ignore[arg-type]
    asyncio.run(uploader._upload_all(leader))  # type: ignore[arg-type]
    tries = ["begin", "publish", "record 200 failed"] * failures
    assert leader.steps == [*tries, "begin", "publish", "record 200", "commit 200", "committed"]


def test_a_closed_leaders_upload_ends_before_the_partition_opens_again(tmp_path, no_bucket_writes, monkeypatch) -> None:
    """The registry lets the upload of a leader it closed end before the partition opens again
    (stop_uploads): left running, it wrote its commit object to the bucket after the new
    leader's RemoteLog.load had found the upload unfinished and deleted its data. The attempt
    in flight finishes (cancelled, a PUT already sent could still land later); one that does
    not finish in time is cancelled."""
    leader = Leader(tmp_path, failures=0)
    uploader = Uploader(bucket=None, leaders=lambda: [leader], clock=lambda: 0)  # type: ignore[arg-type]

    async def scenario() -> tuple[list[str], list[str]]:
        in_flight, release = asyncio.Event(), asyncio.Event()

        async def slow_upload(*args, **kwargs):
            in_flight.set()
            await release.wait()  # the data PUTs, in flight when the leader closes

        monkeypatch.setattr(uploader_module, "upload_committed", slow_upload)
        uploader._tasks[("t", 0)] = asyncio.create_task(uploader._upload_all(leader))  # type: ignore[arg-type]  # as a pass starts it
        await asyncio.wait_for(in_flight.wait(), 5)
        leader.closed = True
        stopping = asyncio.create_task(uploader.stop_uploads([("t", 0), ("t", 1)]))
        for _ in range(10):  # however often the loop turns, the PUT holds the attempt
            await asyncio.sleep(0)
        assert not stopping.done()  # waits for the attempt in flight
        release.set()
        await asyncio.wait_for(stopping, 5)
        # An attempt that does not end in time is cancelled.
        stuck = Leader(tmp_path, failures=0)
        in_flight.clear()
        release.clear()
        monkeypatch.setattr(uploader_module, "STOP_UPLOADS_S", 0.05)
        uploader._tasks[("t", 0)] = asyncio.create_task(uploader._upload_all(stuck))  # type: ignore[arg-type]
        await asyncio.wait_for(in_flight.wait(), 5)
        stuck.closed = True
        await asyncio.wait_for(uploader.stop_uploads([("t", 0)]), 5)
        release.set()
        await asyncio.sleep(0)
        return leader.steps, stuck.steps

    finished, cancelled = asyncio.run(scenario())
    assert finished == ["begin", "publish", "record 200", "commit 200", "committed"]
    assert cancelled == ["begin"]
    assert uploader._tasks == {}
