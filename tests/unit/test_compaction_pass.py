"""One cleaning pass of the shell over a real local log (compaction/cleaner.py clean_partition,
then Log.replace_segment): a full map cleans the whole dirty section, a small one stops where
it is full, and transactions are cleaned as Kafka cleans them (aborted data supersedes nothing
and goes; its marker and a commit marker go once their transaction's data is gone, past
the delete horizon the first pass that found them so stamped on them)."""

from __future__ import annotations

import threading
from pathlib import Path

from hot_tier import Log, LogConfig
from hot_tier.records import Record, decode_batches, encode_batch

from diskless.broker.compaction.cleaning import PassResult, Throttler, clean_partition, segment_views
from diskless.broker.compaction.config import CompactionRules
from diskless.broker.compaction.policy import plan
from hot_tier.records.transactions import encode_marker

NOW = 10**12
RULES = CompactionRules(delete=False, delete_retention_ms=10**9)


def records_of(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    for segment in log.segments:
        for batch in decode_batches(segment.log_path.read_bytes()):
            if not batch.header.is_control:
                out += [(r.offset, r.key, r.value) for r in batch.records]
    return out


def run_pass(log: Log, map_capacity: int, aborted=(), checkpoint: int | None = None, rules: CompactionRules = RULES,
             log_start_offset: int | None = 0, producer_last_offsets: dict[int, int] | None = None,
             aborts_removable_below: int = 2**63, now_ms: int = NOW) -> PassResult:  # fmt: skip
    segments = list(log.segments)
    views = segment_views(segments)
    cleaning = plan(views, checkpoint=checkpoint, log_start_offset=0, high_watermark=log.log_end_offset, rules=rules, now_ms=now_ms)
    result = clean_partition(
        segments, views, cleaning, rules, map_capacity=map_capacity, producer_last_offsets=producer_last_offsets or {}, now_ms=now_ms,
        throttle=Throttler(1e308), stop=threading.Event(), aborted=aborted, log_start_offset=log_start_offset,
        aborts_removable_below=aborts_removable_below,
    )  # fmt: skip
    for base_offset, size_bytes in result.cleaned:
        assert log.replace_segment(base_offset, size_bytes) is not None
    return result


def run_past_horizon(log: Log, **kwargs) -> PassResult:
    """Two passes with delete.retention.ms=0: the first stamps the delete horizon (now) on
    the markers (and tombstones) it keeps, the second is past it."""
    rules = CompactionRules(delete=False, delete_retention_ms=0)
    first = run_pass(log, map_capacity=10, rules=rules, **kwargs)
    assert first.removed_aborts == {}
    return run_pass(log, map_capacity=10, rules=rules, **kwargs)


def keyed_log(dir: Path) -> Log:
    log = Log.open(dir, LogConfig(segment_bytes=600), 0)
    for i in range(30):
        log.append(bytearray(encode_batch([Record(0, NOW, b"k%d" % (i % 3), b"v%d" % i)])), 0)
    log.roll(0)
    return log


def test_a_full_map_cleans_to_one_record_per_key(tmp_path: Path) -> None:
    log = keyed_log(tmp_path)
    assert run_pass(log, map_capacity=10).end_offset == 30
    assert records_of(log) == [(27, b"k0", b"v27"), (28, b"k1", b"v28"), (29, b"k2", b"v29")]


def test_a_small_map_cleans_as_far_as_it_covers_and_the_next_pass_goes_on(tmp_path: Path) -> None:
    log = Log.open(tmp_path, LogConfig(segment_bytes=600), 0)
    for i in range(30):  # keys k0..k9 three times
        log.append(bytearray(encode_batch([Record(0, NOW, b"k%d" % (i % 10), b"v%d" % i)])), 0)
    log.roll(0)
    end = run_pass(log, map_capacity=4).end_offset  # k0..k3, then k4 does not fit: the map ends at offset 4
    assert end == 4
    kept = records_of(log)
    # Nothing at or past the map's end went; below it the map's keys kept their last record
    # in its range (k0..k3 at 0..3: their later records are past the map).
    assert [o for o, _, _ in kept] == list(range(30))
    ends = [end]
    while end < 30:
        end = run_pass(log, map_capacity=4, checkpoint=end).end_offset
        ends.append(end)
    assert ends == [4, 8, 12, 16, 20, 24, 28, 30]
    assert records_of(log) == [(o, b"k%d" % (o % 10), b"v%d" % o) for o in range(20, 30)]


def test_a_tombstone_of_old_records_stays_delete_retention_after_its_first_cleaning_restarts_included(tmp_path: Path) -> None:
    # A replay of old records (CreateTime a day after the epoch) to a compacted topic: their age
    # says nothing of when consumers saw the delete. Kafka keeps it delete.retention.ms from the
    # cleaning that first kept it (KIP-534), and so does the cleaner here, across a restart.
    log = Log.open(tmp_path, LogConfig(segment_bytes=100_000), 0)
    log.append(bytearray(encode_batch([Record(0, 86_400_000, b"a", b"v")])), 0)
    log.append(bytearray(encode_batch([Record(0, 86_400_001, b"a", None), Record(1, 86_400_002, b"b", b"w")])), 0)
    log.roll(0)
    assert segment_views(list(log.segments))[0].first_timestamp == 86_400_000  # max.compaction.lag.ms counts from it
    first = run_pass(log, map_capacity=10)
    assert records_of(log) == [(1, b"a", None), (2, b"b", b"w")]
    assert first.tombstone_horizon_ms == NOW + RULES.delete_retention_ms
    # The horizon sits in the first batch's base timestamp: the segment's first timestamp is
    # then the batch's largest (Kafka's first-batch timestamp), not the horizon.
    assert segment_views(list(log.segments))[0].first_timestamp == 86_400_002
    log.close()
    log = Log.open(tmp_path, LogConfig(segment_bytes=100_000), 0)
    run_pass(log, map_capacity=10, now_ms=NOW + RULES.delete_retention_ms - 1)
    assert records_of(log) == [(1, b"a", None), (2, b"b", b"w")]
    timestamps = [r.timestamp for s in log.segments for b in decode_batches(s.log_path.read_bytes()) for r in b.records]
    assert timestamps == [86_400_001, 86_400_002]
    last = run_pass(log, map_capacity=10, now_ms=NOW + RULES.delete_retention_ms)
    assert records_of(log) == [(2, b"b", b"w")]
    assert (last.tombstone_horizon_ms, last.stats.tombstones_dropped) == (None, 1)


def transactions_log(dir: Path) -> Log:
    log = Log.open(dir, LogConfig(segment_bytes=100_000), 0)
    log.append(bytearray(encode_batch([Record(0, NOW, b"a", b"committed-1")])), 0)  # 0
    aborted = encode_batch([Record(0, NOW, b"a", b"aborted")], producer_id=5, producer_epoch=0, base_sequence=0, is_transactional=True)
    log.append(bytearray(aborted), 0)  # 1
    log.append(bytearray(encode_marker(5, 0, False, 0, NOW)), 0)  # 2: abort
    committed = encode_batch([Record(0, NOW, b"b", b"txn-1")], producer_id=6, producer_epoch=0, base_sequence=0, is_transactional=True)
    log.append(bytearray(committed), 0)  # 3
    log.append(bytearray(encode_marker(6, 0, True, 0, NOW)), 0)  # 4: commit
    log.append(bytearray(encode_batch([Record(0, NOW, b"b", b"plain-2")])), 0)  # 5
    kept = encode_batch([Record(0, NOW, b"c", b"txn-2")], producer_id=6, producer_epoch=0, base_sequence=1, is_transactional=True)
    log.append(bytearray(kept), 0)  # 6
    log.append(bytearray(encode_marker(6, 0, True, 0, NOW)), 0)  # 7: commit
    log.roll(0)
    return log


def batch_offsets(log: Log) -> list[tuple[int, bool]]:
    """(last offset, is a control batch) of every batch left."""
    return [(b.header.last_offset, b.header.is_control) for s in log.segments for b in decode_batches(s.log_path.read_bytes())]


def test_aborted_data_goes_and_supersedes_nothing_markers_stay_within_delete_retention(tmp_path: Path) -> None:
    log = transactions_log(tmp_path)
    run_pass(log, map_capacity=10, aborted=[(5, 1, 2)])
    kept = records_of(log)
    assert [(o, k, v) for o, k, v in kept] == [(0, b"a", b"committed-1"), (5, b"b", b"plain-2"), (6, b"c", b"txn-2")]
    assert [o for o, control in batch_offsets(log) if control] == [2, 4, 7]


def test_past_delete_retention_markers_whose_data_is_gone_go_too(tmp_path: Path) -> None:
    log = transactions_log(tmp_path)
    first = run_pass(log, map_capacity=10, aborted=[(5, 1, 2)], rules=CompactionRules(delete=False, delete_retention_ms=0))
    # The first pass keeps every marker and stamps the two whose data is gone: they may go at
    # its time + delete.retention.ms (0), that is at the next pass.
    assert [o for o, control in batch_offsets(log) if control] == [2, 4, 7]
    horizons = [b.header.delete_horizon_ms for s in log.segments for b in decode_batches(s.log_path.read_bytes()) if b.header.is_control]
    assert horizons == [NOW, NOW, None]
    assert (first.removed_aborts, first.tombstone_horizon_ms) == ({}, NOW)
    result = run_pass(log, map_capacity=10, aborted=[(5, 1, 2)], rules=CompactionRules(delete=False, delete_retention_ms=0))
    # The abort marker goes with its data, and the pass names it (its transaction leaves the
    # fetches' lists at the swap); the first commit marker goes (its one record, offset 3, was
    # superseded); the second stays with its transaction's record.
    assert [o for o, control in batch_offsets(log) if control] == [7]
    assert [o for o, _, _ in records_of(log)] == [0, 5, 6]
    assert result.removed_aborts == {0: [2]}


def test_an_abort_marker_the_store_does_not_hold_yet_stays(tmp_path: Path) -> None:
    # A tiered partition whose aborted transactions are recorded in the store below offset 2
    # only: a leader elsewhere would read the bucket's copy (data and marker) without the entry.
    log = transactions_log(tmp_path)
    result = run_past_horizon(log, aborted=[(5, 1, 2)], aborts_removable_below=2)
    assert [o for o, control in batch_offsets(log) if control] == [2, 7]
    assert result.removed_aborts == {}
    assert [o for o, _, _ in records_of(log)] == [0, 5, 6]


def test_an_abort_marker_whose_emptied_batch_stays_stays_too(tmp_path: Path) -> None:
    log = transactions_log(tmp_path)
    result = run_past_horizon(log, aborted=[(5, 1, 2)], producer_last_offsets={5: 1})
    assert batch_offsets(log)[:3] == [(0, False), (1, False), (2, True)]  # the emptied batch, its marker
    assert result.removed_aborts == {}


def test_a_commit_marker_of_a_transaction_begun_below_the_pass_stays(tmp_path: Path) -> None:
    log = transactions_log(tmp_path)
    # The partition's log starts below these segments (history in the bucket): producer 6's
    # first transaction may have data there, so its marker stays; the second is known whole.
    run_past_horizon(log, aborted=[(5, 1, 2)], log_start_offset=None)
    assert [o for o, control in batch_offsets(log) if control] == [2, 4, 7]


def test_the_last_batch_of_an_active_producer_stays_emptied_when_aborted(tmp_path: Path) -> None:
    log = transactions_log(tmp_path)
    run_pass(log, map_capacity=10, aborted=[(5, 1, 2)], producer_last_offsets={5: 1})
    assert (1, False) in batch_offsets(log)
    assert [o for o, _, _ in records_of(log)] == [0, 5, 6]
