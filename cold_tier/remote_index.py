"""Read-only views of a segment's index objects (`.index`, `.timeindex`) fetched from the bucket. Pure.

The objects are the local files byte for byte: the format, the entry types (IndexEntry,
TimestampOffset) and the lookups are hot_tier/index_format.py's (Kafka's OffsetIndex and
TimeIndex, 8-byte and 12-byte big-endian entries); this module only adds what a remote object
must also satisfy. An offset index lookup returns the entry with the largest offset <= the
target, (base_offset, 0) if none; a time index lookup the entry with the largest timestamp <=
the target, (-1, base_offset) if none.

These bytes come from outside the process, so `parse_*` check them before any lookup trusts
them: the format's own rules (a whole number of entries, strictly increasing offsets,
positions and timestamps, time index offsets never decreasing, nothing negative), and, against
the segment's commit key, offsets inside [base_offset, last_offset] and positions inside the
.log. Anything else raises `CorruptSegmentObject`. Views are immutable once built and safe to
share between tasks.
"""

from __future__ import annotations

from hot_tier.index_format import (
    IndexEntry,
    MalformedIndex,
    OffsetIndexView,
    TimeIndexView,
    TimestampOffset,
)

from .layout import CommittedSegment
from .remote_errors import CorruptSegmentObject

RemoteOffsetIndex = OffsetIndexView
RemoteTimeIndex = TimeIndexView

__all__ = ["IndexEntry", "RemoteOffsetIndex", "RemoteTimeIndex", "TimestampOffset", "parse_offset_index", "parse_time_index"]


def parse_offset_index(segment: CommittedSegment, data: bytes) -> RemoteOffsetIndex:
    """The offset index object of `segment`, checked against its commit key."""
    key = segment.index_key
    try:
        index = OffsetIndexView.from_bytes(segment.base_offset, data)
    except MalformedIndex as error:
        raise CorruptSegmentObject(key, error.reason) from None
    if len(index):
        if segment.base_offset + index.relative_offsets[-1] > segment.last_offset:
            raise CorruptSegmentObject(key, f"an offset lies outside [{segment.base_offset}, {segment.last_offset}]")
        if index.positions[-1] >= segment.size_bytes:
            raise CorruptSegmentObject(key, f"a position lies outside the {segment.size_bytes}-byte .log")
    return index


def parse_time_index(segment: CommittedSegment, data: bytes) -> RemoteTimeIndex:
    """The time index object of `segment`, checked against its commit key."""
    key = segment.time_index_key
    try:
        index = TimeIndexView.from_bytes(segment.base_offset, data)
    except MalformedIndex as error:
        raise CorruptSegmentObject(key, error.reason) from None
    if len(index) and segment.base_offset + index.relative_offsets[-1] > segment.last_offset:
        raise CorruptSegmentObject(key, f"an offset lies outside [{segment.base_offset}, {segment.last_offset}]")
    return index
