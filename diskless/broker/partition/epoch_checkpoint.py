"""The leader epochs this broker took a partition at, in its log directory.

Kafka's `leader-epoch-checkpoint` file, in Kafka's text layout: a version line (0), a count
line, then one `<epoch> <start offset>` line per epoch, oldest first. Here an entry is written
each time this broker becomes the partition's leader, before it serves: the epoch it took
and where its log ended then.

A new leader reads it to know whether another broker may have led the partition since this
broker last did (the epoch it takes now is not the next one after its last): then the local
tail above the durable end was never acknowledged to an acks=all producer and may since have
been written again elsewhere (the producer retried it at the other leader, perhaps after
bumping its epoch), so it must not be sent to the bucket again (leader.py). Written to a
temporary name and renamed, as Kafka's CheckpointFile, but not fsynced: a file lost or torn
by an OS crash reads as absent or older, which means "another broker may have led", the
cautious reading, and an fsync per partition opened cost 1 ms each (seconds for a topic of
thousands of partitions).
"""

from __future__ import annotations

import os
from pathlib import Path

FILE_NAME = "leader-epoch-checkpoint"
ENTRIES_KEPT = 16
_VERSION = 0


def last_leader_epoch(dir: Path) -> int | None:
    """The epoch this broker last took the partition at (None: never, or unreadable)."""
    entries = _read(dir / FILE_NAME)
    return entries[-1][0] if entries else None


def leader_epochs(dir: Path) -> list[tuple[int, int]]:
    """(leader epoch, start offset) of each time this broker took the partition, oldest first."""
    return _read(dir / FILE_NAME)


def record_leader_epoch(dir: Path, leader_epoch: int, start_offset: int) -> None:
    """Note that this broker leads the partition from `start_offset` at `leader_epoch`."""
    path = dir / FILE_NAME
    entries = [e for e in _read(path) if e[0] < leader_epoch] + [(leader_epoch, start_offset)]
    entries = entries[-ENTRIES_KEPT:]
    text = "\n".join([str(_VERSION), str(len(entries)), *(f"{epoch} {offset}" for epoch, offset in entries)]) + "\n"
    tmp = path.with_name(FILE_NAME + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _read(path: Path) -> list[tuple[int, int]]:
    try:
        lines = path.read_text().split()
    except OSError:
        return []
    try:
        version, count, rest = int(lines[0]), int(lines[1]), lines[2:]
        if version != _VERSION or len(rest) != 2 * count:
            return []
        return [(int(rest[i]), int(rest[i + 1])) for i in range(0, len(rest), 2)]
    except (IndexError, ValueError):
        return []  # torn or foreign: as if absent, the cautious reading
