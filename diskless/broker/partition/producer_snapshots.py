"""Producer-state snapshots of a partition's local log, as Kafka's ProducerStateManager keeps them.

Producer state is rebuilt at open from the newest snapshot at or below the log end plus the
local batches after it (Kafka's loadProducerState). A snapshot is written after every roll,
before tiering can drop the rolled segment's local copy, so producers whose last batches live
only in the bucket are still deduplicated after a restart. A snapshot is
`<map_end_offset, 20 digits>.snapshot` in the log directory (byte layout in producer_state.py),
written to a temporary name, fsynced and renamed; the newest two are kept. A crash before the
rename leaves the previous snapshot, whose gap the local log still covers.

Synchronous file I/O; only the partition's leader (on the event-loop task) calls these.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path

from hot_tier import Log
from hot_tier.files import fsync_dir
from hot_tier.records.header import NO_SEQUENCE, BatchHeader
from hot_tier.scan import scan_batches
from metadata import ProducerSnapshot
from metadata import ProducerStateEntry as StoredEntry

from ..producer_state import BatchMetadata, ProducerSnapshotError, ProducerStateEntry, ProducerStateManager

logger = logging.getLogger(__name__)

PRODUCER_SNAPSHOTS_KEPT = 2
_SNAPSHOT_FILE = re.compile(r"^(\d{20})\.snapshot$")


def load_producer_state(
    log: Log, producer_id_expiration_ms: int, published: ProducerStateManager | None = None
) -> tuple[ProducerStateManager, int, list[tuple[int, int]]]:
    """(state, base offset of the active segment if no rolled local segment lacks a snapshot,
    else -1: then the caller writes one before tiering may drop those segments, and the
    transactions open at the local log's start that began below it: (producer id, first
    offset), from the snapshot the state starts from, before the local batches are folded in).

    `published` is the state the partition's leaders keep in the metadata store (see
    `published_state`); it is used when it lies inside the local log and no local snapshot
    is newer: a broker taking over from another starts with a local log that begins where
    the bucket ends, and without it would know none of the producers whose batches all lie
    below (it would then take any sequence from them, a retry too).

    Snapshots outside the local log are deleted, as Kafka's truncateAndReload does: above its
    end they describe batches that are gone (the log was cut after a crash); below its start
    the batches between them and the log are not here to replay (the log was cut whole and
    restarted higher), so the state would miss those producers' last sequences. An
    unreadable snapshot is skipped for an older one.
    """
    log_end_offset, log_start_offset = log.log_end_offset, log.segments[0].base_offset
    manager: ProducerStateManager | None = None
    names = os.listdir(log.dir)  # once: a broker opens thousands of partitions at start-up
    for offset in sorted(_snapshot_offsets(log.dir, names), reverse=True):
        path = _snapshot_path(log.dir, offset)
        if not log_start_offset <= offset <= log_end_offset:
            path.unlink(missing_ok=True)
            continue
        if manager is not None:
            continue
        try:
            manager = ProducerStateManager.from_snapshot(path.read_bytes(), producer_id_expiration_ms)
        except (OSError, ProducerSnapshotError) as exc:
            logger.warning("ignoring producer-state snapshot %s: %s", path, exc)
    for name in names:
        if name.endswith(".snapshot.tmp"):
            (log.dir / name).unlink(missing_ok=True)
    if published is not None and log_start_offset <= published.map_end_offset <= log_end_offset:
        if manager is None or manager.map_end_offset < published.map_end_offset:
            manager = published
    segments = log.segments
    covered = len(segments) == 1 or (manager is not None and manager.map_end_offset >= segments[-1].base_offset)
    manager = manager or ProducerStateManager(producer_id_expiration_ms)
    # Read before the fold: a transaction begun below the log and ended by a local marker is
    # closed in the folded state, and its first offset would be lost with it.
    open_below = [
        (e.producer_id, e.current_txn_first_offset) for e in manager.entries() if 0 <= e.current_txn_first_offset < log_start_offset
    ]  # fmt: skip
    manager.rebuild_from_batches(batch_headers(log))
    return manager, segments[-1].base_offset if covered else -1, open_below


def write_producer_snapshot(dir: Path, manager: ProducerStateManager, keep_above: int | None = None) -> Path:
    """Write `manager`'s snapshot durably under its map end offset; keep the newest few, and
    every one above `keep_above` (the bucket's end: `published_state` reads them)."""
    path = _snapshot_path(dir, manager.map_end_offset)
    tmp = path.with_name(path.name + ".tmp")
    data = memoryview(manager.snapshot())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        while data:
            data = data[os.write(fd, data):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(dir)
    for offset in sorted(_snapshot_offsets(dir))[:-PRODUCER_SNAPSHOTS_KEPT]:
        if keep_above is None or offset <= keep_above:
            _snapshot_path(dir, offset).unlink(missing_ok=True)
    return path


def snapshot_after(dir: Path, segment_end: int, durable_end: int, producer_id_expiration_ms: int) -> ProducerStateManager | None:
    """The state of the first local snapshot at or after a segment's end that describes only
    durable batches (at most `durable_end`), or None: what a leader publishes with the segment."""
    for offset in sorted(o for o in _snapshot_offsets(dir) if segment_end <= o <= durable_end):
        try:
            return ProducerStateManager.from_snapshot(_snapshot_path(dir, offset).read_bytes(), producer_id_expiration_ms)
        except (OSError, ProducerSnapshotError) as exc:
            logger.warning("ignoring producer-state snapshot %s: %s", _snapshot_path(dir, offset), exc)
    return None


def to_published(manager: ProducerStateManager) -> ProducerSnapshot:
    """The store's form of a state: each producer's last batch, as Kafka's snapshot files keep it."""
    return ProducerSnapshot(
        manager.map_end_offset,
        tuple(
            StoredEntry(
                e.producer_id, e.producer_epoch, e.last_sequence, e.last_offset,
                e.batches[-1].last_offset - e.batches[-1].first_offset if e.batches else 0, e.last_timestamp_ms,
                e.coordinator_epoch, e.current_txn_first_offset,
            )  # fmt: skip
            for e in manager.entries()
        ),
    )


def published_state(snapshot: ProducerSnapshot, producer_id_expiration_ms: int) -> ProducerStateManager:
    """A state from the store's form: each producer with its last batch (a retry of an earlier
    one is then not recognised, as after Kafka reloads a snapshot file)."""
    entries = []
    for e in snapshot.entries:
        batches: tuple[BatchMetadata, ...] = ()
        if e.last_sequence != NO_SEQUENCE:
            first_sequence = e.last_sequence - e.offset_delta
            if first_sequence < 0:  # the batch's sequences wrapped past Int32 max to 0
                first_sequence += 2**31
            batches = (BatchMetadata(first_sequence, e.last_sequence, e.last_offset - e.offset_delta, e.last_offset, e.last_timestamp_ms),)
        entries.append(ProducerStateEntry(
            e.producer_id, e.producer_epoch, batches, e.last_offset, e.last_timestamp_ms, e.coordinator_epoch, e.current_txn_first_offset
        ))  # fmt: skip
    return ProducerStateManager.from_entries(snapshot.log_end_offset, entries, producer_id_expiration_ms)


def drop_snapshots_above(dir: Path, offset: int) -> int:
    """Delete the snapshots of map end offsets above `offset` (all of them for -1): the log was
    cut there. Returns how many went."""
    gone = [_snapshot_path(dir, o) for o in _snapshot_offsets(dir) if o > offset]
    for path in gone:
        path.unlink(missing_ok=True)
    return len(gone)


def _snapshot_path(dir: Path, offset: int) -> Path:
    return dir / f"{offset:020d}.snapshot"


def _snapshot_offsets(dir: Path, names: list[str] | None = None) -> list[int]:
    return [int(m.group(1)) for name in (os.listdir(dir) if names is None else names) if (m := _SNAPSHOT_FILE.match(name))]


def batch_headers(log: Log) -> Iterator[BatchHeader]:
    """Every batch header of the local log, in offset order (reads headers only)."""
    for segment in log.segments:
        if not segment.size_bytes:  # nothing to read (a new segment's file may not exist yet)
            continue
        fd = os.open(segment.log_path, os.O_RDONLY)
        try:
            yield from scan_batches(fd, 0, segment.size_bytes)
        finally:
            os.close(fd)
