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
