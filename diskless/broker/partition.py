"""One partition this broker leads: its log, its append rules, its idempotent-producer state
and the waiters of long-polling fetches.

Only the event-loop task calls a Partition; the log underneath does synchronous file I/O,
which lands in the page cache (appends) or is an fsync on roll (bounded by segment size).

Producer state is rebuilt at open from the newest producer-state snapshot at or below the log
end plus the local batches after it (Kafka's loadProducerState). A snapshot is written after
every roll, before tiering can drop the rolled segment's local copy, so producers whose last
batches live only in the bucket are still deduplicated after a restart. A snapshot is
`<map_end_offset, 20 digits>.snapshot` in the log directory (byte layout in producer_state.py),
written to a temporary name, fsynced and renamed; the newest two are kept. A crash before the
rename leaves the previous snapshot, whose gap the local log still covers.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from cold_tier.layout import CommittedSegment
from hot_tier import AppendInfo, Log, LogConfig
from hot_tier.files import fsync_dir
from hot_tier.records.header import BatchHeader, iter_headers
from hot_tier.scan import scan_batches

from .errors import InvalidProducerEpoch, InvalidRecord, OutOfOrderSequence, RecordTooLarge, TransactionsUnsupported
from .producer_state import Duplicate, InvalidProducerEpoch as EpochDecision, OutOfOrderSequence as SequenceDecision, ProducerSnapshotError, ProducerStateManager

logger = logging.getLogger(__name__)

PRODUCER_SNAPSHOTS_KEPT = 2
_SNAPSHOT_FILE = re.compile(r"^(\d{20})\.snapshot$")


@dataclass(frozen=True, slots=True)
class PartitionRules:
    """The topic configs the broker applies to a partition above its local log."""

    max_message_bytes: int
    log_append_time: bool
    tiered: bool  # remote.storage.enable
    retention: tuple[int, int]  # retention.ms, retention.bytes
    local_retention: tuple[int, int]  # local.retention.ms, local.retention.bytes (-2 resolved)

    @classmethod
    def from_configs(cls, configs: dict[str, str]) -> PartitionRules:
        retention = (int(configs["retention.ms"]), int(configs["retention.bytes"]))
        local_ms, local_bytes = int(configs["local.retention.ms"]), int(configs["local.retention.bytes"])
        return cls(
            max_message_bytes=int(configs["max.message.bytes"]),
            log_append_time=configs["message.timestamp.type"] == "LogAppendTime",
            tiered=configs["remote.storage.enable"] == "true",
            retention=retention,
            local_retention=(retention[0] if local_ms == -2 else local_ms, retention[1] if local_bytes == -2 else local_bytes),
        )

    def log_config(self, configs: dict[str, str]) -> LogConfig:
        """The local log's config: for tiered topics, tiering decides what leaves the disk."""
        config = LogConfig.from_topic_configs(configs)
        return replace(config, retention_ms=-1, retention_bytes=-1) if self.tiered else config


class Partition:
    def __init__(
        self, topic: str, topic_id: uuid.UUID, index: int, log: Log, rules: PartitionRules,
        producer_id_expiration_ms: int, *, leader_epoch: int = 0, deleted_below: int = 0,
    ) -> None:
        self.topic = topic
        self.topic_id = topic_id
        self.index = index
        self.log = log
        self.rules = rules
        self.leader_epoch = leader_epoch
        self.remote: list[CommittedSegment] = []  # the committed catalogue in the bucket, in order
        self.deleted_below = deleted_below  # DeleteRecords and remote retention: nothing below is served
        self.producers, self._snapshot_base = load_producer_state(log, producer_id_expiration_ms)
        self._appended: asyncio.Future[None] | None = None
        self.maybe_snapshot_producers()

    @property
    def tiered(self) -> bool:
        return self.rules.tiered

    @property
    def retention(self) -> tuple[int, int]:
        return self.rules.retention

    @property
    def local_retention(self) -> tuple[int, int]:
        return self.rules.local_retention

    @property
    def log_start_offset(self) -> int:
        """The first offset served, from the bucket or the local log (Kafka's logStartOffset)."""
        first = self.remote[0].base_offset if self.remote else self.log.log_start_offset
        return max(first, self.deleted_below)

    def append(self, records: bytes, now_ms: int) -> AppendInfo:
        """Validate and append the one batch of a produce request; wake waiting fetches.

        A retried batch of an idempotent producer is not appended again: the answer is the
        offsets it got the first time. Raises CorruptBatch, InvalidRecord, RecordTooLarge,
        OutOfOrderSequence or InvalidProducerEpoch; nothing is written then.
        """
        headers = list(iter_headers(records, check_crc=False))
        if len(headers) != 1:
            raise InvalidRecord("produce requests v3+ carry exactly one record batch per partition")
        header = headers[0]
        if header.size_bytes > self.rules.max_message_bytes:
            raise RecordTooLarge(header.size_bytes, self.rules.max_message_bytes)
        if header.is_transactional:
            raise TransactionsUnsupported()
        if header.has_producer_id:
            decision = self.producers.check(header.producer_id, header.producer_epoch, header.base_sequence, header.last_sequence, now_ms)
            if isinstance(decision, Duplicate):
                # On LogAppendTime topics the retained timestamp is the first append's time.
                log_append_time_ms = decision.timestamp_ms if self.rules.log_append_time else -1
                return AppendInfo(
                    decision.first_offset, decision.last_offset, decision.timestamp_ms, log_append_time_ms, self.log_start_offset, 0
                )
            if isinstance(decision, SequenceDecision):
                raise OutOfOrderSequence(header.producer_id, header.base_sequence, decision.current_last_sequence)
            if isinstance(decision, EpochDecision):
                raise InvalidProducerEpoch(header.producer_id, header.producer_epoch, decision.current_epoch)
        info = self.log.append(bytearray(records), now_ms, log_append_time=self.rules.log_append_time)
        if header.has_producer_id:
            self.producers.record(
                header.producer_id, header.producer_epoch, header.base_sequence, header.last_sequence,
                info.first_offset, info.last_offset, info.max_timestamp,
            )
        self.producers.update_map_end_offset(self.log.log_end_offset)
        self.maybe_snapshot_producers()
        self.notify()
        return info

    def maybe_snapshot_producers(self) -> bool:
        """Write a producer-state snapshot if the log rolled since the last one.

        `append` calls it; whoever else rolls the log (time-based rolls) must call it right
        after, before the rolled segment can be tiered and dropped locally.
        """
        if self.log.recovery_point <= self._snapshot_base:  # cheap check: a roll moves it
            return False
        active_base = self.log.active_base_offset
        if active_base <= self._snapshot_base:
            return False
        write_producer_snapshot(self.log.dir, self.producers)
        self._snapshot_base = active_base
        return True

    def notify(self) -> None:
        """Wake every fetch waiting on this partition (after an append or a deletion)."""
        if self._appended is not None:
            if not self._appended.done():
                self._appended.set_result(None)
            self._appended = None

    def appended(self) -> asyncio.Future[None]:
        """A future that completes at the next append: long-polling fetches wait on it."""
        if self._appended is None:
            self._appended = asyncio.get_running_loop().create_future()
        return self._appended


def load_producer_state(log: Log, producer_id_expiration_ms: int) -> tuple[ProducerStateManager, int]:
    """(state, base offset of the active segment if no rolled local segment lacks a snapshot,
    else -1: then the caller writes one before tiering may drop those segments).

    Snapshots above the log end describe batches that are gone (the log was cut after a
    crash) and are deleted; an unreadable snapshot is skipped for an older one.
    """
    log_end_offset = log.log_end_offset
    manager: ProducerStateManager | None = None
    for offset in sorted(_snapshot_offsets(log.dir), reverse=True):
        path = _snapshot_path(log.dir, offset)
        if offset > log_end_offset:
            path.unlink(missing_ok=True)
            continue
        if manager is not None:
            continue
        try:
            manager = ProducerStateManager.from_snapshot(path.read_bytes(), producer_id_expiration_ms)
        except (OSError, ProducerSnapshotError) as exc:
            logger.warning("ignoring producer-state snapshot %s: %s", path, exc)
    for stale in log.dir.glob("*.snapshot.tmp"):
        stale.unlink(missing_ok=True)
    segments = log.segments
    covered = len(segments) == 1 or (manager is not None and manager.map_end_offset >= segments[-1].base_offset)
    manager = manager or ProducerStateManager(producer_id_expiration_ms)
    manager.rebuild_from_batches(batch_headers(log))
    return manager, segments[-1].base_offset if covered else -1


def write_producer_snapshot(dir: Path, manager: ProducerStateManager) -> Path:
    """Write `manager`'s snapshot durably under its map end offset; keep the newest few."""
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
        _snapshot_path(dir, offset).unlink(missing_ok=True)
    return path


def _snapshot_path(dir: Path, offset: int) -> Path:
    return dir / f"{offset:020d}.snapshot"


def _snapshot_offsets(dir: Path) -> list[int]:
    return [int(m.group(1)) for path in dir.iterdir() if (m := _SNAPSHOT_FILE.match(path.name))]


def batch_headers(log: Log) -> Iterator[BatchHeader]:
    """Every batch header of the local log, in offset order (reads headers only)."""
    for segment in log.segments:
        fd = os.open(segment.log_path, os.O_RDONLY)
        try:
            yield from scan_batches(fd, 0, segment.size_bytes)
        finally:
            os.close(fd)
