"""File handles of the local log and the FileSlice that fetches send from.

A segment's `.log` is one `SegmentFile`, opened O_APPEND|O_RDWR: appends go to the end with
one write call, reads use pread at explicit positions, so nothing depends on a shared file
offset. A FileSlice keeps a reference to that file object: when retention deletes the
segment, the name is unlinked but the open descriptor (POSIX) keeps the bytes readable until
the last FileSlice is dropped, and CPython then closes it (SegmentFile closes quietly on
garbage collection instead of raising ResourceWarning). Closing the Log closes the files
outright; a FileSlice used after that raises ValueError from fileno(), never reads another
file that reused the descriptor number, as long as callers call fileno() just before use.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path


class SegmentFile(io.FileIO):
    """A `.log` file, shared by its segment and by any FileSlice handed out from it."""

    def __del__(self) -> None:
        if not self.closed:
            self.close()


def open_segment_file(path: Path) -> SegmentFile:
    return SegmentFile(path, "a+")  # O_RDWR | O_APPEND | O_CREAT


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write all of `data` at the end of an O_APPEND file (one write call unless the OS splits it)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def pread_exact(fd: int, size_bytes: int, position: int) -> bytes:
    """Up to `size_bytes` from `position`; shorter only at end of file."""
    data = os.pread(fd, size_bytes, position)
    if len(data) == size_bytes or not data:
        return data
    parts = [data]
    got = len(data)
    while got < size_bytes:
        more = os.pread(fd, size_bytes - got, position + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def fsync_dir(path: Path) -> None:
    """Make the creation or removal of names in `path` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class FileSlice:
    """`size_bytes` bytes of whole batches at `position` of `file`: what a fetch sends.

    Send with `os.sendfile(socket_fd, slice.fileno(), slice.position, slice.size_bytes)` (or
    asyncio's loop.sendfile with offset/count, default loop only), or get the bytes with
    read_bytes(). Safe to hand to another task or thread; valid while referenced, even after
    the segment is deleted. Bytes are only wrong if the log is truncated below them.
    """

    file: SegmentFile
    position: int
    size_bytes: int

    def fileno(self) -> int:
        return self.file.fileno()

    def read_bytes(self) -> bytes:
        return pread_exact(self.file.fileno(), self.size_bytes, self.position)
