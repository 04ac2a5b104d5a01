"""Values the Log hands out: what an append did, what a segment looks like, what was deleted."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path


@dataclass(frozen=True, slots=True)
class AppendInfo:
    """The result of Log.append, as a ProduceResponse needs it."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time_ms: int  # -1 for CreateTime appends
    log_start_offset: int
    size_bytes: int


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """A snapshot of one segment, for tiering (upload the rolled ones) and for tests."""

    base_offset: int
    next_offset: int
    size_bytes: int
    max_timestamp: int  # -1 if the segment holds no timestamp
    log_path: Path
    index_path: Path
    timeindex_path: Path
    is_active: bool


class DeleteReason(str, Enum):
    RETENTION_MS = "retention.ms"
    RETENTION_BYTES = "retention.bytes"
    LOG_START_OFFSET = "log_start_offset"  # DeleteRecords, or a log start offset from metadata
    TIERED = "tiered"  # delete_segments_to: the segment is safe in the bucket


@dataclass(frozen=True, slots=True)
class DeletedSegment:
    base_offset: int
    next_offset: int
    size_bytes: int
    max_timestamp: int
    reason: DeleteReason
