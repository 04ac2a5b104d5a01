"""Compaction of the bucket's history: the segments of a tiered compacted partition that its
leader has no local copy of, because another broker wrote them (the partition moved here) or
this broker's disk was lost. bucket.py replaces bucket segments by cleaned local copies; these
have none, so they are cleaned from the bucket itself:

    1. download the history's .log objects into `<partition dir>/bucket-history/`;
    2. one cleaning pass (cleaning.py) over history and local segments together: the offset
       map is built from the whole of both, up to the cleanable end (the last stable offset and
       the bucket's end, leader.cleanable_end_offset) or as far as the dedupe buffer holds;
       cleaned copies are written for the history segments only;
    3. bucket.py's rewrites, merged up to segment.bytes, replace the history segments whose
       copies changed: uploaded with a new upload id, swapped in by one fenced store write, the
       replaced objects deleted after file.delete.delay.ms.

The history has no cleaner checkpoint of its own, so a pass goes over all of it. It runs when
a broker starts leading the partition, and then only when the data written since the last
pass reaches min.cleanable.dirty.ratio of the history's size, or when a tombstone the last
pass kept reaches delete.retention.ms (`HistoryMemo.due`). Crash safety is bucket.py's: the
scratch files are nothing but a cache, deleted before and after each pass.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cold_tier.layout import CommittedSegment
from hot_tier import SegmentInfo
from hot_tier.swap import cleaned_path

from .bucket import plan_rewrites, rewrite
from .cleaning import Throttler, clean_partition, segment_views
from .config import CompactionRules
from .policy import SegmentView, plan

HISTORY_DIRECTORY = "bucket-history"
_DOWNLOAD_CHUNK_BYTES = 8 * 2**20


@dataclass(frozen=True, slots=True)
class HistoryMemo:
    """What the last pass over a partition's history saw."""

    leader_epoch: int
    cleaned_to: int  # the pass's offset map end: data from here on is new to the history
    history_bytes: int
    tombstone_horizon_ms: int | None  # when a tombstone it kept may go

    @classmethod
    def failed(cls, leader: Any) -> HistoryMemo:
        """After a failed pass: the next one waits for new data, as after a pass that did it all."""
        history = history_segments(leader.remote.segments, leader.local_segments)
        return cls(leader.leader_epoch, leader.cleanable_end_offset, sum(s.size_bytes for s in history), None)

    def due(self, leader_epoch: int, local: Sequence[SegmentInfo], cleanable_end: int, rules: CompactionRules, now_ms: int) -> bool:
        if leader_epoch != self.leader_epoch:
            return True
        if self.tombstone_horizon_ms is not None and now_ms >= self.tombstone_horizon_ms:
            return True
        new = sum(s.size_bytes for s in local if not s.is_active and self.cleaned_to <= s.base_offset < cleanable_end)
        return new > 0 and new / (new + self.history_bytes) > rules.min_cleanable_dirty_ratio


def history_segments(remote: Sequence[CommittedSegment], local: Sequence[SegmentInfo]) -> list[CommittedSegment]:
    """The bucket segments entirely below the local log."""
    if not local:
        return []
    start = local[0].base_offset
    return [s for s in remote if s.next_offset <= start]


async def clean_history(
    leader: Any, now_ms: int, memo: HistoryMemo | None, *, map_capacity: int, throttle: Throttler, stop: threading.Event
) -> tuple[int, HistoryMemo | None]:
    """Clean `leader`'s bucket history if it is due; (rewrites swapped in, the new memo)."""
    local = list(leader.local_segments)
    history = history_segments(leader.remote.segments, local)
    rules: CompactionRules = leader.rules.compaction
    if not history or (memo is not None and not memo.due(leader.leader_epoch, local, leader.cleanable_end_offset, rules, now_ms)):
        return 0, memo
    scratch = leader.dir / HISTORY_DIRECTORY
    await asyncio.to_thread(shutil.rmtree, scratch, True)
    await asyncio.to_thread(scratch.mkdir, parents=True)
    try:
        downloaded = [await _download(leader.remote.storage.bucket, segment, scratch) for segment in history]
        views = [SegmentView(s.base_offset, s.next_offset, s.size_bytes, s.max_timestamp, s.base_timestamp, False) for s in history]
        views += await asyncio.to_thread(segment_views, local)
        cleaning = plan(
            views, checkpoint=None, log_start_offset=history[0].base_offset, high_watermark=leader.cleanable_end_offset,
            rules=rules, now_ms=now_ms,
        )  # fmt: skip
        result = await asyncio.to_thread(
            clean_partition, downloaded + local, views, cleaning, rules, map_capacity=map_capacity,
            producer_last_offsets=leader.producer_last_offsets(), now_ms=now_ms, throttle=throttle, stop=stop,
            aborted=leader.aborted_transactions(0, cleaning.first_uncleanable_offset), rewrite_below=local[0].base_offset,
            log_start_offset=leader.log_start_offset, aborts_removable_below=leader.aborts_removable_below,
        )  # fmt: skip
        cleaned = {base for base, _ in result.cleaned}
        sources = [_cleaned(info, scratch) if info.base_offset in cleaned else info for info in downloaded]
        end = SegmentInfo(history[-1].next_offset, history[-1].next_offset, 0, -1, scratch / "end", scratch / "end", scratch / "end", True)
        swapped = 0
        for planned in plan_rewrites(history, [*sources, end], leader.log_config.segment_bytes, cleaned):
            if leader.closed:
                break
            swapped += await rewrite(leader, planned, now_ms)
        memo = HistoryMemo(leader.leader_epoch, result.end_offset, sum(s.size_bytes for s in sources), result.tombstone_horizon_ms)
        return swapped, memo
    finally:
        await asyncio.to_thread(shutil.rmtree, scratch, True)


async def _download(bucket: Any, segment: CommittedSegment, scratch: Path) -> SegmentInfo:
    """The segment's .log object, as a file under `scratch`, in ranged GETs."""
    path = scratch / f"{segment.base_offset:020d}.log"
    with open(path, "wb") as out:
        for start in range(0, segment.size_bytes, _DOWNLOAD_CHUNK_BYTES):
            chunk = await bucket.get(segment.log_key, start=start, end=min(segment.size_bytes, start + _DOWNLOAD_CHUNK_BYTES))
            await asyncio.to_thread(out.write, chunk)
    return SegmentInfo(
        segment.base_offset, segment.next_offset, segment.size_bytes, segment.max_timestamp,
        path, path.with_suffix(".index"), path.with_suffix(".timeindex"), False,
    )  # fmt: skip


def _cleaned(info: SegmentInfo, scratch: Path) -> SegmentInfo:
    path = cleaned_path(scratch, info.base_offset)
    return replace(info, log_path=path, size_bytes=os.stat(path).st_size)
