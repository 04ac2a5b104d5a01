"""Kafka's LeaderEpochFileCache.endOffsetFor answers from a partition's leader epoch history
(partition/epoch_history.py; the history read from the bucket: test_offset_for_leader_epoch.py)."""

from __future__ import annotations

from diskless.broker.partition.epoch_history import end_offset_for

STARTS = [(1, 0), (3, 100), (4, 100), (7, 250)]


def test_the_latest_epoch_ends_at_the_log_end() -> None:
    assert end_offset_for(STARTS, 7, 300) == (7, 300)


def test_an_earlier_epoch_ends_where_the_next_known_leadership_began() -> None:
    assert end_offset_for(STARTS, 1, 300) == (1, 100)
    assert end_offset_for(STARTS, 2, 300) == (1, 100)  # unknown epoch: the largest known below it
    assert end_offset_for(STARTS, 3, 300) == (3, 100)  # a leadership that wrote nothing
    assert end_offset_for(STARTS, 5, 300) == (4, 250)


def test_epochs_outside_the_history_are_undefined_or_the_first_start() -> None:
    assert end_offset_for(STARTS, 8, 300) == (-1, -1)
    assert end_offset_for(STARTS, -1, 300) == (-1, -1)
    assert end_offset_for([(3, 40), (5, 90)], 2, 120) == (2, 40)  # below every known one: Kafka's answer
    assert end_offset_for([], 2, 120) == (-1, -1)
