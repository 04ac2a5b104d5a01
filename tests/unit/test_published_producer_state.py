"""The producer state a leader publishes with a segment (in the metadata store), and how a
leader on another broker starts from it: each producer's last batch, exactly; used only when
it lies inside the local log and no local snapshot is newer."""

from __future__ import annotations

from pathlib import Path

from hot_tier import Log, LogConfig
from hot_tier.records import Record, encode_batch

from diskless.broker.partition.producer_snapshots import (
    load_producer_state,
    published_state,
    snapshot_after,
    to_published,
    write_producer_snapshot,
)
from diskless.broker.producer_state import Duplicate, OutOfOrderSequence, ProducerStateManager
from metadata import ProducerSnapshot, ProducerStateEntry

EXPIRY = 10**12


def batch(producer_id: int, sequence: int, count: int = 1) -> bytearray:
    return bytearray(encode_batch([Record(i, 0, None, b"v") for i in range(count)], producer_id=producer_id, producer_epoch=2, base_sequence=sequence))


def test_published_form_keeps_each_producers_last_batch() -> None:
    state = ProducerStateManager(EXPIRY)
    state.record(7, 2, 0, 2, 0, 2, 100)
    state.record(7, 2, 3, 4, 3, 4, 110)
    state.record(9, 0, 2**31 - 2, 0, 5, 7, 120)  # sequences wrapped past Int32 max
    state.update_map_end_offset(8)
    published = to_published(state)
    assert published == ProducerSnapshot(8, (ProducerStateEntry(7, 2, 4, 4, 1, 110), ProducerStateEntry(9, 0, 0, 7, 2, 120)))
    loaded = published_state(published, EXPIRY)
    assert loaded.map_end_offset == 8
    assert loaded.check(7, 2, 3, 4, 0) == Duplicate(3, 4, 110)
    assert loaded.check(9, 0, 2**31 - 2, 0, 0) == Duplicate(5, 7, 120)
    assert isinstance(loaded.check(7, 2, 6, 6, 0), OutOfOrderSequence)  # 5 comes next
    assert loaded.check(7, 2, 5, 5, 0).__class__.__name__ == "Append"


def test_a_leader_whose_log_begins_at_the_bucket_end_starts_from_the_published_state(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "p", LogConfig(), 0, log_start_offset=None)
    log.truncate_fully_and_start_at(100)  # everything below is in the bucket
    log.append(batch(9, 0), 0)  # the write-ahead tail: another producer
    published = published_state(ProducerSnapshot(100, (ProducerStateEntry(7, 2, 41, 99, 1, 5),)), EXPIRY)
    state, _, _ = load_producer_state(log, EXPIRY, published)
    assert state.producer_ids() == [7, 9]
    assert state.check(7, 2, 40, 41, 0) == Duplicate(98, 99, 5)
    # Outside the local log it describes other batches than the log's: not used.
    state, _, _ = load_producer_state(log, EXPIRY, published_state(ProducerSnapshot(50, ()), EXPIRY))
    assert state.producer_ids() == [9]
    log.close()


def test_the_snapshot_published_is_the_first_durable_one_after_the_segment(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "p", LogConfig(), 0, log_start_offset=None)
    state = ProducerStateManager(EXPIRY)
    for sequence in range(6):
        info = log.append(batch(7, sequence), 0)
        state.record(7, 2, sequence, sequence, info.first_offset, info.last_offset, 0)
        if sequence in (1, 3, 5):
            write_producer_snapshot(log.dir, state, keep_above=0)  # at 2, 4, 6: all kept above the bucket's end
    assert sorted(p.name for p in log.dir.glob("*.snapshot")) == [f"{o:020d}.snapshot" for o in (2, 4, 6)]
    assert snapshot_after(log.dir, 3, 6, EXPIRY).map_end_offset == 4
    assert snapshot_after(log.dir, 3, 3, EXPIRY) is None  # 4 holds a batch not yet durable
    log.append(batch(7, 6), 0)
    state.record(7, 2, 6, 6, 6, 6, 0)
    write_producer_snapshot(log.dir, state, keep_above=5)  # the bucket now ends at 5: 2 and 4 go, being neither above it nor among the newest two
    assert sorted(p.name for p in log.dir.glob("*.snapshot")) == [f"{o:020d}.snapshot" for o in (6, 7)]
    log.close()
