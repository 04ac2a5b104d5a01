"""A partition's log cut back (a stale tail dropped, a torn write) takes the producer snapshots
above the cut with it: the tail rebuilt there may hold other batches."""

from __future__ import annotations

from pathlib import Path

from diskless.broker.partition.producer_snapshots import drop_snapshots_above


def snapshot(dir: Path, offset: int) -> Path:
    path = dir / f"{offset:020d}.snapshot"
    path.write_bytes(b"state")
    return path


def test_snapshots_above_the_cut_go_and_the_others_stay(tmp_path: Path) -> None:
    kept = [snapshot(tmp_path, 0), snapshot(tmp_path, 100)]
    gone = [snapshot(tmp_path, 101), snapshot(tmp_path, 5000)]
    (tmp_path / "00000000000000000000.log").write_bytes(b"")
    assert drop_snapshots_above(tmp_path, 100) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([p.name for p in kept] + ["00000000000000000000.log"])
    assert not any(p.exists() for p in gone)
    assert drop_snapshots_above(tmp_path, -1) == 2  # the whole log was cut: none stays
    assert [p.name for p in tmp_path.iterdir()] == ["00000000000000000000.log"]


def test_snapshots_outside_the_local_log_are_not_loaded(tmp_path: Path) -> None:
    """A log cut whole and restarted higher (the bucket holds more than the disk did): the
    snapshots of its old history describe state whose batches up to the new start are not
    here to replay, and go; one inside the log is loaded."""
    from hot_tier import Log, LogConfig
    from hot_tier.records import Record, encode_batch

    from diskless.broker.partition.producer_snapshots import load_producer_state, write_producer_snapshot

    log = Log.open(tmp_path / "p", LogConfig(), 0, log_start_offset=None)
    for sequence in range(3):
        info = log.append(bytearray(encode_batch([Record(0, 0, None, b"v")], producer_id=7, producer_epoch=0, base_sequence=sequence)), 0)
    state, _, _ = load_producer_state(log, 10**9)
    write_producer_snapshot(log.dir, state)  # at 3
    log.truncate_fully_and_start_at(50)
    log.append(bytearray(encode_batch([Record(0, 0, None, b"v")], producer_id=9, producer_epoch=0, base_sequence=0)), 0)
    state, _, _ = load_producer_state(log, 10**9)
    assert state.producer_ids() == [9]  # producer 7's old state is not taken for the current one
    assert not (log.dir / f"{3:020d}.snapshot").exists()
    write_producer_snapshot(log.dir, state)  # at 51, inside the log
    state, _, _ = load_producer_state(log, 10**9)
    assert state.producer_ids() == [9] and state.last_entry(9).last_offset == 50 and info.last_offset == 2
    log.close()
