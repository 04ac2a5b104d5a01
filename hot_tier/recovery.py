"""Opening a partition directory after a clean shutdown or a crash (kill -9 at any byte).

What the Log guarantees so that recovery can be short:

- every segment but the last was fsynced (.log and indexes) before the next one was created;
- close() fsyncs everything and then creates CLEAN_SHUTDOWN_FILE; opening removes it first,
  so a crash after the open forces a full check of the tail next time.

What loading does, segment by segment in base-offset order:

- segments but the last, and the last after a clean shutdown: trusted up to their last offset
  index entry; the batches after it (about index.interval.bytes of them) are validated to
  find the next offset;
- the last segment otherwise: validated from its last index entry below `recovery_point` (the
  offset up to which the broker knows data was flushed), or from byte 0 when it is unknown;
- a segment whose index is missing or inconsistent: validated from byte 0, index rebuilt;
- validation reads every batch with its CRC and checks that offsets continue (only that they increase in a compacted log, swap.py); the first torn
  or corrupt batch cuts its segment there and every later segment is deleted;
- a log_start_offset from metadata above everything on disk empties the log and starts a new
  segment there (Kafka's LogLoader does the same).

Nothing is served until this is done; Log.open is the only caller.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .config import LogConfig
from .errors import CorruptLog
from .files import fsync_dir
from .segment import TRUST_ALL, LogSegment, segment_paths
from .swap import complete_swaps, is_compacted

CLEAN_SHUTDOWN_FILE = ".clean_shutdown"
_SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex)$")


@dataclass(frozen=True, slots=True)
class LoadedLog:
    segments: list[LogSegment]
    log_start_offset: int
    truncated_bytes: int  # bytes cut off torn or corrupt tails
    deleted_segments: int  # segments dropped after a cut, or below a later log start offset
    clean_shutdown: bool


def _scan_dir(dir: Path) -> tuple[list[int], list[Path]]:
    """Base offsets that have a .log, and index files whose .log is gone (to delete)."""
    logs: set[int] = set()
    indexes: list[tuple[int, Path]] = []
    for path in dir.iterdir():
        match = _SEGMENT_FILE.match(path.name)
        if match is None:
            continue
        base = int(match.group(1))
        if match.group(2) == "log":
            logs.add(base)
        else:
            indexes.append((base, path))
    return sorted(logs), [path for base, path in indexes if base not in logs]


def _new_segment(dir: Path, base_offset: int, config: LogConfig, now_ms: int, *, lazy: bool = False) -> LogSegment:
    return LogSegment.create(
        dir, base_offset, index_interval_bytes=config.index_interval_bytes,
        segment_index_bytes=config.segment_index_bytes, now_ms=now_ms, lazy=lazy,
    )  # fmt: skip


def load_log(
    dir: Path, config: LogConfig, now_ms: int, *, log_start_offset: int | None, recovery_point: int | None
) -> LoadedLog:
    dir.mkdir(parents=True, exist_ok=True)
    marker = dir / CLEAN_SHUTDOWN_FILE
    clean = marker.exists()
    if clean:
        marker.unlink()
    complete_swaps(dir)  # a cleaned segment whose swap was committed replaces the old one (swap.py)
    offset_gaps = is_compacted(dir)
    bases, orphans = _scan_dir(dir)
    for path in orphans:
        path.unlink()
    segments: list[LogSegment] = []
    truncated = deleted = 0
    try:
        for i, base in enumerate(bases):
            if truncated:  # after a cut, later segments would leave a hole in the offsets
                for path in segment_paths(dir, base):
                    path.unlink(missing_ok=True)
                deleted += 1
                continue
            segment = LogSegment.load(
                dir, base, index_interval_bytes=config.index_interval_bytes,
                segment_index_bytes=config.segment_index_bytes, now_ms=now_ms,
            )  # fmt: skip
            segments.append(segment)
            if i < len(bases) - 1 or clean:
                trusted_below: int | None = TRUST_ALL
            else:
                trusted_below = recovery_point
            truncated += segment.recover(trusted_below, offset_gaps=offset_gaps)
            if len(segments) > 1 and segment.base_offset < segments[-2].next_offset:
                raise CorruptLog(
                    segment.log_path,
                    f"segment starts at {segment.base_offset}, inside the previous one"
                    f" (which ends at {segments[-2].next_offset})",
                )
            first_timestamp = segment.first_batch_max_timestamp()
            if first_timestamp >= 0:
                # Kafka ages a loaded segment by its first batch's timestamp, not from the restart.
                segment.roll_base_ms = min(first_timestamp, now_ms)
            elif segment.size_bytes:
                segment.roll_base_ms = now_ms
    except BaseException:
        for segment in segments:
            segment.close()
        raise

    if not segments:  # its file is made at first use: until then, a restart finds the same empty log
        segments.append(_new_segment(dir, log_start_offset or 0, config, now_ms, lazy=True))
    log_end_offset = segments[-1].next_offset
    if log_start_offset is not None and log_start_offset > log_end_offset:
        for segment in segments:
            segment.delete()
        deleted += len(segments)
        segments = [_new_segment(dir, log_start_offset, config, now_ms)]
    start = segments[0].base_offset if log_start_offset is None else max(log_start_offset, segments[0].base_offset)
    if bases and (not clean or truncated):
        segments[-1].flush()  # what recovery kept or cut may be only in the page cache (a new log holds nothing)
    if bases:
        fsync_dir(dir)  # the marker's removal, the cuts and the deletions above (a log without segments: nothing to guard)
    return LoadedLog(segments, start, truncated, deleted, clean)
