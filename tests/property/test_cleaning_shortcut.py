"""A cleaning pass decides a batch whose records are all superseded without walking them
(OffsetMap.latest_between, rewrite.clean_batch): on random logs (keys, tombstones, batch sizes,
producers, delete horizons, a map that fills up, a checkpoint) its cleaned copies and figures are byte for byte
those of the pass that walks every batch."""

from __future__ import annotations

import threading
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hot_tier import Log, LogConfig
from hot_tier.records import Record, encode_batch

from diskless.broker.compaction.cleaning import Throttler, clean_partition, segment_views
from diskless.broker.compaction.config import CompactionRules
from diskless.broker.compaction.policy import OffsetMap, plan

NOW = 10**12

batches = st.lists(
    st.tuples(
        st.lists(st.tuples(st.integers(0, 12), st.booleans()), min_size=1, max_size=6),  # (key, is a tombstone)
        st.sampled_from([None, 7, 8]),  # producer id
        st.sampled_from([None, NOW - 1, NOW + 10**9]),  # delete horizon: none yet, passed, not yet
    ),
    min_size=1,
    max_size=40,
)


def _pass(dir: Path, written, capacity: int, checkpoint: int | None, last_offsets: dict[int, int]):
    log = Log.open(dir, LogConfig(segment_bytes=700), 0)
    try:
        for records, producer, horizon in written:
            batch = [Record(i, NOW, b"key-%d" % key if key < 12 else b"a-longer-key-than-a-digest-%d" % key, None if tomb else b"v")
                     for i, (key, tomb) in enumerate(records)]  # fmt: skip
            extra = {} if producer is None else {"producer_id": producer, "producer_epoch": 0, "base_sequence": log.log_end_offset}
            log.append(bytearray(encode_batch(batch, delete_horizon_ms=horizon, **extra)), 0)
        log.roll(0)
        segments = list(log.segments)
        views = segment_views(segments)
        rules = CompactionRules(delete=False, delete_retention_ms=10**9)
        checkpoint = None if checkpoint is None else min(checkpoint, log.log_end_offset)
        cleaning = plan(views, checkpoint=checkpoint, log_start_offset=0, high_watermark=log.log_end_offset, rules=rules, now_ms=NOW)
        result = clean_partition(
            segments, views, cleaning, rules, map_capacity=capacity, producer_last_offsets=last_offsets, now_ms=NOW + 1,
            throttle=Throttler(float("inf")), stop=threading.Event(), log_start_offset=0,
        )  # fmt: skip
        copies = {base: (dir / f"{base:020d}.log.cleaned").read_bytes() for base, _ in result.cleaned}
        return result.end_offset, result.stats, copies
    finally:
        log.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
# Found by CI: a producer's last batch, all superseded, stamped with a passed horizon, kept
# empty: the shortcut dropped its horizon, the walk kept it.
@example(
    written=[([(0, False)] * 5, None, None), ([(0, False)] * 5, None, None), ([(0, False)] * 4, 7, NOW - 1), ([(0, False)], None, None)],
    capacity=1, checkpoint=None, last_of_7=13,
)
@given(written=batches, capacity=st.integers(1, 14), checkpoint=st.none() | st.integers(0, 60),
       last_of_7=st.integers(0, 120))  # fmt: skip
def test_the_shortcut_cleans_exactly_as_the_walk(tmp_path_factory, monkeypatch, written, capacity, checkpoint, last_of_7) -> None:
    last_offsets = {7: last_of_7}
    shortcut = _pass(tmp_path_factory.mktemp("shortcut"), written, capacity, checkpoint, last_offsets)
    with monkeypatch.context() as patched:
        patched.setattr(OffsetMap, "latest_between", lambda self, first, last: -1)  # never 0: every batch walked
        walked = _pass(tmp_path_factory.mktemp("walked"), written, capacity, checkpoint, last_offsets)
    assert shortcut == walked
