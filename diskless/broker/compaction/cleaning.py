"""One cleaning pass over a compacted partition's segments, in a worker thread: the offset
map built from the dirty section, then a cleaned copy (`B.log.cleaned`, hot_tier/swap.py) of
each segment the map changes (steps 1 and 2 of cleaner.py's module header). It touches
nothing but the files it writes; what it decides is policy.py's and rewrite.py's. Reads and
writes are paced by a Throttler shared by every pass (log.cleaner.io.max.bytes.per.second).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hot_tier import SegmentInfo
from hot_tier.files import pread_exact
from hot_tier.records import HEADER_BYTES, BatchHeader, CorruptBatch, iter_record_keys, peek_size, read_header
from hot_tier.scan import first_timestamp
from hot_tier.swap import cleaned_path

from .config import CompactionRules
from .policy import CleaningPlan, OffsetMap, SegmentView
from .rewrite import CleanStats, DeleteHorizons, TransactionMarkers, clean_batch, copy_with

READ_CHUNK_BYTES = 4 * 2**20


class CleaningStopped(Exception):
    """The broker is stopping: the pass ends, its cleaned copies are left for the next open."""


class CorruptSegment(Exception):
    def __init__(self, path: Path, position: int, reason: str) -> None:
        super().__init__(f"{path}: batch at position {position}: {reason}")
        self.path = path
        self.position = position


class Throttler:
    """At most `bytes_per_second` over all threads (Kafka's Throttler): callers report bytes
    and sleep when they ran ahead. Thread-safe."""

    def __init__(self, bytes_per_second: float, clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self.bytes_per_second = bytes_per_second
        self._clock, self._sleep = clock, sleep
        self._lock = threading.Lock()
        self._start = clock()
        self._bytes = 0.0

    def pause_s(self, now_s: float, bytes_done: float) -> float:
        """How long to sleep so that `bytes_done` since the window opened fit the rate."""
        return max(0.0, bytes_done / self.bytes_per_second - (now_s - self._start))

    def account(self, size_bytes: int) -> None:
        if self.bytes_per_second >= 1e300:
            return
        with self._lock:
            self._bytes += size_bytes
            now = self._clock()
            pause = self.pause_s(now, self._bytes)
            if now - self._start > 1.0 and pause == 0.0:  # a new window once caught up
                self._start, self._bytes = now, 0.0
        if pause > 0:
            self._sleep(pause)


@dataclass(slots=True)
class PassResult:
    end_offset: int  # the new checkpoint
    cleaned: list[tuple[int, int]] = field(default_factory=list)  # (base offset, size of the old segment) to swap
    stats: CleanStats = field(default_factory=CleanStats)
    tombstone_horizon_ms: int | None = None  # when the first tombstone or marker kept may go
    map_keys: int = 0
    # Base offset of a cleaned copy -> the ABORT markers it no longer holds (rewrite.TransactionMarkers).
    removed_aborts: dict[int, list[int]] = field(default_factory=dict)


def segment_views(segments: Sequence[SegmentInfo]) -> list[SegmentView]:
    """The policy's view of the local segments (one 61-byte read per non-empty segment)."""
    views = []
    for i, s in enumerate(segments):
        end = segments[i + 1].base_offset if i + 1 < len(segments) else s.next_offset
        first = -1
        if s.size_bytes >= HEADER_BYTES and not s.is_active:
            try:
                first = first_timestamp(s.log_path)
            except OSError:
                first = -1
        views.append(SegmentView(s.base_offset, end, s.size_bytes, s.max_timestamp, first, s.is_active))
    return views


def iter_batches(path: Path, size_bytes: int, throttle: Throttler, stop: threading.Event) -> Iterator[tuple[BatchHeader, bytes]]:
    """Every batch of a rolled segment's first `size_bytes`, CRC checked, read in large chunks."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        buffer, buffer_start, position = b"", 0, 0
        while position < size_bytes:
            if stop.is_set():
                raise CleaningStopped()
            relative = position - buffer_start
            if len(buffer) - relative < HEADER_BYTES:
                buffer = pread_exact(fd, min(READ_CHUNK_BYTES, size_bytes - position), position)
                buffer_start, relative = position, 0
                throttle.account(len(buffer))
            size = peek_size(buffer, relative)
            if size is None or size < HEADER_BYTES or position + size > size_bytes:
                raise CorruptSegment(path, position, "torn or impossible batch length")
            if len(buffer) - relative < size:
                buffer = pread_exact(fd, min(max(READ_CHUNK_BYTES, size), size_bytes - position), position)
                buffer_start, relative = position, 0
                throttle.account(len(buffer))
            data = buffer[relative : relative + size]
            try:
                header = read_header(data, 0, check_crc=True)
            except CorruptBatch as exc:
                raise CorruptSegment(path, position, str(exc)) from exc
            yield header, data
            position += size
    finally:
        os.close(fd)


class AbortedBatches:
    """Which transactional data batches belong to aborted transactions: (producer id, first
    offset, abort marker's offset) of each, as the partition's transactions (txn/) know them."""

    def __init__(self, aborted: Sequence[tuple[int, int, int]]) -> None:
        self._by_producer: dict[int, list[tuple[int, int]]] = {}
        for producer_id, first_offset, last_offset in aborted:
            self._by_producer.setdefault(producer_id, []).append((first_offset, last_offset))

    def __contains__(self, header: BatchHeader) -> bool:
        ranges = self._by_producer.get(header.producer_id)
        return ranges is not None and any(first <= header.base_offset <= last for first, last in ranges)


def passes_through(header: BatchHeader, aborted: AbortedBatches) -> bool:
    """Batches the offset map does not take: transaction markers, and data of aborted
    transactions (they supersede nothing; rewrite.TransactionMarkers says what becomes of them)."""
    return header.is_control or (header.is_transactional and header in aborted)


def clean_partition(
    segments: Sequence[SegmentInfo], views: Sequence[SegmentView], cleaning: CleaningPlan, rules: CompactionRules, *,
    map_capacity: int, producer_last_offsets: dict[int, int], now_ms: int, throttle: Throttler, stop: threading.Event,
    aborted: Sequence[tuple[int, int, int]] = (),
    rewrite_below: int | None = None,
    log_start_offset: int | None = None,
    aborts_removable_below: int = 2**63,
) -> PassResult:
    """Steps 1 and 2 of a pass (see the module header); runs in a worker thread, touches no
    state but the .cleaned files it writes. `cleaning` stops at the last stable offset: open
    transactions are not cleaned; records of aborted ones supersede nothing. With
    `rewrite_below`, only segments starting below it get cleaned copies (the map is built
    over the whole dirty section all the same): history.py cleans the bucket's part alone.
    `log_start_offset` is the partition's (bucket included): a pass whose first segment starts
    there sees every transaction whole (rewrite.TransactionMarkers), whose ABORT markers it
    may remove below `aborts_removable_below`."""
    aborted_batches = AbortedBatches(aborted)
    first_dirty, uncleanable = cleaning.first_dirty_offset, cleaning.first_uncleanable_offset
    offset_map = OffsetMap(map_capacity, first_dirty)
    for segment, view in zip(segments, views):
        if view.active or view.base_offset >= uncleanable or view.end_offset <= first_dirty:
            continue
        for header, data in iter_batches(segment.log_path, segment.size_bytes, throttle, stop):
            if header.last_offset < first_dirty or passes_through(header, aborted_batches):
                continue
            if header.base_offset >= uncleanable:
                break
            pairs = ((offset, key) for offset, key, _ in iter_record_keys(data, header) if first_dirty <= offset < uncleanable)
            if not offset_map.add_records(pairs):
                break
            offset_map.cover_to(min(header.next_offset, uncleanable))
        if offset_map.full:
            break
        offset_map.cover_to(min(view.end_offset, uncleanable))
    end_offset = offset_map.end_offset if offset_map.full else uncleanable
    offset_map.end_offset = end_offset
    result = PassResult(end_offset, map_keys=len(offset_map))
    horizons = DeleteHorizons(now_ms, rules.delete_retention_ms)
    from_log_start = log_start_offset is not None and bool(segments) and segments[0].base_offset <= log_start_offset
    markers = TransactionMarkers(from_log_start=from_log_start, aborts_removable_below=aborts_removable_below)
    for segment, view in zip(segments, views):
        if view.active or view.base_offset >= end_offset:  # policy.segments_to_clean
            continue
        if rewrite_below is not None and view.base_offset >= rewrite_below:
            continue
        removed_before = len(markers.removed_aborts)
        if _write_cleaned(segment, offset_map, producer_last_offsets, horizons, result.stats, throttle, stop, aborted_batches, markers):
            result.cleaned.append((segment.base_offset, segment.size_bytes))
            if len(markers.removed_aborts) > removed_before:
                result.removed_aborts[segment.base_offset] = markers.removed_aborts[removed_before:]
    result.tombstone_horizon_ms = horizons.earliest_ms
    return result


def _write_cleaned(
    segment: SegmentInfo, offset_map: OffsetMap, producer_last_offsets: dict[int, int], horizons: DeleteHorizons,
    stats: CleanStats, throttle: Throttler, stop: threading.Event, aborted: AbortedBatches, markers: TransactionMarkers,
) -> bool:
    """Write segment's cleaned copy; True if it differs from the segment (else no copy is left)."""
    path = cleaned_path(segment.log_path.parent, segment.base_offset)
    changed = False
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        pending: list[bytes] = []
        pending_bytes = 0
        for header, data in iter_batches(segment.log_path, segment.size_bytes, throttle, stop):
            retain_empty = header.has_producer_id and producer_last_offsets.get(header.producer_id) == header.last_offset
            if header.is_control:
                cleaned: bytes | None = markers.marker(data, header, horizons)
                stats.count_passed(data, cleaned, header)
            elif header.is_transactional and header in aborted:
                cleaned = copy_with([], header, delete_horizon_ms=header.delete_horizon_ms) if retain_empty else None
                stats.count_passed(data, cleaned, header)
            else:
                cleaned = clean_batch(data, header, offset_map, horizons=horizons, retain_empty=retain_empty, stats=stats)
            if header.is_transactional and not header.is_control and cleaned is not None:
                markers.kept_data(header)
            if cleaned is not data:
                changed = True
            if cleaned is not None:
                pending.append(cleaned)
                pending_bytes += len(cleaned)
                if pending_bytes >= READ_CHUNK_BYTES:
                    _write_chunks(fd, pending)
                    throttle.account(pending_bytes)
                    pending, pending_bytes = [], 0
        if changed:
            _write_chunks(fd, pending)
            throttle.account(pending_bytes)
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    os.close(fd)
    if not changed:
        path.unlink(missing_ok=True)
    return changed


def _write_chunks(fd: int, chunks: list[bytes]) -> None:
    data = b"".join(chunks)
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
