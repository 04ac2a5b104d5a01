"""The producer: `send()` puts a record in the accumulator; the sender ships it.

    async with Producer(bootstrap_servers="127.0.0.1:9092", linger_ms=5) as producer:
        delivery = await producer.send("orders", b"value", key=b"user-1")
        metadata = await delivery          # RecordMetadata(topic, partition, offset, timestamp)
        await producer.send_and_wait("orders", b"another")

`send()` returns as soon as the record is in its batch; it waits only while the topic's
metadata is unknown or the buffer (`buffer_memory`) is full, for at most `max_block_ms`.
`flush()` sends everything buffered at once and waits for the answers; `close()` flushes, then
stops. Settings follow the Java producer's names and defaults (see config.py); idempotence is
on by default (acks=all) and turned off with a warning when the broker lacks InitProducerId.

Used from one event loop; `send()` may be called from many tasks of that loop at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import contextlib
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Mapping, Sequence
from time import time as _time
from typing import Any

from . import protocol
from .accumulator import Accumulator, AccumulatorParams, ProducerBatch
from .builder import record_size_bytes
from .cluster import Cluster, now_ms
from .config import ProducerConfig
from .errors import ClientClosedError, IllegalStateError, KafkaTimeoutError, MessageSizeTooLargeError
from .partitioner import StickyPartitioner, partition_for_key
from .sender import Sender
from .structs import ConsumerGroupMetadata, OffsetAndMetadata, RecordMetadata, TopicPartition
from .transaction import TransactionManager

log = logging.getLogger(__name__)

Headers = Iterable[tuple[str, bytes | None]]


class DeliveryFuture(tuple):
    """The outcome of one `send()`: await it for a `RecordMetadata`, or its error.

    One asyncio future per batch is shared by the batch's records; this adds the record's place
    in the batch. A tuple (batch, index, timestamp) so that `send()` builds it in one C call.
    """

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        yield from self[0].future.__await__()
        return self.result()

    def done(self) -> bool:
        return self[0].future.done()

    def result(self) -> RecordMetadata:
        batch, index, timestamp = self
        base_offset, log_append_time = batch.future.result()
        tp = batch.tp
        return RecordMetadata(
            tp.topic,
            tp.partition,
            base_offset + index if base_offset >= 0 else -1,
            log_append_time if log_append_time >= 0 else timestamp,
        )

    def exception(self) -> BaseException | None:
        return self[0].future.exception()

    def add_done_callback(self, callback: Callable[[DeliveryFuture], None]) -> None:
        self[0].future.add_done_callback(lambda _f: callback(self))


_new_delivery = tuple.__new__
_NONE = {type(None)}
_BYTES_OR_NONE = {bytes, type(None)}


def _as_bytes(data: object, what: str) -> bytes:
    """A bytes-like `data` as bytes; anything else is the caller's mistake."""
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    if isinstance(data, bytes):  # a bytes subclass
        return bytes(data)
    hint = f" (encode it, or give the Producer a {what}_serializer)" if what in ("key", "value") else ""
    raise TypeError(f"a record's {what} must be bytes or None, not {type(data).__name__}{hint}")


def _checked_headers(headers: Headers) -> tuple[tuple[str, bytes | None], ...]:
    checked = []
    for header in headers:
        try:
            header_key, header_value = header
        except (TypeError, ValueError):
            raise TypeError(f"a record header must be a (str, bytes | None) pair, not {header!r}") from None
        if type(header_key) is not str:
            raise TypeError(f"a record header's key must be str, not {type(header_key).__name__}")
        if header_value is not None and type(header_value) is not bytes:
            header_value = _as_bytes(header_value, "header value")
        checked.append((header_key, header_value))
    return tuple(checked)


class Producer:
    """`key_serializer` and `value_serializer`, as in aiokafka, turn what `send()` is given into
    bytes (for example `lambda v: json.dumps(v).encode()`); without them keys and values must be
    bytes or None. A record that is rejected (a wrong type, a serializer that raises, too large)
    raises from `send()` and leaves the producer as it was."""

    def __init__(
        self,
        bootstrap_servers: str = "127.0.0.1:9092",
        *,
        key_serializer: Callable[[Any], bytes | None] | None = None,
        value_serializer: Callable[[Any], bytes | None] | None = None,
        **settings: Any,
    ) -> None:
        self.config = ProducerConfig.from_kwargs(bootstrap_servers=bootstrap_servers, **settings)
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self._cluster: Cluster | None = None
        self._accumulator: Accumulator | None = None
        self._sender: Sender | None = None
        self._partitioner = StickyPartitioner(self.config.batch_size)
        self._incomplete: set[ProducerBatch] = set()
        self._buffer_waiters: list[asyncio.Future[None]] = []
        self._started = False
        self._starting: asyncio.Future[None] | None = None
        self._closed = False
        self._txn: TransactionManager | None = None  # with a transactional_id (transaction.py)

    # --- life cycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, learn the cluster and (with idempotence) check the broker supports it."""
        if self._closed:
            raise ClientClosedError("producer")
        if self._started:
            return
        if self._starting is not None:
            return await asyncio.shield(self._starting)
        self._starting = asyncio.get_running_loop().create_future()
        try:
            await self._start()
        except BaseException as exc:
            self._starting.set_exception(exc)
            self._starting.exception()
            self._starting = None
            raise
        self._starting.set_result(None)

    async def _start(self) -> None:
        config = self.config
        cluster = Cluster(
            config.bootstrap_servers,
            client_id=config.client_id,
            request_timeout_ms=config.request_timeout_ms,
            metadata_max_age_ms=config.metadata_max_age_ms,
            retry_backoff_ms=config.retry_backoff_ms,
            security=config.security,
            allow_auto_topic_creation=True,
        )
        await cluster.start()
        idempotent = config.enable_idempotence
        if idempotent:
            connection = await cluster.any_connection()
            if not connection.supports(protocol.INIT_PRODUCER_ID):
                log.warning(
                    "broker %s:%d does not support InitProducerId: producing without idempotence",
                    connection.host, connection.port,
                )  # fmt: skip
                idempotent = False
                self.config = dataclasses.replace(config, enable_idempotence=False)
        accumulator = Accumulator(
            AccumulatorParams(
                batch_size=config.batch_size,
                linger_ms=config.linger_ms,
                max_request_size=config.max_request_size,
                compression=config.compression_type,
                idempotent=idempotent,
                max_in_flight=config.max_in_flight_requests_per_connection,
                transactional=config.transactional_id is not None,
            )
        )
        self._loop = asyncio.get_running_loop()
        self._cluster = cluster
        if config.transactional_id is not None:
            self._txn = TransactionManager(
                config.transactional_id, config.transaction_timeout_ms, cluster, config.retry_backoff_ms, config.max_block_ms
            )
        self._sender = Sender(self.config, accumulator, cluster, self._batch_done, self._txn)
        if self._txn is not None:
            # The producer id comes from the transaction coordinator, before the sender runs.
            accumulator.reset_producer_id(*await self._txn.init())
            self._sender._need_producer_id = False
        self._sender.start()
        self._accumulator = accumulator  # last: send() takes a set accumulator to mean "started"
        self._started = True

    async def close(self, timeout_ms: int | None = None) -> None:
        """Send what is buffered (waiting up to `timeout_ms`, default: no limit), then stop.

        Records still unsent when the time is up fail with `ClientClosedError`.
        """
        if self._closed:
            return
        self._closed = True
        if self._starting is not None and not self._starting.done():
            # A start in progress finishes first, so what it opens (connections, the sender) is
            # closed here rather than left running; a start that fails left nothing to close.
            await asyncio.wait((self._starting,))
        if not self._started:
            return
        try:
            await self._flush(timeout_ms)
        finally:
            assert self._sender is not None and self._accumulator is not None and self._cluster is not None
            await self._sender.stop()
            for batch in self._accumulator.abort_all() + [b for b in self._incomplete if b.in_flight]:
                if not batch.future.done():
                    batch.future.set_exception(ClientClosedError("producer"))
                self._batch_done(batch)
            await self._cluster.close()
            for waiter in self._buffer_waiters:
                if not waiter.done():
                    waiter.set_exception(ClientClosedError("producer"))

    async def stop(self) -> None:
        """aiokafka's name for `close()`."""
        await self.close()

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- sending ---------------------------------------------------------------------------

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Headers | None = None,
    ) -> DeliveryFuture:
        """Add a record to its batch; returns an awaitable of its `RecordMetadata`.

        Raises `ClientClosedError` after close, `KafkaTimeoutError` when the topic's metadata
        or buffer space did not come within `max_block_ms`, `MessageSizeTooLargeError` for a
        record larger than `max_request_size`, ValueError for a partition out of range,
        TypeError for a key, value or header that is not bytes or None (after the serializers).
        Whatever it raises, the record was not added and the producer is unchanged.
        """
        if self._closed:
            raise ClientClosedError("producer")
        if self._value_serializer is not None:
            value = self._value_serializer(value)
        if self._key_serializer is not None:
            key = self._key_serializer(key)
        # Checked before anything changes: a record the batch builder cannot encode must not
        # get as far as the accumulator (which would be left with a half-opened batch).
        if value is not None and type(value) is not bytes:
            value = _as_bytes(value, "value")
        if key is not None and type(key) is not bytes:
            key = _as_bytes(key, "key")
        accumulator = self._accumulator
        if accumulator is None:
            await self.start()
            accumulator = self._accumulator
            assert accumulator is not None
            if self._closed:
                raise ClientClosedError("producer")
        cluster = self._cluster
        assert cluster is not None
        found = cluster.metadata.topics.get(topic)
        if found is not None:
            num_partitions = len(found.partitions)
        else:
            num_partitions = await cluster.wait_for_topic(topic, self.config.max_block_ms)
            if self._closed:  # close() may have run meanwhile: its abort_all() would miss this record
                raise ClientClosedError("producer")
        if headers:
            header_tuple = _checked_headers(headers)
            size = record_size_bytes(key, value, header_tuple)
        else:
            header_tuple = ()  # record_size_bytes of a record without headers, inline: the hot path
            size = 21 + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
        sticky = False
        if partition is None:
            if key is not None:
                partition = partition_for_key(key, num_partitions)
            else:
                sticky = True
                partition = self._partitioner.partition(topic, num_partitions, cluster.metadata.available_partitions(topic))
        elif not 0 <= partition < num_partitions:
            raise ValueError(f"partition {partition} is not in the range [0, {num_partitions}) of topic {topic!r}")
        if self._txn is not None:
            await self._txn.add_partition(topic, partition)  # AddPartitionsToTxn before its first record
            if self._closed:
                raise ClientClosedError("producer")
        if size > self.config.max_request_size:
            raise MessageSizeTooLargeError(
                f"the record is {size} bytes, more than max_request_size={self.config.max_request_size}", topic=topic
            )
        if accumulator.buffered_bytes + size > self.config.buffer_memory and accumulator.buffered_bytes:
            await self._wait_for_buffer(size)
        if timestamp_ms is None:
            timestamp_ms = int(_time() * 1000)
        batch, index, created, filled = accumulator.append(
            (topic, partition), timestamp_ms, key, value, header_tuple, now_ms(), size
        )
        if created:
            batch.future = self._loop.create_future()
            self._incomplete.add(batch)
            self._sender.wake()  # type: ignore[union-attr]  # ships it at once (linger 0) or starts the linger timer
        if sticky:
            self._partitioner.record_appended(topic, partition, size, num_partitions, cluster.metadata.available_partitions(topic))
        if filled:
            self._sender.wake()  # type: ignore[union-attr]
            await asyncio.sleep(0)  # let the sender ship the full batch while we go on
        return _new_delivery(DeliveryFuture, (batch, index, timestamp_ms))

    async def send_many(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> list[DeliveryFuture]:
        """Add many records without headers, in order, as that many `send()` calls would:
        same partitions, same batches, same order. The bulk path of `diskless produce`.

        `keys`, when given, has one key (or None) per value. Returns one `DeliveryFuture` per
        batch the records went to, that of the batch's last record here: a batch is delivered
        or fails as a whole, so these carry the outcome of every record. Raises what `send()`
        raises; every record is checked before any is added, so a rejected record leaves the
        producer unchanged. A `KafkaTimeoutError` while waiting for buffer space (or a close)
        leaves the records before it added, as a loop of `send()` would.
        """
        if self._closed:
            raise ClientClosedError("producer")
        count = len(values)
        if keys is not None and len(keys) != count:
            raise ValueError(f"send_many: {len(keys)} keys for {count} values")
        if self._value_serializer is not None:
            values = [self._value_serializer(value) for value in values]
        if self._key_serializer is not None:
            keys = [self._key_serializer(key) for key in (keys if keys is not None else [None] * count)]
        # map() and set() run in C: a few ns a record where a generator takes ~100.
        if not set(map(type, values)) <= _BYTES_OR_NONE:
            values = [value if value is None or type(value) is bytes else _as_bytes(value, "value") for value in values]
        if keys is not None:
            key_types = set(map(type, keys))
            if key_types <= _NONE:
                keys = None
            elif not key_types <= _BYTES_OR_NONE:
                keys = [key if key is None or type(key) is bytes else _as_bytes(key, "key") for key in keys]
        if not count:
            return []
        accumulator = self._accumulator
        if accumulator is None:
            await self.start()
            accumulator = self._accumulator
            assert accumulator is not None
            if self._closed:
                raise ClientClosedError("producer")
        cluster = self._cluster
        assert cluster is not None
        found = cluster.metadata.topics.get(topic)
        if found is not None:
            num_partitions = len(found.partitions)
        else:
            num_partitions = await cluster.wait_for_topic(topic, self.config.max_block_ms)
            if self._closed:  # as in send()
                raise ClientClosedError("producer")
        config = self.config
        if keys is None and None not in values:
            largest = 21 + max(map(len, values))
        else:
            largest = 21 + max(len(value) if value is not None else 0 for value in values)
        if keys is not None:
            largest = max(21 + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
                          for key, value in zip(keys, values))
        if largest > config.max_request_size:
            raise MessageSizeTooLargeError(
                f"a record is {largest} bytes, more than max_request_size={config.max_request_size}", topic=topic
            )
        partitions: list[int] | None = None  # per record, when keys decide
        if partition is not None:
            if not 0 <= partition < num_partitions:
                raise ValueError(f"partition {partition} is not in the range [0, {num_partitions}) of topic {topic!r}")
        elif keys is not None:
            partitions = [partition_for_key(key, num_partitions) if key is not None else -1 for key in keys]
        if timestamp_ms is None:
            timestamp_ms = int(_time() * 1000)
        sender = self._sender
        assert sender is not None
        last: dict[ProducerBatch, int] = {}  # batch -> index of its last record added here
        no_sticky = 1 << 62
        position = 0
        while position < count:
            stop = count
            sticky = False
            target = partition
            if target is None:
                target = partitions[position] if partitions is not None else -1
                if target < 0:  # no key: the sticky partition
                    sticky = True
                    available = cluster.metadata.available_partitions(topic)
                    target = self._partitioner.partition(topic, num_partitions, available)
                if partitions is not None:  # a run of records bound for the same partition
                    stop = position + 1
                    wanted = partitions[position]
                    while stop < count and partitions[stop] == wanted:
                        stop += 1
            if self._txn is not None:
                await self._txn.add_partition(topic, target)  # AddPartitionsToTxn before its first record
                if self._closed:
                    raise ClientClosedError("producer")
            key = keys[position] if keys is not None else None
            value = values[position]
            first_bytes = 21 + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
            if accumulator.buffered_bytes + first_bytes > config.buffer_memory and accumulator.buffered_bytes:
                await self._wait_for_buffer(first_bytes)
            room_bytes = max(config.buffer_memory - accumulator.buffered_bytes, first_bytes)
            sticky_bytes = self._partitioner.bytes_left(topic) if sticky else no_sticky
            batch, position, size, created, filled = accumulator.append_many(
                (topic, target), timestamp_ms, keys, values, position, stop, now_ms(), room_bytes, sticky_bytes
            )
            last[batch] = batch.builder.count - 1
            if created:
                batch.future = self._loop.create_future()
                self._incomplete.add(batch)
                sender.wake()
            if sticky:
                self._partitioner.record_appended(topic, target, size, num_partitions, cluster.metadata.available_partitions(topic))
            if filled:
                sender.wake()
                await asyncio.sleep(0)  # let the sender ship the full batch while we go on
                if self._closed and position < count:
                    raise ClientClosedError("producer")
        return [_new_delivery(DeliveryFuture, (batch, index, timestamp_ms)) for batch, index in last.items()]

    async def send_and_wait(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Headers | None = None,
    ) -> RecordMetadata:
        """Send one record and wait until the broker acknowledged it (or it failed)."""
        delivery = await self.send(topic, value, key, partition, timestamp_ms, headers)
        if not delivery.done():
            await self._flush_batch(delivery[0])
        return await delivery

    async def _flush_batch(self, batch: ProducerBatch) -> None:
        """Send `batch` without waiting out its linger (send_and_wait's shortcut)."""
        assert self._accumulator is not None and self._sender is not None
        self._accumulator.flushing += 1
        self._sender.wake()
        try:
            await asyncio.wait([batch.future])
        finally:
            self._accumulator.flushing -= 1

    async def flush(self, timeout_ms: int | None = None) -> None:
        """Send every buffered record now and wait until each is acknowledged or failed.

        Raises `KafkaTimeoutError` if that takes longer than `timeout_ms`.
        """
        if self._closed:
            raise ClientClosedError("producer")
        await self._flush(timeout_ms)

    async def _flush(self, timeout_ms: int | None) -> None:
        if not self._started or not self._incomplete:
            return
        assert self._accumulator is not None and self._sender is not None
        pending = [batch.future for batch in self._incomplete]
        self._accumulator.flushing += 1
        self._sender.wake()
        try:
            _done, not_done = await asyncio.wait(pending, timeout=None if timeout_ms is None else timeout_ms / 1000)
        finally:
            self._accumulator.flushing -= 1
        if not_done:
            raise KafkaTimeoutError("flushing the producer", timeout_ms or 0)

    # --- transactions (transaction.py) ----------------------------------------------------------

    def _transactions(self) -> TransactionManager:
        if self._txn is None:
            raise IllegalStateError("transactions need a producer with a transactional_id, started")
        return self._txn

    async def begin_transaction(self) -> None:
        if self._accumulator is None:
            await self.start()
        self._transactions().begin()

    async def commit_transaction(self) -> None:
        """Wait for every record of the transaction, then commit it (EndTxn). Raises
        `TransactionAbortableError` if a record batch failed for good: abort then."""
        txn = self._transactions()
        await self.flush()
        await txn.end(commit=True)

    async def abort_transaction(self) -> None:
        """Abort the transaction: its records (sent first) are never read committed. After a
        record batch failed for good (commit raised `TransactionAbortableError`), this also
        takes a new producer epoch, and the next transaction may begin."""
        txn = self._transactions()
        await self.flush()
        if await txn.end(commit=False):
            assert self._accumulator is not None
            self._accumulator.reset_producer_id(txn.producer_id, txn.producer_epoch)

    async def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata], group_id: str | ConsumerGroupMetadata
    ) -> None:
        """Commit the group's offsets (the next offset to read) with the transaction, at the
        group's coordinator. `group_id` is a group id (aiokafka) or, better, the consumer's
        `group_metadata()` (Java, KIP-447): then a consumer that lost its generation gets
        IllegalGenerationError, and the transaction must be aborted."""
        await self._transactions().send_offsets(offsets, group_id)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """begin; the block; commit, or abort if the block raises."""
        await self.begin_transaction()
        try:
            yield
        except BaseException:
            await self.abort_transaction()
            raise
        await self.commit_transaction()

    async def partitions_for(self, topic: str) -> list[int]:
        """The partition numbers of `topic`."""
        if not self._started:
            await self.start()
        assert self._cluster is not None
        return list(range(await self._cluster.wait_for_topic(topic, self.config.max_block_ms)))

    # --- buffer ----------------------------------------------------------------------------

    async def _wait_for_buffer(self, size: int) -> None:
        assert self._accumulator is not None and self._sender is not None
        deadline = time.monotonic() + self.config.max_block_ms / 1000
        loop = asyncio.get_running_loop()
        while self._accumulator.buffered_bytes and self._accumulator.buffered_bytes + size > self.config.buffer_memory:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaTimeoutError(
                    f"waiting for buffer space ({self._accumulator.buffered_bytes} of buffer_memory="
                    f"{self.config.buffer_memory} bytes in use)",
                    self.config.max_block_ms,
                )
            waiter = loop.create_future()
            self._buffer_waiters.append(waiter)
            self._sender.wake()
            try:
                await asyncio.wait_for(waiter, remaining)
            except asyncio.TimeoutError:
                pass
            if self._closed:
                raise ClientClosedError("producer")

    def _batch_done(self, batch: ProducerBatch) -> None:
        self._incomplete.discard(batch)
        if self._buffer_waiters:
            waiters, self._buffer_waiters = self._buffer_waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)


__all__ = ["DeliveryFuture", "Producer"]
