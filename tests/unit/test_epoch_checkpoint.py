"""The leader-epoch checkpoint: the epochs this broker took a partition at, in Kafka's text
layout, read back exactly; a torn or foreign file reads as absent (the cautious answer)."""

from __future__ import annotations

from pathlib import Path

from diskless.broker.partition.epoch_checkpoint import ENTRIES_KEPT, FILE_NAME, last_leader_epoch, record_leader_epoch


def test_absent_then_each_epoch_taken_is_the_last(tmp_path: Path) -> None:
    assert last_leader_epoch(tmp_path) is None
    record_leader_epoch(tmp_path, 3, 0)
    record_leader_epoch(tmp_path, 4, 120)
    assert last_leader_epoch(tmp_path) == 4
    assert (tmp_path / FILE_NAME).read_text() == "0\n2\n3 0\n4 120\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [FILE_NAME]  # no temporary file left


def test_retaking_an_epoch_replaces_it_and_drops_later_ones(tmp_path: Path) -> None:
    for epoch, offset in [(1, 0), (2, 10), (5, 30)]:
        record_leader_epoch(tmp_path, epoch, offset)
    record_leader_epoch(tmp_path, 2, 12)  # an open at epoch 2 tried again
    assert (tmp_path / FILE_NAME).read_text() == "0\n2\n1 0\n2 12\n"


def test_only_the_newest_entries_are_kept(tmp_path: Path) -> None:
    for epoch in range(ENTRIES_KEPT + 5):
        record_leader_epoch(tmp_path, epoch, epoch * 100)
    lines = (tmp_path / FILE_NAME).read_text().splitlines()
    assert lines[:2] == ["0", str(ENTRIES_KEPT)]
    assert lines[2:] == [f"{e} {e * 100}" for e in range(5, ENTRIES_KEPT + 5)]


def test_a_torn_or_foreign_file_reads_as_absent(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    for text in ["", "0\n2\n3 0\n", "1\n1\n3 0\n", "0\n1\nthree 0\n", "garbage"]:
        path.write_text(text)
        assert last_leader_epoch(tmp_path) is None, text
