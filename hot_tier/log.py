"""One partition's local log: segments in base-offset order, the last one active.

Kafka's UnifiedLog/LocalLog, reduced to the local tier: append with offset assignment,
reads as FileSlices of whole batches, lookups by offset and by time, rolling, local retention,
DeleteRecords, truncation, flushing and recovery on open (recovery.py). Roll, retention and
flush decisions are pure functions in policy.py; per-segment files and indexes live in
segment.py.

Offsets: log_start_offset <= every readable offset < log_end_offset. log_start_offset is the
start of the *local* log; with tiering the partition's log start offset lives in metadata and
is passed back to `open`. high_watermark is the log end offset (one broker, acks on append).

Durability: appends are written, not fsynced. fsync happens when flush.messages or flush.ms
say so, on roll (so every segment but the active one is durable) and on close, which also
leaves a clean-shutdown marker. `recovery_point` is the offset below which everything is
known to be on disk; a broker may checkpoint it and pass it to `open` to shorten recovery.
Deleted segments are unlinked at once: file.delete.delay.ms is not needed because every
FileSlice holds its file open (POSIX keeps unlinked files readable).

Only the partition's owning task may call a Log: it takes no locks. FileSlices it returns
may be used from any task or thread.
"""

from __future__ import annotations

import os
import shutil
from bisect import bisect_right
from pathlib import Path

from .config import LogConfig
from .errors import LogClosed, OffsetOutOfRange
from .files import FileSlice, fsync_dir
from .index import NO_TIMESTAMP, TimestampOffset
from .info import AppendInfo, DeletedSegment, DeleteReason, SegmentInfo
from .policy import RetentionView, roll_reason, select_retention, should_flush
from .records.errors import CorruptBatch, TruncatedBatch
from .records.header import (
    HEADER_BYTES,
    LOG_OVERHEAD,
    BatchHeader,
    read_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)
from .recovery import CLEAN_SHUTDOWN_FILE, load_log
from .segment import TRUST_ALL, AppendedBatch, LogSegment
from .swap import cleaned_path, commit_swap


class Log:
    """A partition's local log. Build it with `Log.open`."""

    def __init__(self, dir: Path, config: LogConfig, segments: list[LogSegment], log_start_offset: int, now_ms: int):
        self._dir = dir
        self._config = config
        self._segments = segments
        self._bases = [segment.base_offset for segment in segments]
        self._log_start_offset = log_start_offset
        self._high_watermark = segments[-1].next_offset
        self._recovery_point = segments[-1].next_offset
        self._last_flush_ms = now_ms
        self._closed = False

    @classmethod
    def open(
        cls,
        dir: Path | str,
        config: LogConfig,
        now_ms: int,
        *,
        log_start_offset: int | None = None,
        recovery_point: int | None = None,
    ) -> Log:
        """Open (creating if needed) and recover the log in `dir`.

        `log_start_offset` comes from metadata when known (DeleteRecords, tiering); below the
        first local segment it is raised to it, above the local log end it empties the log
        and starts it there. `recovery_point`, if known, is the offset below which data was
        flushed; without it and without a clean shutdown the whole tail segment is checked.
        """
        dir = Path(dir)
        loaded = load_log(dir, config, now_ms, log_start_offset=log_start_offset, recovery_point=recovery_point)
        log = cls(dir, config, loaded.segments, loaded.log_start_offset, now_ms)
        log._delete_oldest(log._below_log_start_offset())
        return log

    # -- state -----------------------------------------------------------------------------

    @property
    def dir(self) -> Path:
        return self._dir

    @property
    def config(self) -> LogConfig:
        return self._config

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def size_bytes(self) -> int:
        return sum(segment.size_bytes for segment in self._segments)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def active_base_offset(self) -> int:
        """Base offset of the active segment: it changes exactly when the log rolls."""
        return self._segments[-1].base_offset

    @property
    def segments(self) -> tuple[SegmentInfo, ...]:
        active = self._segments[-1]
        return tuple(
            SegmentInfo(
                s.base_offset, s.next_offset, s.size_bytes, s.max_timestamp,
                s.log_path, s.index_path, s.timeindex_path, s is active,
            )  # fmt: skip
            for s in self._segments
        )

    def update_config(self, config: LogConfig) -> None:
        """New topic configs. index.interval.bytes applies at once, segment.index.bytes to new
        segments, the rest at the next decision that reads them."""
        self._config = config
        for segment in self._segments:
            segment.index_interval_bytes = config.index_interval_bytes

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosed(self._dir)

    # -- append ----------------------------------------------------------------------------

    def append(
        self,
        records: bytearray | memoryview,
        now_ms: int,
        *,
        log_append_time: bool = False,
        leader_epoch: int | None = None,
        keep_offsets: bool = False,
    ) -> AppendInfo:
        """Append the whole batches in `records`, as a producer sent them.

        Every batch is validated (length, magic, CRC, record count) before anything changes;
        an invalid one raises CorruptBatch and nothing is written. Then base offsets (and, with
        `log_append_time`, the LogAppendTime timestamp and CRC; with `leader_epoch`, the
        partition leader epoch, outside the CRC) are written into `records` in place, the
        active segment is rolled if it must be, and the bytes go to it in one write.

        `keep_offsets`: the batches keep the offsets they carry (a log rebuilt from durable
        copies, which a compacted log's gaps may precede); each must start at or after the end
        of the one before, else CorruptBatch and nothing is written.
        """
        if self._closed:
            raise LogClosed(self._dir)
        buf = memoryview(records)
        if buf.readonly:
            raise TypeError("records must be writable (a bytearray): offsets are assigned in place")
        total = len(buf)
        if total == 0:
            raise TruncatedBatch(0, HEADER_BYTES, 0)
        headers: list[BatchHeader] = []
        position = 0
        while position < total:
            header = read_header(buf, position, check_crc=True)
            if header.records_count <= 0 or header.records_count != header.last_offset_delta + 1:
                raise CorruptBatch(
                    position,
                    f"records count {header.records_count} does not match last offset delta {header.last_offset_delta}",
                )
            headers.append(header)
            position += header.batch_length + LOG_OVERHEAD

        active = self._segments[-1]
        first_offset = offset = active.next_offset
        max_timestamp = NO_TIMESTAMP
        batches: list[AppendedBatch] = []
        for header in headers:
            if keep_offsets:
                if header.base_offset < offset:
                    raise CorruptBatch(header.position, f"batch at offset {header.base_offset} is below the log end {offset}")
                if header.position == 0:
                    first_offset = header.base_offset
                offset = header.base_offset
            set_base_offset(buf, header.position, offset)
            if leader_epoch is not None:
                set_partition_leader_epoch(buf, header.position, leader_epoch)
            if log_append_time:
                set_log_append_time(buf, header, now_ms)
                timestamp = now_ms
            else:
                timestamp = header.max_timestamp
            last_offset = offset + header.last_offset_delta
            batches.append(AppendedBatch(header.position, offset, last_offset, timestamp))
            offset = last_offset + 1
            if timestamp > max_timestamp:
                max_timestamp = timestamp

        config = self._config
        reason = roll_reason(
            size_bytes=active.size_bytes,
            incoming_bytes=total,
            segment_bytes=config.segment_bytes,
            roll_base_ms=active.roll_base_ms,
            now_ms=now_ms,
            segment_ms=config.segment_ms,
            index_room=active.index_room(),
            index_entries_needed=active.index_entries_needed(batches),
            relative_last_offset=offset - 1 - active.base_offset,
        )
        if reason is not None:
            active = self._roll(now_ms)
        active.append(buf, batches, now_ms)
        self._high_watermark = offset
        if offset - self._recovery_point >= config.flush_messages or now_ms - self._last_flush_ms >= config.flush_ms:
            self.maybe_flush(now_ms)
        return AppendInfo(
            first_offset, offset - 1, max_timestamp, now_ms if log_append_time else -1, self._log_start_offset, total
        )

    # -- reads -----------------------------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int, *, min_one_batch: bool = True, max_offset: int | None = None
    ) -> FileSlice | None:
        """Whole batches from the one holding `offset`, from one segment.

        At most `max_bytes`, unless `min_one_batch` and the first batch alone is larger: then
        that batch (KIP-74). No batch holding `max_offset` (the high watermark a fetch may see)
        or later. None when there is nothing to send: `offset` is the log end offset or
        `max_offset`, or the first batch does not fit and `min_one_batch` is false. Raises
        OffsetOutOfRange outside [log_start_offset, log_end_offset].
        """
        self._check_open()
        log_end_offset = self.log_end_offset
        if not self._log_start_offset <= offset <= log_end_offset:
            raise OffsetOutOfRange(offset, self._log_start_offset, log_end_offset)
        limit = log_end_offset if max_offset is None else min(max_offset, log_end_offset)
        if offset >= limit:
            return None
        segments = self._segments
        i = bisect_right(self._bases, offset) - 1
        # Past segments that end at or below `offset`, and past segments the cleaner emptied
        # (a compacted log, swap.py: their next_offset is their base offset, above `offset`).
        while segments[i].next_offset <= offset or (segments[i].size_bytes == 0 and i < len(segments) - 1):
            i += 1
        segment = segments[i]
        return segment.read(
            offset, max_bytes, min_one_batch=min_one_batch,
            max_offset=limit if limit < segment.next_offset else None,
        )  # fmt: skip

    def offset_for_timestamp(self, timestamp_ms: int) -> TimestampOffset | None:
        """The first record at or after log_start_offset with timestamp >= `timestamp_ms`
        (ListOffsets by timestamp), or None if there is none. Decodes one batch only."""
        self._check_open()
        for segment in self._segments:
            if segment.max_timestamp >= timestamp_ms:
                found = segment.find_offset_by_timestamp(timestamp_ms, self._log_start_offset)
                if found is not None:
                    return found
        return None

    def max_timestamp_offset(self) -> TimestampOffset | None:
        """The largest timestamp and the first record holding it (ListOffsets MAX_TIMESTAMP,
        KIP-734), or None if the log holds no timestamp."""
        self._check_open()
        best: LogSegment | None = None
        for segment in self._segments:
            if segment.max_timestamp >= 0 and (best is None or segment.max_timestamp > best.max_timestamp):
                best = segment
        return best.max_timestamp_offset() if best is not None else None

    # -- rolling and flushing --------------------------------------------------------------

    def roll(self, now_ms: int) -> SegmentInfo:
        """Close the active segment to appends and start a new one at the log end offset; the
        rolled segment is fsynced first. A no-op when the active segment is empty."""
        self._check_open()
        self._roll(now_ms)
        return self.segments[-1]

    def maybe_roll(self, now_ms: int) -> bool:
        """Roll if segment.ms (or a full index) says so with nothing incoming: the broker calls
        this periodically so an idle partition's segment is still rolled (and tiered)."""
        self._check_open()
        active = self._segments[-1]
        reason = roll_reason(
            size_bytes=active.size_bytes, incoming_bytes=0, segment_bytes=self._config.segment_bytes,
            roll_base_ms=active.roll_base_ms, now_ms=now_ms, segment_ms=self._config.segment_ms,
            index_room=active.index_room(), index_entries_needed=0, relative_last_offset=0,
        )  # fmt: skip
        if reason is None:
            return False
        self._roll(now_ms)
        return True

    def _roll(self, now_ms: int) -> LogSegment:
        active = self._segments[-1]
        if active.size_bytes == 0:
            return active
        active.mark_rolled(now_ms)
        active.flush()
        segment = LogSegment.create(
            self._dir, active.next_offset, index_interval_bytes=self._config.index_interval_bytes,
            segment_index_bytes=self._config.segment_index_bytes, now_ms=now_ms,
        )  # fmt: skip
        fsync_dir(self._dir)
        self._segments.append(segment)
        self._bases.append(segment.base_offset)
        self._recovery_point = segment.base_offset
        self._last_flush_ms = now_ms
        return segment

    def flush(self) -> None:
        """fsync the active segment (the others already are): recovery_point = log_end_offset."""
        self._check_open()
        self._segments[-1].flush()
        self._recovery_point = self.log_end_offset

    def maybe_flush(self, now_ms: int) -> bool:
        """Flush if flush.messages or flush.ms says so. Append calls it; so may a timer."""
        self._check_open()
        if not should_flush(
            unflushed_messages=self.log_end_offset - self._recovery_point,
            ms_since_flush=now_ms - self._last_flush_ms,
            flush_messages=self._config.flush_messages,
            flush_ms=self._config.flush_ms,
        ):
            return False
        self.flush()
        self._last_flush_ms = now_ms
        return True

    # -- deletion --------------------------------------------------------------------------

    def _delete_oldest(self, reasons: list[DeleteReason]) -> list[DeletedSegment]:
        count = len(reasons)
        if count == 0:
            return []
        assert count < len(self._segments), "the active segment is never deleted"
        doomed = self._segments[:count]
        del self._segments[:count]
        del self._bases[:count]
        self._log_start_offset = max(self._log_start_offset, self._segments[0].base_offset)
        deleted = []
        for segment, reason in zip(doomed, reasons):
            deleted.append(
                DeletedSegment(segment.base_offset, segment.next_offset, segment.size_bytes, segment.max_timestamp, reason)
            )
            segment.delete()
        return deleted

    def _below_log_start_offset(self) -> list[DeleteReason]:
        count = 0
        while count < len(self._segments) - 1 and self._segments[count + 1].base_offset <= self._log_start_offset:
            count += 1
        return [DeleteReason.LOG_START_OFFSET] * count

    def delete_retention_segments(self, now_ms: int) -> list[DeletedSegment]:
        """Delete the oldest segments that retention.ms, retention.bytes or the log start
        offset let go, never the active one; log_start_offset moves to the first kept one."""
        self._check_open()
        views = [
            RetentionView(
                segment.base_offset,
                segment.size_bytes,
                segment.max_timestamp if segment.max_timestamp >= 0 else segment.last_modified_ms(),
            )
            for segment in self._segments
        ]
        reasons = select_retention(
            views,
            retention_ms=self._config.retention_ms,
            retention_bytes=self._config.retention_bytes,
            log_start_offset=self._log_start_offset,
            high_watermark=self._high_watermark,
            now_ms=now_ms,
        )
        return self._delete_oldest(reasons)

    def delete_segments_to(self, offset: int) -> list[DeletedSegment]:
        """Delete the oldest non-active segments whose next_offset <= `offset` (they are in the
        bucket now); log_start_offset, the start of the local log, moves past them."""
        self._check_open()
        limit = min(offset, self._high_watermark)
        count = 0
        while count < len(self._segments) - 1 and self._segments[count].next_offset <= limit:
            count += 1
        return self._delete_oldest([DeleteReason.TIERED] * count)

    def advance_log_start_offset(self, offset: int) -> list[DeletedSegment]:
        """DeleteRecords: raise log_start_offset to `offset` (reads below it are then out of
        range) and delete the whole segments below it (also those a roll has since pushed
        below it). It never moves back; past the high watermark it raises OffsetOutOfRange,
        as in Kafka."""
        self._check_open()
        if offset > self._high_watermark:
            raise OffsetOutOfRange(offset, self._log_start_offset, self.log_end_offset)
        self._log_start_offset = max(self._log_start_offset, offset)
        return self._delete_oldest(self._below_log_start_offset())

    # -- truncation ------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Drop every batch holding `offset` or later: later segments whole, the segment that
        holds it at the batch boundary (a batch `offset` falls inside goes entirely, and the
        log end offset becomes its base offset). Returns whether anything was dropped.
        FileSlices over the dropped bytes must not be used afterwards."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset >= self.log_end_offset:
            return False
        if offset < self._segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        while len(self._segments) > 1 and self._segments[-1].base_offset > offset:
            self._segments.pop().delete()  # newest first: a crash leaves a consistent prefix
            self._bases.pop()
        self._segments[-1].truncate_to(offset)
        log_end_offset = self.log_end_offset
        self._log_start_offset = min(self._log_start_offset, log_end_offset)
        self._high_watermark = min(self._high_watermark, log_end_offset)
        self._recovery_point = min(self._recovery_point, log_end_offset)
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start an empty log at `offset` (log start = end = offset)."""
        self._check_open()
        created_ms = self._segments[-1].created_ms  # no clock here; created_ms is informational
        for segment in reversed(self._segments):
            segment.delete()
        segment = LogSegment.create(
            self._dir, offset, index_interval_bytes=self._config.index_interval_bytes,
            segment_index_bytes=self._config.segment_index_bytes, now_ms=created_ms,
        )  # fmt: skip
        fsync_dir(self._dir)
        self._segments = [segment]
        self._bases = [offset]
        self._log_start_offset = self._high_watermark = self._recovery_point = offset

    # -- compaction ------------------------------------------------------------------------

    def replace_segment(self, base_offset: int, expected_size_bytes: int) -> SegmentInfo | None:
        """Swap in the cleaned copy the log cleaner wrote (and fsynced) at
        swap.cleaned_path(dir, base_offset) for the rolled segment `base_offset`, crash-safe
        (swap.py), and load it with rebuilt indexes. The cleaned copy keeps the base offset and
        the offsets of the batches it keeps.

        Returns None, deleting the cleaned copy, if the segment is gone, active, or no longer
        `expected_size_bytes` long (retention or DeleteRecords got there first).
        """
        self._check_open()
        i = bisect_right(self._bases, base_offset) - 1
        if i < 0 or i >= len(self._segments) - 1 or self._bases[i] != base_offset or self._segments[i].size_bytes != expected_size_bytes:
            cleaned_path(self._dir, base_offset).unlink(missing_ok=True)
            return None
        old = self._segments[i]
        commit_swap(self._dir, base_offset)
        old.retire()
        segment = LogSegment.load(
            self._dir, base_offset, index_interval_bytes=self._config.index_interval_bytes,
            segment_index_bytes=self._config.segment_index_bytes, now_ms=old.created_ms,
        )  # fmt: skip
        segment.recover(TRUST_ALL, offset_gaps=True)  # no indexes: validated from byte 0, indexes rebuilt
        segment.flush()
        segment.roll_base_ms, segment.rolled_ms = old.roll_base_ms, old.rolled_ms
        self._segments[i] = segment
        return self.segments[i]

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """fsync everything, close the files and leave the clean-shutdown marker."""
        if self._closed:
            return
        active = self._segments[-1]
        if active.size_bytes:  # an empty active segment has nothing to make durable
            active.append_final_time_entry()
            active.flush()
        for segment in self._segments:
            segment.close()
        self._closed = True
        if len(self._segments) == 1 and not active.size_bytes:
            return  # nothing for recovery to skip at the next open: no marker (and no fsyncs for it)
        marker = os.open(self._dir / CLEAN_SHUTDOWN_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.fsync(marker)
        finally:
            os.close(marker)
        fsync_dir(self._dir)

    def delete(self) -> None:
        """Close and remove the whole log directory (the partition is gone from this broker)."""
        if not self._closed:
            for segment in self._segments:
                segment.close()
            self._closed = True
        shutil.rmtree(self._dir, ignore_errors=True)

    def __repr__(self) -> str:
        return (
            f"Log({str(self._dir)!r}, log_start_offset={self._log_start_offset},"
            f" log_end_offset={self.log_end_offset}, segments={len(self._segments)})"
        )
