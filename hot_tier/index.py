"""The sparse indexes of a segment in memory, as LogSegment keeps and appends them: Kafka's
`.index` and `.timeindex`, whose byte format, entry types and lookups live in index_format.py
(the one copy, shared with cold_tier and spark_reader).

Both files hold nothing but entries (Kafka preallocates and trims on close; these are written
append-only, so the file length is always entries x entry size). The classes here keep the
entries in memory (arrays, 8 and 12 bytes per entry), answer lookups, and hand back the bytes
of each new entry for LogSegment to append to the file. The time index keeps its last slot for
the entry written when the segment is rolled or closed (Kafka's TimeIndex.isFull). Not safe to
share between threads while appending.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Iterator
from pathlib import Path

from .errors import CorruptIndex
from .index_format import (
    INT32_MAX,
    NO_TIMESTAMP,
    OFFSET_ENTRY,
    OFFSET_ENTRY_BYTES,
    TIME_ENTRY,
    TIME_ENTRY_BYTES,
    IndexEntry,
    MalformedIndex,
    TimestampOffset,
    check_offset_entries,
    check_time_entries,
    decode_offset_entries,
    decode_time_entries,
    encode_offset_entries,
    encode_time_entries,
    lookup_offset,
    lookup_timestamp,
)

__all__ = [
    "INT32_MAX",
    "NO_TIMESTAMP",
    "OFFSET_ENTRY_BYTES",
    "TIME_ENTRY_BYTES",
    "IndexEntry",
    "OffsetIndex",
    "TimeIndex",
    "TimestampOffset",
]


class OffsetIndex:
    """Offset -> position of a segment, in memory; see the module header for the file format."""

    __slots__ = ("base_offset", "max_entries", "_offsets", "_positions")

    def __init__(self, base_offset: int, max_index_bytes: int) -> None:
        self.base_offset = base_offset
        self.max_entries = max_index_bytes // OFFSET_ENTRY_BYTES
        self._offsets = array("i")  # relative offsets
        self._positions = array("i")

    @classmethod
    def from_bytes(
        cls, base_offset: int, data: bytes, max_index_bytes: int, *, path: Path | None = None
    ) -> OffsetIndex:
        """Parse a `.index` file. Raises CorruptIndex unless its entries are well-formed."""
        index = cls(base_offset, max_index_bytes)
        try:
            index._offsets, index._positions = decode_offset_entries(data)
            check_offset_entries(index._offsets, index._positions)
        except MalformedIndex as error:
            raise CorruptIndex(path, error.reason) from None
        return index

    def __len__(self) -> int:
        return len(self._offsets)

    def __iter__(self) -> Iterator[IndexEntry]:
        base = self.base_offset
        for relative, position in zip(self._offsets, self._positions):
            yield IndexEntry(base + relative, position)

    @property
    def is_full(self) -> bool:
        return len(self._offsets) >= self.max_entries

    @property
    def room(self) -> int:
        return self.max_entries - len(self._offsets)

    def entry(self, slot: int) -> IndexEntry:
        return IndexEntry(self.base_offset + self._offsets[slot], self._positions[slot])

    @property
    def last_entry(self) -> IndexEntry | None:
        return self.entry(-1) if self._offsets else None

    def lookup(self, offset: int) -> IndexEntry:
        """The entry with the largest offset <= `offset`; (base_offset, 0) if there is none."""
        return lookup_offset(self.base_offset, self._offsets, self._positions, offset)

    def slot_below(self, offset: int) -> int:
        """The slot of the last entry with offset < `offset`, or -1."""
        return bisect_right(self._offsets, offset - self.base_offset - 1) - 1

    def floor_position(self, position: int) -> int:
        """The largest indexed batch position <= `position` (0 if none): a batch boundary."""
        slot = bisect_right(self._positions, position) - 1
        return self._positions[slot] if slot >= 0 else 0

    def append(self, offset: int, position: int) -> bytes:
        """Record (offset, position) and return its 8 bytes for the file."""
        relative = offset - self.base_offset
        if self.is_full:
            raise ValueError(f"offset index of segment {self.base_offset} is full ({self.max_entries} entries)")
        if not 0 <= relative <= INT32_MAX or not 0 <= position <= INT32_MAX:
            raise ValueError(f"entry ({offset}, {position}) does not fit segment {self.base_offset}")
        if self._offsets and (relative <= self._offsets[-1] or position <= self._positions[-1]):
            raise ValueError(f"entry ({offset}, {position}) is not after {self.last_entry}")
        self._offsets.append(relative)
        self._positions.append(position)
        return OFFSET_ENTRY.pack(relative, position)

    def truncate_to_slots(self, slots: int) -> None:
        del self._offsets[slots:]
        del self._positions[slots:]

    def truncate_to_offset(self, offset: int) -> None:
        """Drop every entry whose offset is >= `offset` (Kafka's OffsetIndex.truncateTo)."""
        self.truncate_to_slots(bisect_right(self._offsets, offset - self.base_offset - 1))

    def to_bytes(self) -> bytes:
        return encode_offset_entries(self._offsets, self._positions)


class TimeIndex:
    """Max timestamp so far -> offset, in memory; see the module header for the file format."""

    __slots__ = ("base_offset", "max_entries", "_timestamps", "_offsets")

    def __init__(self, base_offset: int, max_index_bytes: int) -> None:
        self.base_offset = base_offset
        self.max_entries = max_index_bytes // TIME_ENTRY_BYTES
        self._timestamps = array("q")
        self._offsets = array("i")  # relative offsets

    @classmethod
    def from_bytes(cls, base_offset: int, data: bytes, max_index_bytes: int, *, path: Path | None = None) -> TimeIndex:
        """Parse a `.timeindex` file. Raises CorruptIndex unless its entries are well-formed."""
        index = cls(base_offset, max_index_bytes)
        try:
            index._timestamps, index._offsets = decode_time_entries(data)
            # A local time index never holds a negative timestamp (NO_TIMESTAMP never goes in).
            if index._timestamps and index._timestamps[0] < 0:
                raise MalformedIndex(f"first timestamp {index._timestamps[0]} is negative")
            check_time_entries(index._timestamps, index._offsets)
        except MalformedIndex as error:
            raise CorruptIndex(path, error.reason) from None
        return index

    def __len__(self) -> int:
        return len(self._offsets)

    def __iter__(self) -> Iterator[TimestampOffset]:
        base = self.base_offset
        for timestamp, relative in zip(self._timestamps, self._offsets):
            yield TimestampOffset(timestamp, base + relative)

    @property
    def is_full(self) -> bool:
        # The last slot is reserved for the entry appended on roll or close.
        return len(self._offsets) >= self.max_entries - 1

    @property
    def room(self) -> int:
        return self.max_entries - 1 - len(self._offsets)

    def entry(self, slot: int) -> TimestampOffset:
        return TimestampOffset(self._timestamps[slot], self.base_offset + self._offsets[slot])

    @property
    def last_entry(self) -> TimestampOffset | None:
        return self.entry(-1) if self._offsets else None

    def lookup(self, timestamp: int) -> TimestampOffset:
        """The entry with the largest timestamp <= `timestamp`; (-1, base_offset) if none."""
        return lookup_timestamp(self.base_offset, self._timestamps, self._offsets, timestamp)

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> bytes | None:
        """Record (timestamp, offset) if timestamp is past the last entry's; return its 12 bytes.

        Returns None (nothing to write) when the timestamp does not advance, as Kafka's
        TimeIndex.maybeAppend does; `skip_full_check` lets the roll/close entry take the last slot.
        """
        last = self._timestamps[-1] if self._timestamps else NO_TIMESTAMP
        if timestamp <= last:
            return None
        relative = offset - self.base_offset
        if len(self._offsets) >= (self.max_entries if skip_full_check else self.max_entries - 1):
            raise ValueError(f"time index of segment {self.base_offset} is full ({self.max_entries} entries)")
        if not 0 <= relative <= INT32_MAX or (self._offsets and relative < self._offsets[-1]):
            raise ValueError(f"time index entry ({timestamp}, {offset}) does not fit segment {self.base_offset}")
        self._timestamps.append(timestamp)
        self._offsets.append(relative)
        return TIME_ENTRY.pack(timestamp, relative)

    def truncate_to_slots(self, slots: int) -> None:
        del self._timestamps[slots:]
        del self._offsets[slots:]

    def truncate_to_offset(self, offset: int) -> None:
        """Drop every entry whose offset is >= `offset` (Kafka's TimeIndex.truncateTo)."""
        self.truncate_to_slots(bisect_right(self._offsets, offset - self.base_offset - 1))

    def to_bytes(self) -> bytes:
        return encode_time_entries(self._timestamps, self._offsets)
