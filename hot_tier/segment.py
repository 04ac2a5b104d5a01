"""One segment of a partition's local log: `<base_offset:020d>.log`, `.index`, `.timeindex`.

Files (Kafka's LogSegment):

    <base_offset>.log        whole RecordBatch v2 batches back to back (records/header.py);
                             the first batch starts at base_offset, offsets are contiguous
    <base_offset>.index      offset index, 8-byte entries (index.py)
    <base_offset>.timeindex  time index, 12-byte entries (index.py)

Index entries follow Kafka's rule exactly: before appending a batch, if more than
index_interval_bytes were appended since the last entry (or since position 0), add
(batch last offset, batch position) to the offset index and (max timestamp so far, its
batch's last offset) to the time index. The same rule runs on append and on recovery, so a
rebuilt index is byte-for-byte the one that was written. Rolling or closing adds the final
time index entry (the segment's max timestamp), as Kafka's onBecomeInactiveSegment does.

Crash behaviour: append writes the batches with one write call, then their index entries,
and never fsyncs; flush() fsyncs all three files. After kill -9 the page cache keeps every
byte written; after a power loss any suffix written since the last flush may be lost or
torn, in any of the three files. `recover` rescans the part that may be unflushed, cuts the
.log at the first torn batch, bad CRC or offset discontinuity (in a compacted log, swap.py: an
offset going backwards), and rebuilds the index entries
past the last trusted one. The read path trusts only bytes below size_bytes, which counts
whole appended batches.

Descriptors: a segment holds no open file until it is used. Its `.log` is opened on the
first read or append and its `.index` / `.timeindex` only while it appends index entries;
a process-wide LRU (open_files.OPEN_SEGMENTS) makes the segment used least recently let go
of them when too many segments hold files, and they are opened again on next use. Rolling
lets go of the index files at once (a rolled segment never appends an entry again). The
files are written with plain write calls (no user-space buffer) and fsync works through any
descriptor of a file, so letting go of one loses nothing. Index files are read whole only when
the segment is loaded, and rewritten or cut by path.

Only the partition's owning task may call a LogSegment (no locks, not thread-safe). The
FileSlices it returns may go to any task or thread.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from .errors import CorruptIndex, CorruptLog, LogClosed
from .files import FileSlice, SegmentFile, open_segment_file, pread_exact, write_all
from .open_files import OPEN_SEGMENTS
from .index import INT32_MAX, NO_TIMESTAMP, OFFSET_ENTRY_BYTES, TIME_ENTRY_BYTES, OffsetIndex, TimeIndex, TimestampOffset
from .records.batch import decode_batch
from .records.errors import CorruptBatch
from .records.header import BatchHeader
from .scan import header_at, scan_batches, size_at

TRUST_ALL = 2**63  # recover(trusted_below=TRUST_ALL): every indexed batch is durable


class AppendedBatch(NamedTuple):
    """What a segment needs of one batch it appends, read from the batch's header after the
    Log assigned its offsets (and stamped LogAppendTime). `position` is in the appended buffer."""

    position: int
    base_offset: int
    last_offset: int
    max_timestamp: int

    @classmethod
    def of(cls, header: BatchHeader) -> AppendedBatch:
        return cls(header.position, header.base_offset, header.last_offset, header.max_timestamp)


def segment_paths(dir: Path, base_offset: int) -> tuple[Path, Path, Path]:
    stem = f"{base_offset:020d}"
    return dir / f"{stem}.log", dir / f"{stem}.index", dir / f"{stem}.timeindex"


class LogSegment:
    """A segment's three files and what they imply: next offset, size, max timestamp and the
    offset holding it, when it was created and rolled. Byte layout, crash behaviour and the
    one task allowed to call it: see the module header. Built by `create` or `load`."""

    def __init__(
        self,
        dir: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        segment_index_bytes: int,
        now_ms: int,
        new: bool,
        lazy: bool = False,
    ) -> None:
        self.base_offset = base_offset
        self.log_path, self.index_path, self.timeindex_path = segment_paths(dir, base_offset)
        self.index_interval_bytes = index_interval_bytes
        self.created_ms = now_ms
        self.rolled_ms: int | None = None
        # When the segment's age for segment.ms starts: the first append (see Log).
        self.roll_base_ms: int | None = None
        indexes_existed = self.index_path.exists() and self.timeindex_path.exists()
        self._closed = False
        self._file: SegmentFile | None = None  # opened on use, let go of by OPEN_SEGMENTS
        self._index_fd = -1  # O_WRONLY | O_APPEND, only while appending index entries
        self._timeindex_fd = -1
        # A new segment of an empty directory (a partition just made) creates its .log file at
        # its first use, as its index files: a topic of thousands of partitions need not make
        # thousands of files that may never be written (absent, it reads as an empty log).
        self._size = 0 if lazy else os.fstat(self.file.fileno()).st_size
        if new and self._size:
            raise CorruptLog(self.log_path, f"a new segment's file already holds {self._size} bytes")
        self.offset_index = OffsetIndex(base_offset, segment_index_bytes)
        self.time_index = TimeIndex(base_offset, segment_index_bytes)
        self._pending_index = bytearray()
        self._pending_timeindex = bytearray()
        self._next_offset = base_offset
        self._max_timestamp = NO_TIMESTAMP
        self._offset_of_max_timestamp = base_offset
        self._last_index_position = 0
        self.index_trusted = True
        if new:
            # The index files are created by their first entry (or the roll), not here: a topic
            # of thousands of partitions would create two files each that may never be used.
            # Stale ones (a base offset reused after a truncation) are emptied.
            for path in (self.index_path, self.timeindex_path):
                if path.exists():
                    _write_whole(path, b"")
        elif not indexes_existed:
            self.index_trusted = False
        else:
            try:
                self.offset_index = OffsetIndex.from_bytes(
                    base_offset, self.index_path.read_bytes(), segment_index_bytes, path=self.index_path
                )
                self.time_index = TimeIndex.from_bytes(
                    base_offset, self.timeindex_path.read_bytes(), segment_index_bytes, path=self.timeindex_path
                )
            except CorruptIndex:
                self.offset_index = OffsetIndex(base_offset, segment_index_bytes)
                self.time_index = TimeIndex(base_offset, segment_index_bytes)
                self.index_trusted = False

    @classmethod
    def create(
        cls, dir: Path, base_offset: int, *, index_interval_bytes: int, segment_index_bytes: int, now_ms: int,
        lazy: bool = False,
    ) -> LogSegment:
        """A new, empty segment: its .log file is created (at first use if `lazy`: the
        directory holds no segment), its index files by their first entry; stale index files
        are emptied."""
        return cls(
            dir, base_offset, index_interval_bytes=index_interval_bytes,
            segment_index_bytes=segment_index_bytes, now_ms=now_ms, new=True, lazy=lazy,
        )  # fmt: skip

    @classmethod
    def load(
        cls, dir: Path, base_offset: int, *, index_interval_bytes: int, segment_index_bytes: int, now_ms: int
    ) -> LogSegment:
        """An existing segment. Call `recover` before anything else: it sets next_offset."""
        return cls(
            dir, base_offset, index_interval_bytes=index_interval_bytes,
            segment_index_bytes=segment_index_bytes, now_ms=now_ms, new=False,
        )  # fmt: skip

    # -- state -----------------------------------------------------------------------------

    @property
    def next_offset(self) -> int:
        return self._next_offset

    @property
    def size_bytes(self) -> int:
        return self._size

    @property
    def max_timestamp(self) -> int:
        """The largest batch max_timestamp in the segment; -1 (NO_TIMESTAMP) if none."""
        return self._max_timestamp

    @property
    def offset_of_max_timestamp(self) -> int:
        """The last offset of the first batch that holds max_timestamp (Kafka's shallow offset)."""
        return self._offset_of_max_timestamp

    @property
    def file(self) -> SegmentFile:
        """The `.log` file, opened if this segment had let go of it. Call it just before use:
        a file kept across another segment's use may have been let go of (then it stays
        readable by whoever holds it, as a FileSlice does)."""
        file = self._file
        if file is None:
            if self._closed:
                raise LogClosed(self.log_path)
            file = self._file = open_segment_file(self.log_path)
        OPEN_SEGMENTS.used(self)
        return file

    def last_modified_ms(self) -> int:
        """The .log file's mtime (when it was created, if it has not been yet)."""
        try:
            return os.stat(self.log_path).st_mtime_ns // 1_000_000
        except FileNotFoundError:
            return self.created_ms

    def release_files(self) -> None:
        """Let go of the open files (OPEN_SEGMENTS calls this; they reopen on next use). The
        `.log` file object is dropped, not closed: FileSlices may still be sending from it."""
        self._file = None
        self._close_index_fds()

    def retire(self) -> None:
        """Its files were replaced by a cleaned copy (swap.py): forget them without closing
        or unlinking. FileSlices handed out keep reading the old bytes until they are done."""
        self._closed = True
        OPEN_SEGMENTS.forget(self)
        self._file = None
        self._close_index_fds()

    def _close_index_fds(self) -> None:
        for fd in (self._index_fd, self._timeindex_fd):
            if fd >= 0:
                os.close(fd)
        self._index_fd = self._timeindex_fd = -1

    def _index_fds(self) -> tuple[int, int]:
        """Descriptors to append index entries with, opened on first need."""
        if self._index_fd < 0 or self._timeindex_fd < 0:
            if self._closed:
                raise LogClosed(self.log_path)
            self.file  # noqa: B018 - registers the segment with OPEN_SEGMENTS before it holds more
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
            if self._index_fd < 0:
                self._index_fd = os.open(self.index_path, flags, 0o644)
            if self._timeindex_fd < 0:
                self._timeindex_fd = os.open(self.timeindex_path, flags, 0o644)
        else:
            OPEN_SEGMENTS.used(self)
        return self._index_fd, self._timeindex_fd

    def index_room(self) -> int:
        """How many more entry pairs the indexes take before one of them is full."""
        return min(self.offset_index.room, self.time_index.room)

    def index_entries_needed(self, batches: Sequence[AppendedBatch]) -> int:
        """How many entry pairs appending `batches` adds."""
        needed = 0
        last = self._last_index_position
        for batch in batches:
            position = self._size + batch.position
            if position - last > self.index_interval_bytes:
                needed += 1
                last = position
        return needed

    # -- append ----------------------------------------------------------------------------

    def append(self, buf: bytes | bytearray | memoryview, batches: Sequence[AppendedBatch], now_ms: int) -> None:
        """Append `buf`, which holds exactly the whole batches `batches` describe.

        One write call for the batches (no per-record work), then one for each index's new
        entries. If the write fails the file is cut back so no partial batch stays behind.
        """
        first, last = batches[0], batches[-1]
        # Gaps are a compacted log's (batches rebuilt keeping their offsets); going back never is.
        if first.base_offset < self._next_offset or last.last_offset - self.base_offset > INT32_MAX:
            raise ValueError(
                f"batches [{first.base_offset}, {last.last_offset}] do not follow segment"
                f" {self.base_offset} at {self._next_offset}"
            )
        fd = self.file.fileno()
        start = self._size
        try:
            write_all(fd, buf)
        except OSError:
            os.ftruncate(fd, start)
            raise
        track = self._track
        for batch in batches:
            track(start + batch.position, batch.last_offset, batch.max_timestamp)
        self._size = start + len(buf)
        self._next_offset = last.last_offset + 1
        if self.roll_base_ms is None:
            self.roll_base_ms = now_ms
        self._write_pending_index()

    def _track(self, position: int, last_offset: int, max_timestamp: int) -> None:
        """Kafka's per-batch bookkeeping in LogSegment.append and LogSegment.recover."""
        if max_timestamp > self._max_timestamp:
            self._max_timestamp = max_timestamp
            self._offset_of_max_timestamp = last_offset
        if position - self._last_index_position > self.index_interval_bytes:
            # A full index skips entries (lookups then scan further) rather than fail; the
            # Log rolls before an append could need more entries than are left.
            if self.offset_index.is_full or self.time_index.is_full:
                return
            self._pending_index += self.offset_index.append(last_offset, position)
            entry = self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
            if entry is not None:
                self._pending_timeindex += entry
            self._last_index_position = position

    def _write_pending_index(self) -> None:
        if not self._pending_index and not self._pending_timeindex:
            return
        index_fd, timeindex_fd = self._index_fds()
        if self._pending_index:
            write_all(index_fd, self._pending_index)
            self._pending_index.clear()
        if self._pending_timeindex:
            write_all(timeindex_fd, self._pending_timeindex)
            self._pending_timeindex.clear()

    def append_final_time_entry(self) -> None:
        """The segment's max timestamp into the time index's reserved last slot (roll, close)."""
        entry = self._final_time_entry()
        if entry is not None:
            write_all(self._index_fds()[1], entry)

    def _final_time_entry(self) -> bytes | None:
        if len(self.time_index) >= self.time_index.max_entries:  # segment.index.bytes < 12, or used
            return None
        return self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp, skip_full_check=True)

    def mark_rolled(self, now_ms: int) -> None:
        self._index_fds()  # a rolled segment has both index files, if only empty (uploads send them)
        self.append_final_time_entry()
        self.rolled_ms = now_ms
        # Flushed by the Log right after (fsync by path), never appended to again.
        self._close_index_fds()

    # -- reads -----------------------------------------------------------------------------

    def translate_offset(self, offset: int) -> BatchHeader | None:
        """The header of the first batch whose last offset is >= `offset`, or None.

        An index lookup, then a forward scan of 61-byte headers from that position.
        """
        fd = self.file.fileno()
        position = self.offset_index.lookup(offset).position
        while position < self._size:
            header = header_at(fd, position, self._size, self.log_path)
            if header.last_offset >= offset:
                return header
            position += header.size_bytes
        return None

    def _boundary_at_or_before(self, limit: int, start: int) -> int:
        """The last batch boundary <= `limit`, scanning 12-byte prefixes from `start` or from the
        last indexed batch below `limit`, whichever is later."""
        fd = self.file.fileno()
        position = max(start, self.offset_index.floor_position(limit))
        while position < self._size:
            size = size_at(fd, position, self._size, self.log_path)
            if position + size > limit:
                break
            position += size
        return position

    def read(self, offset: int, max_bytes: int, *, min_one_batch: bool, max_offset: int | None) -> FileSlice | None:
        """Whole batches from the one holding `offset`: at most `max_bytes` unless the first
        batch alone is larger and `min_one_batch` (KIP-74), and none holding `max_offset` or
        later. None if nothing qualifies."""
        first = self.translate_offset(offset)
        if first is None:
            return None
        start = first.position
        max_position = self._size
        if max_offset is not None and max_offset < self._next_offset:
            limit_batch = self.translate_offset(max_offset)
            if limit_batch is not None:
                max_position = limit_batch.position
        first_end = start + first.size_bytes
        if first_end > max_position:
            return None
        if first.size_bytes > max_bytes:
            return FileSlice(self.file, start, first.size_bytes) if min_one_batch else None
        limit = min(start + max_bytes, max_position)
        end = max_position if limit == max_position else self._boundary_at_or_before(limit, first_end)
        return FileSlice(self.file, start, end - start)

    def _decode(self, header: BatchHeader):
        data = pread_exact(self.file.fileno(), header.size_bytes, header.position)
        try:
            return decode_batch(data)
        except CorruptBatch as exc:
            raise CorruptLog(self.log_path, f"batch at position {header.position}: {exc.reason}") from exc

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> TimestampOffset | None:
        """The first record at or after `starting_offset` with timestamp >= `timestamp`.

        Kafka's LogSegment.findOffsetByTimestamp: the time index gives a starting point, batch
        headers are scanned to the first batch whose max timestamp is >= `timestamp`, and only
        that batch is decoded. Off the hot path.
        """
        if self._max_timestamp < timestamp:
            return None
        fd = self.file.fileno()
        indexed = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(indexed.offset, starting_offset)).position
        while position < self._size:
            header = header_at(fd, position, self._size, self.log_path)
            if header.max_timestamp >= timestamp and header.last_offset >= starting_offset:
                for record in self._decode(header).records:
                    if record.timestamp >= timestamp and record.offset >= starting_offset:
                        return TimestampOffset(record.timestamp, record.offset)
            position += header.size_bytes
        return None

    def max_timestamp_offset(self) -> TimestampOffset | None:
        """The first record holding the segment's max timestamp (ListOffsets MAX_TIMESTAMP)."""
        if self._max_timestamp < 0:
            return None
        fd = self.file.fileno()
        position = self.offset_index.lookup(self._offset_of_max_timestamp).position
        while position < self._size:
            header = header_at(fd, position, self._size, self.log_path)
            if header.max_timestamp == self._max_timestamp:
                for record in self._decode(header).records:
                    if record.timestamp == self._max_timestamp:
                        return TimestampOffset(record.timestamp, record.offset)
            position += header.size_bytes
        return None

    def first_batch_max_timestamp(self) -> int:
        if self._size == 0:
            return NO_TIMESTAMP
        return header_at(self.file.fileno(), 0, self._size, self.log_path).max_timestamp

    # -- recovery and truncation -----------------------------------------------------------

    def recover(self, trusted_below: int | None, *, offset_gaps: bool = False) -> int:
        """Validate every batch that may not be durable; return the bytes cut off the tail.

        Batches up to the last offset index entry below `trusted_below` are trusted (they were
        flushed with the index); from that entry on (from position 0 if `trusted_below` is
        None or the index is untrusted) each batch is checked with its CRC and for offset
        continuity (only increase with `offset_gaps`: a compacted log), and the indexes are rebuilt past the entry with the same rule as append.
        """
        self._pending_index.clear()
        self._pending_timeindex.clear()
        old_index = self.offset_index.to_bytes()
        old_timeindex = self.time_index.to_bytes()
        file_size = os.fstat(self.file.fileno()).st_size
        slot = -1
        if self.index_trusted and trusted_below is not None:
            slot = self.offset_index.slot_below(trusted_below)
            while slot >= 0 and self.offset_index.entry(slot).position >= file_size:
                slot -= 1
        valid_end = self._rescan(slot, file_size, offset_gaps)
        if valid_end is None:  # the trusted entry does not point at its batch: trust nothing
            valid_end = self._rescan(-1, file_size, offset_gaps)
            assert valid_end is not None
        if valid_end < file_size:
            os.ftruncate(self.file.fileno(), valid_end)
        self._size = valid_end
        self._final_time_entry()  # Kafka's recover() ends with it too; written with the rest below
        self._rewrite_index_files(old_index, old_timeindex)
        self.index_trusted = True
        return file_size - valid_end

    def _rescan(self, slot: int, file_size: int, offset_gaps: bool) -> int | None:
        if slot >= 0:
            entry = self.offset_index.entry(slot)
            self.offset_index.truncate_to_slots(slot + 1)
            self.time_index.truncate_to_offset(entry.offset + 1)
            start, expected, self._last_index_position = entry.position, None, entry.position
        else:
            entry = None
            self.offset_index.truncate_to_slots(0)
            self.time_index.truncate_to_slots(0)
            start, expected, self._last_index_position = 0, self.base_offset, 0
        last_time = self.time_index.last_entry
        self._max_timestamp = last_time.timestamp if last_time else NO_TIMESTAMP
        self._offset_of_max_timestamp = last_time.offset if last_time else self.base_offset
        position = start
        for header in scan_batches(self.file.fileno(), start, file_size):
            if expected is None:
                if entry is None or header.last_offset != entry.offset:
                    return None
            elif header.base_offset < expected if offset_gaps else header.base_offset != expected:
                break  # offset_gaps: the log was compacted (swap.py), batches may be missing between two
            if header.last_offset_delta < 0 or header.last_offset - self.base_offset > INT32_MAX:
                break
            self._track(header.position, header.last_offset, header.max_timestamp)
            position = header.position + header.size_bytes
            expected = header.next_offset
        if expected is None:
            return None
        self._next_offset = expected
        self._pending_index.clear()
        self._pending_timeindex.clear()
        return position

    def _rewrite_index_files(self, old_index: bytes, old_timeindex: bytes) -> None:
        for path, index, old in (
            (self.index_path, self.offset_index, old_index),
            (self.timeindex_path, self.time_index, old_timeindex),
        ):
            data = index.to_bytes()
            if data != old or _size_of(path) != len(data):
                _write_whole(path, data)

    def truncate_to(self, offset: int) -> int:
        """Drop the batch holding `offset` and everything after it; return the bytes dropped.

        Kafka's LogSegment.truncateTo: the cut is at a batch boundary, so if `offset` falls
        inside a batch that whole batch goes and next_offset becomes its base offset.
        """
        if offset >= self._next_offset:
            return 0
        batch = self.translate_offset(offset) if offset > self.base_offset else None
        position = batch.position if batch is not None else 0
        new_next_offset = batch.base_offset if batch is not None else self.base_offset
        dropped = self._size - position
        os.ftruncate(self.file.fileno(), position)
        self.offset_index.truncate_to_offset(new_next_offset)
        self.time_index.truncate_to_offset(new_next_offset)
        for path, size in ((self.index_path, len(self.offset_index) * OFFSET_ENTRY_BYTES), (self.timeindex_path, len(self.time_index) * TIME_ENTRY_BYTES)):
            if size or path.exists():  # absent: no entry was ever written
                os.truncate(path, size)
        self._size = position
        self._next_offset = new_next_offset
        last_entry = self.offset_index.last_entry
        self._last_index_position = last_entry.position if last_entry else 0
        last_time = self.time_index.last_entry
        self._max_timestamp = last_time.timestamp if last_time else NO_TIMESTAMP
        self._offset_of_max_timestamp = last_time.offset if last_time else self.base_offset
        scan = self._last_index_position
        while scan < self._size:
            header = header_at(self.file.fileno(), scan, self._size, self.log_path)
            if header.max_timestamp > self._max_timestamp:
                self._max_timestamp = header.max_timestamp
                self._offset_of_max_timestamp = header.last_offset
            scan += header.size_bytes
        if position == 0:
            self.roll_base_ms = None
        self.rolled_ms = None
        return dropped

    # -- lifecycle -------------------------------------------------------------------------

    def flush(self) -> None:
        """fsync the .log and both indexes: everything appended so far survives a power loss.
        (fsync through any descriptor of a file flushes all of its written pages.)"""
        os.fsync(self.file.fileno())
        for fd, path in ((self._index_fd, self.index_path), (self._timeindex_fd, self.timeindex_path)):
            if fd >= 0:
                os.fsync(fd)
            elif path.exists():  # not yet created: no entry written, nothing to flush
                _fsync_path(path)

    def close(self) -> None:
        """Close the files (outstanding FileSlices of this segment become unusable)."""
        if self._closed:
            return
        self._closed = True
        OPEN_SEGMENTS.forget(self)
        if self._file is not None:
            self._file.close()
        self._file = None
        self._close_index_fds()

    def delete(self) -> None:
        """Unlink the three files. FileSlices already handed out stay readable: the .log file
        object is dropped, not closed, and the OS keeps its bytes until the last one goes."""
        was_closed = self._closed
        self._closed = True
        OPEN_SEGMENTS.forget(self)
        self._file = None
        self._close_index_fds()
        if was_closed and not self.log_path.exists():
            return
        for path in (self.log_path, self.index_path, self.timeindex_path):
            path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, next_offset={self._next_offset}, size_bytes={self._size})"


def _size_of(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return -1


def _write_whole(path: Path, data: bytes) -> None:
    """Make `path` hold exactly `data` (created if missing), without keeping it open."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        write_all(fd, data)
    finally:
        os.close(fd)


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
