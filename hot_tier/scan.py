"""Reading batch headers out of a `.log` file without decoding records.

Two ways, for two callers:

- `header_at` / `size_at`: one pread of the 61-byte header (or of the 12-byte prefix: base
  offset, batch length) of a batch the segment already trusts. The read path walks batches
  this way from an index entry. A header that is not a batch (bad magic, impossible length,
  runs past the data) raises CorruptLog: never serve garbage.
- `first_timestamp`: a segment's first batch's timestamp, for bookkeeping.
- `scan_batches`: reads the file in large chunks and validates every batch fully (length,
  magic, CRC-32C over the whole batch) with hot_tier.records.read_header. Recovery uses it;
  it stops quietly at the first batch that is torn or corrupt, and the caller truncates there.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from .errors import CorruptLog
from .files import pread_exact
from .records.errors import CorruptBatch
from .records.header import HEADER_BYTES, LOG_OVERHEAD, MAGIC, BatchHeader, peek_size, read_header

_HEADER = struct.Struct(">qiibIhiqqqhii")
_PREFIX = struct.Struct(">qi")  # base_offset, batch_length
_MIN_BATCH_LENGTH = HEADER_BYTES - LOG_OVERHEAD
SCAN_CHUNK_BYTES = 8 * 1024 * 1024


def header_at(fd: int, position: int, end: int, path: Path) -> BatchHeader:
    """The header of the batch at `position`, which must end by `end`. CRC not checked."""
    data = pread_exact(fd, HEADER_BYTES, position)
    if len(data) < HEADER_BYTES:
        raise CorruptLog(path, f"batch header at position {position} is cut short at end of file")
    header = BatchHeader(position, *_HEADER.unpack(data))
    if header.magic != MAGIC or header.batch_length < _MIN_BATCH_LENGTH or position + header.size_bytes > end:
        raise CorruptLog(path, f"no valid batch at position {position} (magic {header.magic}, length {header.batch_length})")
    return header


def size_at(fd: int, position: int, end: int, path: Path) -> int:
    """The total size of the batch at `position`, which must end by `end`."""
    data = pread_exact(fd, LOG_OVERHEAD, position)
    if len(data) < LOG_OVERHEAD:
        raise CorruptLog(path, f"batch at position {position} is cut short at end of file")
    size = _PREFIX.unpack(data)[1] + LOG_OVERHEAD
    if size < HEADER_BYTES or position + size > end:
        raise CorruptLog(path, f"batch at position {position} claims an impossible size of {size} bytes")
    return size


def first_timestamp(path: Path) -> int:
    """The timestamp of the segment's first batch (BatchHeader.first_timestamp), -1 when the
    file holds no whole header: bookkeeping only (the bucket's segment records, compaction
    lag); the batch itself is not checked."""
    with open(path, "rb") as f:
        data = f.read(HEADER_BYTES)
    if len(data) < HEADER_BYTES:
        return -1
    header = BatchHeader(0, *_HEADER.unpack(data))
    return header.first_timestamp if header.magic == MAGIC else -1


def scan_batches(fd: int, start: int, end: int, *, chunk_bytes: int = SCAN_CHUNK_BYTES) -> Iterator[BatchHeader]:
    """Yield every valid batch in [start, end) in order, positions relative to the file.

    Stops (without raising) at the first batch that is torn, has an impossible length or
    magic, or fails its CRC: the valid bytes end where the last yielded batch ends.
    """
    buffer = b""
    buffer_start = start
    position = start
    while position < end:
        relative = position - buffer_start
        if len(buffer) - relative < HEADER_BYTES:
            buffer = pread_exact(fd, min(max(chunk_bytes, HEADER_BYTES), end - position), position)
            buffer_start, relative = position, 0
        size = peek_size(buffer, relative)
        if size is None or size < HEADER_BYTES or position + size > end:
            return
        if len(buffer) - relative < size:
            buffer = pread_exact(fd, min(max(chunk_bytes, size), end - position), position)
            buffer_start, relative = position, 0
        try:
            header = read_header(buffer, relative, check_crc=True)
        except CorruptBatch:
            return
        yield replace(header, position=position)
        position += size

