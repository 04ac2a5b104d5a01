"""A broker that leads a partition again after another broker may have led it meanwhile drops
its local copies of what that leader uploaded.

Its local log may hold, at those offsets, its own batches that never became durable (acks=1
while the bucket was slow): their producers sent them again to the other leader, which wrote
other records there and uploaded them. Only the tail above the bucket's end used to be cut, so
the local copies below it were served in place of the acknowledged records."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from diskless.broker.partition.leader import _drop_copies_another_leader_replaced
from hot_tier import Log, LogConfig
from hot_tier.records import Record, encode_batch


def local_log(path: Path, start: int, end: int) -> Log:
    log = Log.open(path, LogConfig(segment_bytes=1024), start, log_start_offset=None)
    if start:
        log.truncate_fully_and_start_at(start)
    for _ in range(start, end):
        log.append(bytearray(encode_batch([Record(0, 0, None, b"v" * 100)])), 0, leader_epoch=5)
    return log


def bucket(*segments: tuple[int, int, int]) -> SimpleNamespace:
    """(base offset, last offset, leader epoch of the upload) per segment."""
    rows = [SimpleNamespace(base_offset=b, last_offset=e, leader_epoch=epoch) for b, e, epoch in segments]
    return SimpleNamespace(segments=rows, end_offset=rows[-1].last_offset + 1 if rows else 0)


def test_local_copies_from_another_leaders_first_segment_go(tmp_path: Path) -> None:
    log = local_log(tmp_path / "t-0", 0, 30)
    # This broker led at epoch 5 and uploaded [0, 10); epoch 6 was another broker's, which
    # uploaded [10, 25): the local copies of 10-29 may be this broker's unacknowledged batches.
    assert _drop_copies_another_leader_replaced(log, bucket((0, 9, 5), (10, 24, 6)), 5, "t", 0) == 10
    assert (log.log_start_offset, log.log_end_offset) == (0, 10)
    log.close()


def test_nothing_goes_when_every_segment_is_this_brokers_or_above_the_local_log(tmp_path: Path) -> None:
    log = local_log(tmp_path / "t-0", 0, 20)
    assert _drop_copies_another_leader_replaced(log, bucket((0, 9, 4), (10, 14, 5)), 5, "t", 0) == 20
    assert _drop_copies_another_leader_replaced(log, bucket((0, 19, 5), (20, 29, 6)), 5, "t", 0) == 20  # a controlled hand-over
    assert (log.log_start_offset, log.log_end_offset) == (0, 20)
    log.close()


def test_a_local_log_wholly_above_the_first_such_segment_goes_whole(tmp_path: Path) -> None:
    log = local_log(tmp_path / "t-0", 12, 30)
    assert _drop_copies_another_leader_replaced(log, bucket((0, 9, 5), (10, 24, 7)), 5, "t", 0) == 10
    assert (log.log_start_offset, log.log_end_offset) == (25, 25)  # continues at the bucket's end
    log.close()


def test_without_a_checkpoint_every_segment_may_be_another_leaders(tmp_path: Path) -> None:
    log = local_log(tmp_path / "t-0", 0, 20)
    assert _drop_copies_another_leader_replaced(log, bucket((5, 14, 1)), None, "t", 0) == 5
    assert log.log_end_offset == 5
    log.close()
