"""Read-only views of a segment's index objects (`.index`, `.timeindex`) fetched from the bucket. Pure.

The objects are the local files byte for byte (hot_tier/index.py, Kafka's OffsetIndex and
TimeIndex), nothing but whole entries, big-endian:

    .index      8-byte entries:  relative_offset (int32) | position (int32)
    .timeindex  12-byte entries: timestamp (int64, ms)   | relative_offset (int32)

An offset index entry (o, p) says the batch starting at position p of the .log ends at offset
base_offset + o, so every offset >= that one lies at or after p; a lookup returns the entry
with the largest offset <= the target, (base_offset, 0) if none. A time index entry (t, o)
says t is the segment's max timestamp up to the batch ending at base_offset + o; a lookup
returns the entry with the largest timestamp <= the target, (-1, base_offset) if none.

These bytes come from outside the process, so `parse_*` check them before any lookup trusts
them: a whole number of entries, offsets and positions inside the segment, strictly increasing
offsets, positions and timestamps (time index offsets never decrease). Anything else raises
`CorruptSegmentObject`. Views are immutable once built and safe to share between tasks.
"""

from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_right
from dataclasses import dataclass
from itertools import islice
from operator import le, lt

from .layout import CommittedSegment
from .remote_errors import CorruptSegmentObject

OFFSET_ENTRY_BYTES = 8
TIME_ENTRY_BYTES = 12
NO_TIMESTAMP = -1
_SWAP = sys.byteorder == "little"
_TIME_ENTRY = struct.Struct(">qi")


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """An offset and a byte position at or before the batch holding it."""

    offset: int
    position: int


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    timestamp: int
    offset: int


class RemoteOffsetIndex:
    """A segment's offset index: `lookup(offset) -> IndexEntry`."""

    __slots__ = ("base_offset", "_relative_offsets", "_positions")

    def __init__(self, base_offset: int, relative_offsets: array, positions: array) -> None:
        self.base_offset = base_offset
        self._relative_offsets = relative_offsets
        self._positions = positions

    def __len__(self) -> int:
        return len(self._relative_offsets)

    def lookup(self, offset: int) -> IndexEntry:
        slot = bisect_right(self._relative_offsets, offset - self.base_offset) - 1
        if slot < 0:
            return IndexEntry(self.base_offset, 0)
        return IndexEntry(self.base_offset + self._relative_offsets[slot], self._positions[slot])


class RemoteTimeIndex:
    """A segment's time index: `lookup(timestamp) -> TimestampOffset`."""

    __slots__ = ("base_offset", "_timestamps", "_relative_offsets")

    def __init__(self, base_offset: int, timestamps: array, relative_offsets: array) -> None:
        self.base_offset = base_offset
        self._timestamps = timestamps
        self._relative_offsets = relative_offsets

    def __len__(self) -> int:
        return len(self._timestamps)

    def lookup(self, timestamp: int) -> TimestampOffset:
        slot = bisect_right(self._timestamps, timestamp) - 1
        if slot < 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return TimestampOffset(self._timestamps[slot], self.base_offset + self._relative_offsets[slot])


def parse_offset_index(segment: CommittedSegment, data: bytes) -> RemoteOffsetIndex:
    """The offset index object of `segment`, checked against its commit key."""
    key = segment.index_key
    if len(data) % OFFSET_ENTRY_BYTES:
        raise CorruptSegmentObject(key, f"{len(data)} bytes is not a whole number of {OFFSET_ENTRY_BYTES}-byte entries")
    pairs = _big_endian("i", data)
    relative_offsets, positions = pairs[0::2], pairs[1::2]
    if relative_offsets:
        _check_increasing(key, "relative offsets", relative_offsets, lt)
        _check_increasing(key, "positions", positions, lt)
        if relative_offsets[0] < 0 or segment.base_offset + relative_offsets[-1] > segment.last_offset:
            raise CorruptSegmentObject(key, f"an offset lies outside [{segment.base_offset}, {segment.last_offset}]")
        if positions[0] < 0 or positions[-1] >= segment.size_bytes:
            raise CorruptSegmentObject(key, f"a position lies outside the {segment.size_bytes}-byte .log")
    return RemoteOffsetIndex(segment.base_offset, relative_offsets, positions)


def parse_time_index(segment: CommittedSegment, data: bytes) -> RemoteTimeIndex:
    """The time index object of `segment`, checked against its commit key."""
    key = segment.time_index_key
    if len(data) % TIME_ENTRY_BYTES:
        raise CorruptSegmentObject(key, f"{len(data)} bytes is not a whole number of {TIME_ENTRY_BYTES}-byte entries")
    entries = list(_TIME_ENTRY.iter_unpack(data))
    timestamps = array("q", [timestamp for timestamp, _ in entries])
    relative_offsets = array("i", [relative_offset for _, relative_offset in entries])
    if entries:
        _check_increasing(key, "timestamps", timestamps, lt)
        _check_increasing(key, "relative offsets", relative_offsets, le)
        if relative_offsets[0] < 0 or segment.base_offset + relative_offsets[-1] > segment.last_offset:
            raise CorruptSegmentObject(key, f"an offset lies outside [{segment.base_offset}, {segment.last_offset}]")
    return RemoteTimeIndex(segment.base_offset, timestamps, relative_offsets)


def _big_endian(typecode: str, data: bytes) -> array:
    values = array(typecode)
    values.frombytes(data)
    if _SWAP:
        values.byteswap()
    return values


def _check_increasing(key: str, what: str, values: array, order) -> None:
    if not all(map(order, values, islice(values, 1, None))):
        raise CorruptSegmentObject(key, f"{what} are not {'strictly increasing' if order is lt else 'non-decreasing'}")
