"""The tiering decisions as pure functions: what to upload, which local copies and which bucket
segments retention lets go, and the disk-limit backpressure."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from diskless.broker.tiering import policy
from hot_tier import SegmentInfo

NOW = 1_000_000


def local(base: int, next_: int, size: int, max_ts: int, active: bool = False) -> SegmentInfo:
    p = Path(f"/x/{base:020d}.log")
    return SegmentInfo(base, next_, size, max_ts, p, p.with_suffix(".index"), p.with_suffix(".timeindex"), active)


@dataclass(frozen=True)
class Remote:
    base_offset: int
    last_offset: int
    size_bytes: int
    max_timestamp: int

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


def test_segments_to_upload_are_rolled_non_empty_and_past_the_bucket() -> None:
    segs = [local(0, 10, 100, NOW), local(10, 20, 100, NOW), local(20, 20, 0, -1), local(20, 30, 50, NOW, active=True)]
    assert policy.segments_to_upload(segs, 0) == segs[:2]
    assert policy.segments_to_upload(segs, 10) == segs[1:2]
    assert policy.segments_to_upload(segs, 20) == []


def test_local_copies_go_only_once_in_the_bucket() -> None:
    segs = [local(0, 10, 100, NOW - 50), local(10, 20, 100, NOW - 50), local(20, 30, 100, NOW, active=True)]
    # local.retention.ms=0: every uploaded segment goes, none that is not uploaded.
    assert policy.local_copies_to_delete(segs, 10, local_retention_ms=0, local_retention_bytes=-1, now_ms=NOW) == 10
    assert policy.local_copies_to_delete(segs, 20, local_retention_ms=0, local_retention_bytes=-1, now_ms=NOW) == 20
    assert policy.local_copies_to_delete(segs, 0, local_retention_ms=0, local_retention_bytes=-1, now_ms=NOW) == 0
    # Not old enough.
    assert policy.local_copies_to_delete(segs, 20, local_retention_ms=100, local_retention_bytes=-1, now_ms=NOW) == 0
    # By size: keep at least 200 bytes locally.
    assert policy.local_copies_to_delete(segs, 20, local_retention_ms=-1, local_retention_bytes=200, now_ms=NOW) == 10
    # The active segment never goes, even when "uploaded" past it.
    assert policy.local_copies_to_delete(segs, 30, local_retention_ms=0, local_retention_bytes=-1, now_ms=NOW) == 20


def test_remote_retention_over_the_whole_log() -> None:
    remote = [Remote(0, 9, 100, NOW - 500), Remote(10, 19, 100, NOW - 300), Remote(20, 29, 100, NOW - 100)]
    segs = [local(30, 40, 100, NOW, active=True)]
    kw = dict(retention_ms=-1, retention_bytes=-1, log_start_offset=0, now_ms=NOW)
    assert policy.remote_segments_to_delete(remote, segs, **kw) == 0
    assert policy.remote_segments_to_delete(remote, segs, **{**kw, "retention_ms": 200}) == 2
    assert policy.remote_segments_to_delete(remote, segs, **{**kw, "retention_ms": 0}) == 3
    # 400 bytes in the log (bucket + local): keep >= 250 -> drop one.
    assert policy.remote_segments_to_delete(remote, segs, **{**kw, "retention_bytes": 250}) == 1
    # DeleteRecords to offset 15: only the segment wholly below goes.
    assert policy.remote_segments_to_delete(remote, segs, **{**kw, "log_start_offset": 15}) == 1
    assert policy.remote_segments_to_delete(remote, segs, **{**kw, "log_start_offset": 20}) == 2
    assert policy.remote_segments_to_delete([], segs, **{**kw, "retention_ms": 0}) == 0


def test_remote_retention_counts_local_segments_not_yet_uploaded() -> None:
    remote = [Remote(0, 9, 100, NOW)]
    segs = [local(10, 20, 100, NOW), local(20, 30, 100, NOW, active=True)]
    # 300 bytes in all; keep >= 200: the bucket segment goes.
    kw = dict(retention_ms=-1, log_start_offset=0, now_ms=NOW)
    assert policy.remote_segments_to_delete(remote, segs, retention_bytes=200, **kw) == 1
    assert policy.remote_segments_to_delete(remote, segs, retention_bytes=201, **kw) == 0


def test_disk_limit() -> None:
    assert policy.over_disk_limit(101, 100)
    assert not policy.over_disk_limit(100, 100)
    assert not policy.over_disk_limit(10**12, -1)
