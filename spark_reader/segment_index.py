"""What Spark's reader asks of a segment's index objects: the byte range of .log to fetch for
an offset range, and where records stop being older than a timestamp. The format, the checks
and the lookups are hot_tier/index_format.py's (Kafka's `.index` and `.timeindex`, the same
bytes as the local files; importing it loads none of the log). Pure.

An index that is not well-formed (the format's checks, plus positions inside the .log) is not
trusted: it reads as empty, so the whole segment is read, which is slower but still exact,
since the reader checks every batch it decodes anyway.
"""

from __future__ import annotations

from array import array

from hot_tier.index_format import MalformedIndex, OffsetIndexView, TimeIndexView


def parse_offset_index(data: bytes, base_offset: int, size_bytes: int) -> OffsetIndexView:
    """The entries of an .index object; none if it is malformed (see the module header)."""
    try:
        index = OffsetIndexView.from_bytes(base_offset, data)
    except MalformedIndex:
        return OffsetIndexView(base_offset, array("i"), array("i"))
    if len(index) and index.positions[-1] >= max(size_bytes, 1):
        return OffsetIndexView(base_offset, array("i"), array("i"))
    return index


def parse_time_index(data: bytes, base_offset: int) -> TimeIndexView:
    """The entries of a .timeindex object; none if it is malformed."""
    try:
        return TimeIndexView.from_bytes(base_offset, data)
    except MalformedIndex:
        return TimeIndexView(base_offset, array("q"), array("i"))


def position_range(index: OffsetIndexView, size_bytes: int, start_offset: int, end_offset: int) -> tuple[int, int]:
    """A byte range [start, end) of the .log holding every batch with an offset in
    [start_offset, end_offset): from a batch boundary at or before the batch of start_offset
    to the end of the batch holding end_offset - 1 (or a bit past it, never past the segment).
    """
    # The largest entry whose batch ends at or before start_offset: the batch at its position
    # starts at or before start_offset's batch ((base_offset, 0) if none).
    start = index.lookup(start_offset).position
    # The first entry whose batch ends at or after end_offset - 1: end_offset - 1 sits in that
    # batch or an earlier one, so the next entry's position (a later batch) bounds the read.
    slot = index.first_slot_at_or_after(end_offset - 1)
    end = index.positions[slot + 1] if slot + 1 < len(index) else size_bytes
    return start, max(start, end)


def first_offset_not_older_than(index: TimeIndexView, timestamp_ms: int) -> int | None:
    """An offset before which every record is older than `timestamp_ms` (so reading can start
    there), from the time index; None if the index does not say."""
    entry = index.last_entry_older_than(timestamp_ms)
    return entry.offset + 1 if entry is not None else None
