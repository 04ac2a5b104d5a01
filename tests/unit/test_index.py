"""The in-memory offset and time indexes and their byte formats (Kafka's OffsetIndex/TimeIndex)."""

from __future__ import annotations

import struct

import pytest

from hot_tier.errors import CorruptIndex
from hot_tier.index import IndexEntry, OffsetIndex, TimeIndex, TimestampOffset


def test_offset_index_lookup_returns_the_floor_entry_or_the_base() -> None:
    index = OffsetIndex(base_offset=100, max_index_bytes=80)
    assert index.lookup(150) == IndexEntry(100, 0)
    index.append(104, 400)
    index.append(110, 900)
    index.append(111, 1000)
    assert index.lookup(99) == IndexEntry(100, 0)
    assert index.lookup(103) == IndexEntry(100, 0)
    assert index.lookup(104) == IndexEntry(104, 400)
    assert index.lookup(109) == IndexEntry(104, 400)
    assert index.lookup(110) == IndexEntry(110, 900)
    assert index.lookup(10**9) == IndexEntry(111, 1000)
    assert list(index) == [IndexEntry(104, 400), IndexEntry(110, 900), IndexEntry(111, 1000)]
    assert index.floor_position(899) == 400
    assert index.floor_position(900) == 900
    assert index.floor_position(399) == 0


def test_offset_index_entry_bytes_are_kafkas_layout() -> None:
    index = OffsetIndex(base_offset=2**40, max_index_bytes=1024)
    first = index.append(2**40 + 7, 4100)
    second = index.append(2**40 + 70000, 2**31 - 1)
    # 4-byte offset relative to the base, 4-byte position, big-endian
    assert first == bytes([0, 0, 0, 7, 0, 0, 0x10, 0x04])
    assert second == bytes([0, 1, 0x11, 0x70, 0x7F, 0xFF, 0xFF, 0xFF])
    assert index.to_bytes() == first + second
    again = OffsetIndex.from_bytes(2**40, first + second, 1024)
    assert list(again) == list(index)


def test_offset_index_fills_at_max_index_bytes() -> None:
    index = OffsetIndex(base_offset=0, max_index_bytes=20)  # rounds down to 2 entries
    assert index.max_entries == 2
    index.append(1, 10)
    assert not index.is_full and index.room == 1
    index.append(2, 20)
    assert index.is_full and index.room == 0
    with pytest.raises(ValueError):
        index.append(3, 30)


def test_offset_index_rejects_entries_that_do_not_advance() -> None:
    index = OffsetIndex(base_offset=10, max_index_bytes=80)
    index.append(12, 100)
    with pytest.raises(ValueError):
        index.append(12, 200)
    with pytest.raises(ValueError):
        index.append(13, 100)
    with pytest.raises(ValueError):
        index.append(9, 300)  # below the base offset
    assert len(index) == 1


def test_offset_index_truncate_drops_entries_at_or_after_the_offset() -> None:
    index = OffsetIndex(base_offset=0, max_index_bytes=80)
    for offset, position in ((3, 100), (6, 200), (9, 300)):
        index.append(offset, position)
    index.truncate_to_offset(7)
    assert list(index) == [IndexEntry(3, 100), IndexEntry(6, 200)]
    index.truncate_to_offset(6)
    assert list(index) == [IndexEntry(3, 100)]
    assert index.slot_below(4) == 0 and index.slot_below(3) == -1


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x00" * 7, "multiple"),
        (struct.pack(">iiii", 5, 100, 5, 200), "increase"),
        (struct.pack(">iiii", 5, 100, 6, 100), "increase"),
        (struct.pack(">ii", -1, 100), "negative"),
        (struct.pack(">iiii", 5, 100, 0, 0), "increase"),  # a zero-filled tail after a power loss
    ],
)
def test_offset_index_from_bytes_rejects_inconsistent_files(data: bytes, reason: str) -> None:
    with pytest.raises(CorruptIndex, match=reason):
        OffsetIndex.from_bytes(0, data, 1024)


def test_time_index_appends_only_when_the_timestamp_advances() -> None:
    index = TimeIndex(base_offset=50, max_index_bytes=120)
    assert index.maybe_append(-1, 50) is None  # NO_TIMESTAMP never goes in
    entry = index.maybe_append(1_700_000_000_000, 52)
    # 8-byte timestamp, 4-byte offset relative to the base, big-endian
    assert entry == struct.pack(">q", 1_700_000_000_000) + bytes([0, 0, 0, 2])
    assert index.maybe_append(1_700_000_000_000, 60) is None
    assert index.maybe_append(1_699_999_999_999, 61) is None
    assert index.maybe_append(1_700_000_000_005, 61) == struct.pack(">qi", 1_700_000_000_005, 11)
    assert list(index) == [TimestampOffset(1_700_000_000_000, 52), TimestampOffset(1_700_000_000_005, 61)]
    assert index.to_bytes() == struct.pack(">qiqi", 1_700_000_000_000, 2, 1_700_000_000_005, 11)


def test_time_index_lookup_returns_the_floor_entry_or_no_timestamp() -> None:
    index = TimeIndex(base_offset=50, max_index_bytes=120)
    assert index.lookup(10**15) == TimestampOffset(-1, 50)
    index.maybe_append(1000, 52)
    index.maybe_append(2000, 58)
    assert index.lookup(999) == TimestampOffset(-1, 50)
    assert index.lookup(1000) == TimestampOffset(1000, 52)
    assert index.lookup(1999) == TimestampOffset(1000, 52)
    assert index.lookup(5000) == TimestampOffset(2000, 58)


def test_time_index_keeps_its_last_slot_for_the_roll_entry() -> None:
    index = TimeIndex(base_offset=0, max_index_bytes=36)  # 3 entries, full at 2
    index.maybe_append(10, 1)
    assert not index.is_full
    index.maybe_append(20, 2)
    assert index.is_full and index.room == 0
    with pytest.raises(ValueError):
        index.maybe_append(30, 3)
    assert index.maybe_append(30, 3, skip_full_check=True) is not None
    with pytest.raises(ValueError):
        index.maybe_append(40, 4, skip_full_check=True)
    assert len(index) == 3


def test_time_index_round_trip_truncate_and_validation() -> None:
    data = struct.pack(">qiqiqi", 10, 0, 20, 4, 30, 4)
    index = TimeIndex.from_bytes(100, data, 1200)
    assert list(index) == [TimestampOffset(10, 100), TimestampOffset(20, 104), TimestampOffset(30, 104)]
    assert index.to_bytes() == data
    index.truncate_to_offset(104)
    assert list(index) == [TimestampOffset(10, 100)]
    with pytest.raises(CorruptIndex, match="timestamps"):
        TimeIndex.from_bytes(0, struct.pack(">qiqi", 20, 0, 20, 1), 1200)
    with pytest.raises(CorruptIndex, match="offsets decrease"):
        TimeIndex.from_bytes(0, struct.pack(">qiqi", 20, 5, 30, 1), 1200)
    with pytest.raises(CorruptIndex, match="multiple"):
        TimeIndex.from_bytes(0, b"\x00" * 13, 1200)
