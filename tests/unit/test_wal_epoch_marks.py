"""Leader epoch marks (diskless/broker/wal/epoch_marks.py): written in the background, retried
through bucket failures, never for a first leadership, never once their leader closed, and a
topic's deletion waits for its marks still being written."""

from __future__ import annotations

import asyncio
import uuid

from cold_tier.errors import PreconditionFailed
from cold_tier.layout import epoch_key

from diskless.broker.wal import epoch_marks
from diskless.broker.wal.epoch_marks import EpochMarks

T = uuid.UUID(int=5)


class FlakyBucket:
    """PUTs fail `failures` times, then land; a key already there answers PreconditionFailed."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.objects: dict[str, bytes] = {}
        self.attempts = 0

    async def put(self, key: str, data: bytes, *, if_none_match: bool = False) -> None:
        self.attempts += 1
        if self.failures:
            self.failures -= 1
            raise ConnectionError("the bucket does not answer")
        if if_none_match and key in self.objects:
            raise PreconditionFailed(key)
        self.objects[key] = data


async def test_a_mark_is_retried_until_the_bucket_takes_it(monkeypatch) -> None:
    monkeypatch.setattr(epoch_marks, "RETRY_BACKOFF_MS", 1)
    bucket = FlakyBucket(failures=3)
    marks = EpochMarks(bucket)  # type: ignore[arg-type]
    marks.mark("t", T, 2, 5, 1234, lambda: True)
    marks.mark("t", T, 3, 1, 0, lambda: True)  # a first leadership fenced nobody: no mark
    await asyncio.wait_for(marks.drain(), 10)
    assert bucket.objects == {epoch_key("t", 2, 5, 1234, T): b""}
    assert (bucket.attempts, marks.written) == (4, 1)
    marks.mark("t", T, 2, 5, 1234, lambda: True)  # again (a lost answer): the object is there, fine
    await asyncio.wait_for(marks.drain("t"), 10)
    assert (list(bucket.objects), marks.written) == ([epoch_key("t", 2, 5, 1234, T)], 2)


async def test_a_closed_leaders_mark_is_given_up_and_a_deletion_waits_for_it(monkeypatch) -> None:
    monkeypatch.setattr(epoch_marks, "RETRY_BACKOFF_MS", 1)
    bucket = FlakyBucket(failures=10**9)  # the bucket is out
    marks = EpochMarks(bucket)  # type: ignore[arg-type]
    open_leaders = {"gone": True, "kept": True}
    marks.mark("gone", T, 0, 3, 10, lambda: open_leaders["gone"])
    marks.mark("kept", T, 0, 3, 10, lambda: open_leaders["kept"])
    deadline = asyncio.get_running_loop().time() + 10
    while bucket.attempts < 4:  # both are being retried
        assert asyncio.get_running_loop().time() < deadline, bucket.attempts
        await asyncio.sleep(0.001)
    open_leaders["gone"] = False  # its topic is deleted: its leader closed
    attempts = bucket.attempts
    await asyncio.wait_for(marks.drain("gone"), 10)  # not waiting for its back-off to end
    assert bucket.attempts <= attempts + 1  # a PUT in flight, at most, was awaited
    bucket.failures = 0
    await asyncio.wait_for(marks.drain(), 10)
    assert bucket.objects == {epoch_key("kept", 0, 3, 10, T): b""}
    await marks.stop()
