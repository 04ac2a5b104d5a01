"""Tiering decisions: pure functions of a partition's segments, its catalogue and now_ms.

What to upload next, which local copies may go, which bucket segments retention drops, and
when produce must be refused because too much waits for the bucket. Retention reuses
`hot_tier.policy.select_retention` (Kafka's deletableSegments predicates) over the right view
of the log: the local segments for local.retention.*, the whole log (bucket, then the local
segments not yet in it) for retention.*. No I/O, no clock; the uploader and the partition's
leader act on the answers.

Invariant the answers rely on: a partition's segments are contiguous in offsets, the bucket's
catalogue first, the local segments from its end on (a local segment below the bucket's end is
a copy of what the bucket holds).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from hot_tier import SegmentInfo
from hot_tier.policy import RetentionView, select_retention


class RemoteSegmentView(Protocol):
    """What retention needs of a committed segment in the bucket."""

    @property
    def base_offset(self) -> int: ...

    @property
    def next_offset(self) -> int: ...

    @property
    def size_bytes(self) -> int: ...

    @property
    def max_timestamp(self) -> int: ...


def segments_to_upload(local: Sequence[SegmentInfo], remote_end_offset: int) -> list[SegmentInfo]:
    """Rolled, non-empty local segments the bucket does not hold yet, oldest first."""
    return [s for s in local if not s.is_active and s.base_offset >= remote_end_offset and s.size_bytes > 0]


def local_copies_to_delete(
    local: Sequence[SegmentInfo], remote_end_offset: int, *, local_retention_ms: int, local_retention_bytes: int, now_ms: int
) -> int:
    """The offset below which local copies go (0: none), by local.retention.ms / .bytes.

    Only segments wholly in the bucket (next_offset <= remote_end_offset) are candidates; the
    active segment never is.
    """
    views = [RetentionView(s.base_offset, s.size_bytes, s.max_timestamp) for s in local]
    reasons = select_retention(
        views, retention_ms=local_retention_ms, retention_bytes=local_retention_bytes,
        log_start_offset=-1, high_watermark=local[-1].next_offset if local else 0, now_ms=now_ms,
    )  # fmt: skip
    target = 0
    for segment, _ in zip(local, reasons):
        if segment.is_active or segment.next_offset > remote_end_offset:
            break
        target = segment.next_offset
    return target


def remote_segments_to_delete(
    remote: Sequence[RemoteSegmentView],
    local: Sequence[SegmentInfo],
    *,
    retention_ms: int,
    retention_bytes: int,
    log_start_offset: int,
    now_ms: int,
) -> int:
    """How many of the oldest bucket segments retention.ms / retention.bytes (over the whole
    log) or the log start offset (DeleteRecords) let go."""
    remote_end = remote[-1].next_offset if remote else 0
    views = [RetentionView(s.base_offset, s.size_bytes, s.max_timestamp) for s in remote]
    not_in_bucket = [*segments_to_upload(local, remote_end), *(s for s in local if s.is_active)]
    views += [RetentionView(s.base_offset, s.size_bytes, s.max_timestamp) for s in not_in_bucket]
    reasons = select_retention(
        views, retention_ms=retention_ms, retention_bytes=retention_bytes,
        log_start_offset=log_start_offset, high_watermark=views[-1].base_offset if views else 0, now_ms=now_ms,
    )  # fmt: skip
    return min(len(reasons), len(remote))


def over_disk_limit(waiting_bytes: int, local_disk_limit_bytes: int) -> bool:
    """Refuse produce to tiered partitions: more than the limit waits for the bucket (-1: no limit)."""
    return local_disk_limit_bytes >= 0 and waiting_bytes > local_disk_limit_bytes
