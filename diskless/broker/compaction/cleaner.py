"""The log cleaner's shell: rewrites a compacted partition's rolled local segments, and the
broker's background task that runs it (Kafka's LogCleaner and its CleanerThreads).

A pass over one partition (`clean_partition` in cleaning.py, in a worker thread; the
decisions are policy.py's and rewrite.py's):

    1. build the offset map from the dirty section, in offset order, until it is full or the
       section ends: the pass covers [log start, map end)
    2. for each rolled segment starting below the map end, in offset order: write its cleaned
       copy, B.log.cleaned (hot_tier/swap.py), batch by batch; a segment nothing changes in is
       left alone
    3. back on the event loop, swap each cleaned copy in, in offset order (Log.replace_segment:
       crash-safe, indexes rebuilt), then record the map end in the partition's
       `cleaner-offset-checkpoint` file (written to a temporary name, fsynced, renamed)
    4. after the round, for each tiered compacted partition led here, the bucket is brought up
       to the cleaned copies (bucket.py) and the history no local copy holds is cleaned from
       the bucket (history.py)

Crash safety: a crash during 1 or 2 leaves only .cleaned files, deleted at the next open. A
crash during 3 leaves some segments cleaned and the others as they were, each whole; the
checkpoint still names the old start of the dirty section, so the next pass does it again.
A pass never removes the record the map names for a key (its newest), so superseded records
may go in any order; a tombstone, which hides the older records of its key below it, goes
only from a segment swapped after every segment below it: hence the offset order.

Reads and writes are paced by log.cleaner.io.max.bytes.per.second, shared by all passes
(Kafka's Throttler). A pass runs in a thread, not a process of its own: measured on 2 cores
(bench/compaction.py --produce), acks=all produce kept 0.92-1.07 of its rate during a pass in
a thread, and 0.69-0.83 with the pass in a worker process (niceness 10 or 19), which took a
whole core from the broker and its clients.

Only partitions this broker leads are cleaned; a pass whose segment was deleted meanwhile
(retention of compact,delete, DeleteRecords) or whose leader closed drops its cleaned copies.

What operators see (metrics.py reads it at scrape time, admin_http.py per partition): the
LogCleaner keeps, as Kafka's LogCleaner and LogCleanerManager do, each partition's dirty ratio
as of its last round, the figures of the passes of the last round that cleaned something
(Kafka's per-thread lastStats), when a round last ran, and the partitions whose pass failed
(Kafka's uncleanable partitions: skipped until they are no longer led here). A partition's
last cleaning is the time its checkpoint was written (the file's mtime): it survives a restart.
"""


from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from hot_tier import SegmentInfo
from hot_tier.swap import cleaned_path

from . import metrics
from .bucket import clean_bucket
from .cleaning import CleaningStopped, Throttler, clean_partition, segment_views
from .config import CleanerConfig, CompactionRules
from .history import HistoryMemo, clean_history
from .policy import ENTRY_BYTES, CleaningPlan, SegmentView, plan
from .rewrite import CleanStats

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "cleaner-offset-checkpoint"


class CleanablePartition(Protocol):
    """What the cleaner asks of a partition's leader (partition/leader.py)."""

    topic: str
    index: int

    @property
    def rules(self) -> object: ...
    @property
    def closed(self) -> bool: ...
    @property
    def dir(self) -> Path: ...
    @property
    def local_segments(self) -> tuple[SegmentInfo, ...]: ...
    @property
    def local_log_start_offset(self) -> int: ...
    @property
    def log_start_offset(self) -> int: ...
    @property
    def high_watermark(self) -> int: ...
    @property
    def cleanable_end_offset(self) -> int: ...
    @property
    def aborts_removable_below(self) -> int: ...
    def aborted_transactions(self, start_offset: int, end_offset: int) -> list[tuple[int, int, int]]: ...
    def producer_last_offsets(self) -> dict[int, int]: ...
    def replace_cleaned_segment(self, base_offset: int, size_bytes: int, removed_aborts: Sequence[int] = ()) -> bool: ...


@dataclass(frozen=True, slots=True)
class PassSummary:
    """One finished pass, as Kafka's CleanerStats reports it (LogCleaner's gauges read these)."""

    topic: str
    partition: int
    elapsed_s: float
    stats: CleanStats
    map_keys: int
    map_capacity: int

    @property
    def buffer_utilization(self) -> float:
        """Share of the offset map the pass filled (Kafka's OffsetMap.utilization)."""
        return self.map_keys / self.map_capacity if self.map_capacity else 0.0


def partition_cleaning(
    leader: CleanablePartition, now_ms: int, tombstone_horizon_ms: int | None = None
) -> tuple[CleaningPlan, list[SegmentInfo], list[SegmentView]] | None:
    """A compacted partition's cleanable range now (None for a partition that is not compacted
    or closed). Reads the first header of each rolled segment and the checkpoint file."""
    rules = getattr(leader.rules, "compaction", None)
    if rules is None or leader.closed:
        return None
    segments = list(leader.local_segments)
    views = segment_views(segments)
    cleaning = plan(
        views, checkpoint=read_checkpoint(leader.dir), log_start_offset=leader.local_log_start_offset,
        high_watermark=leader.cleanable_end_offset, rules=rules, now_ms=now_ms, tombstone_horizon_ms=tombstone_horizon_ms,
    )  # fmt: skip
    return cleaning, segments, views


def read_checkpoint(dir: Path) -> int | None:
    try:
        return int((dir / CHECKPOINT_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def last_cleaned_ms(dir: Path) -> int | None:
    """When the partition's last complete pass ended (its checkpoint was written), or None."""
    try:
        return (dir / CHECKPOINT_FILE).stat().st_mtime_ns // 1_000_000
    except OSError:
        return None


def write_checkpoint(dir: Path, offset: int) -> None:
    """The first dirty offset, atomically: a temporary file, fsynced, renamed over the old one."""
    temporary = dir / f"{CHECKPOINT_FILE}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, f"{offset}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, dir / CHECKPOINT_FILE)


class LogCleaner:
    """The broker's cleaner task: every log.cleaner.backoff.ms, the filthiest compacted partitions this broker leads, up to
    log.cleaner.threads at a time, each in a worker thread. Runs on the event loop; the
    partitions' logs are touched only there (the swap), the threads read rolled segments and
    write .cleaned files."""

    def __init__(self, config: CleanerConfig, leaders: Callable[[], Sequence[CleanablePartition]], clock: Callable[[], int]) -> None:
        self.config = config
        self._leaders = leaders
        self._clock = clock
        self._stop = threading.Event()
        self._throttle = Throttler(config.io_max_bytes_per_second, sleep=self._stop.wait)  # a stop ends a throttled wait
        self._horizons: dict[tuple[str, int], int | None] = {}
        self.passes = 0  # completed passes that swapped something in, for tests and metrics
        self.bucket_rewrites = 0  # bucket rewrites swapped in (bucket.py, history.py)
        self._history: dict[tuple[str, int], HistoryMemo | None] = {}  # history.py's, per partition led
        self.last_cleaned_ms: dict[tuple[str, int], int] = {}
        # What the metrics read (see the module header); only the event-loop task writes them.
        self.dirty_ratios: dict[tuple[str, int], float] = {}  # every compacted partition, as of the last round
        self.last_passes: list[PassSummary] = []  # the passes of the last round that cleaned something
        self.last_run_ms: int | None = None  # when the last round began (self._clock)
        self.uncleanable: dict[tuple[str, int], Path] = {}  # partition -> its log's directory
        self._wake = asyncio.Event()  # set by reconfigure: the backoff ends early

    def now_ms(self) -> int:
        return self._clock()

    def _map_capacity(self) -> int:
        """Keys one pass's offset map may hold: the dedupe buffer shared by the threads."""
        return self.config.dedupe_buffer_size // max(1, self.config.threads) // ENTRY_BYTES

    def reconfigure(self, config: CleanerConfig) -> None:
        """New log.cleaner.* values (dynamic broker configs): threads and the dedupe buffer apply
        from the next round, the I/O limit at once, and a round waiting out the old backoff
        starts now (Kafka restarts its cleaner threads)."""
        if config == self.config:
            return
        self.config = config
        self._throttle.bytes_per_second = config.io_max_bytes_per_second
        self._wake.set()

    def log_dirs(self) -> set[Path]:
        """The directories holding the logs of the partitions led here (one: the data dir's logs)."""
        return {leader.dir.parent for leader in self._leaders() if not leader.closed}

    async def run(self) -> None:
        metrics.LOG_CLEANER.attach(self)
        try:
            while True:
                try:
                    await self.clean_once()
                except Exception:
                    log.exception("log cleaner round failed; retrying after log.cleaner.backoff.ms")
                self._wake.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.config.backoff_ms / 1000)
        finally:
            metrics.LOG_CLEANER.detach(self)
            self._stop.set()  # passes still in their threads stop at the next batch

    def plans(self, now_ms: int) -> list[tuple[CleanablePartition, CleaningPlan, list[SegmentInfo], list[SegmentView]]]:
        """The partitions to clean now, filthiest first (forced ones before the others). Records
        every compacted partition's dirty ratio; skips the uncleanable ones."""
        found = []
        ratios: dict[tuple[str, int], float] = {}
        led: set[tuple[str, int]] = set()
        for leader in self._leaders():
            key = (leader.topic, leader.index)
            led.add(key)
            planned = partition_cleaning(leader, now_ms, self._horizons.get(key))
            if planned is None:
                continue
            cleaning, segments, views = planned
            ratios[key] = cleaning.dirty_ratio
            if key not in self.uncleanable and cleaning.should_clean(leader.rules.compaction):  # type: ignore[attr-defined]
                found.append((leader, cleaning, segments, views))
        self.dirty_ratios = ratios
        self.uncleanable = {key: dir for key, dir in self.uncleanable.items() if key in led}
        found.sort(key=lambda item: (not item[1].forced, -item[1].dirty_ratio))
        return found

    async def clean_once(self) -> int:
        """One round: clean up to log.cleaner.threads partitions; return how many were cleaned."""
        self.last_run_ms = now_ms = self._clock()
        chosen = self.plans(now_ms)[: max(1, self.config.threads)]
        if not chosen:
            await self.clean_buckets()
            return 0
        results = await asyncio.gather(*(self._clean(*item) for item in chosen), return_exceptions=True)
        summaries = []
        for (leader, *_), outcome in zip(chosen, results):
            if isinstance(outcome, PassSummary):
                summaries.append(outcome)
            elif isinstance(outcome, BaseException) and not isinstance(outcome, CleaningStopped):
                # Kafka's markPartitionUncleanable: not tried again while this broker leads it.
                self.uncleanable[(leader.topic, leader.index)] = leader.dir.parent
                log.error("%s-%d: cleaning failed, the partition is uncleanable until it moves: %r", leader.topic, leader.index, outcome)
        if summaries:
            self.last_passes = summaries
        await self.clean_buckets()
        return len(summaries)

    async def clean_buckets(self) -> int:
        """Bring the bucket copies of the tiered compacted partitions led here up to their
        cleaned local copies (bucket.py); return how many rewrites were swapped in."""
        swapped = 0
        led = {(leader.topic, leader.index) for leader in self._leaders()}
        self._history = {key: memo for key, memo in self._history.items() if key in led}
        for leader in self._leaders():
            if leader.closed or not getattr(leader, "tiered", False) or getattr(leader.rules, "compaction", None) is None:
                continue
            if (leader.topic, leader.index) in self.uncleanable:
                continue
            key = (leader.topic, leader.index)
            try:
                swapped += await clean_bucket(leader, self._clock())
            except Exception as exc:  # the bucket keeps the segments as they are; the next round tries again
                log.warning("%s-%d: compacting the bucket failed: %r", leader.topic, leader.index, exc)
            try:
                done, self._history[key] = await clean_history(
                    leader, self._clock(), self._history.get(key), map_capacity=self._map_capacity(), throttle=self._throttle, stop=self._stop
                )  # fmt: skip
                swapped += done
            except CleaningStopped:
                raise
            except Exception as exc:  # tried again once as much is written again, not every round
                self._history[key] = HistoryMemo.failed(leader)
                log.warning("%s-%d: compacting the bucket's history failed: %r", leader.topic, leader.index, exc)
        self.bucket_rewrites += swapped
        return swapped

    async def _clean(
        self, leader: CleanablePartition, cleaning: CleaningPlan, segments: list[SegmentInfo], views: list[SegmentView]
    ) -> PassSummary | None:
        """One pass over `leader`; its summary, or None when the leader closed meanwhile."""
        rules: CompactionRules = leader.rules.compaction  # type: ignore[attr-defined]
        now_ms = self._clock()
        started = time.monotonic()
        map_capacity = self._map_capacity()
        result = await asyncio.to_thread(
            clean_partition, segments, views, cleaning, rules, map_capacity=map_capacity,
            producer_last_offsets=leader.producer_last_offsets(), now_ms=now_ms, throttle=self._throttle, stop=self._stop,
            aborted=leader.aborted_transactions(0, cleaning.first_uncleanable_offset), log_start_offset=leader.log_start_offset,
            aborts_removable_below=leader.aborts_removable_below,
        )  # fmt: skip
        swapped = 0
        for base_offset, size_bytes in result.cleaned:  # in offset order: see the module header
            if leader.closed:
                for base, _ in result.cleaned:
                    cleaned_path(leader.dir, base).unlink(missing_ok=True)
                return None
            if leader.replace_cleaned_segment(base_offset, size_bytes, result.removed_aborts.get(base_offset, ())):
                swapped += 1
            else:
                break  # a segment went meanwhile: the checkpoint stays, the next pass redoes it
        else:
            write_checkpoint(leader.dir, result.end_offset)
            self._horizons[(leader.topic, leader.index)] = result.tombstone_horizon_ms
        for base, _ in result.cleaned[swapped:]:
            cleaned_path(leader.dir, base).unlink(missing_ok=True)
        stats = result.stats
        elapsed_s = time.monotonic() - started
        self.passes += 1
        self.last_cleaned_ms[(leader.topic, leader.index)] = now_ms
        metrics.observe_cleaning(leader.topic, stats)
        log.info(
            "%s-%d: cleaned offsets up to %d (dirty ratio %.2f, %d keys): %d of %d segment(s) rewritten, "
            "%d of %d records kept, %d tombstone(s) dropped, %d -> %d bytes in %.2f s",
            leader.topic, leader.index, result.end_offset, cleaning.dirty_ratio, result.map_keys, swapped,
            len(result.cleaned), stats.records_kept, stats.records_read, stats.tombstones_dropped,
            stats.bytes_read, stats.bytes_written, elapsed_s,
        )  # fmt: skip
        return PassSummary(leader.topic, leader.index, elapsed_s, stats, result.map_keys, map_capacity)
