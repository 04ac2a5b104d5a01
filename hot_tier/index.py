"""The sparse indexes of a segment, in Kafka's `.index` and `.timeindex` formats.

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

Entries strictly increase in timestamp and never decrease in offset. The last slot is kept
for the entry written when the segment is rolled or closed (Kafka's TimeIndex.isFull).

Both files hold nothing but entries (Kafka preallocates and trims on close; these are written
append-only, so the file length is always entries x entry size). The classes here are pure:
they keep the entries in memory (arrays, 8 and 12 bytes per entry), answer lookups, and hand
back the bytes of each new entry for LogSegment to append to the file. cold_tier may import
them to build or read index objects. Not safe to share between threads while appending.
"""

from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from operator import lt
from pathlib import Path

from .errors import CorruptIndex

NO_TIMESTAMP = -1
OFFSET_ENTRY_BYTES = 8
TIME_ENTRY_BYTES = 12
INT32_MAX = 2**31 - 1

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
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


def _int32s(data: bytes) -> array:
    values = array("i")
    values.frombytes(data)
    if _SWAP:
        values.byteswap()
    return values


def _strictly_increasing(values: array) -> bool:
    return all(map(lt, values, islice(values, 1, None)))


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
        if len(data) % OFFSET_ENTRY_BYTES:
            raise CorruptIndex(path, f"length {len(data)} is not a multiple of {OFFSET_ENTRY_BYTES}")
        index = cls(base_offset, max_index_bytes)
        values = _int32s(data)
        index._offsets = values[0::2]
        index._positions = values[1::2]
        if index._offsets and index._offsets[0] < 0:
            raise CorruptIndex(path, f"first relative offset {index._offsets[0]} is negative")
        if index._positions and index._positions[0] < 0:
            raise CorruptIndex(path, f"first position {index._positions[0]} is negative")
        if not _strictly_increasing(index._offsets) or not _strictly_increasing(index._positions):
            raise CorruptIndex(path, "offsets and positions do not strictly increase")
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
        slot = bisect_right(self._offsets, offset - self.base_offset) - 1
        if slot < 0:
            return IndexEntry(self.base_offset, 0)
        return self.entry(slot)

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
        return _OFFSET_ENTRY.pack(relative, position)

    def truncate_to_slots(self, slots: int) -> None:
        del self._offsets[slots:]
        del self._positions[slots:]

    def truncate_to_offset(self, offset: int) -> None:
        """Drop every entry whose offset is >= `offset` (Kafka's OffsetIndex.truncateTo)."""
        self.truncate_to_slots(bisect_right(self._offsets, offset - self.base_offset - 1))

    def to_bytes(self) -> bytes:
        values = array("i", bytes(8 * len(self._offsets)))
        values[0::2] = self._offsets
        values[1::2] = self._positions
        if _SWAP:
            values.byteswap()
        return values.tobytes()


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
        if len(data) % TIME_ENTRY_BYTES:
            raise CorruptIndex(path, f"length {len(data)} is not a multiple of {TIME_ENTRY_BYTES}")
        index = cls(base_offset, max_index_bytes)
        for timestamp, relative in _TIME_ENTRY.iter_unpack(data):
            index._timestamps.append(timestamp)
            index._offsets.append(relative)
        if index._offsets and (index._offsets[0] < 0 or index._timestamps[0] < 0):
            raise CorruptIndex(path, "first entry has a negative timestamp or relative offset")
        if not _strictly_increasing(index._timestamps):
            raise CorruptIndex(path, "timestamps do not strictly increase")
        if any(map(lt, islice(index._offsets, 1, None), index._offsets)):
            raise CorruptIndex(path, "offsets decrease")
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
        slot = bisect_right(self._timestamps, timestamp) - 1
        if slot < 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return self.entry(slot)

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
        return _TIME_ENTRY.pack(timestamp, relative)

    def truncate_to_slots(self, slots: int) -> None:
        del self._timestamps[slots:]
        del self._offsets[slots:]

    def truncate_to_offset(self, offset: int) -> None:
        """Drop every entry whose offset is >= `offset` (Kafka's TimeIndex.truncateTo)."""
        self.truncate_to_slots(bisect_right(self._offsets, offset - self.base_offset - 1))

    def to_bytes(self) -> bytes:
        return b"".join(_TIME_ENTRY.pack(t, o) for t, o in zip(self._timestamps, self._offsets))
