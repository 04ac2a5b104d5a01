"""Segments hold descriptors only while used: the process-wide LRU (hot_tier/open_files.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from hot_tier import Log, LogConfig
from hot_tier.open_files import OPEN_SEGMENTS
from hot_tier.records import Record, encode_batch


def batch(value_bytes: int = 32) -> bytearray:
    return bytearray(encode_batch([Record(0, 1000, None, b"v" * value_bytes)]))


def open_fds_under(dir: Path) -> int:
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith(str(dir)):
            count += 1
    return count


@pytest.fixture
def small_lru() -> Iterator[int]:
    before = OPEN_SEGMENTS.max_segments
    OPEN_SEGMENTS.max_segments = 4
    try:
        yield 4
    finally:
        OPEN_SEGMENTS.max_segments = before


def test_many_partitions_hold_a_bounded_number_of_descriptors(tmp_path: Path, small_lru: int) -> None:
    config = LogConfig(segment_bytes=1024, index_interval_bytes=1)
    logs = [Log.open(tmp_path / f"t-{i}", config, 0) for i in range(40)]
    for log in logs:
        for _ in range(30):  # several segments each, with index entries
            log.append(batch(), 0)
    assert all(len(log.segments) > 2 for log in logs)
    assert open_fds_under(tmp_path) <= 3 * small_lru
    for log in logs:  # reads everywhere, then everything again after a close and reopen
        piece = log.read(0, 10_000, min_one_batch=True, max_offset=None)
        assert piece is not None and piece.read_bytes()
    assert open_fds_under(tmp_path) <= 3 * small_lru
    ends = [log.log_end_offset for log in logs]
    for log in logs:
        log.close()
    assert open_fds_under(tmp_path) == 0
    reopened = [Log.open(tmp_path / f"t-{i}", config, 0) for i in range(40)]
    assert [log.log_end_offset for log in reopened] == ends
    assert open_fds_under(tmp_path) <= 3 * small_lru
    for log in reopened:
        log.close()


def test_a_file_slice_stays_readable_after_its_segment_lets_go_of_the_file(tmp_path: Path, small_lru: int) -> None:
    config = LogConfig(segment_bytes=1024)
    first = Log.open(tmp_path / "a-0", config, 0)
    first.append(batch(), 0)
    piece = first.read(0, 10_000, min_one_batch=True, max_offset=None)
    assert piece is not None
    expected = piece.read_bytes()
    others = [Log.open(tmp_path / f"b-{i}", config, 0) for i in range(2 * small_lru)]  # evicts `first`
    assert piece.read_bytes() == expected
    first.append(batch(), 0)  # reopens its file, appends where it left off
    assert first.log_end_offset == 2
    for log in [first, *others]:
        log.close()
