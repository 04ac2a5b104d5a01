"""Idempotent-producer state of one partition, sans-IO (Kafka's ProducerStateManager).

For every producer id the partition remembers the producer epoch and its last five batches
(first/last sequence, first/last offset, timestamp), so a retried batch is answered with its
original offsets instead of being written twice, and a gap in sequences is refused.

Decisions, in Kafka's order (UnifiedLog.analyzeAndValidateProducerState, ProducerAppendInfo):

  1. a batch without producer id                            -> Append
  2. same epoch and same sequence range as a retained batch -> Duplicate(its offsets)
  3. epoch older than the producer's                        -> InvalidProducerEpoch (47;
     Kafka answers produce with it since 2.7, KIP-588)
  4. epoch newer than the producer's: base sequence must be 0 -> else OutOfOrderSequence (45)
  5. same epoch: base sequence must follow the last one (Int32 max wraps to 0) -> else 45
  6. a producer without state here (never seen, or expired: idle for
     producer.id.expiration.ms): Append, whatever the sequence, as Kafka 2.5+ forgives state
     lost to time or retention (ProducerAppendInfo: "If there is no current producer epoch
     ... accept writes with any sequence number").
  7. except in a partition nothing was ever written to (`partition_empty`): there a first
     sequence other than 0 is refused with UNKNOWN_PRODUCER_ID (59), as Kafka before 2.5
     answered it. The producer's earlier batches went to an old leader and never became
     durable (a new leader rebuilds its tail from what is durable); taken, a later batch
     makes librdkafka count the lost ones as delivered (its "implicit ack": a later batch
     succeeded, so the earlier must have). Answered 59, the clients reset their producer and
     send those batches again (librdkafka, Java, ours). Only there is the state certainly
     whole: elsewhere it may lack a producer whose batches are durable (expired while they
     stay, or a published state missing at a segment's end, which the uploader logs), and
     refusing one of its retries makes librdkafka fail for good.

`check` reads, `record` writes: the shell calls check(batch), assigns offsets, record(batch)
before checking the next batch of the partition (Kafka does both under the log lock). If the
append then fails, `truncate_to(base_offset)` forgets it. `check` treats a producer as
unknown once `producer_id_expiration_ms` have passed since its last batch timestamp, the
moment Kafka's periodic expiry would forget it; `expire` then reclaims the memory.

Snapshots: `snapshot()` / `from_snapshot` (byte layout in hot_tier/producer_snapshot.py, where
the Spark reader reads the ones in the bucket too). Unlike Kafka's snapshot (last batch only),
all five batches are kept, so duplicates of recent batches are still detected after a restart.
A snapshot that fails any check raises `CorruptProducerSnapshot` (or
`UnsupportedProducerSnapshotVersion`): the caller then rebuilds the state from the log with
`rebuild_from_batches`.

One manager per partition, used by the task that appends to that partition.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from kio.schema.errors import ErrorCode

from hot_tier.producer_snapshot import (
    NUM_BATCHES_TO_RETAIN,
    BatchMetadata,
    CorruptProducerSnapshot,
    ProducerSnapshotError,
    ProducerStateEntry,
    UnsupportedProducerSnapshotVersion,
    decode_snapshot,
    encode_snapshot,
)
from hot_tier.records.header import NO_PRODUCER_ID, NO_SEQUENCE, BatchHeader

__all__ = [  # the snapshot's types, re-exported with the state they describe
    "NUM_BATCHES_TO_RETAIN", "BatchMetadata", "CorruptProducerSnapshot", "ProducerSnapshotError", "ProducerStateEntry",
    "UnsupportedProducerSnapshotVersion",
]  # fmt: skip

NO_PRODUCER_EPOCH = -1
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000
_INT32_MAX = 2**31 - 1

@dataclass(frozen=True, slots=True)
class Append:
    """Write the batch, then `record` it."""


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A retry of a batch already in the log: answer with its offsets, write nothing."""

    first_offset: int
    last_offset: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class OutOfOrderSequence:
    error_code: ClassVar[ErrorCode] = ErrorCode.out_of_order_sequence_number
    producer_id: int
    producer_epoch: int
    base_sequence: int
    current_epoch: int
    current_last_sequence: int  # NO_SEQUENCE when the batch opens a new epoch


@dataclass(frozen=True, slots=True)
class UnknownProducer:
    error_code: ClassVar[ErrorCode] = ErrorCode.unknown_producer_id
    producer_id: int
    base_sequence: int


@dataclass(frozen=True, slots=True)
class InvalidProducerEpoch:
    error_code: ClassVar[ErrorCode] = ErrorCode.invalid_producer_epoch
    producer_id: int
    producer_epoch: int
    current_epoch: int


Decision = Append | Duplicate | OutOfOrderSequence | InvalidProducerEpoch | UnknownProducer
APPEND = Append()


def in_sequence(last_sequence: int, next_sequence: int) -> bool:
    return next_sequence == last_sequence + 1 or (next_sequence == 0 and last_sequence == _INT32_MAX)


def sequence_after(last_sequence: int) -> int:
    """The base sequence of the batch that follows `last_sequence` (NO_SEQUENCE: a new epoch's first)."""
    return 0 if last_sequence in (NO_SEQUENCE, _INT32_MAX) else last_sequence + 1


class ProducerStateManager:
    def __init__(self, producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> None:
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._entries: dict[int, ProducerStateEntry] = {}
        self._map_end_offset = 0

    @property
    def map_end_offset(self) -> int:
        """The offset after the last batch this state has seen (Kafka's mapEndOffset)."""
        return self._map_end_offset

    def __len__(self) -> int:
        return len(self._entries)

    def producer_ids(self) -> list[int]:
        return sorted(self._entries)

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._entries.get(producer_id)

    # -- the produce path ----------------------------------------------------------------

    def check(
        self, producer_id: int, producer_epoch: int, base_sequence: int, last_sequence: int, now_ms: int,
        partition_empty: bool = False,
    ) -> Decision:
        """Decide what to do with a client's batch; see the module header. Changes nothing."""
        if producer_id == NO_PRODUCER_ID:
            return APPEND
        entry = self._entries.get(producer_id)
        if entry is not None and self._is_expired(entry, now_ms):
            entry = None
        if entry is not None and entry.producer_epoch == producer_epoch:
            for batch in entry.batches:
                if batch.first_sequence == base_sequence and batch.last_sequence == last_sequence:
                    return Duplicate(batch.first_offset, batch.last_offset, batch.timestamp_ms)
        current_epoch = entry.producer_epoch if entry is not None else NO_PRODUCER_EPOCH
        if producer_epoch < current_epoch:
            return InvalidProducerEpoch(producer_id, producer_epoch, current_epoch)
        if producer_epoch != current_epoch:
            if base_sequence != 0 and current_epoch != NO_PRODUCER_EPOCH:
                return OutOfOrderSequence(producer_id, producer_epoch, base_sequence, current_epoch, NO_SEQUENCE)
            if base_sequence != 0 and partition_empty:
                return UnknownProducer(producer_id, base_sequence)
            return APPEND
        # No epoch known (no entry, or a batch that carried epoch -1): any sequence goes, as Kafka.
        if entry is None or current_epoch == NO_PRODUCER_EPOCH or in_sequence(entry.last_sequence, base_sequence):
            return APPEND
        return OutOfOrderSequence(producer_id, producer_epoch, base_sequence, current_epoch, entry.last_sequence)

    def record(
        self,
        producer_id: int,
        producer_epoch: int,
        first_sequence: int,
        last_sequence: int,
        first_offset: int,
        last_offset: int,
        timestamp_ms: int,
        transactional: bool = False,
    ) -> None:
        """Remember a batch that is now in the log. Not validated: `check` came first."""
        self.update_map_end_offset(last_offset + 1)
        if producer_id == NO_PRODUCER_ID:
            return
        entry = self._entries.get(producer_id)
        # A new epoch starts a new history (Kafka's maybeUpdateProducerEpoch).
        kept = entry.batches if entry is not None and entry.producer_epoch == producer_epoch else ()
        batch = BatchMetadata(first_sequence, last_sequence, first_offset, last_offset, timestamp_ms)
        txn_first = entry.current_txn_first_offset if entry is not None else -1
        if transactional and txn_first < 0:
            txn_first = first_offset
        self._entries[producer_id] = ProducerStateEntry(
            producer_id,
            producer_epoch,
            (kept + (batch,))[-NUM_BATCHES_TO_RETAIN:],
            last_offset,
            timestamp_ms,
            entry.coordinator_epoch if entry is not None else -1,  # a coordinator's, whatever the producer epoch
            txn_first,
        )

    def update_map_end_offset(self, next_offset: int) -> None:
        """Note batches appended without producer state (no producer id)."""
        self._map_end_offset = max(self._map_end_offset, next_offset)

    # -- maintenance ---------------------------------------------------------------------

    def expire(self, now_ms: int) -> list[int]:
        """Forget producers idle for producer.id.expiration.ms; returns their ids."""
        expired = sorted(pid for pid, entry in self._entries.items() if self._is_expired(entry, now_ms))
        for producer_id in expired:
            del self._entries[producer_id]
        return expired

    def _is_expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        return now_ms - entry.last_timestamp_ms >= self.producer_id_expiration_ms

    def truncate_to(self, offset: int) -> None:
        """Forget batches at or beyond `offset` (the log was truncated there).

        Exact for producers that keep a batch below `offset`. A producer whose retained
        batches all go is forgotten (its older history was never kept), which makes it
        "unknown" and lenient; for exact state, load a snapshot taken at or below `offset`
        and `rebuild_from_batches` from there, as Kafka's truncateAndReload does.
        """
        for producer_id, entry in list(self._entries.items()):
            if entry.last_offset < offset:
                continue
            kept = tuple(b for b in entry.batches if b.last_offset < offset)
            if not kept:
                del self._entries[producer_id]
                continue
            txn_first = entry.current_txn_first_offset if entry.current_txn_first_offset < offset else -1
            self._entries[producer_id] = ProducerStateEntry(
                producer_id, entry.producer_epoch, kept, kept[-1].last_offset, kept[-1].timestamp_ms, entry.coordinator_epoch, txn_first
            )
        self._map_end_offset = min(self._map_end_offset, offset)

    def rebuild_from_batches(self, headers: Iterable[BatchHeader]) -> None:
        """Fold batch headers, in log order, into the state (Kafka's loadProducersFromRecords).

        Batches ending before `map_end_offset` are already part of the state and skipped, so
        a caller can load a snapshot and fold the log from the snapshot's offset onwards.
        Batches are not validated: the log is the truth.
        """
        for header in headers:
            if header.last_offset < self._map_end_offset:
                continue
            if not header.has_producer_id:
                self.update_map_end_offset(header.next_offset)
            elif header.is_control:
                self.record_marker(header.producer_id, header.producer_epoch, header.last_offset, header.max_timestamp)
            else:
                self.record(
                    header.producer_id,
                    header.producer_epoch,
                    header.base_sequence,
                    header.last_sequence,
                    header.base_offset,
                    header.last_offset,
                    header.max_timestamp,
                    header.is_transactional,
                )

    def record_marker(self, producer_id: int, producer_epoch: int, offset: int, timestamp_ms: int, coordinator_epoch: int = -1) -> None:
        """Fold a transaction marker at `offset` in (`coordinator_epoch` -1: not known, keep
        the last one's). A marker carries no sequences; it may bump the producer epoch (Kafka's
        appendEndTxnMarker), which starts a new history. It ends the open transaction."""
        self.update_map_end_offset(offset + 1)
        entry = self._entries.get(producer_id)
        kept = entry.batches if entry is not None and entry.producer_epoch == producer_epoch else ()
        if coordinator_epoch < 0 and entry is not None:
            coordinator_epoch = entry.coordinator_epoch
        self._entries[producer_id] = ProducerStateEntry(producer_id, producer_epoch, kept, offset, timestamp_ms, coordinator_epoch)

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> ErrorCode | None:
        """Whether a marker may be appended (Kafka's appendEndTxnMarker checks): not for an
        older producer epoch (a fenced producer's transaction) nor from an older coordinator
        than the last marker's (a zombie coordinator's late marker would end the transaction
        the producer has open now)."""
        entry = self._entries.get(producer_id)
        if entry is None:
            return None
        if producer_epoch < entry.producer_epoch:
            return ErrorCode.invalid_producer_epoch
        if coordinator_epoch < entry.coordinator_epoch:
            return ErrorCode.transaction_coordinator_fenced
        return None

    # -- snapshots -----------------------------------------------------------------------

    def entries(self) -> list[ProducerStateEntry]:
        """Every producer's entry, by producer id."""
        return [self._entries[pid] for pid in sorted(self._entries)]

    @classmethod
    def from_entries(
        cls, map_end_offset: int, entries: Iterable[ProducerStateEntry], producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS
    ) -> ProducerStateManager:
        """A state made of `entries`, reflecting every batch below `map_end_offset`."""
        manager = cls(producer_id_expiration_ms)
        manager._map_end_offset = map_end_offset
        manager._entries = {e.producer_id: e for e in entries}
        return manager


    def snapshot(self) -> bytes:
        """The whole state as snapshot bytes (hot_tier/producer_snapshot.py)."""
        return encode_snapshot(self._map_end_offset, self.entries())

    @classmethod
    def from_snapshot(
        cls, data: bytes | bytearray | memoryview, producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS
    ) -> ProducerStateManager:
        """Load `snapshot()` bytes; raises a `ProducerSnapshotError` subclass if they are bad."""
        map_end_offset, entries = decode_snapshot(data)
        return cls.from_entries(map_end_offset, entries, producer_id_expiration_ms)
