"""The record accumulator: per-partition queues of batches waiting to be sent (Kafka's
RecordAccumulator), with the producer's per-partition sending state.

`append()` adds a record to the last open batch of its partition, or opens a new batch when
that one would pass `batch_size`. A partition's first batch is *ready* when it is full (or
another batch waits behind it), when it has waited `linger_ms`, or when a flush is under way;
and it is *sendable* when its partition has a known leader and no retry backoff pending.
`drain()` takes, per broker, at most one batch per partition (Kafka allows one batch per
partition per Produce request) until `max_request_size` is reached. A batch is closed to
appends when drain first builds it, even if it then waits for a later request.

Ordering: batches of a partition leave in order. With idempotence, a batch gets its base
sequence when first drained and keeps it through retries; a retried batch goes back to the
front of its queue and is sent again only once no other batch of its partition is in flight,
so the broker sees sequences in order again. Without idempotence, `max_in_flight == 1` keeps
order by allowing one batch per partition in flight.

`buffered_bytes` counts the records held, from `append` until the batch is `release`d.

Pure: `now` is passed in; futures are attached by the shell (producer.py). One accumulator
belongs to one producer and is used from its event loop only.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from hot_tier.records import HEADER_BYTES

from .builder import BatchBuilder, record_size_bytes
from .structs import TopicPartition

NO_LEADER = -1
SEQUENCE_WRAP = 1 << 31


class ProducerBatch:
    """Records for one partition that travel together in one Produce request."""

    __slots__ = (
        "tp", "builder", "created_ms", "buffered_bytes", "attempts", "retry_at_ms", "base_sequence",
        "producer_id", "producer_epoch", "data", "future", "in_flight", "full", "done",
    )  # fmt: skip

    def __init__(self, tp: TopicPartition, now: int) -> None:
        self.tp = tp
        self.builder = BatchBuilder()
        self.created_ms = now
        self.buffered_bytes = 0
        self.attempts = 0
        self.retry_at_ms = 0
        self.base_sequence = -1
        self.producer_id = -1
        self.producer_epoch = -1
        self.data: bytes | None = None  # built at first drain; rebuilt if the producer id changes
        self.future: Any = None  # the shell's completion future
        self.in_flight = False
        self.full = False
        self.done = False

    @property
    def record_count(self) -> int:
        return self.builder.count

    def __repr__(self) -> str:
        return f"<ProducerBatch {self.tp.topic}-{self.tp.partition} records={self.record_count} seq={self.base_sequence}>"


@dataclass(frozen=True, slots=True)
class AccumulatorParams:
    batch_size: int
    linger_ms: int
    max_request_size: int
    compression: int
    idempotent: bool
    max_in_flight: int
    transactional: bool = False  # batches carry the transactional attribute (transaction.py)


class _PartitionState:
    __slots__ = ("queue", "open", "in_flight", "next_sequence", "acked_sequence")

    def __init__(self) -> None:
        self.queue: deque[ProducerBatch] = deque()
        self.open: ProducerBatch | None = None  # the batch appends go to, until it is full
        self.in_flight = 0
        self.next_sequence = 0  # the base sequence the next new batch takes
        self.acked_sequence = 0  # the sequence after the last acknowledged batch's (Java's lastAckedSequence + 1)


class Accumulator:
    def __init__(self, params: AccumulatorParams) -> None:
        self.params = params
        self._body_limit = params.batch_size - HEADER_BYTES  # records section of a full batch
        self.partitions: dict[TopicPartition, _PartitionState] = {}
        self.buffered_bytes = 0
        self.flushing = 0
        self.producer_id = -1
        self.producer_epoch = -1

    # --- appending -------------------------------------------------------------------------

    def append(
        self,
        tp: tuple[str, int],
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: tuple[tuple[str, bytes | None], ...],
        now: int,
        size: int | None = None,
    ) -> tuple[ProducerBatch, int, bool, bool]:
        """Add a record; returns (its batch, its index in the batch, whether that batch is new,
        whether a batch became full: then there is something for the sender to ship).

        `tp` may be a plain (topic, partition) tuple (it hashes as a TopicPartition); `size` is
        `record_size_bytes` of the record, when the caller has it already.
        """
        state = self.partitions.get(tp)
        if state is None:
            tp = TopicPartition(*tp)
            state = self.partitions[tp] = _PartitionState()
        if size is None:
            size = record_size_bytes(key, value, headers)
        batch = open_batch = state.open
        filled = False
        created = batch is None or batch.full or len(batch.builder.body) + size > self._body_limit
        if created:
            batch = ProducerBatch(TopicPartition(*tp), now)
        builder = batch.builder
        # The record goes into the builder before anything else changes: if it cannot be
        # encoded (BatchBuilder.append raises and leaves the builder as it was), neither the
        # partition's queue nor its open batch may have moved.
        index = builder.append(timestamp, key, value, headers)
        if created:
            if open_batch is not None and not open_batch.full:
                open_batch.full = filled = True
            state.open = batch
            state.queue.append(batch)
        batch.buffered_bytes += size
        self.buffered_bytes += size
        if len(builder.body) >= self._body_limit:
            batch.full = filled = True
        return batch, index, created, filled

    def append_many(
        self,
        tp: tuple[str, int],
        timestamp: int,
        keys: Sequence[bytes | None] | None,
        values: Sequence[bytes | None],
        start: int,
        stop: int,
        now: int,
        room_bytes: int,
        sticky_bytes: int,
    ) -> tuple[ProducerBatch, int, int, bool, bool]:
        """Add records `start`, `start + 1`, ... (before `stop`) to one batch of `tp`, as many
        as `append()` one by one would put in that batch, within `room_bytes` and up to
        `sticky_bytes` (see `BatchBuilder.append_many`); at least one. Returns (the batch, the
        index after the last record added, the sizes they add up to, whether that batch is new,
        whether a batch became full). The records have no headers and were checked by the caller.
        """
        state = self.partitions.get(tp)
        if state is None:
            tp = TopicPartition(*tp)
            state = self.partitions[tp] = _PartitionState()
        batch = open_batch = state.open
        filled = False
        created = batch is None or batch.full
        body_limit = self._body_limit
        if not created:
            position, size = batch.builder.append_many(timestamp, keys, values, start, stop, body_limit, room_bytes, sticky_bytes)
            if position == start:  # the next record does not fit: it opens the next batch, as in append()
                created = True
        if created:
            batch = ProducerBatch(TopicPartition(*tp), now)
            position, size = batch.builder.append_many(timestamp, keys, values, start, stop, body_limit, room_bytes, sticky_bytes)
            if open_batch is not None and not open_batch.full:
                open_batch.full = filled = True
            state.open = batch
            state.queue.append(batch)
        batch.buffered_bytes += size
        self.buffered_bytes += size
        if len(batch.builder.body) >= body_limit:
            batch.full = filled = True
        return batch, position, size, created, filled

    # --- sending ---------------------------------------------------------------------------

    def _sendable_head(self, state: _PartitionState, now: int) -> ProducerBatch | None:
        """The partition's first batch if it may be sent now (ignoring readiness)."""
        if not state.queue:
            return None
        batch = state.queue[0]
        if batch.retry_at_ms > now:
            return None
        if state.in_flight:
            if batch.attempts or not self.params.idempotent and self.params.max_in_flight == 1:
                return None
            if state.in_flight >= self.params.max_in_flight:
                return None
        return batch

    def ready(self, now: int, leader_of: Callable[[TopicPartition], int]) -> tuple[set[int], int, set[str]]:
        """(nodes with a batch to send now, ms until the next batch may become ready, topics
        whose leader is unknown)."""
        nodes: set[int] = set()
        unknown: set[str] = set()
        next_check_ms = 1 << 30
        linger = self.params.linger_ms
        for tp, state in self.partitions.items():
            batch = self._sendable_head(state, now)
            if batch is None:
                if state.queue and state.queue[0].retry_at_ms > now:
                    next_check_ms = min(next_check_ms, state.queue[0].retry_at_ms - now)
                continue
            leader = leader_of(tp)
            if leader == NO_LEADER:
                unknown.add(tp.topic)
                continue
            if leader in nodes:
                continue
            waited = now - batch.created_ms
            if batch.full or len(state.queue) > 1 or self.flushing or batch.attempts or waited >= linger:
                nodes.add(leader)
            else:
                next_check_ms = min(next_check_ms, linger - waited)
        return nodes, next_check_ms, unknown

    def drain(
        self, now: int, nodes: Iterable[int], leader_of: Callable[[TopicPartition], int]
    ) -> dict[int, list[ProducerBatch]]:
        """Take the batches to send to each of `nodes`: one per partition, within max_request_size."""
        wanted = set(nodes)
        drained: dict[int, list[ProducerBatch]] = {node: [] for node in wanted}
        sizes = dict.fromkeys(wanted, 0)
        params = self.params
        for tp, state in self.partitions.items():
            batch = self._sendable_head(state, now)
            if batch is None:
                continue
            node = leader_of(tp)
            if node not in wanted:
                continue
            data = batch.data
            if data is None or (params.idempotent and batch.producer_id != self.producer_id):
                data = self._build(batch, state)
            if sizes[node] and sizes[node] + len(data) > params.max_request_size:
                continue
            sizes[node] += len(data)
            state.queue.popleft()
            if state.open is batch:
                state.open = None
            state.in_flight += 1
            batch.in_flight = True
            batch.full = True
            drained[node].append(batch)
        return {node: batches for node, batches in drained.items() if batches}

    def _build(self, batch: ProducerBatch, state: _PartitionState) -> bytes:
        # Once built, the batch's records are fixed: its bytes are encoded and its sequence
        # range is taken. It is closed to appends here, not when it leaves the queue, since a
        # built batch may stay queued (it did not fit in this request); a record appended to
        # it then would be acknowledged with the batch but never sent.
        batch.full = True
        if state.open is batch:
            state.open = None
        if self.params.idempotent and self.producer_id >= 0:
            if batch.producer_id != self.producer_id or batch.producer_epoch != self.producer_epoch or batch.base_sequence < 0:
                batch.base_sequence = state.next_sequence
                state.next_sequence = (state.next_sequence + batch.record_count) % SEQUENCE_WRAP
            batch.producer_id, batch.producer_epoch = self.producer_id, self.producer_epoch
        batch.data = batch.builder.build(
            compression=self.params.compression,
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
            base_sequence=batch.base_sequence,
            is_transactional=self.params.transactional,
        )
        return batch.data

    # --- outcomes --------------------------------------------------------------------------

    def completed(self, batch: ProducerBatch, acknowledged: bool = False) -> None:
        """The batch was acknowledged or failed for good: it leaves the accumulator."""
        state = self.partitions[batch.tp]
        if acknowledged and batch.base_sequence >= 0 and (batch.producer_id, batch.producer_epoch) == (self.producer_id, self.producer_epoch):
            state.acked_sequence = (batch.base_sequence + batch.record_count) % SEQUENCE_WRAP
        if batch.in_flight:
            batch.in_flight = False
            state.in_flight -= 1
        self._release(batch)

    def is_next_sequence(self, batch: ProducerBatch) -> bool:
        """Whether `batch` comes right after the last acknowledged batch of its partition (Java's
        isNextSequence). An OUT_OF_ORDER_SEQUENCE answer to a batch that does not is caused by
        an earlier batch still in flight or retrying (e.g. at an old leader): retry it; to the
        next batch it means the broker lost sequences, and the batch fails."""
        state = self.partitions[batch.tp]
        return batch.base_sequence == state.acked_sequence and (batch.producer_id, batch.producer_epoch) == (self.producer_id, self.producer_epoch)

    def reenqueue(self, batch: ProducerBatch, now: int, backoff_ms: int) -> None:
        """Put a failed in-flight batch back for a retry, in sequence order at the front."""
        state = self.partitions[batch.tp]
        if batch.in_flight:
            batch.in_flight = False
            state.in_flight -= 1
        batch.attempts += 1
        batch.retry_at_ms = now + backoff_ms
        queue = state.queue
        position = 0
        if batch.base_sequence >= 0:
            while position < len(queue) and 0 <= queue[position].base_sequence < batch.base_sequence:
                position += 1
        queue.insert(position, batch)

    def expire(self, now: int, delivery_timeout_ms: int) -> list[ProducerBatch]:
        """Remove and return queued (not in-flight) batches older than the delivery timeout."""
        expired = []
        for state in self.partitions.values():
            while state.queue and now - state.queue[0].created_ms >= delivery_timeout_ms:
                expired.append(state.queue.popleft())
        for batch in expired:
            self._release(batch)
        return expired

    def abort_all(self) -> list[ProducerBatch]:
        """Remove and return every queued batch (the producer is closing without draining)."""
        aborted = [batch for state in self.partitions.values() for batch in state.queue]
        for state in self.partitions.values():
            state.queue.clear()
        for batch in aborted:
            self._release(batch)
        return aborted

    def _release(self, batch: ProducerBatch) -> None:
        state = self.partitions.get(batch.tp)
        if state is not None and state.open is batch:
            state.open = None  # an expired or aborted batch takes no more records
        if not batch.done:
            batch.done = True
            self.buffered_bytes -= batch.buffered_bytes

    def reset_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        """A new producer id or epoch: sequences restart at 0 for every partition, and batches
        not yet acknowledged get new sequences when next drained."""
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        for state in self.partitions.values():
            state.next_sequence = state.acked_sequence = 0
            for batch in state.queue:
                batch.base_sequence = -1

    def has_unsent(self) -> bool:
        return any(state.queue for state in self.partitions.values())

    def in_flight_count(self) -> int:
        return sum(state.in_flight for state in self.partitions.values())
