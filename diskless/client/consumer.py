"""The consumer: a group member (`subscribe`) or a reader of given partitions (`assign`).

    async with Consumer("orders", bootstrap_servers="127.0.0.1:9092", group_id="billing",
                        auto_offset_reset="earliest") as consumer:
        async for record in consumer:           # ConsumerRecord(topic, partition, offset, ...)
            ...
        batches = await consumer.getmany(timeout_ms=1000, max_records=500)

Records come from the fetcher (fetcher.py), which keeps fetches in flight ahead of the
application. "Consumed" means handed to the application: `commit()` and auto-commit store,
per partition, the offset after the last record returned by `getmany` or yielded by
`async for` (records drained for iteration but not yet yielded do not count).

`group_protocol="consumer"` joins with KIP-848's protocol (membership.py: the broker assigns,
partitions move incrementally) instead of the classic JoinGroup/SyncGroup (group.py).

Group membership (heartbeats, rebalances, auto-commit) runs in background tasks, so a slow
application never misses a heartbeat while the event loop is free; `max_poll_interval_ms` is
the rebalance timeout sent in JoinGroup, but the consumer does not leave the group on its own
when the application stops calling `getmany` (the Java consumer does).

Used from one event loop; do not call `getmany` from two tasks at once.
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .cluster import Cluster
from .config import ConsumerConfig
from .errors import ClientClosedError, IllegalStateError, KafkaTimeoutError
from .fetcher import Fetcher
from .group import GroupMember, RebalanceListener
from .membership import ConsumerGroupMember
from .offsets import EARLIEST, LATEST, list_offsets
from .records import deserialize
from .structs import ConsumerGroupMetadata, ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition
from .subscription import SubscriptionState


class Consumer:
    def __init__(
        self,
        *topics: str,
        bootstrap_servers: str = "127.0.0.1:9092",
        pattern: str | None = None,
        listener: RebalanceListener | None = None,
        key_deserializer: Callable[[bytes | None], Any] | None = None,
        value_deserializer: Callable[[bytes | None], Any] | None = None,
        **settings: Any,
    ) -> None:
        """`key_deserializer` and `value_deserializer`, as in aiokafka, turn each record's key
        and value bytes (or None) into what `getmany()`, `getone()` and `async for` hand out."""
        self.config = ConsumerConfig.from_kwargs(bootstrap_servers=bootstrap_servers, **settings)
        self._key_deserializer = key_deserializer
        self._value_deserializer = value_deserializer
        self._subscription = SubscriptionState()
        self._listener = listener
        self._initial = (topics, pattern)
        self._initial_assignment: list[TopicPartition] | None = None
        self._cluster: Cluster | None = None
        self._fetcher: Fetcher | None = None
        self._group: GroupMember | None = None
        self._pending: deque[ConsumerRecord] = deque()  # drained for `async for`, not yet yielded
        self._started = False
        self._closed = False

    # --- life cycle ------------------------------------------------------------------------

    async def start(self) -> None:
        if self._closed:
            raise ClientClosedError("consumer")
        if self._started:
            return
        config = self.config
        self._cluster = Cluster(
            config.bootstrap_servers,
            client_id=config.client_id,
            request_timeout_ms=config.request_timeout_ms,
            metadata_max_age_ms=config.metadata_max_age_ms,
            retry_backoff_ms=config.retry_backoff_ms,
            security=config.security,
            allow_auto_topic_creation=config.allow_auto_create_topics,
        )
        await self._cluster.start()
        if config.group_id is not None:
            member_cls = ConsumerGroupMember if config.group_protocol == "consumer" else GroupMember
            self._group = member_cls(config, self._cluster, self._subscription, self._consumed_offsets, self._assignment_changed)
        self._fetcher = Fetcher(config, self._cluster, self._subscription, self._group.fetch_committed_offsets if self._group else None)
        self._started = True
        topics, pattern = self._initial
        if topics or pattern:
            self.subscribe(topics, pattern=pattern, listener=self._listener)
        elif self._initial_assignment is not None:
            self.assign(self._initial_assignment)

    async def close(self) -> None:
        """Commit (with auto-commit), leave the group, close connections."""
        if self._closed:
            return
        self._closed = True
        if not self._started:
            return
        assert self._fetcher is not None and self._cluster is not None
        self._fetcher.close()
        try:
            if self._group is not None:
                await self._group.close()
        finally:
            await self._cluster.close()

    async def stop(self) -> None:
        """aiokafka's name for `close()`."""
        await self.close()

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _check(self) -> None:
        if self._closed:
            raise ClientClosedError("consumer")
        if not self._started:
            raise IllegalStateError("the consumer is not started: call start() or use `async with`")

    # --- what to read ----------------------------------------------------------------------

    def subscribe(
        self,
        topics: Iterable[str] = (),
        pattern: str | re.Pattern[str] | None = None,
        listener: RebalanceListener | None = None,
    ) -> None:
        """Join the group (`group_id`) for these topics, or every topic matching `pattern`.

        May be called before `start()`; the consumer then subscribes as it starts.
        """
        if isinstance(topics, str):
            topics = [topics]
        if not self._started and not self._closed:
            if self.config.group_id is None:
                raise IllegalStateError("subscribe() needs a group_id; use assign() to read without a group")
            self._initial = (tuple(topics), pattern)
            self._listener = listener or self._listener
            return
        self._check()
        if self._group is None:
            raise IllegalStateError("subscribe() needs a group_id; use assign() to read without a group")
        self._subscription.subscribe(topics, pattern)
        assert self._cluster is not None
        if pattern is not None:
            self._cluster.want_all_topics = True
        else:
            self._cluster.add_topics(topics)
        self._group.subscription_changed(listener)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions, without a group (offsets may still be committed
        when a group_id is set)."""
        partitions = [TopicPartition(*tp) for tp in partitions]
        if not self._started and not self._closed:
            self._initial_assignment = partitions
            return
        self._check()
        self._subscription.assign(partitions)
        assert self._cluster is not None and self._fetcher is not None
        self._cluster.add_topics({tp.topic for tp in partitions})
        self._assignment_changed()

    def unsubscribe(self) -> None:
        self._check()
        if self._group is not None and self._subscription.subscribed:
            self._group.unsubscribe()
        self._subscription.unsubscribe()
        self._assignment_changed()

    def assignment(self) -> set[TopicPartition]:
        return set(self._subscription.assignment)

    def subscription(self) -> frozenset[str]:
        return self._subscription.topics

    def _assignment_changed(self) -> None:
        assigned = self._subscription.assignment
        if self._pending:
            self._pending = deque(r for r in self._pending if (r.topic, r.partition) in assigned)
        if self._fetcher is not None:
            self._fetcher.wake()

    # --- records ---------------------------------------------------------------------------

    async def getmany(
        self, *partitions: TopicPartition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records that are ready, by partition; waits up to `timeout_ms` for the first ones.

        Returns at most `max_records` (default `max_poll_records`) records. Raises the errors
        the fetch met (OffsetOutOfRangeError with auto_offset_reset="none", CorruptRecordError,
        NoOffsetForPartitionError, ...), and ClientClosedError once closed.
        """
        self._check()
        fetcher = self._fetcher
        assert fetcher is not None
        limit = max_records or self.config.max_poll_records
        wanted = set(partitions) if partitions else None
        deadline = time.monotonic() + timeout_ms / 1000
        fetcher.wake()
        while True:
            self._raise_errors()
            records = fetcher.drain(limit, wanted)
            if records:
                if self._key_deserializer is not None or self._value_deserializer is not None:
                    records = self._deserialized(records)
                    if not records:
                        continue  # the first record failed: its error is raised above
                return records
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._closed:
                return {}
            await fetcher.wait_for_data(remaining)
            if self._closed:
                raise ClientClosedError("consumer")

    def _deserialized(self, records: dict[TopicPartition, list[ConsumerRecord]]) -> dict[TopicPartition, list[ConsumerRecord]]:
        """The records deserialized. A partition stops at a record that fails: its position
        goes back to that record (the fetcher had moved past it) and the error is raised by the
        next `getmany`, after the records before it are returned (Java does the same)."""
        fetcher = self._fetcher
        assert fetcher is not None
        out = {}
        for tp, batch in records.items():
            good, error = deserialize(batch, self._key_deserializer, self._value_deserializer)
            if good:
                out[tp] = good
            if error is not None:
                self._subscription.state(tp).seek(error.offset)  # drops what was fetched after it
                fetcher.errors.append(error)
                fetcher.wake()
        return out

    async def getone(self, *partitions: TopicPartition) -> ConsumerRecord:
        """The next record (waiting as long as it takes)."""
        while True:
            records = await self.getmany(*partitions, timeout_ms=1000, max_records=1)
            for batch in records.values():
                return batch[0]

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> ConsumerRecord:
        while not self._pending:
            if self._closed:
                raise StopAsyncIteration
            try:
                records = await self.getmany(timeout_ms=1000)
            except ClientClosedError:
                raise StopAsyncIteration from None
            for batch in records.values():
                self._pending.extend(batch)
        return self._pending.popleft()

    def _raise_errors(self) -> None:
        assert self._fetcher is not None
        if self._fetcher.errors:
            raise self._fetcher.errors.popleft()
        if self._group is not None and self._group.errors:
            raise self._group.errors.popleft()

    # --- positions -------------------------------------------------------------------------

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read `partition` from `offset` on (the next getmany returns it first)."""
        self._check()
        if offset < 0:
            raise ValueError(f"offset must not be negative, got {offset}")
        self._subscription.state(partition).seek(offset)
        self._drop_pending(partition)
        assert self._fetcher is not None
        self._fetcher.wake()

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        await self._seek_to("earliest", partitions)

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        await self._seek_to("latest", partitions)

    async def _seek_to(self, strategy: str, partitions: tuple[TopicPartition, ...]) -> None:
        self._check()
        targets = partitions or tuple(self._subscription.assignment)
        for tp in targets:
            self._subscription.state(tp).request_reset(strategy)
            self._drop_pending(tp)
        for tp in targets:
            await self.position(tp)

    def _drop_pending(self, tp: TopicPartition) -> None:
        if self._pending:
            self._pending = deque(r for r in self._pending if (r.topic, r.partition) != tp)

    async def position(self, partition: TopicPartition) -> int:
        """The offset of the next record to be returned for `partition`."""
        self._check()
        state = self._subscription.state(partition)
        assert self._fetcher is not None
        while state.position is None:
            self._fetcher.wake()
            await self._fetcher.wait_for_data(self.config.retry_backoff_ms / 1000)
            self._raise_errors()
            state = self._subscription.state(partition)
        for record in self._pending:
            if (record.topic, record.partition) == partition:
                return record.offset
        return state.position

    def highwater(self, partition: TopicPartition) -> int:
        """The high watermark of `partition` from the last fetch (-1 before any)."""
        return self._subscription.state(partition).high_watermark

    def last_stable_offset(self, partition: TopicPartition) -> int:
        return self._subscription.state(partition).last_stable_offset

    def pause(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._subscription.state(tp).paused = True

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._subscription.state(tp).paused = False
        assert self._fetcher is not None
        self._fetcher.wake()

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, s in self._subscription.assignment.items() if s.paused}

    def _consumed_offsets(self) -> dict[TopicPartition, int]:
        offsets = self._subscription.consumed_offsets()
        for record in reversed(self._pending):  # the first pending record of a partition wins
            offsets[TopicPartition(record.topic, record.partition)] = record.offset
        return offsets

    # --- offsets ---------------------------------------------------------------------------

    async def commit(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None) -> None:
        """Commit `offsets` (the next offset to read, per partition), or what was consumed."""
        self._check()
        if self._group is None:
            raise IllegalStateError("commit() needs a group_id")
        if offsets is None:
            wanted = {tp: OffsetAndMetadata(offset) for tp, offset in self._consumed_offsets().items()}
        else:
            wanted = {tp: v if isinstance(v, OffsetAndMetadata) else OffsetAndMetadata(v) for tp, v in offsets.items()}
        await self._group.commit(wanted)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The group id, generation (or KIP-848 member epoch), member id and instance id, for
        `Producer.send_offsets_to_transaction` (Java's `groupMetadata()`, KIP-447)."""
        self._check()
        if self._group is None:
            raise IllegalStateError("group_metadata() needs a group_id")
        return self._group.group_metadata()

    async def committed(self, partition: TopicPartition) -> int | None:
        """The group's committed offset of `partition`, None if there is none."""
        self._check()
        if self._group is None:
            raise IllegalStateError("committed() needs a group_id")
        found = await self._group.fetch_committed([partition])
        meta = found.get(partition)
        return None if meta is None else meta.offset

    async def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition, the first offset whose timestamp is at or after the given ms (or None)."""
        self._check()
        for ts in timestamps.values():
            if ts < 0:
                raise ValueError(f"timestamps must not be negative, got {ts}")
        assert self._cluster is not None
        return await list_offsets(self._cluster, timestamps, isolation_level=self.config.isolation_level)

    async def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return await self._edge_offsets(partitions, EARLIEST)

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return await self._edge_offsets(partitions, LATEST)

    async def _edge_offsets(self, partitions: Iterable[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
        self._check()
        assert self._cluster is not None
        found = await list_offsets(self._cluster, dict.fromkeys(partitions, timestamp), isolation_level=self.config.isolation_level)
        return {tp: answer.offset if answer is not None else -1 for tp, answer in found.items()}

    # --- cluster ---------------------------------------------------------------------------

    async def topics(self) -> set[str]:
        self._check()
        assert self._cluster is not None
        response = await self._cluster.fetch_metadata(None)
        return {t.name for t in response.topics if not t.error_code and not (self.config.exclude_internal_topics and t.is_internal)}

    async def partitions_for_topic(self, topic: str) -> set[int] | None:
        self._check()
        assert self._cluster is not None
        try:
            count = await self._cluster.wait_for_topic(topic, self.config.request_timeout_ms)
        except KafkaTimeoutError:
            return None
        return set(range(count))


__all__ = ["Consumer"]
