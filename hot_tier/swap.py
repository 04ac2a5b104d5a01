"""Swapping a cleaned copy of a rolled segment in for the segment (the log cleaner's output),
so that a crash at any point leaves either the old segment or the new one, never a mix.

Files, for the segment with base offset B (20 digits, as the segment's own files):

    B.log.cleaned   the cleaned copy while it is written: incomplete, deleted at open
    B.log.swap      the cleaned copy, complete and fsynced: the commit point of the swap

The swap (`commit_swap`, called by Log.replace_segment) after the cleaner wrote and fsynced
B.log.cleaned (with `write_cleaned`):

    1. rename B.log.cleaned -> B.log.swap, fsync the directory       (committed)
    2. unlink B.index and B.timeindex (their entries are the old file's positions)
    3. rename B.log.swap -> B.log (atomic replace), fsync the directory
    4. the segment is loaded again: a segment without indexes is validated from byte 0 and
       its indexes rebuilt (recovery.py), the same code that rebuilds them after a crash

Kafka's LogCleaner does the same with `.cleaned` and `.swap` suffixes (LogSegment.
changeFileSuffixes, LogLoader's swap-file recovery). `complete_swaps` runs first at every
open: a crash before step 1 leaves B.log.cleaned, which it deletes (the old segment stays);
a crash after step 1 leaves B.log.swap, and it redoes steps 2 and 3 (the cleaned copy wins).
The cleaned copy keeps the segment's base offset and the offsets of every batch it keeps, so
the offsets the log serves never change meaning; only records cleaned away disappear.

Only the partition's owning task calls these (through Log); no locks.
"""

from __future__ import annotations

import os
from pathlib import Path

from .files import fsync_dir, write_all
from .segment import segment_paths

CLEANED_SUFFIX = ".cleaned"
COMPACTED_FILE = ".compacted"  # in a log directory: some segment was swapped; offsets may have gaps
SWAP_SUFFIX = ".swap"


def cleaned_path(dir: Path, base_offset: int) -> Path:
    """Where the cleaner writes the cleaned copy of segment `base_offset`."""
    return segment_paths(dir, base_offset)[0].with_name(f"{base_offset:020d}.log{CLEANED_SUFFIX}")


def write_cleaned(path: Path, chunks: list[bytes] | list[bytearray]) -> int:
    """Write the cleaned copy (whole batches, in offset order) and fsync it; return its size."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    size = 0
    try:
        for chunk in chunks:
            write_all(fd, chunk)
            size += len(chunk)
        os.fsync(fd)
    finally:
        os.close(fd)
    return size


def commit_swap(dir: Path, base_offset: int) -> None:
    """Steps 1 to 3 above: B.log.cleaned becomes B.log, the old indexes are gone. Before the
    first swap of a log, COMPACTED_FILE is made durable: from then on recovery accepts gaps
    between batches (in other logs a gap is damage to a base offset, which no CRC covers)."""
    marker = dir / COMPACTED_FILE
    if not marker.exists():
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
        fsync_dir(dir)
    cleaned = cleaned_path(dir, base_offset)
    swap = cleaned.with_name(f"{base_offset:020d}.log{SWAP_SUFFIX}")
    os.replace(cleaned, swap)
    fsync_dir(dir)
    _finish(dir, base_offset, swap)


def _finish(dir: Path, base_offset: int, swap: Path) -> None:
    log_path, index_path, timeindex_path = segment_paths(dir, base_offset)
    index_path.unlink(missing_ok=True)
    timeindex_path.unlink(missing_ok=True)
    os.replace(swap, log_path)
    fsync_dir(dir)


def is_compacted(dir: Path) -> bool:
    return (dir / COMPACTED_FILE).exists()


def complete_swaps(dir: Path) -> int:
    """At open, before the segments are read: drop incomplete cleaned copies, finish committed
    swaps. Returns the number of swaps finished."""
    finished = 0
    for path in sorted(dir.iterdir()):
        name = path.name
        if name.endswith(".log" + CLEANED_SUFFIX):
            path.unlink()
        elif name.endswith(".log" + SWAP_SUFFIX):
            base = name.split(".", 1)[0]
            if len(base) == 20 and base.isdigit():
                _finish(dir, int(base), path)
                finished += 1
    return finished
