"""The transaction coordinator's state machine, sans-IO (Kafka's TransactionCoordinator and
TransactionMetadata): InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit, EndTxn and the transaction timeout.

Each request is decided against the current `TransactionRecord` of its transactional id and
answers an error code and, when the state changes, the next record. The shell
(txn/transactions.py) writes that record to the metadata store and only then `apply`s it:
what a client is told was durable first. A record entering PrepareCommit or PrepareAbort
asks the shell to complete the transaction (markers into every partition, committed offsets
into the group), after which `complete` gives the CompleteCommit / CompleteAbort record.

States and transitions, as Kafka's TransactionState:

    Empty/CompleteCommit/CompleteAbort --AddPartitions/AddOffsets--> Ongoing
    Ongoing --EndTxn(commit)--> PrepareCommit --markers durable--> CompleteCommit
    Ongoing --EndTxn(abort) | timeout | InitProducerId--> PrepareAbort --> CompleteAbort

InitProducerId bumps the producer epoch, which fences the older producer with the same
transactional id (PRODUCER_FENCED on its next request); finding a transaction Ongoing it
aborts it (with the bumped epoch, so the partitions fence the old producer too) and answers
CONCURRENT_TRANSACTIONS, which the client retries. A transaction silent for its
`transaction.timeout.ms` is aborted the same way (`timed_out`).

KIP-360, as Kafka's TransactionMetadata.prepareIncrementProducerEpoch: a producer that names
its own id and current epoch in InitProducerId (after an abortable error, once its
transaction ended) bumps its epoch and the record keeps the epoch it had
(`last_producer_epoch`), so a retry of that request whose answer was lost, naming the epoch
before, gets the current one back, not bumped again. A bump that fences (an InitProducerId
naming no producer, a transaction aborted for its timeout or by such an InitProducerId) keeps
no previous epoch, as Kafka's prepareFenceProducerEpoch path: the producer whose transaction
timed out is fenced for good (EndTxn and InitProducerId with its epoch answer PRODUCER_FENCED;
librdkafka and the Java client raise a fatal error, and the application makes a new
producer). EndTxn must name the current epoch (Kafka's EndTxn before v5, transaction version 1).

No I/O, no clock: `now_ms` comes in. One instance per coordinator, used by the event-loop
task only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from kio.schema.errors import ErrorCode

from metadata import CommittedOffset
from metadata.transactions import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    EMPTY,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    TRANSACTION_STATES,
    TransactionRecord,
)

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_PRODUCER_EPOCH = 32_767  # Short.MAX_VALUE; Kafka moves to a new producer id before it
DEFAULT_TRANSACTION_MAX_TIMEOUT_MS = 900_000  # transaction.max.timeout.ms
DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS = 604_800_000  # transactional.id.expiration.ms (7 days)


@dataclass(frozen=True, slots=True)
class Decision:
    """An answer: the error code, and the record to write before answering (None: no change)."""

    error: ErrorCode
    record: TransactionRecord | None = None


@dataclass(frozen=True, slots=True)
class NeedProducerId:
    """InitProducerId needs a fresh producer id: call again with one."""


@dataclass(frozen=True, slots=True)
class InitProducerIdDecision:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    record: TransactionRecord | None = None


def is_preparing(record: TransactionRecord) -> bool:
    return record.state in (PREPARE_COMMIT, PREPARE_ABORT)


class TransactionCoordinator:
    def __init__(self, transaction_max_timeout_ms: int = DEFAULT_TRANSACTION_MAX_TIMEOUT_MS) -> None:
        self.transaction_max_timeout_ms = transaction_max_timeout_ms
        self._records: dict[str, TransactionRecord] = {}
        self._by_producer: dict[int, str] = {}

    # --- state -------------------------------------------------------------------------------

    def load(self, records: Iterable[TransactionRecord]) -> list[TransactionRecord]:
        """Take the store's records (a start or a move of the coordinator); returns those
        preparing, which the shell completes."""
        self._records.clear()
        self._by_producer.clear()
        for record in records:
            self.apply(record)
        return [r for r in self._records.values() if is_preparing(r)]

    def apply(self, record: TransactionRecord) -> None:
        """Make a record current (after the store has it)."""
        old = self._records.get(record.transactional_id)
        if old is not None and self._by_producer.get(old.producer_id) == old.transactional_id:
            del self._by_producer[old.producer_id]
        self._records[record.transactional_id] = record
        self._by_producer[record.producer_id] = record.transactional_id

    def get(self, transactional_id: str) -> TransactionRecord | None:
        return self._records.get(transactional_id)

    def records(self) -> list[TransactionRecord]:
        return sorted(self._records.values(), key=lambda r: r.transactional_id)

    def pending_offset_partitions(self, group_id: str) -> set[tuple[str, int]]:
        """Partitions whose offsets in `group_id` an open or committing transaction holds
        (OffsetFetch with require_stable answers them UNSTABLE_OFFSET_COMMIT, KIP-447)."""
        return {
            (o.topic, o.partition)
            for r in self._records.values() if r.state in (ONGOING, PREPARE_COMMIT)
            for g, o in r.pending_offsets if g == group_id
        }  # fmt: skip

    def list_transactions(
        self, states: Iterable[str], producer_ids: Iterable[int], min_duration_ms: int, now_ms: int
    ) -> tuple[list[TransactionRecord], list[str]]:
        """ListTransactions (KIP-664): the records matching every filter given (an empty
        filter matches all; `min_duration_ms` >= 0 keeps transactions open at least that
        long, KIP-994), and the state filters that name no state."""
        wanted_states, wanted_ids = set(states), set(producer_ids)
        unknown = sorted(wanted_states - set(TRANSACTION_STATES))
        listed = [
            r for r in self.records()
            if (not wanted_states or r.state in wanted_states)
            and (not wanted_ids or r.producer_id in wanted_ids)
            and (min_duration_ms < 0 or (r.txn_start_ms >= 0 and now_ms - r.txn_start_ms >= min_duration_ms))
        ]  # fmt: skip
        return listed, unknown

    # --- InitProducerId ----------------------------------------------------------------------

    def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        expected_producer_id: int,
        expected_epoch: int,
        now_ms: int,
        fresh_producer_id: int | None = None,
    ) -> InitProducerIdDecision | NeedProducerId:
        if not 0 < timeout_ms <= self.transaction_max_timeout_ms:
            return InitProducerIdDecision(ErrorCode.invalid_transaction_timeout)
        record = self._records.get(transactional_id)
        if record is None:
            if fresh_producer_id is None:
                return NeedProducerId()
            new = TransactionRecord(transactional_id, fresh_producer_id, 0, timeout_ms, EMPTY, last_update_ms=now_ms)
            return InitProducerIdDecision(ErrorCode.none, new.producer_id, new.producer_epoch, new)
        named = expected_producer_id != NO_PRODUCER_ID
        retry = named and record.last_producer_epoch != NO_PRODUCER_EPOCH and expected_epoch == record.last_producer_epoch
        # KIP-360: a producer that names its id and epoch must be the current one, or the one
        # just before the bump it asked for (a retry). Kafka checks only the id before an
        # Ongoing transaction is fenced; the epoch is checked first here, so an older producer
        # cannot abort the current producer's transaction.
        if named and (expected_producer_id != record.producer_id or (expected_epoch != record.producer_epoch and not retry)):
            return InitProducerIdDecision(ErrorCode.producer_fenced)
        if is_preparing(record):
            return InitProducerIdDecision(ErrorCode.concurrent_transactions)
        if record.state == ONGOING:
            # Fence the current producer and abort its transaction; the client retries.
            return InitProducerIdDecision(ErrorCode.concurrent_transactions, record=self._abort(record, now_ms, bump=True))
        empty = {"timeout_ms": timeout_ms, "state": EMPTY, "partitions": (), "groups": (), "pending_offsets": (),
                 "txn_start_ms": -1, "last_update_ms": now_ms}  # fmt: skip
        if retry:
            # A retry of a bump already made: the current epoch, not bumped again.
            new = replace(record, **empty)  # type: ignore[arg-type]
        elif record.producer_epoch + 1 >= MAX_PRODUCER_EPOCH:
            if fresh_producer_id is None:
                return NeedProducerId()
            # Kafka also remembers the previous producer id to accept a retry of this move; not
            # kept here, so such a retry is fenced (once per 32766 bumps of one producer id).
            new = replace(record, producer_id=fresh_producer_id, producer_epoch=0,
                          last_producer_epoch=NO_PRODUCER_EPOCH, **empty)  # type: ignore[arg-type]  # fmt: skip
        else:
            last = record.producer_epoch if named else NO_PRODUCER_EPOCH  # a producer naming none fences the one before
            new = replace(record, producer_epoch=record.producer_epoch + 1, last_producer_epoch=last, **empty)  # type: ignore[arg-type]
        return InitProducerIdDecision(ErrorCode.none, new.producer_id, new.producer_epoch, new)

    # --- within a transaction ----------------------------------------------------------------

    def _check_producer(self, transactional_id: str, producer_id: int, producer_epoch: int) -> tuple[ErrorCode, TransactionRecord | None]:
        record = self._records.get(transactional_id)
        if record is None or record.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping, None
        if producer_epoch != record.producer_epoch:
            return ErrorCode.producer_fenced, None
        if is_preparing(record):
            return ErrorCode.concurrent_transactions, None
        return ErrorCode.none, record

    def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[tuple[str, int]], now_ms: int
    ) -> Decision:
        """AddPartitionsToTxn: the partitions join the transaction (which starts if none is open)."""
        error, record = self._check_producer(transactional_id, producer_id, producer_epoch)
        if record is None:
            return Decision(error)
        wanted = set(partitions)
        if record.state == ONGOING and wanted <= set(record.partitions):
            return Decision(ErrorCode.none)
        return Decision(ErrorCode.none, self._ongoing(record, now_ms, partitions=tuple(sorted(set(record.partitions) | wanted))))

    def knows_producer(self, producer_id: int) -> bool:
        """Whether a transactional id of this coordinator holds `producer_id`."""
        return producer_id in self._by_producer

    def verify_partition(self, producer_id: int, producer_epoch: int, topic: str, partition: int) -> ErrorCode:
        """KIP-890 part 1: a partition leader asks before the first transactional batch of a
        producer: was the partition added to its ongoing transaction?"""
        transactional_id = self._by_producer.get(producer_id)
        record = None if transactional_id is None else self._records.get(transactional_id)
        if record is None:
            return ErrorCode.invalid_producer_id_mapping
        return verification_error(record.producer_id, record.producer_epoch, record.state, record.partitions,
                                  producer_id, producer_epoch, topic, partition)  # fmt: skip

    def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str, now_ms: int) -> Decision:
        """AddOffsetsToTxn: the group's offsets will be committed with the transaction."""
        error, record = self._check_producer(transactional_id, producer_id, producer_epoch)
        if record is None:
            return Decision(error)
        if record.state == ONGOING and group_id in record.groups:
            return Decision(ErrorCode.none)
        return Decision(ErrorCode.none, self._ongoing(record, now_ms, groups=tuple(sorted(set(record.groups) | {group_id}))))

    def txn_offset_commit(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str, offsets: Iterable[CommittedOffset], now_ms: int
    ) -> Decision:
        """TxnOffsetCommit: offsets kept pending, written to the group when the transaction commits."""
        error, record = self._check_producer(transactional_id, producer_id, producer_epoch)
        if record is None:
            return Decision(error)
        if record.state != ONGOING or group_id not in record.groups:
            return Decision(ErrorCode.invalid_txn_state)
        new = {(o.topic, o.partition): o for g, o in record.pending_offsets if g == group_id}
        for o in offsets:
            new[(o.topic, o.partition)] = o
        pending = tuple(p for p in record.pending_offsets if p[0] != group_id) + tuple((group_id, new[k]) for k in sorted(new))
        return Decision(ErrorCode.none, replace(record, pending_offsets=pending, last_update_ms=now_ms))

    def _ongoing(self, record: TransactionRecord, now_ms: int, **changes: object) -> TransactionRecord:
        if record.state != ONGOING:  # a new transaction: nothing of the last one carries over
            record = replace(record, state=ONGOING, partitions=(), groups=(), pending_offsets=(), txn_start_ms=now_ms)
        return replace(record, last_update_ms=now_ms, **changes)  # type: ignore[arg-type]

    # --- the end ------------------------------------------------------------------------------

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool, now_ms: int) -> Decision:
        """EndTxn. A retry of an end already reached answers NONE; the other end INVALID_TXN_STATE."""
        record = self._records.get(transactional_id)
        if record is None or record.producer_id != producer_id:
            return Decision(ErrorCode.invalid_producer_id_mapping)
        if producer_epoch != record.producer_epoch:
            return Decision(ErrorCode.producer_fenced)
        if record.state == ONGOING:
            if commit:
                return Decision(ErrorCode.none, replace(record, state=PREPARE_COMMIT, last_update_ms=now_ms))
            return Decision(ErrorCode.none, self._abort(record, now_ms, bump=False))
        if is_preparing(record):
            return Decision(ErrorCode.concurrent_transactions)
        if record.state == (COMPLETE_COMMIT if commit else COMPLETE_ABORT):
            return Decision(ErrorCode.none)
        return Decision(ErrorCode.invalid_txn_state)

    def _abort(self, record: TransactionRecord, now_ms: int, *, bump: bool) -> TransactionRecord:
        """PrepareAbort. `bump` fences the producer: its epoch is not kept as the previous one
        (Kafka's endTransaction on an epoch fence sets lastProducerEpoch to -1), so neither
        EndTxn nor InitProducerId with it is taken for a retry."""
        if not bump:
            return replace(record, state=PREPARE_ABORT, last_update_ms=now_ms)
        epoch = record.producer_epoch + 1 if record.producer_epoch + 1 < MAX_PRODUCER_EPOCH else record.producer_epoch
        return replace(record, producer_epoch=epoch, last_producer_epoch=NO_PRODUCER_EPOCH, state=PREPARE_ABORT, last_update_ms=now_ms)

    def complete(self, transactional_id: str, now_ms: int) -> TransactionRecord | None:
        """The record once every marker of a preparing transaction is durable (and, for a
        commit, its offsets written): CompleteCommit / CompleteAbort, nothing pending."""
        record = self._records.get(transactional_id)
        if record is None or not is_preparing(record):
            return None
        state = COMPLETE_COMMIT if record.state == PREPARE_COMMIT else COMPLETE_ABORT
        # The start time stays, as Kafka's prepareComplete keeps txnStartTimestamp (DescribeTransactions).
        return replace(record, state=state, partitions=(), groups=(), pending_offsets=(), last_update_ms=now_ms)

    def timed_out(self, now_ms: int) -> list[TransactionRecord]:
        """Ongoing transactions silent past their timeout, as PrepareAbort records with the
        producer epoch bumped (the producer is fenced, as Kafka's abortTimedOutTransactions)."""
        return [
            self._abort(r, now_ms, bump=True)
            for r in self._records.values()
            if r.state == ONGOING and r.txn_start_ms >= 0 and now_ms - r.txn_start_ms > r.timeout_ms
        ]

    def expired_ids(self, now_ms: int, expiration_ms: int) -> list[str]:
        """Transactional ids with no transaction open and no request for `expiration_ms`
        (Kafka's transactional.id.expiration.ms): the store forgets them, then `forget`."""
        return sorted(
            r.transactional_id for r in self._records.values()
            if r.state in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT) and now_ms - r.last_update_ms >= expiration_ms
        )  # fmt: skip

    def forget(self, transactional_id: str) -> None:
        record = self._records.pop(transactional_id, None)
        if record is not None and self._by_producer.get(record.producer_id) == transactional_id:
            del self._by_producer[record.producer_id]

    def next_timeout_ms(self) -> int | None:
        """When the earliest ongoing transaction times out, or None."""
        ends = [r.txn_start_ms + r.timeout_ms for r in self._records.values() if r.state == ONGOING and r.txn_start_ms >= 0]
        return min(ends, default=None)


def verification_error(
    producer_id: int, producer_epoch: int, state: str, partitions: Iterable[tuple[str, int]],
    asked_producer_id: int, asked_epoch: int, topic: str, partition: int,
) -> ErrorCode:  # fmt: skip
    """KIP-890 part 1 on a transaction's state (the coordinator's own record, or another
    broker's DescribeTransactions answer): may the producer's first batch of this
    transaction go to `topic`-`partition`?"""
    if asked_producer_id != producer_id:
        return ErrorCode.invalid_producer_id_mapping
    if asked_epoch < producer_epoch:
        return ErrorCode.invalid_producer_epoch
    if state != ONGOING or (topic, partition) not in set(partitions):
        return ErrorCode.invalid_txn_state
    return ErrorCode.none
