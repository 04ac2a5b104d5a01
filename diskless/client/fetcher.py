"""The consumer's fetcher: keeps one Fetch in flight per broker, ahead of the application.

For each broker, the fetcher sends one Fetch for the assigned partitions it leads that are
fetchable (a known `fetch_offset`, not paused, fewer than two answers waiting), and sends the
next as soon as the answer is in, while the application is still working through earlier
records. Answers are kept as `CompletedFetch`es (the record bytes as received); records are
decoded only as the application takes them (`drain`), a batch's CRC checked before its first.

Records below the position are skipped (a fetch returns whole batches, which may start
before the offset asked for), as are control batches (transaction markers) and, with
read_committed, the batches of aborted transactions.

Position resets (a new partition, OFFSET_OUT_OF_RANGE, seek_to_beginning/end) are resolved
by a helper task: the committed offset first (through `committed`, when in a group), else
`auto_offset_reset` by ListOffsets.

Used from the consumer's event loop only.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from itertools import islice
from typing import Any

from hot_tier.records import ATTR_CONTROL, ATTR_TRANSACTIONAL, RecordsError, read_header

from . import protocol
from .cluster import NO_LEADER, Cluster, now_ms
from .config import ConsumerConfig
from .errors import CorruptRecordError, KafkaError, NoOffsetForPartitionError, OffsetOutOfRangeError, error_for
from .offsets import EARLIEST, LATEST, list_offsets
from .records import iter_records
from .structs import ConsumerRecord, TopicPartition
from .subscription import PartitionState, SubscriptionState

log = logging.getLogger(__name__)

_BATCH_FRAME = struct.Struct(">qi")  # base_offset, batch_length
_BASE_OFFSET = struct.Struct(">q")
_LAST_OFFSET_DELTA = struct.Struct(">i")
_ATTRIBUTES_AND_PID = struct.Struct(">h")
_PRODUCER_ID = struct.Struct(">q")
_HEADER_BYTES = 61
_OFFSET_OUT_OF_RANGE = 1



class CompletedFetch:
    """The record bytes of one partition from one Fetch answer, consumed batch by batch."""

    __slots__ = ("tp", "epoch", "data", "position", "end", "records", "aborted", "aborting", "error", "batch_next_offset", "batch_end")

    def __init__(self, tp: TopicPartition, epoch: int, data: bytes, end: int, aborted: list[tuple[int, int]] | None) -> None:
        self.tp = tp
        self.epoch = epoch
        self.data = data
        self.position = 0  # byte position of the next batch to decode
        self.end = end  # the whole batches end here; a partial batch may follow
        self.records: Iterator[ConsumerRecord] | None = None  # the rest of the batch being taken
        # As Java's CompletedFetch: the aborted transactions, (first offset, producer id) by first
        # offset, move into `aborting` once the batches reach their first offset; a producer's
        # control batch (its abort marker) takes it out. One producer aborts many transactions
        # over time, each its own entry: a commit marker before an abort must not end it.
        self.aborted = aborted
        self.aborting: set[int] = set()
        self.error: Exception | None = None
        self.batch_next_offset = -1
        self.batch_end = 0  # byte position after the batch being taken

    @property
    def exhausted(self) -> bool:
        return self.records is None and self.position >= self.end

    def take(self, limit: int, state: PartitionState, check_crc: bool) -> list[ConsumerRecord]:
        """Up to `limit` records at or after the position; advances `state.position`."""
        out: list[ConsumerRecord] = []
        while len(out) < limit:
            if self.records is None:
                if self.position >= self.end or not self._next_batch(state, check_crc):
                    break
                continue
            wanted = limit - len(out)
            try:
                taken = list(islice(self.records, wanted))
            except RecordsError as exc:
                self._corrupt(str(exc))
                break
            out += taken
            if taken:
                state.position = max(state.position or 0, taken[-1].offset + 1)
            if len(taken) < wanted:
                # The batch is done; compaction may have removed its last records.
                self.records, self.position = None, self.batch_end
                state.position = max(state.position or 0, self.batch_next_offset)
        return out

    def _corrupt(self, message: str) -> None:
        """Stop at a batch that does not decode: its records before the fault were taken."""
        (base_offset,) = _BASE_OFFSET.unpack_from(self.data, self.position)
        self.error = CorruptRecordError(self.tp.topic, self.tp.partition, base_offset, message)
        self.records = None
        self.position = self.end

    def _next_batch(self, state: PartitionState, check_crc: bool) -> bool:
        """Start the next batch: `records` then iterates it (None if skipped); False on an error."""
        data, at = self.data, self.position
        base_offset, batch_length = _BATCH_FRAME.unpack_from(data, at)
        (last_delta,) = _LAST_OFFSET_DELTA.unpack_from(data, at + 23)
        next_offset = base_offset + last_delta + 1
        (attributes,) = _ATTRIBUTES_AND_PID.unpack_from(data, at + 21)
        self.records = None
        self.batch_next_offset = next_offset
        assert state.position is not None
        if next_offset <= state.position:
            self.position = at + batch_length + 12
            return True
        if attributes & ATTR_CONTROL:
            if self.aborted or self.aborting:
                # As Java's consumeAbortedTransactionsUpTo: the aborted transactions that began
                # before this marker are taken first, so that a fetch starting at an abort
                # marker leaves no entry for its producer behind to catch the next transaction.
                while self.aborted and self.aborted[0][0] < next_offset:
                    self.aborting.add(self.aborted.pop(0)[1])
                (producer_id,) = _PRODUCER_ID.unpack_from(data, at + 43)
                self.aborting.discard(producer_id)  # its marker ends the aborted transaction
            self.position = at + batch_length + 12
            state.position = max(state.position, next_offset)
            return True
        if (self.aborted or self.aborting) and attributes & ATTR_TRANSACTIONAL:
            while self.aborted and self.aborted[0][0] < next_offset:
                self.aborting.add(self.aborted.pop(0)[1])
            (producer_id,) = _PRODUCER_ID.unpack_from(data, at + 43)
            if producer_id in self.aborting:
                self.position = at + batch_length + 12
                state.position = max(state.position, next_offset)
                return True
        try:
            header = read_header(data, at, check_crc=check_crc)
        except RecordsError as exc:
            self._corrupt(str(exc))
            return False
        # `position` stays at the batch while its records are taken: a fault names its base offset.
        self.records = iter_records(data, header, self.tp.topic, self.tp.partition, state.position)
        self.batch_end = at + header.size_bytes
        return True


def whole_batches(data: bytes) -> tuple[int, int | None]:
    """(end of the whole batches at the start of `data`, offset after the last of them)."""
    position, end = 0, len(data)
    next_offset = None
    while end - position >= _HEADER_BYTES:
        base_offset, batch_length = _BATCH_FRAME.unpack_from(data, position)
        size = batch_length + 12
        if size < _HEADER_BYTES or position + size > end:
            break
        (last_delta,) = _LAST_OFFSET_DELTA.unpack_from(data, position + 23)
        next_offset = base_offset + last_delta + 1
        position += size
    return position, next_offset


class Fetcher:
    def __init__(
        self,
        config: ConsumerConfig,
        cluster: Cluster,
        subscription: SubscriptionState,
        committed: Callable[[list[TopicPartition]], Awaitable[dict[TopicPartition, int]]] | None,
    ) -> None:
        self.config = config
        self.cluster = cluster
        self.subscription = subscription
        self._committed = committed  # the group's OffsetFetch, None without a group
        self.completed: deque[CompletedFetch] = deque()
        self.errors: deque[Exception] = deque()
        self._node_in_flight: set[int] = set()
        self._node_backoff_until: dict[int, int] = {}
        self._connecting: set[int] = set()
        self._resolving: asyncio.Task[None] | None = None
        self._data_waiters: list[asyncio.Future[None]] = []
        self._loop = asyncio.get_running_loop()
        self._closed = False
        self._retry_handle: asyncio.TimerHandle | None = None

    def close(self) -> None:
        self._closed = True
        if self._resolving is not None:
            self._resolving.cancel()
        if self._retry_handle is not None:
            self._retry_handle.cancel()
        self._notify()

    # --- the application's side ------------------------------------------------------------

    def drain(self, max_records: int, partitions: set[TopicPartition] | None = None) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records ready for the application, at most `max_records`, by partition."""
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        remaining = max_records
        skipped: list[CompletedFetch] = []
        assignment = self.subscription.assignment
        check_crc = self.config.check_crcs
        while remaining > 0 and self.completed:
            fetch = self.completed.popleft()
            state = assignment.get(fetch.tp)
            if state is None or state.epoch != fetch.epoch or state.position is None:
                continue  # unassigned or moved since it was fetched (seek resets `buffered`)
            if state.paused or state.revoking or (partitions is not None and fetch.tp not in partitions):
                skipped.append(fetch)
                continue
            records = fetch.take(remaining, state, check_crc)
            if records:
                out.setdefault(fetch.tp, []).extend(records)
                remaining -= len(records)
            if fetch.error is not None:
                state.buffered -= 1
                state.fetch_offset = state.position  # fetch again from the bad batch, if the app seeks
                self.errors.append(fetch.error)
                break
            if fetch.exhausted:
                state.buffered -= 1
                self.wake()
            else:
                skipped.append(fetch)
                break
        self.completed.extendleft(reversed(skipped))
        return out

    def has_data(self) -> bool:
        return bool(self.completed) or bool(self.errors)

    async def wait_for_data(self, timeout_s: float) -> None:
        waiter = self._loop.create_future()
        self._data_waiters.append(waiter)
        handle = self._loop.call_later(timeout_s, _resolve, waiter)
        try:
            await waiter
        finally:
            handle.cancel()

    def _notify(self) -> None:
        waiters, self._data_waiters = self._data_waiters, []
        for waiter in waiters:
            _resolve(waiter)

    # --- fetching --------------------------------------------------------------------------

    def wake(self) -> None:
        """Send whatever fetches can go now, and start resolving missing positions."""
        if self._closed:
            return
        if self.subscription.missing_positions() and (self._resolving is None or self._resolving.done()):
            self._resolving = asyncio.ensure_future(self._resolve_positions())
        self._send_fetches()

    def _send_fetches(self) -> None:
        meta = self.cluster.metadata
        now = now_ms()
        by_node: dict[int, list[tuple[TopicPartition, PartitionState]]] = {}
        need_metadata = False
        for tp, state in self.subscription.assignment.items():
            if not state.fetchable:
                continue
            leader = meta.leader(tp.topic, tp.partition)
            if leader == NO_LEADER:
                need_metadata = True
                continue
            if leader in self._node_in_flight or self._node_backoff_until.get(leader, 0) > now:
                continue
            by_node.setdefault(leader, []).append((tp, state))
        if need_metadata:
            self.cluster.add_topics({tp.topic for tp in self.subscription.assignment})
            self.cluster.request_refresh()
            self._retry_later()
        for node, partitions in by_node.items():
            connection = self.cluster.connection_nowait(node)
            if connection is None:
                self._connect(node)
                continue
            self._send_fetch(node, connection, partitions)

    def _send_fetch(self, node: int, connection: Any, partitions: list[tuple[TopicPartition, PartitionState]]) -> None:
        config = self.config
        cls = protocol.request_class(protocol.FETCH, connection.version(protocol.FETCH))
        topic_cls = protocol.nested(cls, "FetchTopic")
        partition_cls = protocol.nested(cls, "FetchPartition")
        by_topic: dict[str, list[Any]] = {}
        sent = []
        meta = self.cluster.metadata
        for tp, state in partitions:
            by_topic.setdefault(tp.topic, []).append(
                protocol.build(
                    partition_cls,
                    partition=tp.partition,
                    current_leader_epoch=meta.leader_epoch(tp.topic, tp.partition),
                    fetch_offset=state.fetch_offset,
                    last_fetched_epoch=-1,
                    log_start_offset=-1,
                    partition_max_bytes=config.max_partition_fetch_bytes,
                )
            )
            state.in_flight = True
            sent.append((tp, state.epoch, state.fetch_offset))
        request = protocol.build(
            cls,
            cluster_id=None,
            replica_id=-1,
            max_wait=protocol.ms(config.fetch_max_wait_ms),
            min_bytes=config.fetch_min_bytes,
            max_bytes=config.fetch_max_bytes,
            isolation_level=config.isolation_level,
            session_id=0,
            session_epoch=-1,  # no fetch session: every fetch is a full fetch
            topics=tuple(topic_cls(topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
            forgotten_topics_data=(),
            rack_id="",
        )
        self._node_in_flight.add(node)
        future = connection.send(request, timeout_ms=config.request_timeout_ms + config.fetch_max_wait_ms)
        future.add_done_callback(partial(self._on_fetch, node, sent))

    def _on_fetch(self, node: int, sent: list[tuple[TopicPartition, int, int]], future: asyncio.Future[Any]) -> None:
        self._node_in_flight.discard(node)
        assignment = self.subscription.assignment
        expected = {}
        for tp, epoch, fetch_offset in sent:
            state = assignment.get(tp)
            if state is not None:
                state.in_flight = False
                expected[tp] = (epoch, fetch_offset)
        error = None if future.cancelled() else future.exception()  # retrieved even when closed
        if self._closed:
            return
        if future.cancelled() or error is not None:
            if not self._closed:
                log.debug("fetch from node %d failed: %s", node, error)
                self._node_backoff_until[node] = now_ms() + self.config.retry_backoff_ms
                self.cluster.request_refresh()
                self._retry_later()
            return
        response = future.result()
        if getattr(response, "error_code", 0):
            log.warning("fetch from node %d failed: %s", node, error_for(response.error_code))
            self._node_backoff_until[node] = now_ms() + self.config.retry_backoff_ms
            self._retry_later()
            return
        got_data = False
        for topic in response.responses:
            for p in topic.partitions:
                tp = TopicPartition(topic.topic, p.partition_index)
                state = assignment.get(tp)
                sent_as = expected.get(tp)
                if state is None or sent_as is None or state.epoch != sent_as[0]:
                    continue  # unassigned or moved (seek) since: the answer is stale
                got_data |= self._on_partition(tp, state, p)
        if got_data:
            self._notify()
        self.wake()

    def _on_partition(self, tp: TopicPartition, state: PartitionState, p: Any) -> bool:
        code = p.error_code
        if code:
            if code == _OFFSET_OUT_OF_RANGE:
                strategy = self.config.auto_offset_reset
                if strategy == "none":
                    self.errors.append(OffsetOutOfRangeError(None, topic=tp.topic, partition=tp.partition, offset=state.fetch_offset))
                    state.awaiting_seek = True
                    return True
                log.info("offset %s of %s-%d is out of range; resetting to %s", state.fetch_offset, tp.topic, tp.partition, strategy)
                state.request_reset(strategy)
                return False
            error = error_for(code, None, topic=tp.topic, partition=tp.partition)
            if error.invalid_metadata or error.retriable:
                self.cluster.request_refresh()
                self._retry_later()
                return False
            self.errors.append(error)
            return True
        state.high_watermark = p.high_watermark
        state.last_stable_offset = p.last_stable_offset
        state.log_start_offset = getattr(p, "log_start_offset", -1)
        data = p.records
        if not data:
            return False
        end, next_offset = whole_batches(data)
        if end == 0 or next_offset is None:
            return False
        aborted = None
        if self.config.isolation_level and p.aborted_transactions:
            aborted = sorted((a.first_offset, a.producer_id) for a in p.aborted_transactions)
        self.completed.append(CompletedFetch(tp, state.epoch, data, end, aborted))
        state.buffered += 1
        state.fetch_offset = max(state.fetch_offset or 0, next_offset)
        return True

    def _connect(self, node: int) -> None:
        if node in self._connecting:
            return
        self._connecting.add(node)

        def done(future: asyncio.Future[Any]) -> None:
            self._connecting.discard(node)
            if not future.cancelled() and future.exception() is not None:
                log.warning("cannot connect to node %d: %s", node, future.exception())
                self._node_backoff_until[node] = now_ms() + self.config.retry_backoff_ms
                self.cluster.request_refresh()
                self._retry_later()
                return
            self.wake()

        asyncio.ensure_future(self.cluster.connection(node)).add_done_callback(done)

    def _retry_later(self) -> None:
        if self._retry_handle is None and not self._closed:

            def fire() -> None:
                self._retry_handle = None
                self.wake()

            self._retry_handle = self._loop.call_later(self.config.retry_backoff_ms / 1000, fire)

    # --- positions -------------------------------------------------------------------------

    async def _resolve_positions(self) -> None:
        try:
            while not self._closed:
                missing = self.subscription.missing_positions()
                if not missing:
                    return
                await self._resolve(missing)
        except asyncio.CancelledError:
            raise
        except KafkaError as exc:
            if exc.retriable:
                log.info("finding positions failed, will retry: %s", exc)
                self._retry_later()
            else:
                self.errors.append(exc)
                self._notify()
        finally:
            if not self._closed:
                self._notify()  # position() may be waiting for these
                self._send_fetches()

    async def _resolve(self, missing: list[TopicPartition]) -> None:
        assignment = self.subscription.assignment
        epochs = {tp: assignment[tp].epoch for tp in missing}
        strategies: dict[TopicPartition, str] = {}
        need_committed = [tp for tp in missing if assignment[tp].reset is None]
        committed: dict[TopicPartition, int] = {}
        if need_committed and self._committed is not None:
            committed = await self._committed(need_committed)
        for tp in missing:
            state = assignment.get(tp)
            if state is None or state.epoch != epochs[tp]:
                continue
            if tp in committed:
                state.seek(committed[tp])
            else:
                strategies[tp] = state.reset or self.config.auto_offset_reset
        no_reset = [tp for tp, s in strategies.items() if s == "none"]
        if no_reset:
            for tp in no_reset:
                assignment[tp].awaiting_seek = True
            raise NoOffsetForPartitionError(sorted(no_reset))
        if not strategies:
            return
        timestamps = {tp: EARLIEST if s == "earliest" else LATEST for tp, s in strategies.items()}
        found = await list_offsets(self.cluster, timestamps, isolation_level=self.config.isolation_level)
        for tp, answer in found.items():
            state = assignment.get(tp)
            if state is None or state.epoch != epochs[tp] or answer is None:
                continue
            state.seek(answer.offset)


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
