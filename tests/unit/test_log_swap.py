"""Swapping a cleaned copy in for a rolled segment (hot_tier/swap.py, Log.replace_segment): the
cleaned offsets are served with their gaps, indexes are rebuilt, and a crash at either side of
the commit point leaves the old segment or the new one, whole."""

from __future__ import annotations

import os
from pathlib import Path

from hot_tier import Log, LogConfig
from hot_tier.records import Record, decode_batches, encode_batch, iter_headers
from hot_tier.swap import COMPACTED_FILE, cleaned_path, write_cleaned

CONFIG = LogConfig(segment_bytes=1200, index_interval_bytes=150)


def fill(dir: Path) -> Log:
    """Three rolled segments of single-record batches (keys k0..k4), and an active one."""
    log = Log.open(dir, CONFIG, 0)
    for i in range(40):
        log.append(bytearray(encode_batch([Record(0, 1000 + i, b"k%d" % (i % 5), b"v%d" % i)])), 0)
    log.roll(0)
    return log


def read_offsets(log: Log, start: int = 0) -> list[int]:
    offsets, offset = [], start
    while offset < log.log_end_offset:
        chunk = log.read(offset, 1 << 20)
        if chunk is None:
            break
        headers = list(iter_headers(chunk.read_bytes()))
        offsets += [r.offset for b in decode_batches(chunk.read_bytes()) for r in b.records]
        offset = headers[-1].next_offset
    return offsets


def keep_even(log: Log, base_offset: int) -> int:
    """Write the cleaned copy of segment `base_offset` keeping its even offsets; its old size."""
    segment = next(s for s in log.segments if s.base_offset == base_offset)
    data = segment.log_path.read_bytes()
    kept = [data[h.position : h.position + h.size_bytes] for h in iter_headers(data) if h.base_offset % 2 == 0]
    write_cleaned(cleaned_path(log.dir, base_offset), kept)
    return segment.size_bytes


def test_replace_segment_serves_the_gaps_and_rebuilds_indexes(tmp_path: Path) -> None:
    log = fill(tmp_path)
    first, second = log.segments[0], log.segments[1]
    assert log.replace_segment(first.base_offset, keep_even(log, first.base_offset)) is not None
    kept = [o for o in range(first.base_offset, second.base_offset) if o % 2 == 0]
    assert read_offsets(log) == kept + list(range(second.base_offset, log.log_end_offset))
    assert log.read(1, 1 << 20).read_bytes()[:8] == (2).to_bytes(8, "big")  # an offset in a gap reads from the next batch
    assert (tmp_path / COMPACTED_FILE).exists() and first.index_path.stat().st_size > 0
    log.close()
    reopened = Log.open(tmp_path, CONFIG, 0)
    assert read_offsets(reopened) == kept + list(range(second.base_offset, reopened.log_end_offset))


def test_an_emptied_segment_is_skipped_by_reads(tmp_path: Path) -> None:
    log = fill(tmp_path)
    first, second = log.segments[0], log.segments[1]
    write_cleaned(cleaned_path(log.dir, 0), [])
    assert log.replace_segment(0, first.size_bytes).size_bytes == 0
    assert read_offsets(log) == list(range(second.base_offset, log.log_end_offset))


def test_a_segment_that_changed_meanwhile_is_not_replaced(tmp_path: Path) -> None:
    log = fill(tmp_path)
    size = keep_even(log, 0)
    assert log.replace_segment(0, size + 1) is None
    assert not cleaned_path(log.dir, 0).exists()
    active = log.segments[-1].base_offset
    assert log.replace_segment(active, 0) is None


def test_crash_before_the_commit_point_keeps_the_old_segment(tmp_path: Path) -> None:
    log = fill(tmp_path)
    before = read_offsets(log)
    keep_even(log, 0)
    log.close()  # the broker dies with B.log.cleaned written
    reopened = Log.open(tmp_path, CONFIG, 0)
    assert read_offsets(reopened) == before
    assert not cleaned_path(tmp_path, 0).exists()


def test_crash_after_the_commit_point_finishes_the_swap(tmp_path: Path) -> None:
    log = fill(tmp_path)
    second = log.segments[1].base_offset
    keep_even(log, 0)
    (tmp_path / COMPACTED_FILE).touch()
    # The first step of the swap done, the rest not: B.log.swap beside the old B.log and indexes.
    os.replace(cleaned_path(tmp_path, 0), cleaned_path(tmp_path, 0).with_name(f"{0:020d}.log.swap"))
    reopened = Log.open(tmp_path, CONFIG, 0)
    assert read_offsets(reopened) == [o for o in range(second) if o % 2 == 0] + list(range(second, reopened.log_end_offset))
    assert sorted(p.name for p in tmp_path.iterdir() if ".swap" in p.name or ".cleaned" in p.name) == []


def test_gaps_are_damage_in_a_log_that_was_never_compacted(tmp_path: Path) -> None:
    log = fill(tmp_path)
    log.close()
    # The same bytes as a cleaned copy but put in place by hand, without the compacted marker:
    # recovery of the last-but-active segments trusts their index; a full rescan cuts at the gap.
    first = Log.open(tmp_path, CONFIG, 0).segments[0]
    data = first.log_path.read_bytes()
    kept = b"".join(data[h.position : h.position + h.size_bytes] for h in iter_headers(data) if h.base_offset != 3)
    first.log_path.write_bytes(kept)
    first.index_path.unlink()
    reopened = Log.open(tmp_path, CONFIG, 0)
    assert read_offsets(reopened) == [0, 1, 2]
