"""One partition this broker leads: its log, its append rules, its idempotent-producer state
and the waiters of long-polling fetches.

Only the event-loop task calls a Partition; the log underneath does synchronous file I/O,
which lands in the page cache (appends) or is an fsync on roll (bounded by segment size).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace

from cold_tier.layout import CommittedSegment
from hot_tier import AppendInfo, Log, LogConfig
from hot_tier.records.header import BatchHeader, iter_headers
from hot_tier.scan import scan_batches

from .errors import InvalidProducerEpoch, InvalidRecord, OutOfOrderSequence, RecordTooLarge, TransactionsUnsupported
from .producer_state import Duplicate, InvalidProducerEpoch as EpochDecision, OutOfOrderSequence as SequenceDecision, ProducerStateManager


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
        # Rebuilt from the batch headers of the local log: the producers that matter for
        # deduplication are the recent ones, and their batches are still local.
        self.producers = ProducerStateManager(producer_id_expiration_ms)
        self.producers.rebuild_from_batches(batch_headers(log))
        self._appended: asyncio.Future[None] | None = None

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
                return AppendInfo(decision.first_offset, decision.last_offset, decision.timestamp_ms, -1, self.log_start_offset, 0)
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
        self.notify()
        return replace(info, log_start_offset=self.log_start_offset)

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


def batch_headers(log: Log) -> Iterator[BatchHeader]:
    """Every batch header of the local log, in offset order (reads headers only)."""
    for segment in log.segments:
        fd = os.open(segment.log_path, os.O_RDONLY)
        try:
            yield from scan_batches(fd, 0, segment.size_bytes)
        finally:
            os.close(fd)
