"""Errors of segment upload and remote reads (segments.py, remote_log.py, remote_index.py).

They extend `cold_tier.errors.ColdTierError` and follow its rules: typed, with the fields a
caller acts on. A missing object of a committed segment (retention got there first), bytes at
rest that cannot be trusted, an offset below the bucket's history, and a closed reader are
different types, so the broker can map each to its own Kafka error code.
"""

from __future__ import annotations

import os

from .errors import ColdTierError
from .layout import CommittedSegment


class RemoteSegmentMissing(ColdTierError):
    """An object of a committed segment is gone: retention deleted the segment after the
    caller listed its catalogue. Refresh the catalogue; a fetch answers OFFSET_OUT_OF_RANGE."""

    retriable = False
    invalid_metadata = True

    def __init__(self, segment: CommittedSegment, key: str) -> None:
        super().__init__(
            f"segment {segment.base_offset}-{segment.last_offset} of {segment.topic}-{segment.partition}"
            f" (upload {segment.upload_id}) is gone from the bucket: {key!r} does not exist"
        )
        self.segment = segment
        self.key = key


class CorruptSegmentObject(ColdTierError):
    """Bytes of a committed segment object that cannot be trusted: an index that is not a
    whole number of entries or not increasing, a .log shorter than its commit key says, a batch
    with a bad length, magic or CRC. Corrupt data at rest, not a caller bug."""

    retriable = False

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"corrupt segment object {key!r}: {reason}")
        self.key = key
        self.reason = reason


class RemoteOffsetOutOfRange(ColdTierError):
    """`offset` lies below the first segment of the catalogue the caller passed."""

    retriable = False

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(
            f"offset {offset} is outside the remote log [{log_start_offset}, {log_end_offset})"
        )
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class ReaderClosed(ColdTierError):
    def __init__(self, operation: str) -> None:
        super().__init__(f"remote log reader is closed: cannot {operation}")
        self.operation = operation


class SegmentFileMismatch(ColdTierError):
    """An upload's .log is not `expected_bytes` long: the local file is shorter than the size
    the caller committed to, or the object the store holds after the upload is another size
    (the file changed while it was read). Nothing was committed."""

    retriable = False

    def __init__(self, path: str | os.PathLike[str], key: str, expected_bytes: int, actual_bytes: int) -> None:
        super().__init__(
            f"segment file {os.fspath(path)!r} -> {key!r}: expected {expected_bytes} bytes, found {actual_bytes}"
        )
        self.path = os.fspath(path)
        self.key = key
        self.expected_bytes = expected_bytes
        self.actual_bytes = actual_bytes
