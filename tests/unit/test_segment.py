"""LogSegment: appends, Kafka's index layout byte for byte, reads, time lookups, truncation,
recovery of a bad index, deletion under a live FileSlice."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from hot_tier.index import IndexEntry, TimestampOffset
from hot_tier.records import Record, encode_batch, iter_headers
from hot_tier.segment import TRUST_ALL, AppendedBatch, LogSegment

BASE = 1000
# Two records per batch, 30-byte values, timestamps within +-63 of each other: 135 bytes each.
TIMESTAMPS = [(990, 1000), (2990, 3000), (2000, 1990), (2500, 2490), (3990, 4000), (4000, 3990), (3500, 3500), (4990, 5000)]
BATCH_BYTES = 135


def batch(base_offset: int, timestamps: tuple[int, ...]) -> bytes:
    records = [Record(base_offset + i, ts, None, b"v" * 30) for i, ts in enumerate(timestamps)]
    return encode_batch(records, base_offset=base_offset)


def append(segment: LogSegment, *batches: bytes, now_ms: int = 0) -> None:
    buf = b"".join(batches)
    segment.append(buf, [AppendedBatch.of(header) for header in iter_headers(buf)], now_ms)


def new_segment(dir: Path, *, index_interval_bytes: int = 200, segment_index_bytes: int = 1024) -> LogSegment:
    return LogSegment.create(
        dir, BASE, index_interval_bytes=index_interval_bytes, segment_index_bytes=segment_index_bytes, now_ms=7
    )


@pytest.fixture
def segment(tmp_path: Path) -> LogSegment:
    segment = new_segment(tmp_path)
    for i, timestamps in enumerate(TIMESTAMPS):
        append(segment, batch(BASE + 2 * i, timestamps), now_ms=100 + i)
    return segment


def test_batches_are_the_size_the_expected_positions_assume() -> None:
    assert {len(batch(BASE + 2 * i, ts)) for i, ts in enumerate(TIMESTAMPS)} == {BATCH_BYTES}


def test_append_tracks_offsets_sizes_and_max_timestamp(segment: LogSegment, tmp_path: Path) -> None:
    assert segment.log_path == tmp_path / "00000000000000001000.log"
    assert segment.index_path == tmp_path / "00000000000000001000.index"
    assert segment.timeindex_path == tmp_path / "00000000000000001000.timeindex"
    assert segment.next_offset == BASE + 16
    assert segment.size_bytes == 8 * BATCH_BYTES == segment.log_path.stat().st_size
    assert segment.max_timestamp == 5000
    assert segment.offset_of_max_timestamp == BASE + 15
    assert segment.created_ms == 7 and segment.roll_base_ms == 100
    expected = b"".join(batch(BASE + 2 * i, ts) for i, ts in enumerate(TIMESTAMPS))
    assert segment.log_path.read_bytes() == expected


def test_index_files_are_kafkas_layout_byte_for_byte(segment: LogSegment) -> None:
    # interval 200, batches of 135 bytes at 0, 135, 270, ...: an entry when more than 200
    # bytes were appended since the last one, before the batch at 270, 540 and 810.
    # .index: 4-byte offset relative to 1000 (the batch's last offset), 4-byte position.
    assert segment.index_path.read_bytes() == struct.pack(">iiiiii", 5, 270, 9, 540, 13, 810)
    # .timeindex: 8-byte max timestamp so far, 4-byte relative offset of the batch holding it
    # (3000 is batch 1's; 4000 first appears in batch 4; at 810 the max has not advanced).
    assert segment.timeindex_path.read_bytes() == struct.pack(">qiqi", 3000, 3, 4000, 9)
    segment.mark_rolled(now_ms=999)
    assert segment.rolled_ms == 999
    # rolling adds the segment's max timestamp in the reserved last slot
    assert segment.timeindex_path.read_bytes() == struct.pack(">qiqiqi", 3000, 3, 4000, 9, 5000, 15)
    assert list(segment.offset_index) == [IndexEntry(1005, 270), IndexEntry(1009, 540), IndexEntry(1013, 810)]


def test_translate_offset_finds_the_batch_holding_an_offset(segment: LogSegment) -> None:
    for offset in range(BASE, BASE + 16):
        header = segment.translate_offset(offset)
        assert header is not None
        assert header.position == (offset - BASE) // 2 * BATCH_BYTES
        assert header.base_offset <= offset <= header.last_offset
    assert segment.translate_offset(BASE + 16) is None


def test_read_returns_whole_batches_within_max_bytes(segment: LogSegment) -> None:
    data = segment.log_path.read_bytes()
    piece = segment.read(1003, 300, min_one_batch=True, max_offset=None)
    assert piece is not None
    assert (piece.position, piece.size_bytes) == (135, 270)  # batches 1 and 2; batch 3 would pass 300
    assert piece.read_bytes() == data[135:405]
    piece = segment.read(1005, 10_000, min_one_batch=True, max_offset=None)
    assert piece is not None and (piece.position, piece.size_bytes) == (270, 810)
    piece = segment.read(1000, 675, min_one_batch=False, max_offset=None)
    assert piece is not None and (piece.position, piece.size_bytes) == (0, 675)


def test_read_kip74_and_max_offset(segment: LogSegment) -> None:
    piece = segment.read(1002, 100, min_one_batch=True, max_offset=None)
    assert piece is not None and (piece.position, piece.size_bytes) == (135, 135)
    assert segment.read(1002, 100, min_one_batch=False, max_offset=None) is None
    # max_offset excludes the batch holding it and everything after
    piece = segment.read(1000, 10_000, min_one_batch=True, max_offset=1005)
    assert piece is not None and (piece.position, piece.size_bytes) == (0, 270)
    piece = segment.read(1000, 10_000, min_one_batch=True, max_offset=1004)
    assert piece is not None and (piece.position, piece.size_bytes) == (0, 270)
    assert segment.read(1004, 10_000, min_one_batch=True, max_offset=1004) is None
    # KIP-74 never passes max_offset
    assert segment.read(1002, 10, min_one_batch=True, max_offset=1003) is None


@pytest.mark.parametrize(
    ("timestamp", "starting_offset", "expected"),
    [
        (0, BASE, TimestampOffset(990, 1000)),
        (995, BASE, TimestampOffset(1000, 1001)),
        (1001, BASE, TimestampOffset(2990, 1002)),
        (2995, BASE, TimestampOffset(3000, 1003)),
        (3001, BASE, TimestampOffset(3990, 1008)),
        (3995, BASE, TimestampOffset(4000, 1009)),
        (4000, BASE, TimestampOffset(4000, 1009)),
        (4995, BASE, TimestampOffset(5000, 1015)),
        (5001, BASE, None),
        (995, 1002, TimestampOffset(2990, 1002)),
        (4000, 1010, TimestampOffset(4000, 1010)),
    ],
)
def test_find_offset_by_timestamp_is_record_exact(
    segment: LogSegment, timestamp: int, starting_offset: int, expected: TimestampOffset | None
) -> None:
    assert segment.find_offset_by_timestamp(timestamp, starting_offset) == expected


def test_max_timestamp_offset_is_the_first_record_holding_it(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    append(segment, batch(BASE, (3990, 4000)), batch(BASE + 2, (4000, 3990)))
    assert segment.max_timestamp == 4000 and segment.offset_of_max_timestamp == BASE + 1
    assert segment.max_timestamp_offset() == TimestampOffset(4000, BASE + 1)


def test_truncate_to_cuts_at_the_batch_boundary_and_fixes_indexes(segment: LogSegment) -> None:
    assert segment.truncate_to(1007) == 5 * BATCH_BYTES  # 1007 is inside batch 3 (1006-1007)
    assert segment.next_offset == 1006
    assert segment.size_bytes == 3 * BATCH_BYTES == segment.log_path.stat().st_size
    assert segment.index_path.read_bytes() == struct.pack(">ii", 5, 270)
    assert segment.timeindex_path.read_bytes() == struct.pack(">qi", 3000, 3)
    assert (segment.max_timestamp, segment.offset_of_max_timestamp) == (3000, 1003)
    append(segment, batch(1006, (7000, 7000)))
    assert segment.next_offset == 1008 and segment.max_timestamp == 7000
    assert segment.truncate_to(BASE) == 4 * BATCH_BYTES
    assert (segment.size_bytes, segment.next_offset, segment.max_timestamp) == (0, BASE, -1)
    assert segment.index_path.read_bytes() == b"" and segment.timeindex_path.read_bytes() == b""
    assert segment.roll_base_ms is None


def test_append_never_goes_back_but_may_leave_a_gap(segment: LogSegment) -> None:
    """Offsets only grow; a gap (a compacted log's, rebuilt keeping its offsets) is allowed."""
    with pytest.raises(ValueError, match="do not follow segment"):
        append(segment, batch(BASE + 15, (1, 1)))
    assert (segment.size_bytes, segment.next_offset) == (8 * BATCH_BYTES, BASE + 16)
    append(segment, batch(BASE + 20, (1, 1)))
    assert (segment.size_bytes, segment.next_offset) == (9 * BATCH_BYTES, BASE + 22)


def test_recover_rebuilds_missing_indexes_identically(segment: LogSegment, tmp_path: Path) -> None:
    segment.mark_rolled(now_ms=1)
    segment.flush()
    index, timeindex = segment.index_path.read_bytes(), segment.timeindex_path.read_bytes()
    segment.close()
    segment.index_path.unlink()
    segment.timeindex_path.unlink()
    loaded = LogSegment.load(tmp_path, BASE, index_interval_bytes=200, segment_index_bytes=1024, now_ms=0)
    assert not loaded.index_trusted
    assert loaded.recover(TRUST_ALL) == 0
    assert loaded.index_path.read_bytes() == index
    assert loaded.timeindex_path.read_bytes() == timeindex
    assert (loaded.next_offset, loaded.size_bytes, loaded.max_timestamp) == (BASE + 16, 8 * BATCH_BYTES, 5000)


def test_recover_distrusts_an_index_entry_that_misses_its_batch(segment: LogSegment, tmp_path: Path) -> None:
    index = segment.index_path.read_bytes()
    segment.close()
    segment.index_path.write_bytes(index[:-4] + struct.pack(">i", 811))  # well-formed, mid-batch
    loaded = LogSegment.load(tmp_path, BASE, index_interval_bytes=200, segment_index_bytes=1024, now_ms=0)
    assert loaded.index_trusted
    assert loaded.recover(TRUST_ALL) == 0
    assert loaded.index_path.read_bytes() == index
    assert loaded.next_offset == BASE + 16


def test_recover_cuts_a_torn_tail(segment: LogSegment, tmp_path: Path) -> None:
    segment.close()
    with open(segment.log_path, "r+b") as f:
        f.truncate(7 * BATCH_BYTES + 60)
    loaded = LogSegment.load(tmp_path, BASE, index_interval_bytes=200, segment_index_bytes=1024, now_ms=0)
    assert loaded.recover(None) == 60
    assert (loaded.next_offset, loaded.size_bytes) == (BASE + 14, 7 * BATCH_BYTES)
    assert loaded.log_path.stat().st_size == 7 * BATCH_BYTES
    # the roll/close entry of the rebuilt time index holds the max of what is left
    assert loaded.timeindex_path.read_bytes() == struct.pack(">qi", 3000, 3) + struct.pack(">qi", 4000, 9)


def test_deleted_segment_stays_readable_through_its_file_slice(segment: LogSegment) -> None:
    expected = segment.log_path.read_bytes()[:405]
    piece = segment.read(BASE, 405, min_one_batch=True, max_offset=None)
    segment.delete()
    assert not segment.log_path.exists()
    assert not segment.index_path.exists() and not segment.timeindex_path.exists()
    assert piece is not None and piece.read_bytes() == expected


def test_a_full_index_skips_entries_instead_of_failing(tmp_path: Path) -> None:
    # 36 bytes: 4 offset entries, 3 time entries of which the last is kept for the roll
    segment = new_segment(tmp_path, index_interval_bytes=0, segment_index_bytes=36)
    append(segment, *(batch(BASE + 2 * i, (5, 5)) for i in range(6)))
    assert list(segment.offset_index) == [
        IndexEntry(1003, 135), IndexEntry(1005, 270), IndexEntry(1007, 405), IndexEntry(1009, 540)
    ]
    assert list(segment.time_index) == [TimestampOffset(5, 1001)]
    assert segment.index_room() == 0
    header = segment.translate_offset(1011)
    assert header is not None and header.position == 675
