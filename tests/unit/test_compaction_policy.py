"""The log cleaner's sans-IO core: which range is cleaned (dirty ratio, compaction lags, the
active segment never), the bounded offset map, and one batch rewritten with its offsets."""

from __future__ import annotations

import tracemalloc

from hot_tier.records import Compression, Record, decode_batch, encode_batch, read_header

from diskless.broker.compaction.config import CompactionRules
from diskless.broker.compaction.policy import ENTRY_BYTES, OffsetMap, SegmentView, key_digest, plan, segments_to_clean
from diskless.broker.compaction.rewrite import CleanStats, DeleteHorizons, clean_batch

NOW = 1_000_000_000
RULES = CompactionRules(delete=False)
RETENTION_MS = 86_400_000
KEEP = DeleteHorizons(NOW, RETENTION_MS)


def segs(*sizes: int, max_ts: int = NOW - 10, first_ts: int = NOW - 100) -> list[SegmentView]:
    """Segments of 100 offsets each, the last active."""
    return [
        SegmentView(i * 100, (i + 1) * 100, size, max_ts, first_ts, i == len(sizes) - 1) for i, size in enumerate(sizes)
    ]


def test_never_cleaned_log_is_all_dirty_but_the_active_segment() -> None:
    cleaning = plan(segs(10, 10, 10, 5), checkpoint=None, log_start_offset=0, high_watermark=400, rules=RULES, now_ms=NOW)
    assert (cleaning.first_dirty_offset, cleaning.first_uncleanable_offset) == (0, 300)
    assert (cleaning.clean_bytes, cleaning.dirty_bytes, cleaning.dirty_ratio) == (0, 30, 1.0)
    assert cleaning.should_clean(RULES)


def test_dirty_ratio_against_min_cleanable_dirty_ratio() -> None:
    segments = segs(30, 20, 10, 5)
    cleaning = plan(segments, checkpoint=200, log_start_offset=0, high_watermark=400, rules=RULES, now_ms=NOW)
    assert (cleaning.clean_bytes, cleaning.dirty_bytes) == (50, 10)
    assert not cleaning.should_clean(RULES)  # 1/6 <= 0.5
    assert cleaning.should_clean(CompactionRules(delete=False, min_cleanable_dirty_ratio=0.1))
    # Kafka compares with >: a ratio equal to the setting does not clean.
    half = plan(segs(10, 10, 5), checkpoint=100, log_start_offset=0, high_watermark=300, rules=RULES, now_ms=NOW)
    assert half.dirty_ratio == 0.5 and not half.should_clean(RULES)


def test_the_active_segment_and_the_high_watermark_bound_the_range() -> None:
    cleaning = plan(segs(10, 10, 10), checkpoint=None, log_start_offset=0, high_watermark=150, rules=RULES, now_ms=NOW)
    assert cleaning.first_uncleanable_offset == 150
    assert (cleaning.clean_bytes, cleaning.dirty_bytes) == (0, 20)  # segments overlapping [0, 150), as Kafka counts them
    only_active = plan(segs(10), checkpoint=None, log_start_offset=0, high_watermark=100, rules=RULES, now_ms=NOW)
    assert (only_active.first_uncleanable_offset, only_active.dirty_bytes) == (0, 0)
    assert not only_active.should_clean(RULES)


def test_min_compaction_lag_keeps_young_segments_and_everything_after() -> None:
    segments = segs(10, 10, 10, 5, max_ts=NOW - 100)
    young = [segments[0], SegmentView(100, 200, 10, NOW - 5, NOW - 50, False), segments[2], segments[3]]
    rules = CompactionRules(delete=False, min_compaction_lag_ms=20)
    cleaning = plan(young, checkpoint=None, log_start_offset=0, high_watermark=400, rules=rules, now_ms=NOW)
    assert (cleaning.first_uncleanable_offset, cleaning.dirty_bytes) == (100, 10)


def test_max_compaction_lag_forces_a_cleaning_below_the_ratio() -> None:
    segments = segs(30, 20, 10, 5, first_ts=NOW - 1000)
    rules = CompactionRules(delete=False, max_compaction_lag_ms=500)
    cleaning = plan(segments, checkpoint=200, log_start_offset=0, high_watermark=400, rules=rules, now_ms=NOW)
    assert cleaning.forced and cleaning.should_clean(rules)
    lazy = plan(segments, checkpoint=200, log_start_offset=0, high_watermark=400, rules=RULES, now_ms=NOW)
    assert not lazy.forced


def test_a_passed_tombstone_horizon_forces_a_cleaning_of_the_clean_section() -> None:
    segments = segs(30, 20, 5)
    done = plan(segments, checkpoint=200, log_start_offset=0, high_watermark=300, rules=RULES, now_ms=NOW, tombstone_horizon_ms=NOW + 1)
    assert not done.should_clean(RULES)
    due = plan(segments, checkpoint=200, log_start_offset=0, high_watermark=300, rules=RULES, now_ms=NOW, tombstone_horizon_ms=NOW)
    assert due.should_clean(RULES)
    assert [s.base_offset for s in segments_to_clean(segments, due.first_uncleanable_offset)] == [0, 100]


def test_a_checkpoint_outside_the_log_starts_over_at_the_log_start() -> None:
    cleaning = plan(segs(10, 10, 5), checkpoint=5000, log_start_offset=100, high_watermark=300, rules=RULES, now_ms=NOW)
    assert cleaning.first_dirty_offset == 100


def test_offset_map_keeps_the_last_offset_and_stops_where_it_is_full() -> None:
    offset_map = OffsetMap(3, start_offset=10)
    assert offset_map.add_records([(10, b"a"), (11, b"b"), (12, b"a"), (13, None), (14, b"c"), (15, b"b")])
    assert (len(offset_map), offset_map.end_offset) == (3, 16)
    assert [offset_map.get(key_digest(k)) for k in (b"a", b"b", b"c")] == [12, 15, 14]
    assert not offset_map.add_records([(16, b"a"), (17, b"d"), (18, b"a")])  # d does not fit
    assert (offset_map.full, offset_map.end_offset, offset_map.get(key_digest(b"a"))) == (True, 17, 16)
    offset_map.cover_to(40)
    assert offset_map.end_offset == 17


def test_offset_map_memory_stays_within_the_dedupe_buffer() -> None:
    buffer_bytes = 4 * 2**20
    tracemalloc.start()
    try:
        offset_map = OffsetMap.for_buffer(buffer_bytes, 0)
        offset_map.add_records((i, b"key-%d" % i) for i in range(10**6))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert offset_map.full and len(offset_map) == buffer_bytes // ENTRY_BYTES
    assert offset_map.end_offset == buffer_bytes // ENTRY_BYTES
    assert peak <= buffer_bytes


def batch(records: list[Record], **fields) -> tuple[bytes, object]:
    data = encode_batch(records, **fields)
    return data, read_header(data, 0)


def test_a_batch_keeps_offsets_timestamps_headers_and_producer_fields() -> None:
    records = [Record(100 + i, NOW + i, b"k%d" % (i % 3), b"v%d" % i, (("h", b"%d" % i),)) for i in range(6)]
    data, header = batch(records, base_offset=100, compression=Compression.ZSTD, producer_id=7, producer_epoch=2,
                         base_sequence=40, partition_leader_epoch=5)
    offset_map = OffsetMap(10, 100)
    offset_map.add_records([(100 + i, b"k%d" % (i % 3)) for i in range(6)])
    stats = CleanStats()
    cleaned = clean_batch(data, header, offset_map, horizons=KEEP, retain_empty=False, stats=stats)
    decoded = decode_batch(cleaned)
    assert [r.offset for r in decoded.records] == [103, 104, 105]
    assert decoded.records == records[3:]
    h = decoded.header
    assert (h.base_offset, h.last_offset, h.producer_id, h.producer_epoch, h.base_sequence, h.partition_leader_epoch, h.codec) == (
        100, 105, 7, 2, 40, 5, Compression.ZSTD,
    )
    assert (stats.records_read, stats.records_kept) == (6, 3)
    # Everything kept: the same bytes, not encoded again.
    assert clean_batch(data, header, OffsetMap(10, 100), horizons=KEEP, retain_empty=False, stats=stats) is data


def test_the_last_offset_stays_when_the_last_record_goes() -> None:
    data, header = batch([Record(0, NOW, b"a", b"1"), Record(1, NOW, b"b", b"2")], producer_id=3, producer_epoch=0, base_sequence=0)
    offset_map = OffsetMap(10, 0)
    offset_map.add_records([(0, b"a"), (1, b"b"), (2, b"b")])
    cleaned = clean_batch(data, header, offset_map, horizons=KEEP, retain_empty=False, stats=CleanStats())
    decoded = decode_batch(cleaned)
    assert [r.offset for r in decoded.records] == [0]
    assert (decoded.header.last_offset, decoded.header.last_sequence) == (1, 1)


def test_an_emptied_batch_goes_unless_it_is_a_producers_last() -> None:
    data, header = batch([Record(0, NOW, b"a", b"1")], producer_id=3, producer_epoch=1, base_sequence=9)
    offset_map = OffsetMap(10, 0)
    offset_map.add_records([(0, b"a"), (5, b"a")])
    stats = CleanStats()
    assert clean_batch(data, header, offset_map, horizons=KEEP, retain_empty=False, stats=stats) is None
    assert stats.batches_dropped == 1
    empty = clean_batch(data, header, offset_map, horizons=KEEP, retain_empty=True, stats=stats)
    kept = read_header(empty, 0, check_crc=True)
    assert (kept.records_count, kept.base_offset, kept.last_offset, kept.producer_id, kept.producer_epoch, kept.base_sequence) == (
        0, 0, 0, 3, 1, 9,
    )
    assert kept.max_timestamp == NOW and decode_batch(empty).records == []


def test_tombstones_stay_until_their_horizon_and_records_past_the_map_always_stay() -> None:
    records = [Record(0, NOW - 5, b"a", None), Record(1, NOW - 9, None, b"x"), Record(2, NOW - 7, b"b", None)]
    data, header = batch(records, base_offset=0)
    offset_map = OffsetMap(10, 0)
    offset_map.add_records([(0, b"a")])  # the map ends at 1: offsets 1 and 2 are past it
    stats = CleanStats()
    # The first cleaning keeps every tombstone and stamps the batch's delete horizon (KIP-534):
    # the records and their timestamps are those written, whatever their age.
    horizons = DeleteHorizons(NOW, RETENTION_MS)
    stamped = clean_batch(data, header, offset_map, horizons=horizons, retain_empty=False, stats=stats)
    decoded = decode_batch(stamped)
    assert decoded.records == records
    assert (decoded.header.delete_horizon_ms, decoded.header.max_timestamp, decoded.header.first_timestamp) == (
        NOW + RETENTION_MS, NOW - 5, NOW - 5,
    )
    assert (horizons.earliest_ms, stats.tombstones_kept, stats.tombstones_dropped) == (NOW + RETENTION_MS, 1, 0)
    stamped_header = read_header(stamped, 0)
    # Before the horizon, the same bytes again; the horizon is not moved on.
    later = DeleteHorizons(NOW + RETENTION_MS - 1, RETENTION_MS)
    assert clean_batch(stamped, stamped_header, offset_map, horizons=later, retain_empty=False, stats=stats) is stamped
    assert later.earliest_ms == NOW + RETENTION_MS
    # At the horizon the tombstone the map covers goes; the one past the map stays.
    past = DeleteHorizons(NOW + RETENTION_MS, RETENTION_MS)
    gone = decode_batch(clean_batch(stamped, stamped_header, offset_map, horizons=past, retain_empty=False, stats=stats))
    assert [(r.offset, r.key, r.value, r.timestamp) for r in gone.records] == [(1, None, b"x", NOW - 9), (2, b"b", None, NOW - 7)]
    assert gone.header.delete_horizon_ms == NOW + RETENTION_MS
    assert stats.tombstones_dropped == 1
    covered = OffsetMap(10, 0)
    covered.add_records([(0, b"a"), (1, None), (2, b"b")])
    assert clean_batch(stamped, stamped_header, covered, horizons=past, retain_empty=False, stats=stats) is None


def test_a_batch_without_tombstones_is_never_stamped() -> None:
    data, header = batch([Record(0, NOW - 5, b"a", b"1"), Record(1, NOW - 9, b"b", b"2")])
    horizons = DeleteHorizons(NOW, RETENTION_MS)
    assert clean_batch(data, header, OffsetMap(10, 0), horizons=horizons, retain_empty=False, stats=CleanStats()) is data
    assert horizons.earliest_ms is None


def test_a_passed_horizon_past_the_map_is_not_waited_for_and_a_huge_retention_is_clamped() -> None:
    # A tombstone kept only because it lies past the map's end, its horizon passed: the next
    # ordinary pass takes it; no pass is forced for it (earliest_ms stays None).
    data, header = batch([Record(5, NOW - 9, b"a", None)], base_offset=5, delete_horizon_ms=NOW - 1)
    offset_map = OffsetMap(10, 0)
    offset_map.add_records([(0, b"b")])  # ends at 1
    horizons = DeleteHorizons(NOW, RETENTION_MS)
    assert clean_batch(data, header, offset_map, horizons=horizons, retain_empty=False, stats=CleanStats()) is data
    assert horizons.earliest_ms is None
    # delete.retention.ms at Long.MAX: the horizon is the largest timestamp, not an overflow.
    forever = DeleteHorizons(NOW, 2**63 - 1)
    fresh, fresh_header = batch([Record(0, NOW, b"a", None)])
    stamped = read_header(clean_batch(fresh, fresh_header, OffsetMap(10, 0), horizons=forever, retain_empty=False, stats=CleanStats()))
    assert (stamped.delete_horizon_ms, forever.earliest_ms) == (2**63 - 1, 2**63 - 1)
