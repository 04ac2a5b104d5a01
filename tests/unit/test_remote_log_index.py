"""Index objects fetched from the bucket: parsing, validation against the commit key, lookups
(checked against hot_tier's own in-memory indexes, which wrote the bytes)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cold_tier.layout import CommittedSegment
from cold_tier.remote_errors import CorruptSegmentObject
from cold_tier.remote_index import IndexEntry, TimestampOffset, parse_offset_index, parse_time_index
from hot_tier.index import OffsetIndex, TimeIndex

BASE = 1000


def segment(*, base: int = BASE, last: int = BASE + 999, size_bytes: int = 1 << 20) -> CommittedSegment:
    return CommittedSegment(
        topic="orders", partition=0, base_offset=base, last_offset=last, base_timestamp=0,
        max_timestamp=10_000, size_bytes=size_bytes, leader_epoch=0, upload_id="ab",
    )  # fmt: skip


def offset_index_bytes(entries: list[tuple[int, int]]) -> bytes:
    return b"".join(struct.pack(">ii", relative, position) for relative, position in entries)


def time_index_bytes(entries: list[tuple[int, int]]) -> bytes:
    return b"".join(struct.pack(">qi", timestamp, relative) for timestamp, relative in entries)


def test_offset_index_lookup_gives_the_last_entry_at_or_below():
    index = parse_offset_index(segment(), offset_index_bytes([(9, 500), (19, 1100), (29, 1800)]))
    assert len(index) == 3
    assert index.lookup(BASE) == IndexEntry(BASE, 0)
    assert index.lookup(BASE + 8) == IndexEntry(BASE, 0)
    assert index.lookup(BASE + 9) == IndexEntry(BASE + 9, 500)
    assert index.lookup(BASE + 25) == IndexEntry(BASE + 19, 1100)
    assert index.lookup(BASE + 999) == IndexEntry(BASE + 29, 1800)


def test_empty_indexes_point_at_the_segment_start():
    assert parse_offset_index(segment(), b"").lookup(BASE + 5) == IndexEntry(BASE, 0)
    assert parse_time_index(segment(), b"").lookup(123) == TimestampOffset(-1, BASE)


def test_time_index_lookup_gives_the_last_entry_at_or_below():
    index = parse_time_index(segment(), time_index_bytes([(100, 4), (200, 9), (300, 9), (400, 20)]))
    assert len(index) == 4
    assert index.lookup(99) == TimestampOffset(-1, BASE)
    assert index.lookup(100) == TimestampOffset(100, BASE + 4)
    assert index.lookup(350) == TimestampOffset(300, BASE + 9)
    assert index.lookup(10**12) == TimestampOffset(400, BASE + 20)


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"\x00" * 7, "not a multiple of 8"),
        (offset_index_bytes([(5, 100), (5, 200)]), "offsets and positions do not strictly increase"),
        (offset_index_bytes([(5, 100), (6, 100)]), "offsets and positions do not strictly increase"),
        (offset_index_bytes([(-1, 100)]), "first relative offset -1 is negative"),
        (offset_index_bytes([(1000, 100)]), "outside"),  # past last_offset (base + 999)
        (offset_index_bytes([(5, 1 << 20)]), "position"),  # at the .log's size
        (offset_index_bytes([(5, -4)]), "position"),
    ],
)
def test_corrupt_offset_index_objects_are_refused(data, reason):
    with pytest.raises(CorruptSegmentObject) as raised:
        parse_offset_index(segment(), data)
    assert raised.value.key == segment().index_key
    assert reason in raised.value.reason


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"\x00" * 13, "not a multiple of 12"),
        (time_index_bytes([(100, 1), (100, 2)]), "timestamps do not strictly increase"),
        (time_index_bytes([(100, 5), (200, 4)]), "offsets decrease"),
        (time_index_bytes([(100, -1)]), "first relative offset -1 is negative"),
        (time_index_bytes([(100, 1000)]), "outside"),
    ],
)
def test_corrupt_time_index_objects_are_refused(data, reason):
    with pytest.raises(CorruptSegmentObject) as raised:
        parse_time_index(segment(), data)
    assert raised.value.key == segment().time_index_key
    assert reason in raised.value.reason


@settings(max_examples=100, deadline=None)  # the CPUs are shared: time is not under test
@given(
    gaps=st.lists(st.tuples(st.integers(1, 50), st.integers(1, 5000)), max_size=60),
    targets=st.lists(st.integers(BASE - 5, BASE + 3100), min_size=1, max_size=30),
)
def test_offset_lookup_matches_hot_tier(gaps, targets):
    local = OffsetIndex(BASE, 1 << 20)
    data = bytearray()
    relative, position = -1, 0
    for offset_gap, position_gap in gaps:
        relative += offset_gap
        data += local.append(BASE + relative, position)
        position += position_gap
    remote = parse_offset_index(segment(last=BASE + 3000, size_bytes=position + 1), bytes(data))
    for target in targets:
        expected = local.lookup(target)
        assert remote.lookup(target) == IndexEntry(expected.offset, expected.position)


@settings(max_examples=100, deadline=None)  # the CPUs are shared: time is not under test
@given(
    gaps=st.lists(st.tuples(st.integers(1, 1000), st.integers(0, 20)), max_size=60),
    targets=st.lists(st.integers(-10, 70_000), min_size=1, max_size=30),
)
def test_time_lookup_matches_hot_tier(gaps, targets):
    local = TimeIndex(BASE, 1 << 20)
    data = bytearray()
    timestamp, relative = 0, 0
    for timestamp_gap, offset_gap in gaps:
        timestamp += timestamp_gap
        relative += offset_gap
        data += local.maybe_append(timestamp, BASE + relative)
    remote = parse_time_index(segment(last=BASE + 2000), bytes(data))
    for target in targets:
        expected = local.lookup(target)
        assert remote.lookup(target) == TimestampOffset(expected.timestamp, expected.offset)
