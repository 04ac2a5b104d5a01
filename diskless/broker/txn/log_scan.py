"""Reading a local log's transactional batches for `PartitionTxns.rebuild`, at a partition's
open: headers only (hot_tier.scan), plus the bytes of control batches, whose record key says
commit or abort. Synchronous file I/O; the partition leader's task calls it once at open."""

from __future__ import annotations

import os
from collections.abc import Iterator

from hot_tier import Log
from hot_tier.files import pread_exact
from hot_tier.records.header import BatchHeader, read_header
from hot_tier.scan import scan_batches


def transactional_batches(log: Log) -> Iterator[tuple[BatchHeader, bytes]]:
    """(header, bytes) of every transactional batch in the local log, in offset order; the
    bytes are empty for data batches, the whole batch (header at position 0) for control ones."""
    for segment in log.segments:
        if not segment.size_bytes:  # nothing to read (a new segment's file may not exist yet)
            continue
        fd = os.open(segment.log_path, os.O_RDONLY)
        try:
            for header in scan_batches(fd, 0, segment.size_bytes):
                if not header.is_transactional:
                    continue
                if header.is_control:
                    data = pread_exact(fd, header.size_bytes, header.position)
                    yield read_header(data, 0, check_crc=False), data
                else:
                    yield header, b""
        finally:
            os.close(fd)
