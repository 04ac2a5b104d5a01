"""`Transactions`: the transaction coordinator's async shell around the sans-IO core
(coordinator.py). It persists every transition in the metadata store before applying it
(the store is Kafka's `__transaction_state`), writes the markers of a transaction that
prepares to commit or abort into each partition through its leader and waits until they are
durable, commits the transaction's offsets to its groups, and aborts transactions that stay
silent past their timeout.

A transactional id is coordinated by the broker holding its coordinator slot (cluster/slots.py,
as Kafka's __transaction_state partition): `coordinator_of` gives the slot and its epoch while
this broker holds it, `held` which slots it holds and at which epochs. When they change (a
slot held again at another epoch too), the state of those it holds is read from the store
again, and every transaction found preparing is finished; the state of slots lost is dropped
(the next holder reads the store). The slot's epoch is the coordinator epoch: every write of
transaction state is conditional on it in the store (CoordinatorFenced once the slot moved
on, so a stale holder cannot write), and markers carry it.

Markers go through the leader of each partition: in process for the partitions this broker
leads, with WriteTxnMarkers (inter_broker.py) to the broker leading the others; a partition
whose leader cannot be reached or refuses is retried until one writes the marker, unless its
topic was deleted meanwhile (the store no longer has it, or has fewer partitions): that marker
is dropped, as Kafka's, and the transaction still completes.

A completion task acts for one record: each round, and before it commits offsets and
completes, it checks that this record is still the transactional id's current one, and stops
otherwise (the slot moved away and back, and the transaction it was started for was finished
elsewhere); a newer preparing record gets a task of its own.

Only the event-loop task calls it. Operations on one transactional id are serialised by a lock.
What it did since the process started is counted in `stats` (plain integers, read by the
metrics at scrape time, as the remote reader's).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from metadata import CommittedOffset, CoordinatorFenced, MetadataStore, TopicMetadata
from metadata.transactions import PREPARE_COMMIT, TransactionRecord

from .produce_turns import ProduceTurns
from ..errors import NotTransactionCoordinator
from .coordinator import DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS, InitProducerIdDecision, NeedProducerId, TransactionCoordinator, is_preparing
from .inter_broker import InterBrokerClient

if TYPE_CHECKING:
    from ..partition import PartitionLeader

log = logging.getLogger(__name__)

END_TXN_WAIT_S = 10.0  # EndTxn answers once the markers are durable, or after this (the outcome is decided)
MARKER_RETRY_S = 0.2
MAX_TIMER_SLEEP_S = 1.0


@dataclass(slots=True)
class CoordinatorStats:
    """Transactions this broker finished as coordinator since it started: completed (the
    CompleteCommit / CompleteAbort record written, each counted once) and aborted because
    they went silent past their timeout (also counted aborted once complete)."""

    committed: int = 0
    aborted: int = 0
    timed_out: int = 0


class Transactions:
    def __init__(
        self,
        store: MetadataStore,
        leader: Callable[[str, int], PartitionLeader | None],
        allocate_producer_id: Callable[[], Awaitable[int]],
        clock: Callable[[], int],
        coordinator_of: Callable[[str], tuple[int, int] | None],
        held: Callable[[], frozenset[tuple[int, int]]],
        transaction_max_timeout_ms: int,
        remote_leader: Callable[[str, int], tuple[str, int] | None] = lambda topic, index: None,
        inter_broker: InterBrokerClient | None = None,
        transactional_id_expiration_ms: int = DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS,
        find_topic: Callable[[str], Awaitable[TopicMetadata | None]] | None = None,
    ) -> None:
        self.transactional_id_expiration_ms = transactional_id_expiration_ms
        self.store = store
        self.core = TransactionCoordinator(transaction_max_timeout_ms)
        self.stats = CoordinatorStats()
        self._leader = leader
        self._remote_leader = remote_leader  # (host, port) of another broker leading the partition
        self._inter_broker = inter_broker  # how markers reach it
        self._find_topic = find_topic  # the topic, None once deleted (registry.find_topic); None: never dropped
        self._allocate_producer_id = allocate_producer_id
        self._clock = clock
        self._coordinator_of = coordinator_of  # (slot, epoch) of a transactional id held here, else None
        self._held = held
        self._loaded: frozenset[tuple[int, int]] | None = None  # the (slot, epoch)s whose state core holds
        self._load_lock = asyncio.Lock()
        self._locks: dict[str, asyncio.Lock] = {}
        self._completions: dict[str, asyncio.Task[None]] = {}
        self.produce_turns = ProduceTurns()  # Produce requests verified elsewhere, in order (produce_turns.py)
        self._completing: dict[asyncio.Task[None], TransactionRecord] = {}  # the record each running completion is for
        self._timer: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    # --- life cycle ----------------------------------------------------------------------

    def start(self) -> None:
        self._timer = asyncio.create_task(self._run_timers(), name="transaction-timeouts")

    async def stop(self) -> None:
        tasks = [t for t in (self._timer, *self._completions.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def ensure_loaded(self, transactional_id: str | None = None) -> bool:
        """Whether this broker coordinates `transactional_id` (any, when None); reads the
        store when the slots it holds changed."""
        if self._held() != self._loaded:
            async with self._load_lock:
                held = self._held()
                if held != self._loaded:
                    records = await self.store.list_transactions() if held else []
                    preparing = self.core.load([r for r in records if self._coordinates(r.transactional_id)])
                    self._loaded = held
                    for record in preparing:
                        log.info("transaction %r found in %s: finishing it", record.transactional_id, record.state)
                        self._start_completion(record)
                    self._wake.set()
        return bool(self._loaded) if transactional_id is None else self._coordinates(transactional_id)

    def _coordinates(self, transactional_id: str) -> bool:
        return self._coordinator_of(transactional_id) is not None

    def _lock(self, transactional_id: str) -> asyncio.Lock:
        lock = self._locks.get(transactional_id)
        if lock is None:
            lock = self._locks[transactional_id] = asyncio.Lock()
        return lock

    async def _write(self, record: TransactionRecord) -> None:
        """Persist, then apply; a preparing record starts its completion. A broker that lost the
        coordinator's slot writes nothing more (checked before each write, not fenced by the
        store: the coordinator epoch is the seam for that)."""
        coordinator = self._coordinator_of(record.transactional_id)
        if coordinator is None:
            raise NotTransactionCoordinator(record.transactional_id)
        try:
            await self.store.put_transaction(record, coordinator)
        except CoordinatorFenced as exc:  # the slot moved on before this broker heard of it
            raise NotTransactionCoordinator(record.transactional_id) from exc
        self.core.apply(record)
        if is_preparing(record):
            self._start_completion(record)
        self._wake.set()

    # --- requests ----------------------------------------------------------------------------

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, producer_id: int, producer_epoch: int
    ) -> tuple[ErrorCode, int, int]:
        async with self._lock(transactional_id):
            fresh = None
            while True:
                decision = self.core.init_producer_id(transactional_id, timeout_ms, producer_id, producer_epoch, self._clock(), fresh)
                if not isinstance(decision, NeedProducerId):
                    break
                fresh = await self._allocate_producer_id()
            assert isinstance(decision, InitProducerIdDecision)
            if decision.record is not None:
                await self._write(decision.record)
            if decision.error is ErrorCode.concurrent_transactions and decision.record is not None:
                log.info("InitProducerId of %r fenced epoch %d and aborts its open transaction",
                         transactional_id, decision.record.producer_epoch - 1)  # fmt: skip
            return decision.error, decision.producer_id, decision.producer_epoch

    async def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[tuple[str, int]]
    ) -> ErrorCode:
        async with self._lock(transactional_id):
            decision = self.core.add_partitions(transactional_id, producer_id, producer_epoch, partitions, self._clock())
            if decision.record is not None:
                await self._write(decision.record)
            return decision.error

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str) -> ErrorCode:
        async with self._lock(transactional_id):
            decision = self.core.add_offsets(transactional_id, producer_id, producer_epoch, group_id, self._clock())
            if decision.record is not None:
                await self._write(decision.record)
            return decision.error

    async def txn_offset_commit(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str, offsets: list[CommittedOffset]
    ) -> ErrorCode:
        async with self._lock(transactional_id):
            decision = self.core.txn_offset_commit(transactional_id, producer_id, producer_epoch, group_id, offsets, self._clock())
            if decision.record is not None:
                await self._write(decision.record)
            return decision.error

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> ErrorCode:
        """EndTxn: the outcome is decided once PrepareCommit/PrepareAbort is in the store; the
        answer waits (a bounded time) for the markers to be durable, so a read_committed
        consumer told of the commit finds the records readable."""
        async with self._lock(transactional_id):
            decision = self.core.end_txn(transactional_id, producer_id, producer_epoch, commit, self._clock())
            if decision.record is not None:
                await self._write(decision.record)
            completion = self._completions.get(transactional_id) if decision.record is not None else None
        if completion is not None:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(completion), END_TXN_WAIT_S)
        return decision.error

    def verify(self, producer_id: int, producer_epoch: int, topic: str, partition: int) -> ErrorCode:
        """KIP-890 part 1, asked by a partition leader, in process, for a producer whose
        transactional id this broker coordinates (for one another broker coordinates, the
        Produce handler asked that broker first: handlers/transactions.verify_elsewhere). A
        producer id no transactional id here holds is INVALID_PRODUCER_ID_MAPPING, as that
        broker answers an unknown one: accepted, its batch would hold the partition's last
        stable offset for good (no coordinator would ever end its transaction). Before the
        state is read, or while the slots held here changed since (a slot just moved here, its
        producers not known yet), NOT_ENOUGH_REPLICAS: the producer retries, as for a
        coordinator elsewhere that is loading."""
        if self._loaded is None or self._held() != self._loaded:
            return ErrorCode.not_enough_replicas
        return self.core.verify_partition(producer_id, producer_epoch, topic, partition)

    # --- completion ----------------------------------------------------------------------------

    def _start_completion(self, record: TransactionRecord) -> None:
        """Complete `record`, unless a task already completes this very record. A running task
        for another record (an older transaction, finished elsewhere while the slot was away)
        is cancelled: it would stop by itself at its next check (`_is_current`)."""
        running = self._completions.get(record.transactional_id)
        if running is not None and not running.done():
            if self._completing.get(running) == record:
                return
            log.info("transaction %r: dropping the completion of an earlier record for the one now %s", record.transactional_id, record.state)
            running.cancel()
        task = asyncio.create_task(self._complete(record), name=f"txn-complete-{record.transactional_id}")
        self._completions[record.transactional_id] = task
        self._completing[task] = record
        task.add_done_callback(self._completing.pop)

    def _is_current(self, record: TransactionRecord) -> bool:
        """Whether `record` is still the transactional id's current record. The whole record is
        compared, not only producer id, epoch and state: two transactions of one producer epoch
        (no epoch bump between transactions here) differ in partitions and times."""
        return self.core.get(record.transactional_id) == record

    async def _complete(self, record: TransactionRecord) -> None:
        """Write the markers (each durable), commit the offsets, then record CompleteCommit /
        CompleteAbort. Repeated after a crash: a second marker for a transaction a partition
        already ended ends nothing there, and offsets are overwritten with the same values."""
        commit = record.state == PREPARE_COMMIT
        pending = list(record.partitions)
        while pending:
            coordinator = self._coordinator_of(record.transactional_id)
            if coordinator is None:  # the next holder of the slot finishes it from the store
                log.info("transaction %r: coordinator slot lost; leaving its completion to the next coordinator", record.transactional_id)
                return
            if not self._is_current(record):
                self._superseded(record)
                return
            epoch = coordinator[1]
            waits = []
            missing = []
            for topic, index in pending:
                leader = self._leader(topic, index)
                if leader is None:
                    missing.append((topic, index))
                    continue
                try:
                    offset = leader.append_marker(record.producer_id, record.producer_epoch, commit, epoch, self._clock())
                except Exception as exc:
                    log.warning("transaction %r: marker for %s-%d failed (%s); will retry", record.transactional_id, topic, index, exc)
                    missing.append((topic, index))
                    continue
                waits.append(((topic, index), leader.until_durable(offset + 1)))
            for key, wait in waits:
                try:
                    await wait
                except Exception as exc:
                    log.warning("transaction %r: marker for %s-%d not durable (%s); will retry", record.transactional_id, *key, exc)
                    missing.append(key)
            if not self._is_current(record):
                self._superseded(record)
                return
            pending = await self._remote_markers(record, commit, missing, epoch)
            pending = await self._drop_deleted(record, pending)
            if pending:
                await asyncio.sleep(MARKER_RETRY_S)
        if not self._is_current(record):
            self._superseded(record)
            return
        if commit:
            by_group: dict[str, list[CommittedOffset]] = {}
            for group_id, offset in record.pending_offsets:
                by_group.setdefault(group_id, []).append(offset)
            for group_id, offsets in by_group.items():
                # Conditional on this transaction's coordinator slot, the writer's authority (the
                # group's slot is often another broker's): a stale holder writes no offsets over
                # commits made since; the slot's next holder commits them and completes.
                held = self._coordinator_of(record.transactional_id)
                try:
                    if held is not None:
                        await self._retry(lambda g=group_id, o=offsets, c=held: self.store.commit_offsets(g, o, c))
                except CoordinatorFenced:
                    held = None
                if held is None:
                    log.info("transaction %r: coordinator slot moved on; the next coordinator commits its offsets", record.transactional_id)
                    return
        async with self._lock(record.transactional_id):
            if not self._is_current(record):
                self._superseded(record)
                return
            done = self.core.complete(record.transactional_id, self._clock())
            coordinator = self._coordinator_of(record.transactional_id)
            if done is not None and coordinator is not None:
                try:
                    await self._retry(lambda: self.store.put_transaction(done, coordinator))
                except CoordinatorFenced:
                    log.info("transaction %r: coordinator slot moved on; the next coordinator completes it", record.transactional_id)
                    return
                self.core.apply(done)
                if commit:
                    self.stats.committed += 1
                else:
                    self.stats.aborted += 1
        log.debug("transaction %r of producer %d: %s complete", record.transactional_id, record.producer_id, "commit" if commit else "abort")

    def _superseded(self, record: TransactionRecord) -> None:
        log.info("transaction %r of producer %d (epoch %d, %s) is no longer the current record; its completion stops",
                 record.transactional_id, record.producer_id, record.producer_epoch, record.state)  # fmt: skip

    async def _drop_deleted(self, record: TransactionRecord, partitions: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """The partitions still to write, without those whose topic the store no longer has
        (deleted while the transaction prepared: as Kafka, their markers are dropped, else the
        transactional id would stay preparing for ever). A partition whose topic exists, or
        whose topic could not be looked up, is kept and retried."""
        if not partitions or self._find_topic is None:
            return partitions
        sizes: dict[str, int | None] = {}  # topic -> partitions it has, None once deleted
        left = []
        for topic, index in partitions:
            if topic not in sizes:
                try:
                    found = await self._find_topic(topic)
                except Exception as exc:
                    log.warning("transaction %r: looking up topic %r failed (%s); will retry its marker", record.transactional_id, topic, exc)
                    left.append((topic, index))
                    continue
                sizes[topic] = None if found is None else found.num_partitions
            size = sizes[topic]
            if size is None or index >= size:
                log.warning("transaction %r: %s-%d no longer exists (its topic was deleted); its %s marker is dropped",
                            record.transactional_id, topic, index, "commit" if record.state == PREPARE_COMMIT else "abort")  # fmt: skip
            else:
                left.append((topic, index))
        return left

    async def _remote_markers(self, record: TransactionRecord, commit: bool, partitions: list[tuple[str, int]], epoch: int) -> list[tuple[str, int]]:
        """Send the markers of partitions other brokers lead; returns those still to write."""
        by_broker: dict[tuple[str, int], list[tuple[str, int]]] = {}
        left = []
        for key in partitions:
            address = self._remote_leader(*key)
            if address is None or self._inter_broker is None:
                left.append(key)
            else:
                by_broker.setdefault(address, []).append(key)
        for (host, port), keys in by_broker.items():
            assert self._inter_broker is not None
            try:
                answers = await self._inter_broker.write_txn_markers(
                    (host, port), record.producer_id, record.producer_epoch, commit, epoch, keys, END_TXN_WAIT_S
                )
            except Exception as exc:
                log.warning("transaction %r: WriteTxnMarkers to %s:%d failed (%s); will retry", record.transactional_id, host, port, exc)
                left += keys
                continue
            for key, error in answers.items():
                if error is not ErrorCode.none:
                    log.info("transaction %r: marker for %s-%d refused by %s:%d (%s); will retry",
                             record.transactional_id, *key, host, port, error.name.upper())  # fmt: skip
                    left.append(key)
        return left

    async def _retry(self, operation: Callable[[], Awaitable[None]]) -> None:
        while True:
            try:
                await operation()
                return
            except CoordinatorFenced:
                raise
            except Exception as exc:
                log.warning("transaction coordinator: store write failed (%s); will retry", exc)
                await asyncio.sleep(MARKER_RETRY_S)

    # --- timeouts ------------------------------------------------------------------------------

    async def _run_timers(self) -> None:
        while True:
            try:
                if await self.ensure_loaded():
                    for expired in self.core.timed_out(self._clock()):
                        async with self._lock(expired.transactional_id):  # decided again: a request may have come first
                            record = next((r for r in self.core.timed_out(self._clock()) if r.transactional_id == expired.transactional_id), None)
                            if record is None:
                                continue
                            log.info("transaction %r of producer %d timed out after %d ms: aborting it",
                                     record.transactional_id, record.producer_id, record.timeout_ms)  # fmt: skip
                            await self._write(record)
                            self.stats.timed_out += 1
                    for transactional_id in self.core.expired_ids(self._clock(), self.transactional_id_expiration_ms):
                        async with self._lock(transactional_id):
                            if transactional_id in self.core.expired_ids(self._clock(), self.transactional_id_expiration_ms):
                                coordinator = self._coordinator_of(transactional_id)
                                if coordinator is None:
                                    continue
                                await self.store.delete_transaction(transactional_id, coordinator)
                                self.core.forget(transactional_id)
                                self._locks.pop(transactional_id, None)
                                log.info("transactional id %r expired", transactional_id)
            except Exception:
                log.exception("transaction timeout pass failed; will retry")
            next_ms = self.core.next_timeout_ms()
            sleep_s = MAX_TIMER_SLEEP_S if next_ms is None else min(MAX_TIMER_SLEEP_S, max(0.01, (next_ms - self._clock() + 1) / 1000))
            self._wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), sleep_s)
