"""hot_tier.index_format, the one copy of Kafka's .index/.timeindex entry format: bytes, checks,
lookups, and that the module stays pure (stdlib only: Spark workers import it)."""

from __future__ import annotations

import ast
import struct
from array import array
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hot_tier import index_format as fmt
from hot_tier.index_format import IndexEntry, MalformedIndex, OffsetIndexView, TimeIndexView, TimestampOffset


def test_entry_layout_is_kafkas_big_endian() -> None:
    assert fmt.OFFSET_ENTRY.pack(3, 0x0102) == b"\x00\x00\x00\x03\x00\x00\x01\x02"
    assert fmt.TIME_ENTRY.pack(0x0102030405, 7) == b"\x00\x00\x00\x01\x02\x03\x04\x05\x00\x00\x00\x07"
    assert (fmt.OFFSET_ENTRY.size, fmt.TIME_ENTRY.size) == (fmt.OFFSET_ENTRY_BYTES, fmt.TIME_ENTRY_BYTES) == (8, 12)


@given(st.lists(st.tuples(st.integers(0, fmt.INT32_MAX), st.integers(0, fmt.INT32_MAX)), max_size=40))
def test_offset_entries_round_trip(entries) -> None:
    data = b"".join(struct.pack(">ii", o, p) for o, p in entries)
    relative_offsets, positions = fmt.decode_offset_entries(data)
    assert list(zip(relative_offsets, positions)) == entries
    assert fmt.encode_offset_entries(relative_offsets, positions) == data


@given(st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), st.integers(0, fmt.INT32_MAX)), max_size=40))
def test_time_entries_round_trip(entries) -> None:
    data = b"".join(struct.pack(">qi", t, o) for t, o in entries)
    timestamps, relative_offsets = fmt.decode_time_entries(data)
    assert list(zip(timestamps, relative_offsets)) == entries
    assert fmt.encode_time_entries(timestamps, relative_offsets) == data


def test_lookups() -> None:
    index = OffsetIndexView.from_bytes(100, struct.pack(">iiii", 4, 400, 10, 900))
    assert [index.lookup(o) for o in (99, 103, 104, 109, 110, 10**9)] == [
        IndexEntry(100, 0), IndexEntry(100, 0), IndexEntry(104, 400), IndexEntry(104, 400), IndexEntry(110, 900), IndexEntry(110, 900)
    ]  # fmt: skip
    assert [index.first_slot_at_or_after(o) for o in (100, 104, 105, 110, 111)] == [0, 0, 1, 1, 2]
    times = TimeIndexView.from_bytes(50, struct.pack(">qiqi", 1000, 2, 2000, 8))
    assert [times.lookup(t) for t in (999, 1000, 1999, 5000)] == [
        TimestampOffset(-1, 50), TimestampOffset(1000, 52), TimestampOffset(1000, 52), TimestampOffset(2000, 58)
    ]  # fmt: skip
    assert [times.last_entry_older_than(t) for t in (1000, 1001, 2001)] == [None, TimestampOffset(1000, 52), TimestampOffset(2000, 58)]


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x00" * 7, "not a multiple of 8"),
        (struct.pack(">iiii", 5, 100, 5, 200), "do not strictly increase"),
        (struct.pack(">iiii", 5, 100, 6, 100), "do not strictly increase"),
        (struct.pack(">ii", -1, 100), "first relative offset -1 is negative"),
        (struct.pack(">ii", 1, -1), "first position -1 is negative"),
    ],
)
def test_malformed_offset_entries(data: bytes, reason: str) -> None:
    with pytest.raises(MalformedIndex, match=reason):
        OffsetIndexView.from_bytes(0, data)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x00" * 11, "not a multiple of 12"),
        (struct.pack(">qiqi", 5, 1, 5, 2), "timestamps do not strictly increase"),
        (struct.pack(">qiqi", 5, 2, 6, 1), "offsets decrease"),
        (struct.pack(">qi", 5, -1), "first relative offset -1 is negative"),
    ],
)
def test_malformed_time_entries(data: bytes, reason: str) -> None:
    with pytest.raises(MalformedIndex, match=reason):
        TimeIndexView.from_bytes(0, data)


def test_equal_offsets_in_the_time_index_are_allowed() -> None:
    assert len(TimeIndexView.from_bytes(0, struct.pack(">qiqi", 5, 2, 6, 2))) == 2


def test_the_format_module_imports_only_the_standard_library() -> None:
    tree = ast.parse(Path(fmt.__file__).read_text())
    modules = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    modules |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert modules <= {"__future__", "struct", "sys", "array", "bisect", "dataclasses", "itertools", "operator"}
    assert all(node.level == 0 for node in ast.walk(tree) if isinstance(node, ast.ImportFrom))
    assert isinstance(fmt.decode_offset_entries(b"")[0], array)
