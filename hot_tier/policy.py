"""Roll, retention and flush decisions: pure functions of segment state, config and now_ms.

They follow Kafka's LogSegment.shouldRoll, UnifiedLog.deletableSegments with its
LogStartOffset / RetentionSize / RetentionMs breach predicates, and the flush.messages and
flush.ms checks. No I/O and no clock: the Log passes what it knows and acts on the answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import NamedTuple

from .index import INT32_MAX
from .info import DeleteReason


class RollReason(str, Enum):
    SEGMENT_BYTES = "segment.bytes"
    SEGMENT_MS = "segment.ms"
    INDEX_FULL = "segment.index.bytes"
    OFFSET_RANGE = "relative offset past int32"


def roll_reason(
    *,
    size_bytes: int,
    incoming_bytes: int,
    segment_bytes: int,
    roll_base_ms: int | None,
    now_ms: int,
    segment_ms: int,
    index_room: int,
    index_entries_needed: int,
    relative_last_offset: int,
) -> RollReason | None:
    """Why the active segment must be rolled before the next append, or None.

    An empty segment is never rolled (a batch larger than segment.bytes goes into an empty
    segment of its own). Age counts from the segment's first append (`roll_base_ms`).
    """
    if size_bytes == 0:
        return None
    if size_bytes + incoming_bytes > segment_bytes:
        return RollReason.SEGMENT_BYTES
    if roll_base_ms is not None and now_ms - roll_base_ms > segment_ms:
        return RollReason.SEGMENT_MS
    if index_room <= 0 or index_entries_needed > index_room:
        return RollReason.INDEX_FULL
    if relative_last_offset > INT32_MAX:
        return RollReason.OFFSET_RANGE
    return None


class RetentionView(NamedTuple):
    base_offset: int
    size_bytes: int
    largest_timestamp: int  # max timestamp, or the file's mtime if it holds none (as Kafka)


def select_retention(
    segments: Sequence[RetentionView],
    *,
    retention_ms: int,
    retention_bytes: int,
    log_start_offset: int,
    high_watermark: int,
    now_ms: int,
) -> list[DeleteReason]:
    """The reasons to delete the oldest len(result) segments (a prefix, oldest first).

    The last (active) segment is never chosen, nor a segment whose successor starts above the
    high watermark. A segment goes if the log start offset passed it, if the log would still
    hold >= retention_bytes without it, or if its largest timestamp is more than retention_ms
    old. Kafka checks the three in separate passes; one pass over all three reaches the same
    fixed point a rerun would.
    """
    remaining_bytes = sum(segment.size_bytes for segment in segments)
    reasons: list[DeleteReason] = []
    for segment, successor in zip(segments, segments[1:]):
        if high_watermark < successor.base_offset:
            break
        if successor.base_offset <= log_start_offset:
            reason = DeleteReason.LOG_START_OFFSET
        elif retention_bytes >= 0 and remaining_bytes - segment.size_bytes >= retention_bytes:
            reason = DeleteReason.RETENTION_BYTES
        elif retention_ms >= 0 and now_ms - segment.largest_timestamp > retention_ms:
            reason = DeleteReason.RETENTION_MS
        else:
            break
        reasons.append(reason)
        remaining_bytes -= segment.size_bytes
    return reasons


def should_flush(*, unflushed_messages: int, ms_since_flush: int, flush_messages: int, flush_ms: int) -> bool:
    """flush.messages / flush.ms: fsync once either is reached and something is unflushed."""
    return unflushed_messages > 0 and (unflushed_messages >= flush_messages or ms_since_flush >= flush_ms)
