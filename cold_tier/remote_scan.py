"""The pure decisions of a remote read: which segment holds an offset, what a batch header
says without the rest of the batch, and how many whole batches a fetch returns. No I/O.

A remote fetch (Kafka's RemoteLogManager.read) serves one segment per call:

1. `segment_for_offset`: bisect the catalogue (sorted by base offset) for the segment whose
   [base_offset, last_offset] holds the offset; an offset in a gap between two segments
   starts at the next segment, as Kafka skips offsets that no batch holds.
2. From the offset index's position, `peek_batch` reads batch headers one after another (the
   first 43 bytes suffice: base_offset, batch_length, magic, last_offset_delta,
   max_timestamp; see hot_tier/records/header.py for the layout) until the first batch whose
   last offset is >= the target. Records are never decoded on this path.
3. `take_whole_batches`: from that batch, as many whole batches as fit in max_bytes, or the
   first alone if it is larger and min_one_batch (KIP-74).
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from hot_tier.records.errors import BadLength, BadMagic, TruncatedBatch
from hot_tier.records.header import HEADER_BYTES, LOG_OVERHEAD, MAGIC, peek_size

from .layout import CommittedSegment
from .remote_errors import RemoteOffsetOutOfRange

# base_offset int64 @0, batch_length int32 @8, magic int8 @16, last_offset_delta int32 @23,
# max_timestamp int64 @35: the fields of a header that a scan needs.
_PEEK = struct.Struct(">qi4xb6xi8xq")
PEEK_BYTES = _PEEK.size  # 43


@dataclass(frozen=True, slots=True)
class BatchPeek:
    """What a batch's header says about it, read without its records or CRC check."""

    position: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    size_bytes: int

    @property
    def end_position(self) -> int:
        return self.position + self.size_bytes


def peek_batch(buf: bytes | bytearray | memoryview, position: int, at: int = 0) -> BatchPeek:
    """The batch whose header starts at `buf[at:]`; `position` is where that is in the .log.

    Needs PEEK_BYTES of header only, not the whole batch; raises TruncatedBatch with fewer,
    BadLength for a batch shorter than a header, BadMagic for anything but RecordBatch v2.
    """
    available = len(buf) - at
    if available < PEEK_BYTES:
        raise TruncatedBatch(position, PEEK_BYTES, available)
    base_offset, batch_length, magic, last_offset_delta, max_timestamp = _PEEK.unpack_from(buf, at)
    if batch_length < HEADER_BYTES - LOG_OVERHEAD:
        raise BadLength(position, batch_length)
    if magic != MAGIC:
        raise BadMagic(position, magic)
    return BatchPeek(position, base_offset, base_offset + last_offset_delta, max_timestamp, batch_length + LOG_OVERHEAD)


def take_whole_batches(buf: bytes | bytearray | memoryview, max_bytes: int, *, min_one_batch: bool) -> int:
    """How many leading bytes of `buf` (which starts at a batch) a fetch of `max_bytes` returns.

    Whole batches only, at most `max_bytes` in all; when the first batch alone is larger, all of
    it if `min_one_batch`, else 0. A batch cut short by the end of `buf` is left out, except the
    first, which must be whole: TruncatedBatch (the caller reads the first batch in full).
    """
    first = peek_size(buf, 0)
    if first is None:
        raise TruncatedBatch(0, LOG_OVERHEAD, len(buf))
    if first < HEADER_BYTES:
        raise BadLength(0, first - LOG_OVERHEAD)
    if first > len(buf):
        raise TruncatedBatch(0, first, len(buf))
    if first > max_bytes:
        return first if min_one_batch else 0
    limit = min(max_bytes, len(buf))
    end = first
    while True:
        size = peek_size(buf, end)
        if size is None or size < HEADER_BYTES or end + size > limit:
            return end
        end += size


def segment_for_offset(segments: Sequence[CommittedSegment], offset: int) -> int | None:
    """The index in `segments` (sorted by base offset, not overlapping) of the segment to read
    `offset` from: the one holding it, else the first one after it. None at or past the end of
    the last segment; RemoteOffsetOutOfRange below the first."""
    if not segments or offset >= segments[-1].next_offset:
        return None
    if offset < segments[0].base_offset:
        raise RemoteOffsetOutOfRange(offset, segments[0].base_offset, segments[-1].next_offset)
    at = bisect_right(segments, offset, key=_base_offset) - 1
    if segments[at].last_offset < offset:
        at += 1  # in the gap after segments[at]: the next one starts past `offset`
    return at


def _base_offset(segment: CommittedSegment) -> int:
    return segment.base_offset
