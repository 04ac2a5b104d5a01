"""Lookups in a segment's index objects, which hold the bytes of the local `.index` and
`.timeindex` files (hot_tier/index.py, Kafka's OffsetIndex and TimeIndex), big-endian:

    .index      8-byte entries: relative_offset int32, position int32
                (the batch at `position` ends at base_offset + relative_offset)
    .timeindex  12-byte entries: timestamp int64, relative_offset int32
                (every record up to base_offset + relative_offset has timestamp <= timestamp)

Both are sparse (one entry per index.interval.bytes of log) and strictly increasing. Pure.
An index that is not well-formed is not trusted: the lookups then answer as if it were empty
(read the whole segment), which is slower but still exact, since the reader checks every
batch it decodes anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

OFFSET_ENTRY = np.dtype([("relative_offset", ">i4"), ("position", ">i4")])
TIME_ENTRY = np.dtype([("timestamp", ">i8"), ("relative_offset", ">i4")])


@dataclass(frozen=True, slots=True)
class OffsetIndexEntries:
    offsets: np.ndarray  # absolute last offset of the batch at each position, increasing
    positions: np.ndarray


@dataclass(frozen=True, slots=True)
class TimeIndexEntries:
    timestamps: np.ndarray  # max timestamp so far, increasing
    offsets: np.ndarray  # absolute offsets, non-decreasing


def parse_offset_index(data: bytes, base_offset: int, size_bytes: int) -> OffsetIndexEntries:
    """The entries of an .index object; none if it is malformed (see the module header)."""
    usable = len(data) - len(data) % OFFSET_ENTRY.itemsize
    entries = np.frombuffer(data, OFFSET_ENTRY, count=usable // OFFSET_ENTRY.itemsize)
    relative = entries["relative_offset"].astype(np.int64)
    positions = entries["position"].astype(np.int64)
    well_formed = (
        len(data) % OFFSET_ENTRY.itemsize == 0
        and (relative >= 0).all()
        and (positions >= 0).all()
        and (positions < max(size_bytes, 1)).all()
        and (np.diff(relative) > 0).all()
        and (np.diff(positions) > 0).all()
    )
    if not well_formed:
        return OffsetIndexEntries(np.empty(0, np.int64), np.empty(0, np.int64))
    return OffsetIndexEntries(relative + base_offset, positions)


def parse_time_index(data: bytes, base_offset: int) -> TimeIndexEntries:
    usable = len(data) - len(data) % TIME_ENTRY.itemsize
    entries = np.frombuffer(data, TIME_ENTRY, count=usable // TIME_ENTRY.itemsize)
    timestamps = entries["timestamp"].astype(np.int64)
    relative = entries["relative_offset"].astype(np.int64)
    well_formed = (
        len(data) % TIME_ENTRY.itemsize == 0
        and (relative >= 0).all()
        and (np.diff(timestamps) > 0).all()
        and (np.diff(relative) >= 0).all()
    )
    if not well_formed:
        return TimeIndexEntries(np.empty(0, np.int64), np.empty(0, np.int64))
    return TimeIndexEntries(timestamps, relative + base_offset)


def position_range(index: OffsetIndexEntries, size_bytes: int, start_offset: int, end_offset: int) -> tuple[int, int]:
    """A byte range [start, end) of the .log holding every batch with an offset in
    [start_offset, end_offset): from a batch boundary at or before the batch of start_offset
    to the end of the batch holding end_offset - 1 (or a bit past it, never past the segment).
    """
    offsets, positions = index.offsets, index.positions
    # Largest entry whose batch ends at or before start_offset: the batch at its position
    # starts at or before start_offset's batch.
    slot = int(np.searchsorted(offsets, start_offset, side="right")) - 1
    start = int(positions[slot]) if slot >= 0 else 0
    # First entry whose batch ends at or after end_offset - 1: end_offset - 1 sits in that batch
    # or an earlier one, so the next entry's position (a later batch) bounds the read.
    slot = int(np.searchsorted(offsets, end_offset - 1, side="left"))
    end = int(positions[slot + 1]) if slot + 1 < len(positions) else size_bytes
    return start, max(start, end)


def first_offset_not_older_than(index: TimeIndexEntries, timestamp_ms: int) -> int | None:
    """An offset before which every record is older than `timestamp_ms` (so reading can start
    there), from the time index; None if the index does not say."""
    slot = int(np.searchsorted(index.timestamps, timestamp_ms, side="left")) - 1
    return int(index.offsets[slot]) + 1 if slot >= 0 else None
