"""Planning decisions of the Spark reader: offsets, data loss, splitting, index lookups."""

from __future__ import annotations

import struct

import pytest

from cold_tier.layout import CommittedSegment
from spark_reader.decode import RecordBounds
from spark_reader.errors import DataLoss, InvalidOption, NoOffsetForTimestamp, OffsetRangeInvalid
from spark_reader.options import Earliest, GlobalTimestamp, Latest, PartitionTimestamps, SpecificOffsets
from spark_reader.plan import (
    BrokerOffsets,
    BrokerRange,
    BucketRange,
    PartitionLog,
    SegmentRef,
    clamp_range,
    plan_tasks,
    resolve_offset,
    split_ranges,
)
from spark_reader.segment_index import first_offset_not_older_than, parse_offset_index, parse_time_index, position_range
from spark_reader.stream import decode_offsets, encode_offsets, rate_limit


def segment(base: int, last: int, max_timestamp: int = 1000, size: int = 1000, upload: str = "u1") -> CommittedSegment:
    return CommittedSegment("t", 0, base, last, 0, max_timestamp, size, 0, upload)


LOG = PartitionLog("t", 0, (segment(100, 199), segment(200, 299, 5000), segment(300, 399)))


def no_lookup(log, timestamp_ms):
    raise AssertionError("no timestamp lookup expected")


def test_earliest_latest_and_json_offsets_resolve_against_the_catalogue() -> None:
    assert resolve_offset(Earliest(), LOG, starting=True, lookup=no_lookup) == 100
    assert resolve_offset(Latest(), LOG, starting=False, lookup=no_lookup) == 400
    spec = SpecificOffsets({("t", 0): -2})
    assert resolve_offset(spec, LOG, starting=True, lookup=no_lookup) == 100
    assert resolve_offset(SpecificOffsets({("t", 0): -1}), LOG, starting=False, lookup=no_lookup) == 400
    assert resolve_offset(SpecificOffsets({("t", 0): 250}), LOG, starting=True, lookup=no_lookup) == 250
    with pytest.raises(InvalidOption):
        resolve_offset(SpecificOffsets({("t", 1): 5}), LOG, starting=True, lookup=no_lookup)


def test_with_a_broker_latest_is_the_high_watermark() -> None:
    log = PartitionLog("t", 0, LOG.segments, BrokerOffsets(100, 450, "127.0.0.1:9092"))
    assert resolve_offset(Latest(), log, starting=False, lookup=no_lookup) == 450
    empty = PartitionLog("t", 0, (), BrokerOffsets(7, 9, "127.0.0.1:9092"))
    assert (empty.earliest, empty.latest) == (7, 9)


def test_timestamps_use_the_lookup_and_spark_fallbacks() -> None:
    calls = []

    def lookup(log, timestamp_ms):
        calls.append(timestamp_ms)
        return 321 if timestamp_ms == 5 else None

    assert resolve_offset(GlobalTimestamp(5), LOG, starting=True, lookup=lookup) == 321
    assert resolve_offset(PartitionTimestamps({("t", 0): 6}), LOG, starting=False, lookup=lookup) == 400
    with pytest.raises(NoOffsetForTimestamp):
        resolve_offset(GlobalTimestamp(6), LOG, starting=True, lookup=lookup)
    assert resolve_offset(GlobalTimestamp(6), LOG, starting=True, lookup=lookup, strategy_latest=True) == 400
    assert calls == [5, 6, 6, 6]


def test_read_committed_a_timestamp_match_at_or_above_the_last_stable_offset_is_no_match() -> None:
    """Kafka's ListOffsets with read_committed (and so Spark's Kafka source): only offsets
    below the last stable offset are answered; otherwise the no-match rules apply."""
    committed = PartitionLog("t", 0, LOG.segments, last_stable_offset=350)

    def lookup(log, timestamp_ms):
        return timestamp_ms  # the first record that recent, above the last stable offset or not

    assert resolve_offset(GlobalTimestamp(349), committed, starting=True, lookup=lookup) == 349
    with pytest.raises(NoOffsetForTimestamp):
        resolve_offset(GlobalTimestamp(350), committed, starting=True, lookup=lookup)
    assert resolve_offset(GlobalTimestamp(360), committed, starting=True, lookup=lookup, strategy_latest=True) == 350
    assert resolve_offset(PartitionTimestamps({("t", 0): 360}), committed, starting=False, lookup=lookup) == 350
    assert resolve_offset(GlobalTimestamp(360), LOG, starting=True, lookup=lookup) == 360  # read_uncommitted: the log's end, 400


def test_ranges_outside_the_log_are_data_loss_or_clamped() -> None:
    assert clamp_range(LOG, 150, 350, RecordBounds(), True) == (150, 350)
    assert clamp_range(LOG, 150, 350, RecordBounds(160, 170), True) == (160, 170)
    with pytest.raises(DataLoss) as lost:
        clamp_range(LOG, 50, 350, RecordBounds(), True)
    assert (lost.value.first_missing_offset, lost.value.next_available_offset) == (50, 100)
    assert clamp_range(LOG, 50, 350, RecordBounds(), False) == (100, 350)
    with pytest.raises(DataLoss):
        clamp_range(LOG, 150, 450, RecordBounds(), True)
    assert clamp_range(LOG, 150, 450, RecordBounds(), False) == (150, 400)
    with pytest.raises(OffsetRangeInvalid):
        clamp_range(LOG, 300, 200, RecordBounds(), False)
    assert clamp_range(LOG, 150, 350, RecordBounds(500, 600), True) == (500, 500)


def refs(*segments: CommittedSegment) -> tuple[SegmentRef, ...]:
    return tuple(SegmentRef(s.base_offset, s.last_offset, s.size_bytes, s.upload_id, s.max_timestamp) for s in segments)


def test_tasks_cover_the_range_with_the_segments_that_hold_it() -> None:
    runs, tail = plan_tasks(LOG, 150, 320, RecordBounds(), True)
    assert runs == [(150, 320, refs(*LOG.segments))]
    assert tail is None
    runs, _ = plan_tasks(LOG, 200, 300, RecordBounds(), True)
    assert runs == [(200, 300, refs(LOG.segments[1]))]


def test_a_timestamp_lower_bound_drops_older_segments() -> None:
    runs, _ = plan_tasks(LOG, 100, 400, RecordBounds(min_timestamp_us=2_000_000), True)
    assert runs == [(100, 400, refs(LOG.segments[1]))]


def test_a_hole_in_the_catalogue_is_data_loss_or_skipped() -> None:
    holed = PartitionLog("t", 0, (LOG.segments[0], LOG.segments[2]))
    with pytest.raises(DataLoss) as lost:
        plan_tasks(holed, 150, 350, RecordBounds(), True)
    assert (lost.value.first_missing_offset, lost.value.next_available_offset) == (200, 300)
    runs, _ = plan_tasks(holed, 150, 350, RecordBounds(), False)
    assert runs == [(150, 200, refs(holed.segments[0])), (300, 350, refs(holed.segments[1]))]
    assert plan_tasks(holed, 120, 180, RecordBounds(), True)[0] == [(120, 180, refs(holed.segments[0]))]


def test_the_hot_tail_starts_exactly_at_the_bucket_log_end_offset() -> None:
    log = PartitionLog("t", 0, LOG.segments, BrokerOffsets(0, 470, "h:1"))
    runs, tail = plan_tasks(log, 350, 470, RecordBounds(), True)
    assert runs == [(350, 400, refs(LOG.segments[2]))]
    assert tail == BrokerRange("t", 0, 400, 470, "h:1")
    runs, tail = plan_tasks(log, 420, 470, RecordBounds(), True)
    assert runs == [] and tail == BrokerRange("t", 0, 420, 470, "h:1")
    empty_bucket = PartitionLog("t", 0, (), BrokerOffsets(0, 30, "h:1"))
    assert plan_tasks(empty_bucket, 0, 30, RecordBounds(), True) == ([], BrokerRange("t", 0, 0, 30, "h:1"))


def test_split_ranges_follows_spark_offset_range_calculator() -> None:
    a = BucketRange("t", 0, 0, 100, refs(segment(0, 49), segment(50, 99)))
    b = BucketRange("t", 1, 0, 300, refs(segment(0, 299)))
    assert split_ranges([a, b], None, None) == [a, b]
    assert split_ranges([a, b], 2, None) == [a, b]
    pieces = split_ranges([a, b], 4, None)  # a: round(100/400*4) = 1 piece, b: 3 pieces
    assert [(p.partition, p.start_offset, p.end_offset) for p in pieces] == [(0, 0, 100), (1, 0, 100), (1, 100, 200), (1, 200, 300)]
    pieces = split_ranges([a], None, 30)  # ceil(100 / 30) = 4 pieces
    assert [(p.start_offset, p.end_offset) for p in pieces] == [(0, 25), (25, 50), (50, 75), (75, 100)]
    assert [len(p.segments) for p in pieces] == [1, 1, 1, 1]


def test_min_partitions_leaves_small_ranges_whole_and_shares_the_rest_like_spark() -> None:
    small = BucketRange("t", 0, 0, 10, refs(segment(0, 9)))
    large = BucketRange("t", 1, 0, 990, refs(segment(0, 989)))
    # Spark's "unsplit ranges": small keeps one piece and is left out of the share, so large
    # takes round(990 / 990 * (10 - 1)) = 9 pieces, not round(990 / 1000 * 10) = 10.
    pieces = split_ranges([small, large], 10, None)
    assert [(p.partition, p.end_offset - p.start_offset) for p in pieces] == [(0, 10)] + [(1, 110)] * 9
    # maxRecordsPerPartition first (ceil(990 / 400) = 3 pieces of 330), then minPartitions=8
    # over 10 + 3 * 330: small whole, each 330 round(330 / 990 * 7) = 2 pieces.
    pieces = split_ranges([small, large], 8, 400)
    assert [(p.partition, p.start_offset, p.end_offset) for p in pieces] == [
        (0, 0, 10), (1, 0, 165), (1, 165, 330), (1, 330, 495), (1, 495, 660), (1, 660, 825), (1, 825, 990)
    ]


def offset_index(*entries: tuple[int, int]) -> bytes:
    return b"".join(struct.pack(">ii", relative, position) for relative, position in entries)


def test_position_range_reads_from_a_batch_boundary_through_the_last_wanted_batch() -> None:
    index = parse_offset_index(offset_index((9, 1000), (19, 2000), (29, 3000)), 100, 4000)
    assert [index.entry(slot).offset for slot in range(len(index))] == [109, 119, 129]
    # Entry (109, 1000): the batch at byte 1000 ends at offset 109.
    assert position_range(index, 4000, 100, 200) == (0, 4000)
    assert position_range(index, 4000, 100, 105) == (0, 2000)  # 104 may sit in the batch at 1000
    assert position_range(index, 4000, 115, 118) == (1000, 3000)
    assert position_range(index, 4000, 119, 120) == (2000, 3000)
    assert position_range(index, 4000, 131, 140) == (3000, 4000)


def test_a_malformed_index_is_not_trusted() -> None:
    for data in (offset_index((9, 1000), (5, 2000)), offset_index((9, 1000)) + b"\x00", offset_index((9, 5000))):
        index = parse_offset_index(data, 100, 4000)
        assert position_range(index, 4000, 150, 160) == (0, 4000)


def test_time_index_gives_where_records_stop_being_older() -> None:
    data = b"".join(struct.pack(">qi", ts, relative) for ts, relative in ((1000, 9), (2000, 19), (3000, 29)))
    index = parse_time_index(data, 100)
    assert first_offset_not_older_than(index, 999) is None
    assert first_offset_not_older_than(index, 1000) is None
    assert first_offset_not_older_than(index, 1001) == 110
    assert first_offset_not_older_than(index, 3001) == 130
    assert [index.base_offset + relative for relative in index.relative_offsets] == [109, 119, 129]


def test_rate_limit_shares_rows_like_spark() -> None:
    begin = {("t", 0): 0, ("t", 1): 100, ("t", 2): 50}
    end = {("t", 0): 300, ("t", 1): 200, ("t", 2): 50}
    assert rate_limit(begin, end, 40) == {("t", 0): 30, ("t", 1): 110, ("t", 2): 50}
    assert rate_limit(begin, end, 1) == {("t", 0): 1, ("t", 1): 101, ("t", 2): 50}
    assert rate_limit(begin, end, 10_000) == end
    offsets = {("a", 0): 5, ("a", 10): 7, ("b", 1): 0}
    assert encode_offsets(offsets) == {"a": {"0": 5, "10": 7}, "b": {"1": 0}}
    assert decode_offsets(encode_offsets(offsets)) == offsets
