"""Log: append and offsets, rolling by size / time / full index, reads (positions, KIP-74,
max_offset), lookups by time, retention, DeleteRecords, truncation, reopen, flushing."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from hot_tier import (
    AppendInfo,
    DeletedSegment,
    DeleteReason,
    InvalidConfig,
    Log,
    LogClosed,
    LogConfig,
    OffsetOutOfRange,
    TimestampOffset,
)
from hot_tier.records import (
    TIMESTAMP_LOG_APPEND_TIME,
    BadCrc,
    CorruptBatch,
    Record,
    TruncatedBatch,
    decode_batch,
    encode_batch,
    iter_headers,
    read_header,
    set_base_offset,
)
from hot_tier.recovery import CLEAN_SHUTDOWN_FILE

BATCH = 100  # one record with a 32-byte value


def batch(*timestamps: int, value_bytes: int = 32) -> bytearray:
    """A batch as a producer sends it: base offset 0, one record per timestamp."""
    records = [Record(i, ts, None, b"v" * value_bytes) for i, ts in enumerate(timestamps or (1000,))]
    return bytearray(encode_batch(records))


def open_log(dir: Path, now_ms: int = 0, **config: int) -> Log:
    defaults = {"segment_bytes": 10_000, "index_interval_bytes": 150}
    return Log.open(dir / "orders-0", LogConfig(**(defaults | config)), now_ms)


def bases(log: Log) -> list[tuple[int, int, int]]:
    return [(s.base_offset, s.next_offset, s.size_bytes) for s in log.segments]


def test_the_test_batch_is_100_bytes() -> None:
    assert len(batch(1)) == BATCH


def test_append_assigns_offsets_in_place_and_reports_them(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    first = batch(5, 9, 7)
    info = log.append(first, now_ms=50)
    assert info == AppendInfo(0, 2, 9, -1, 0, len(first))
    second = batch(20)
    assert log.append(second, now_ms=60) == AppendInfo(3, 3, 20, -1, 0, BATCH)
    assert read_header(second).base_offset == 3  # written into the caller's buffer
    data = log.segments[0].log_path.read_bytes()
    assert data == bytes(first) + bytes(second)
    assert (log.log_end_offset, log.high_watermark, log.log_start_offset) == (4, 4, 0)


def test_append_several_batches_in_one_call(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(batch(1), now_ms=0)
    buf = batch(1, 2) + batch(3) + batch(4, 5, 6)
    info = log.append(buf, now_ms=0)
    assert (info.first_offset, info.last_offset, info.max_timestamp) == (1, 6, 6)
    headers = [read_header(buf, 0), read_header(buf, 139), read_header(buf, 239)]
    assert [(h.base_offset, h.last_offset) for h in headers] == [(1, 2), (3, 3), (4, 6)]


def test_append_keeping_offsets_leaves_the_gaps_of_a_compacted_log(tmp_path: Path) -> None:
    """A log rebuilt from durable copies: each batch keeps the offsets it carries."""
    log = open_log(tmp_path)
    log.append(batch(1), now_ms=0)  # offset 0
    rebuilt = batch(2, 3)
    set_base_offset(rebuilt, 0, 5)
    later = batch(4)
    set_base_offset(later, 0, 9)
    info = log.append(rebuilt + later, now_ms=0, keep_offsets=True)
    assert (info.first_offset, info.last_offset, log.log_end_offset) == (5, 9, 10)
    piece = log.read(3, 10_000)
    assert piece is not None
    assert [(h.base_offset, h.last_offset) for h in iter_headers(piece.read_bytes())] == [(5, 6), (9, 9)]
    behind = batch(5)
    set_base_offset(behind, 0, 8)
    with pytest.raises(CorruptBatch, match="below the log end 10"):
        log.append(behind, now_ms=0, keep_offsets=True)
    assert log.log_end_offset == 10


def test_log_append_time_stamps_each_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    info = log.append(batch(5, 6), now_ms=12_345, log_append_time=True)
    assert (info.log_append_time_ms, info.max_timestamp) == (12_345, 12_345)
    piece = log.read(0, 10_000)
    assert piece is not None
    decoded = decode_batch(piece.read_bytes())  # CRC checked
    assert decoded.header.timestamp_type == TIMESTAMP_LOG_APPEND_TIME
    assert [r.timestamp for r in decoded.records] == [12_345, 12_345]
    assert log.offset_for_timestamp(12_000) == TimestampOffset(12_345, 0)


def test_append_stamps_the_leader_epoch_when_given(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    first, second = batch(1), batch(2)
    log.append(first, now_ms=0)
    log.append(second, now_ms=0, leader_epoch=7)
    assert read_header(first, check_crc=True).partition_leader_epoch == -1  # as the producer sent it
    assert read_header(second, check_crc=True).partition_leader_epoch == 7


def test_an_invalid_batch_means_nothing_is_written(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(batch(1), now_ms=0)
    good, bad = batch(2), batch(3)
    bad[-1] ^= 0xFF
    buf = good + bad
    original = bytes(buf)
    with pytest.raises(BadCrc):
        log.append(buf, now_ms=0)
    assert bytes(buf) == original  # not even the good batch got an offset
    assert (log.log_end_offset, log.segments[0].size_bytes) == (1, BATCH)
    assert log.segments[0].log_path.stat().st_size == BATCH
    with pytest.raises(TruncatedBatch):
        log.append(bytearray(), now_ms=0)
    with pytest.raises(TruncatedBatch):
        log.append(batch(4)[:-1], now_ms=0)
    lying = batch(4, 5)
    struct.pack_into(">i", lying, 57, 3)  # records_count 3, last_offset_delta 1
    with pytest.raises(CorruptBatch, match="records count"):
        log.append(fix_crc(lying), now_ms=0)
    with pytest.raises(TypeError):
        log.append(bytes(batch(4)), now_ms=0)  # type: ignore[arg-type]
    assert log.log_end_offset == 1


def fix_crc(buf: bytearray) -> bytearray:
    from crc32c import crc32c

    struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    return buf


def test_roll_by_segment_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=250)
    for _ in range(5):
        log.append(batch(1), now_ms=0)
    assert bases(log) == [(0, 2, 200), (2, 4, 200), (4, 5, 100)]
    assert [s.is_active for s in log.segments] == [False, False, True]
    assert [s.log_path.name for s in log.segments] == [
        "00000000000000000000.log", "00000000000000000002.log", "00000000000000000004.log"
    ]
    assert log.recovery_point == 4  # rolling fsyncs the rolled segment


def test_a_batch_larger_than_segment_bytes_gets_a_segment_of_its_own(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=150)
    log.append(batch(1), now_ms=0)
    log.append(batch(1, value_bytes=200), now_ms=0)
    log.append(batch(1), now_ms=0)
    assert [s.base_offset for s in log.segments] == [0, 1, 2]


def test_roll_by_segment_ms_counts_from_the_first_append(tmp_path: Path) -> None:
    log = open_log(tmp_path, now_ms=0, segment_ms=100)
    log.append(batch(1), now_ms=1000)
    log.append(batch(1), now_ms=1100)  # exactly segment.ms old: not yet
    assert len(log.segments) == 1
    log.append(batch(1), now_ms=1101)
    assert bases(log) == [(0, 2, 200), (2, 3, 100)]
    assert not log.maybe_roll(now_ms=1201)
    assert log.maybe_roll(now_ms=1202)
    assert bases(log) == [(0, 2, 200), (2, 3, 100), (3, 3, 0)]
    assert not log.maybe_roll(now_ms=10**9)  # an empty segment is never rolled


@pytest.mark.parametrize(("step_ms", "per_segment"), [(1, 4), (0, 7)])
def test_roll_when_an_index_is_full(tmp_path: Path, step_ms: int, per_segment: int) -> None:
    # 48 bytes: 6 offset entries; 4 time entries, one kept for the roll. One entry pair per
    # batch after the first (interval 0). Rising timestamps fill the time index after 4
    # batches; constant ones add a single time entry, so the offset index fills after 7.
    log = open_log(tmp_path, segment_index_bytes=48, index_interval_bytes=0)
    for i in range(per_segment + 1):
        log.append(batch(1000 + i * step_ms), now_ms=0)
    assert [s.base_offset for s in log.segments] == [0, per_segment]


@pytest.mark.parametrize("segment_index_bytes", [4, 12, 36])
def test_tiny_indexes_roll_and_reopen(tmp_path: Path, segment_index_bytes: int) -> None:
    log = open_log(tmp_path, segment_index_bytes=segment_index_bytes, index_interval_bytes=0)
    for i in range(6):
        log.append(batch(1000 + i), now_ms=0)
        if i % 2:
            log.close()
            log = open_log(tmp_path, segment_index_bytes=segment_index_bytes, index_interval_bytes=0)
    assert log.log_end_offset == 6
    assert log.offset_for_timestamp(1003) == TimestampOffset(1003, 3)
    for segment in log.segments:
        assert len(segment.timeindex_path.read_bytes()) <= segment_index_bytes // 12 * 12
        assert len(segment.index_path.read_bytes()) <= segment_index_bytes // 8 * 8
    log.close()


def test_explicit_roll(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert log.roll(now_ms=5).base_offset == 0  # empty active segment: nothing to roll
    log.append(batch(1), now_ms=0)
    info = log.roll(now_ms=6)
    assert (info.base_offset, info.is_active) == (1, True)
    assert bases(log) == [(0, 1, 100), (1, 1, 0)]


def test_read_positions_kip74_and_max_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for i in range(10):
        log.append(batch(i), now_ms=0)
    data = log.segments[0].log_path.read_bytes()
    piece = log.read(3, 250)
    assert piece is not None and (piece.position, piece.size_bytes) == (300, 200)
    assert piece.read_bytes() == data[300:500]
    piece = log.read(3, 300)
    assert piece is not None and (piece.position, piece.size_bytes) == (300, 300)
    piece = log.read(3, 299)
    assert piece is not None and (piece.position, piece.size_bytes) == (300, 200)
    piece = log.read(3, 50)
    assert piece is not None and (piece.position, piece.size_bytes) == (300, 100)  # KIP-74
    assert log.read(3, 50, min_one_batch=False) is None
    piece = log.read(3, 10_000, max_offset=5)
    assert piece is not None and (piece.position, piece.size_bytes) == (300, 200)
    assert log.read(5, 10_000, max_offset=5) is None
    assert log.read(10, 10_000) is None
    with pytest.raises(OffsetOutOfRange) as caught:
        log.read(11, 10_000)
    assert (caught.value.offset, caught.value.log_start_offset, caught.value.log_end_offset) == (11, 0, 10)
    with pytest.raises(OffsetOutOfRange):
        log.read(-1, 10_000)


def test_read_starts_at_the_batch_holding_the_offset_and_stays_in_one_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=400)
    for _ in range(3):
        log.append(batch(1, 2, 3), now_ms=0)  # 178-byte batches of 3 records
    assert bases(log) == [(0, 6, 356), (6, 9, 178)]
    piece = log.read(4, 10_000)
    assert piece is not None and (piece.position, piece.size_bytes) == (178, 178)
    assert read_header(piece.read_bytes()).base_offset == 3
    piece = log.read(6, 10_000)
    assert piece is not None and piece.file.name == log.segments[1].log_path


def test_file_slice_survives_retention_deleting_its_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=200, retention_ms=10)
    for _ in range(4):
        log.append(batch(1), now_ms=0)
    piece = log.read(0, 10_000)
    assert piece is not None
    expected = piece.read_bytes()
    deleted = log.delete_retention_segments(now_ms=100)
    assert [d.base_offset for d in deleted] == [0]
    assert not log.dir.joinpath("00000000000000000000.log").exists()
    assert piece.read_bytes() == expected
    with pytest.raises(OffsetOutOfRange):
        log.read(0, 10_000)


def test_offset_for_timestamp_and_max_timestamp_across_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=300)
    for timestamps in ((100, 150, 120), (300, 250, 310), (200, 400, 390), (50, 60, 70)):
        log.append(batch(*timestamps), now_ms=0)
    assert [s.max_timestamp for s in log.segments] == [150, 310, 400, 70]
    assert log.offset_for_timestamp(0) == TimestampOffset(100, 0)
    assert log.offset_for_timestamp(130) == TimestampOffset(150, 1)
    assert log.offset_for_timestamp(151) == TimestampOffset(300, 3)
    assert log.offset_for_timestamp(311) == TimestampOffset(400, 7)
    assert log.offset_for_timestamp(401) is None
    assert log.max_timestamp_offset() == TimestampOffset(400, 7)
    log.advance_log_start_offset(4)
    assert log.offset_for_timestamp(130) == TimestampOffset(250, 4)


def test_max_timestamp_offset_of_an_empty_log(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert log.max_timestamp_offset() is None
    assert log.offset_for_timestamp(0) is None


def six_segments(tmp_path: Path, **config: int) -> Log:
    log = open_log(tmp_path, segment_bytes=200, **config)
    for i in range(11):  # two 100-byte batches per segment; timestamps 1000, 1100, ...
        log.append(batch(1000 + 100 * i), now_ms=0)
    assert [s.base_offset for s in log.segments] == [0, 2, 4, 6, 8, 10]
    return log


def test_retention_by_time(tmp_path: Path) -> None:
    log = six_segments(tmp_path, retention_ms=1000)
    # segment max timestamps 1100, 1300, 1500, ...; deleted when now - max > 1000
    assert log.delete_retention_segments(now_ms=2300) == [
        DeletedSegment(0, 2, 200, 1100, DeleteReason.RETENTION_MS)
    ]
    deleted = log.delete_retention_segments(now_ms=10**9)
    assert [(d.base_offset, d.reason) for d in deleted] == [(b, DeleteReason.RETENTION_MS) for b in (2, 4, 6, 8)]
    assert bases(log) == [(10, 11, 100)]  # never the active segment
    assert log.log_start_offset == 10
    assert not any(tmp_path.joinpath("orders-0", f"{b:020d}.{ext}").exists() for b in (0, 8) for ext in ("log", "index", "timeindex"))


def test_retention_by_size(tmp_path: Path) -> None:
    log = six_segments(tmp_path, retention_bytes=450)
    # 1100 bytes: dropping 200s keeps >= 450 until 500 are left
    deleted = log.delete_retention_segments(now_ms=0)
    assert [(d.base_offset, d.reason) for d in deleted] == [(b, DeleteReason.RETENTION_BYTES) for b in (0, 2, 4)]
    assert (log.size_bytes, log.log_start_offset) == (500, 6)
    assert log.delete_retention_segments(now_ms=0) == []


def test_unlimited_retention_deletes_nothing(tmp_path: Path) -> None:
    log = six_segments(tmp_path, retention_ms=-1, retention_bytes=-1)
    assert log.delete_retention_segments(now_ms=2**62) == []


def test_delete_records_advances_log_start_offset(tmp_path: Path) -> None:
    log = six_segments(tmp_path)
    deleted = log.advance_log_start_offset(3)
    assert deleted == [DeletedSegment(0, 2, 200, 1100, DeleteReason.LOG_START_OFFSET)]
    assert log.log_start_offset == 3
    with pytest.raises(OffsetOutOfRange):
        log.read(2, 10_000)
    piece = log.read(3, 10_000)
    assert piece is not None and (piece.position, piece.size_bytes) == (100, 100)
    assert log.advance_log_start_offset(1) == []
    assert log.log_start_offset == 3
    with pytest.raises(OffsetOutOfRange):
        log.advance_log_start_offset(12)
    assert [d.base_offset for d in log.advance_log_start_offset(11)] == [2, 4, 6, 8]
    assert log.log_start_offset == 11 and log.read(11, 100) is None


def test_delete_segments_to_for_tiering(tmp_path: Path) -> None:
    log = six_segments(tmp_path)
    assert [d.base_offset for d in log.delete_segments_to(5)] == [0, 2]
    assert log.log_start_offset == 4
    assert [(d.base_offset, d.reason) for d in log.delete_segments_to(100)] == [
        (b, DeleteReason.TIERED) for b in (4, 6, 8)
    ]
    assert bases(log) == [(10, 11, 100)]


def test_truncate_to_inside_a_segment_and_across_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=400)
    for _ in range(4):
        log.append(batch(1, 2, 3), now_ms=0)  # 178 bytes, 3 offsets each
    assert bases(log) == [(0, 6, 356), (6, 12, 356)]
    assert not log.truncate_to(12)
    assert log.truncate_to(7)  # inside batch 6-8: the whole batch goes
    assert bases(log) == [(0, 6, 356), (6, 6, 0)]
    assert log.high_watermark == 6
    assert log.truncate_to(4)
    assert bases(log) == [(0, 3, 178)]
    assert not tmp_path.joinpath("orders-0", "00000000000000000006.log").exists()
    assert log.append(batch(9), now_ms=0).first_offset == 3
    assert log.offset_for_timestamp(9) == TimestampOffset(9, 3)


def test_truncate_below_the_first_segment_starts_over(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=200)
    for _ in range(5):
        log.append(batch(1), now_ms=0)
    log.delete_segments_to(2)
    assert log.log_start_offset == 2
    log.truncate_to(1)
    assert bases(log) == [(1, 1, 0)]
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (1, 1, 1)
    assert log.append(batch(1), now_ms=0).first_offset == 1


def test_reopen_after_clean_close(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=250)
    for i in range(5):
        log.append(batch(1000 + i), now_ms=0)
    before = bases(log)
    files = {p.name: p.read_bytes() for p in log.dir.iterdir() if p.name != CLEAN_SHUTDOWN_FILE}
    log.close()
    assert log.dir.joinpath(CLEAN_SHUTDOWN_FILE).exists()
    with pytest.raises(LogClosed):
        log.append(batch(1), now_ms=0)
    with pytest.raises(LogClosed):
        log.read(0, 100)
    log = open_log(tmp_path)
    assert not log.dir.joinpath(CLEAN_SHUTDOWN_FILE).exists()
    assert bases(log) == before
    # close added the active segment's final time index entry (creating its index files: a
    # new segment's are made by their first entry); nothing else changed
    after = {p.name: p.read_bytes() for p in log.dir.iterdir()}
    assert after.pop("00000000000000000004.timeindex") == struct.pack(">qi", 1004, 0)
    assert after.pop("00000000000000000004.index") == b""
    assert "00000000000000000004.timeindex" not in files and "00000000000000000004.index" not in files
    assert after == files
    assert log.append(batch(7), now_ms=0).first_offset == 5
    assert log.max_timestamp_offset() == TimestampOffset(1004, 4)


def test_reopen_with_a_log_start_offset_from_metadata(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=200)
    for _ in range(5):
        log.append(batch(1), now_ms=0)
    log.close()
    config = LogConfig(segment_bytes=200)
    log = Log.open(tmp_path / "orders-0", config, 0, log_start_offset=3)
    assert log.log_start_offset == 3 and [s.base_offset for s in log.segments] == [2, 4]
    with pytest.raises(OffsetOutOfRange):
        log.read(2, 100)
    log.close()
    log = Log.open(tmp_path / "orders-0", config, 0, log_start_offset=100)
    assert bases(log) == [(100, 100, 0)]
    assert (log.log_start_offset, log.log_end_offset) == (100, 100)
    assert log.append(batch(1), now_ms=0).first_offset == 100
    log.close()
    log = Log.open(tmp_path / "orders-0", config, 0, log_start_offset=5)
    assert log.log_start_offset == 100  # never below the first local segment


def test_flush_by_flush_messages(tmp_path: Path) -> None:
    log = open_log(tmp_path, flush_messages=3)
    log.append(batch(1, 2), now_ms=0)
    assert log.recovery_point == 0
    log.append(batch(1), now_ms=0)
    assert log.recovery_point == 3
    log.append(batch(1), now_ms=0)
    assert log.recovery_point == 3
    log.flush()
    assert log.recovery_point == 4


def test_flush_by_flush_ms(tmp_path: Path) -> None:
    log = open_log(tmp_path, now_ms=1000, flush_ms=500)
    log.append(batch(1), now_ms=1200)
    assert log.recovery_point == 0
    assert not log.maybe_flush(now_ms=1499)
    assert log.maybe_flush(now_ms=1500)
    assert log.recovery_point == 1
    assert not log.maybe_flush(now_ms=10_000)  # nothing unflushed


def test_update_config_changes_the_index_interval(tmp_path: Path) -> None:
    log = open_log(tmp_path, index_interval_bytes=10_000)
    for _ in range(3):
        log.append(batch(1), now_ms=0)
    log.update_config(LogConfig(segment_bytes=10_000, index_interval_bytes=50))
    log.append(batch(1), now_ms=0)
    assert log.segments[0].index_path.read_bytes() == struct.pack(">ii", 3, 300)


def test_log_config_from_kafka_topic_configs() -> None:
    assert LogConfig() == LogConfig(
        segment_bytes=1073741824, segment_ms=604800000, segment_index_bytes=10485760, index_interval_bytes=4096,
        retention_ms=604800000, retention_bytes=-1, flush_messages=2**63 - 1, flush_ms=2**63 - 1,
        file_delete_delay_ms=60000,
    )  # fmt: skip
    config = LogConfig.from_topic_configs(
        {"segment.bytes": "2048", "retention.ms": "-1", "cleanup.policy": "delete", "index.interval.bytes": " 10 "}
    )
    assert (config.segment_bytes, config.retention_ms, config.index_interval_bytes) == (2048, -1, 10)
    assert config.segment_ms == 604800000
    assert LogConfig.from_topic_configs(config.to_topic_configs()) == config
    with pytest.raises(InvalidConfig) as caught:
        LogConfig.from_topic_configs({"segment.ms": "soon"})
    assert caught.value.name == "segment.ms"
    with pytest.raises(InvalidConfig):
        LogConfig.from_topic_configs({"segment.bytes": str(2**31)})
    with pytest.raises(InvalidConfig):
        LogConfig(retention_ms=-2)
