"""The producer's background task: drains ready batches into Produce requests and settles them.

One loop per producer (Kafka's Sender thread, as an asyncio task). Each turn it expires
batches past `delivery_timeout_ms`, asks the accumulator which brokers have batches ready,
drains them into one Produce request per broker (at most `max_in_flight` unanswered per
connection; the request is encoded by hand, see protocol.encode_produce_request) and sleeps
until woken by `send()`, by a response, or by the next linger deadline. Responses are handled
in future callbacks, without a task per request.

A batch whose request failed retriably goes back to its queue (see accumulator.py for
ordering) after an exponential backoff, as long as its delivery timeout allows; a stale
leader also asks for a metadata refresh. With idempotence the sender first gets a producer
id (InitProducerId); when a batch with a sequence number fails for good, the sequences of its
partition have a gap, so the sender waits for the requests in flight and gets a new producer
id before sending more (Java bumps the epoch for the same reason).

A transactional producer's id comes from its transaction manager (transaction.py), never from
the sender: a batch that fails for good (UNKNOWN_PRODUCER_ID included) puts the transaction
in its abortable error state, the batches not yet sent fail with it, and the new epoch is
taken when the application aborts.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable
from functools import partial
from typing import Any

from . import protocol
from .accumulator import Accumulator, ProducerBatch
from .cluster import Cluster, now_ms
from .config import ProducerConfig
from .errors import (
    DuplicateSequenceNumberError,
    KafkaError,
    KafkaTimeoutError,
    OutOfOrderSequenceNumberError,
    TransactionAbortableError,
    UnknownProducerIdError,
    error_for,
)
from .structs import TopicPartition
from .transaction import TransactionManager

log = logging.getLogger(__name__)

_NEVER_MS = 1 << 30


class Sender:
    def __init__(
        self,
        config: ProducerConfig,
        accumulator: Accumulator,
        cluster: Cluster,
        on_done: Callable[[ProducerBatch], None],
        txn: TransactionManager | None = None,
    ) -> None:
        self.config = config
        self._txn = txn
        self.accumulator = accumulator
        self.cluster = cluster
        self._on_done = on_done  # the producer's bookkeeping once a batch is settled
        self._loop = asyncio.get_running_loop()
        self._waiter: asyncio.Future[None] | None = None
        self._node_in_flight: dict[int, int] = defaultdict(int)
        self._node_backoff_until: dict[int, int] = {}
        self._connecting: set[int] = set()
        self._need_producer_id = accumulator.params.idempotent
        self._running = True
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="producer-sender")

    async def stop(self) -> None:
        """Stop the loop; requests in flight still settle their batches through callbacks."""
        self._running = False
        if self._task is not None:
            self._task.cancel()  # it may be waiting on InitProducerId: nothing to finish
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    def wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _leader_of(self, tp: TopicPartition) -> int:
        return self.cluster.metadata.leader(tp.topic, tp.partition)

    async def _run(self) -> None:
        while self._running:
            try:
                delay_ms = await self._run_once()
            except Exception:
                log.exception("producer sender turn failed; retrying")
                delay_ms = self.config.retry_backoff_ms
            if delay_ms > 0 and self._running:
                waiter = self._waiter = self._loop.create_future()
                handle = self._loop.call_later(delay_ms / 1000, _resolve, waiter) if delay_ms < _NEVER_MS else None
                await waiter
                if handle is not None:
                    handle.cancel()
                self._waiter = None
            elif self._running:
                await asyncio.sleep(0)

    async def _run_once(self) -> int:
        """One turn; returns how long to sleep (0: go again at once)."""
        accumulator = self.accumulator
        now = now_ms()
        for batch in accumulator.expire(now, self.config.delivery_timeout_ms):
            self._fail(batch, KafkaTimeoutError(f"delivering records to {batch.tp.topic}-{batch.tp.partition}", self.config.delivery_timeout_ms))
        txn = self._txn
        if txn is not None and txn.error is not None and accumulator.has_unsent():
            # The transaction will be aborted (or the producer is fenced): what is not sent yet
            # is not sent at all (Java's abortUndrainedBatches).
            error = txn.fatal if txn.fatal is not None else TransactionAbortableError(txn.transactional_id, txn.error)
            for batch in accumulator.abort_all():
                self._fail(batch, error)
        if self._need_producer_id:
            if accumulator.in_flight_count():
                return _NEVER_MS  # a response will wake us
            if not await self._init_producer_id():
                return self.config.retry_backoff_ms
        nodes, next_check_ms, unknown = accumulator.ready(now, self._leader_of)
        if unknown:
            self.cluster.add_topics(unknown)
            self.cluster.request_refresh()
            next_check_ms = min(next_check_ms, self.config.retry_backoff_ms)
        sendable = set()
        for node in nodes:
            if self._node_backoff_until.get(node, 0) > now:
                next_check_ms = min(next_check_ms, self._node_backoff_until[node] - now)
                continue
            if self._node_in_flight[node] >= self.config.max_in_flight_requests_per_connection:
                continue
            if self.cluster.connection_nowait(node) is None:
                self._connect(node)
                continue
            sendable.add(node)
        if not sendable:
            return next_check_ms
        drained = accumulator.drain(now, sendable, self._leader_of)
        for node, batches in drained.items():
            self._send(node, batches)
        # Something went out: look again at once, more may be ready for another request.
        return 0 if drained else next_check_ms

    # --- producer id -----------------------------------------------------------------------

    async def _init_producer_id(self) -> bool:
        def make(version: int) -> Any:
            cls = protocol.request_class(protocol.INIT_PRODUCER_ID, version)
            return protocol.build(cls, transactional_id=None, transaction_timeout=protocol.ms(-1), producer_id=-1, producer_epoch=-1)

        try:
            response = await self.cluster.request_any(protocol.INIT_PRODUCER_ID, make)
        except KafkaError as exc:
            log.warning("InitProducerId failed, will retry: %s", exc)
            return False
        if response.error_code:
            error = error_for(response.error_code)
            if not error.retriable:
                raise error
            log.warning("InitProducerId failed, will retry: %s", error)
            return False
        self.accumulator.reset_producer_id(response.producer_id, response.producer_epoch)
        self._need_producer_id = False
        log.debug("producer id %d epoch %d", response.producer_id, response.producer_epoch)
        return True

    # --- requests --------------------------------------------------------------------------

    def _connect(self, node: int) -> None:
        if node in self._connecting:
            return
        self._connecting.add(node)

        def done(future: asyncio.Future[Any]) -> None:
            self._connecting.discard(node)
            if future.cancelled():
                return
            error = future.exception()
            if error is not None:
                log.warning("cannot connect to node %d: %s", node, error)
                self._node_backoff_until[node] = now_ms() + self.config.retry_backoff_ms
                self.cluster.request_refresh()
            self.wake()

        asyncio.ensure_future(self.cluster.connection(node)).add_done_callback(done)

    def _send(self, node: int, batches: list[ProducerBatch]) -> None:
        connection = self.cluster.connection_nowait(node)
        if connection is None:
            for batch in batches:
                self._retry_or_fail(batch, error_for(13, "connection lost before sending"))
            return
        version = connection.version(protocol.PRODUCE)
        by_topic: dict[str, list[tuple[int, bytes]]] = defaultdict(list)
        for batch in batches:
            by_topic[batch.tp.topic].append((batch.tp.partition, batch.data))  # type: ignore[arg-type]
        frame = protocol.encode_produce_request(
            version, connection.client_id, self.config.acks, self.config.request_timeout_ms, list(by_topic.items()), self.config.transactional_id
        )
        if self.config.acks == 0:
            try:
                connection.send_frame(frame, None, "ProduceRequest").result()
            except KafkaError as exc:
                for batch in batches:
                    self._retry_or_fail(batch, exc)
                return
            for batch in batches:
                self._succeed(batch, -1, -1)
            return
        self._node_in_flight[node] += 1
        future = connection.send_frame(frame, protocol.response_class(protocol.PRODUCE, version), "ProduceRequest")
        future.add_done_callback(partial(self._on_response, node, batches))

    def _on_response(self, node: int, batches: list[ProducerBatch], future: asyncio.Future[Any]) -> None:
        self._node_in_flight[node] -= 1
        self.wake()
        error = future.exception() if not future.cancelled() else KafkaError("produce request cancelled")
        if error is not None:
            if isinstance(error, KafkaError) and error.invalid_metadata:
                self.cluster.request_refresh()
            for batch in batches:
                self._retry_or_fail(batch, error if isinstance(error, KafkaError) else KafkaError(str(error)))
            return
        response = future.result()
        results = {}
        for topic in response.responses:
            for p in topic.partition_responses:
                results[(topic.name, p.index)] = p
        for batch in batches:
            p = results.get((batch.tp.topic, batch.tp.partition))
            if p is None:
                self._retry_or_fail(batch, error_for(13, "no answer for this partition in the Produce response"))
            elif p.error_code == 0 or p.error_code == DuplicateSequenceNumberError.errno:
                append_time = p.log_append_time  # kio: an aware datetime, None for -1 (CreateTime)
                self._succeed(batch, p.base_offset, -1 if append_time is None else round(append_time.timestamp() * 1000))
            else:
                message = getattr(p, "error_message", None)
                self._retry_or_fail(batch, error_for(p.error_code, message, topic=batch.tp.topic, partition=batch.tp.partition))

    # --- outcomes --------------------------------------------------------------------------

    def _succeed(self, batch: ProducerBatch, base_offset: int, log_append_time: int) -> None:
        self.accumulator.completed(batch, acknowledged=True)
        if not batch.future.done():
            batch.future.set_result((base_offset, log_append_time))
        self._on_done(batch)

    def _fail(self, batch: ProducerBatch, error: BaseException) -> None:
        self.accumulator.completed(batch)
        if self._txn is not None:
            self._txn.batch_failed(error)  # the new epoch comes when the transaction is aborted
        elif self.accumulator.params.idempotent and batch.base_sequence >= 0:
            self._need_producer_id = True  # a gap in this partition's sequences
        if not batch.future.done():
            batch.future.set_exception(error)
        self._on_done(batch)

    def _retry_or_fail(self, batch: ProducerBatch, error: KafkaError) -> None:
        retriable = error.retriable
        if isinstance(error, OutOfOrderSequenceNumberError) and (self._need_producer_id or not self.accumulator.is_next_sequence(batch)):
            retriable = True  # an earlier batch is unanswered or retrying: this one overtook it
        if isinstance(error, UnknownProducerIdError) and self._txn is None:
            self._need_producer_id = True
            retriable = True
        if error.invalid_metadata:
            self.cluster.request_refresh()
        now = now_ms()
        backoff = min(self.config.retry_backoff_ms * (2 ** min(batch.attempts, 16)), self.config.retry_backoff_max_ms)
        if (
            retriable
            and self._running
            and batch.attempts < self.config.retries
            and now + backoff - batch.created_ms < self.config.delivery_timeout_ms
        ):
            log.debug("retrying %r after %s", batch, error)
            self.accumulator.reenqueue(batch, now, backoff)
        else:
            self._fail(batch, error)


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
