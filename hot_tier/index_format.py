"""The byte format of a segment's sparse indexes, Kafka's `.index` and `.timeindex`, and the
lookups over their entries. The one copy of it: the local index files (hot_tier/index.py),
the index objects in the bucket (cold_tier/remote_index.py) and Spark's reader
(spark_reader/read.py) all decode, check and search entries here.

Offset index (Kafka's OffsetIndex), 8-byte entries, big-endian:

    offset  size  field
    0       4     relative_offset   offset - segment base_offset (int32)
    4       4     position          byte position of a batch in the segment's .log (int32)

An entry (offset, position) says: the batch that starts at `position` ends at `offset` (its
last offset, as Kafka's LogSegment.append records it), so every offset >= entry.offset sits at
or after `position`. Entries strictly increase in offset and in position.

Time index (Kafka's TimeIndex), 12-byte entries, big-endian:

    offset  size  field
    0       8     timestamp         the segment's max timestamp so far (int64, ms)
    8       4     relative_offset   last offset of the batch holding it - base_offset (int32)

Entries strictly increase in timestamp and never decrease in offset.

Both hold nothing but entries, one per index.interval.bytes of log (sparse). Entries are kept
as two parallel `array`s per index (relative offsets and positions; timestamps and relative
offsets), which is what the lookups take. Pure: no files, no clock, and nothing from the rest
of hot_tier, so a Spark worker reading index objects loads no log machinery. Functions here
never keep state; the arrays they return are the caller's.
"""

from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from itertools import islice
from operator import lt

OFFSET_ENTRY_BYTES = 8
TIME_ENTRY_BYTES = 12
NO_TIMESTAMP = -1
INT32_MAX = 2**31 - 1

OFFSET_ENTRY = struct.Struct(">ii")  # relative_offset, position
TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative_offset

_SWAP = sys.byteorder == "little"


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """An offset and the byte position of the batch that ends at it (or, from a lookup, a
    position at or before the batch holding the target offset)."""

    offset: int
    position: int


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    timestamp: int
    offset: int


class MalformedIndex(ValueError):
    """Index bytes that break the format; each user turns it into its own error (CorruptIndex
    for a local file, CorruptSegmentObject for a bucket object) or distrusts the index."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def decode_offset_entries(data: bytes) -> tuple[array, array]:
    """(relative_offsets, positions) of offset index bytes, not yet checked (see
    `check_offset_entries`). Raises MalformedIndex unless `data` is whole entries."""
    if len(data) % OFFSET_ENTRY_BYTES:
        raise MalformedIndex(f"length {len(data)} is not a multiple of {OFFSET_ENTRY_BYTES}")
    values = array("i")
    values.frombytes(data)
    if _SWAP:
        values.byteswap()
    return values[0::2], values[1::2]


def decode_time_entries(data: bytes) -> tuple[array, array]:
    """(timestamps, relative_offsets) of time index bytes, not yet checked (see
    `check_time_entries`). Raises MalformedIndex unless `data` is whole entries."""
    if len(data) % TIME_ENTRY_BYTES:
        raise MalformedIndex(f"length {len(data)} is not a multiple of {TIME_ENTRY_BYTES}")
    timestamps, relative_offsets = array("q"), array("i")
    for timestamp, relative in TIME_ENTRY.iter_unpack(data):
        timestamps.append(timestamp)
        relative_offsets.append(relative)
    return timestamps, relative_offsets


def check_offset_entries(relative_offsets: array, positions: array) -> None:
    """Raise MalformedIndex unless the entries are the format's: a first entry with no negative
    field, and offsets and positions strictly increasing (so none is negative)."""
    if relative_offsets and relative_offsets[0] < 0:
        raise MalformedIndex(f"first relative offset {relative_offsets[0]} is negative")
    if positions and positions[0] < 0:
        raise MalformedIndex(f"first position {positions[0]} is negative")
    if not _strictly_increasing(relative_offsets) or not _strictly_increasing(positions):
        raise MalformedIndex("offsets and positions do not strictly increase")


def check_time_entries(timestamps: array, relative_offsets: array) -> None:
    """Raise MalformedIndex unless the entries are the format's: a first relative offset that
    is not negative, timestamps strictly increasing, relative offsets never decreasing."""
    if relative_offsets and relative_offsets[0] < 0:
        raise MalformedIndex(f"first relative offset {relative_offsets[0]} is negative")
    if not _strictly_increasing(timestamps):
        raise MalformedIndex("timestamps do not strictly increase")
    if any(map(lt, islice(relative_offsets, 1, None), relative_offsets)):
        raise MalformedIndex("offsets decrease")


def encode_offset_entries(relative_offsets: array, positions: array) -> bytes:
    values = array("i", bytes(OFFSET_ENTRY_BYTES * len(relative_offsets)))
    values[0::2] = relative_offsets
    values[1::2] = positions
    if _SWAP:
        values.byteswap()
    return values.tobytes()


def encode_time_entries(timestamps: array, relative_offsets: array) -> bytes:
    return b"".join(TIME_ENTRY.pack(t, o) for t, o in zip(timestamps, relative_offsets))


def lookup_offset(base_offset: int, relative_offsets: array, positions: array, offset: int) -> IndexEntry:
    """The entry with the largest offset <= `offset`; (base_offset, 0) if there is none."""
    slot = bisect_right(relative_offsets, offset - base_offset) - 1
    if slot < 0:
        return IndexEntry(base_offset, 0)
    return IndexEntry(base_offset + relative_offsets[slot], positions[slot])


def first_slot_at_or_after(base_offset: int, relative_offsets: array, offset: int) -> int:
    """The slot of the first entry whose offset is >= `offset` (len if none): the batch holding
    `offset` starts at or before that entry's position."""
    return bisect_left(relative_offsets, offset - base_offset)


def lookup_timestamp(base_offset: int, timestamps: array, relative_offsets: array, timestamp: int) -> TimestampOffset:
    """The entry with the largest timestamp <= `timestamp`; (-1, base_offset) if there is none."""
    slot = bisect_right(timestamps, timestamp) - 1
    if slot < 0:
        return TimestampOffset(NO_TIMESTAMP, base_offset)
    return TimestampOffset(timestamps[slot], base_offset + relative_offsets[slot])


def last_entry_older_than(base_offset: int, timestamps: array, relative_offsets: array, timestamp: int) -> TimestampOffset | None:
    """The entry with the largest timestamp < `timestamp`, None if there is none: every record
    up to its offset is older than `timestamp`."""
    slot = bisect_left(timestamps, timestamp) - 1
    if slot < 0:
        return None
    return TimestampOffset(timestamps[slot], base_offset + relative_offsets[slot])


class OffsetIndexView:
    """The checked entries of one segment's offset index, read-only: `lookup(offset) ->
    IndexEntry`. Immutable once built, so safe to share between tasks and threads."""

    __slots__ = ("base_offset", "relative_offsets", "positions")

    def __init__(self, base_offset: int, relative_offsets: array, positions: array) -> None:
        self.base_offset = base_offset
        self.relative_offsets = relative_offsets
        self.positions = positions

    @classmethod
    def from_bytes(cls, base_offset: int, data: bytes) -> OffsetIndexView:
        """Decode and check an offset index; MalformedIndex if it breaks the format."""
        relative_offsets, positions = decode_offset_entries(data)
        check_offset_entries(relative_offsets, positions)
        return cls(base_offset, relative_offsets, positions)

    def __len__(self) -> int:
        return len(self.relative_offsets)

    def entry(self, slot: int) -> IndexEntry:
        return IndexEntry(self.base_offset + self.relative_offsets[slot], self.positions[slot])

    def lookup(self, offset: int) -> IndexEntry:
        return lookup_offset(self.base_offset, self.relative_offsets, self.positions, offset)

    def first_slot_at_or_after(self, offset: int) -> int:
        return first_slot_at_or_after(self.base_offset, self.relative_offsets, offset)


class TimeIndexView:
    """The checked entries of one segment's time index, read-only: `lookup(timestamp) ->
    TimestampOffset`. Immutable once built, so safe to share between tasks and threads."""

    __slots__ = ("base_offset", "timestamps", "relative_offsets")

    def __init__(self, base_offset: int, timestamps: array, relative_offsets: array) -> None:
        self.base_offset = base_offset
        self.timestamps = timestamps
        self.relative_offsets = relative_offsets

    @classmethod
    def from_bytes(cls, base_offset: int, data: bytes) -> TimeIndexView:
        """Decode and check a time index; MalformedIndex if it breaks the format."""
        timestamps, relative_offsets = decode_time_entries(data)
        check_time_entries(timestamps, relative_offsets)
        return cls(base_offset, timestamps, relative_offsets)

    def __len__(self) -> int:
        return len(self.timestamps)

    def lookup(self, timestamp: int) -> TimestampOffset:
        return lookup_timestamp(self.base_offset, self.timestamps, self.relative_offsets, timestamp)

    def last_entry_older_than(self, timestamp: int) -> TimestampOffset | None:
        return last_entry_older_than(self.base_offset, self.timestamps, self.relative_offsets, timestamp)


def _strictly_increasing(values: array) -> bool:
    return all(map(lt, values, islice(values, 1, None)))
