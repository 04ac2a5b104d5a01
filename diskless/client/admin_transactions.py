"""The transactions half of the admin client (KIP-664): list the transactions the brokers
coordinate (ListTransactions, asked of every broker; those that coordinate none answer
NOT_COORDINATOR and are skipped) and describe transactional ids (DescribeTransactions, asked of
each id's transaction coordinator, FindCoordinator key type 1); describe a partition's
producers and the transactions they hold open there (DescribeProducers, to its leader), and
abort a hanging transaction (WriteTxnMarkers to the partition's leader, as Kafka's
Admin.abortTransaction).

A mixin of `Admin` (admin.py), which supplies `_cluster` and `_retrying`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from . import protocol
from .cluster import NO_LEADER, Cluster
from .errors import KafkaError, UnknownTopicOrPartitionError, error_for

T = TypeVar("T")
TRANSACTION_KEY = 1
_SKIPPED = (15, 16)  # COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: this broker coordinates no transactions
_COORDINATOR_ERRORS = (14, 15, 16)
_UNKNOWN_TOPIC_OR_PARTITION = 3
_LEADER_NOT_AVAILABLE = 5


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str  # Kafka's names: Empty, Ongoing, PrepareCommit, CompleteCommit, ...
    coordinator_id: int


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    transactional_id: str
    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int | None  # None before the first transaction (Kafka's OptionalLong; -1 on the wire)
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class ProducerState:
    """A producer a partition's leader knows (Kafka's admin ProducerState)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp_ms: int
    coordinator_epoch: int  # of its last marker; -1 unknown
    current_transaction_start_offset: int  # -1: no transaction open in the partition


class TransactionAdmin:
    _cluster: Cluster

    async def _retrying(self, attempt: Callable[[], Awaitable[T]], final: frozenset[int] = frozenset()) -> T:
        """Admin's retries through retry.retrying (this class is a mixin of Admin, which defines it)."""
        ...

    async def _partitions(self, topic: str, partitions: Iterable[int] | None) -> list[int]: ...  # Admin's

    async def _by_leader(
        self, topic: str, partitions: list[int], api_key: int, make: Callable[[int, list[int]], Any], read: Callable[[Any], list[tuple[int, int, T]]]
    ) -> dict[int, T]: ...  # Admin's

    async def list_transactions(self, *, states: Iterable[str] = (), producer_ids: Iterable[int] = ()) -> list[TransactionListing]:
        """Every transactional id the cluster's coordinators know, sorted by id; `states` and
        `producer_ids` keep only those that match."""
        states_filter, ids_filter = tuple(states), tuple(producer_ids)

        async def attempt() -> list[TransactionListing]:
            await self._cluster.fetch_metadata(())
            nodes = list(self._cluster.metadata.brokers)

            def make(version: int) -> Any:
                cls = protocol.request_class(protocol.LIST_TRANSACTIONS, version)
                return protocol.build(cls, state_filters=states_filter, producer_id_filters=ids_filter, duration_filter=-1)

            responses = await asyncio.gather(*(self._cluster.request_node(n, protocol.LIST_TRANSACTIONS, make) for n in nodes))
            listed = []
            for node, response in zip(nodes, responses):
                if response.error_code in _SKIPPED:
                    continue
                if response.error_code:
                    raise error_for(response.error_code)
                listed += [TransactionListing(s.transactional_id, s.producer_id, s.transaction_state, node) for s in response.transaction_states]
            return sorted(listed, key=lambda t: t.transactional_id)

        return await self._retrying(attempt)

    async def describe_transactions(self, transactional_ids: str | Iterable[str]) -> dict[str, TransactionDescription]:
        """Each transactional id's state, producer, timeout, start time and partitions."""
        ids = [transactional_ids] if isinstance(transactional_ids, str) else list(transactional_ids)

        async def describe(transactional_id: str) -> TransactionDescription:
            async def attempt() -> TransactionDescription:
                node = await self._cluster.coordinator(transactional_id, TRANSACTION_KEY)

                def make(version: int) -> Any:
                    return protocol.build(protocol.request_class(protocol.DESCRIBE_TRANSACTIONS, version), transactional_ids=(transactional_id,))

                try:
                    (state,) = (await self._cluster.request_node(node, protocol.DESCRIBE_TRANSACTIONS, make)).transaction_states
                except KafkaError:
                    self._cluster.forget_coordinator(transactional_id, TRANSACTION_KEY)
                    raise
                if state.error_code:
                    if state.error_code in _COORDINATOR_ERRORS:
                        self._cluster.forget_coordinator(transactional_id, TRANSACTION_KEY)
                    raise error_for(state.error_code)
                start_ms = state.transaction_start_time  # an int (responses.py): -1 when none started
                return TransactionDescription(
                    transactional_id, node, state.transaction_state, state.producer_id, state.producer_epoch,
                    round(state.transaction_timeout.total_seconds() * 1000), start_ms if start_ms >= 0 else None,
                    tuple((t.topic, p) for t in state.topics for p in t.partitions),
                )  # fmt: skip

            return await self._retrying(attempt)

        found = await asyncio.gather(*(describe(i) for i in ids))
        return dict(zip(ids, found))

    async def abort_transaction(self, topic: str, partition: int, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Abort the transaction `producer_id` has open in one partition, as its coordinator
        would: an abort marker with the producer's epoch and the coordinator epoch, written by
        the partition's leader (WriteTxnMarkers) and durable when this returns. For a hanging
        transaction (Kafka's Admin.abortTransaction, KIP-664), whose coordinator no longer knows
        it: the partition's last stable offset moves past it. A marker for a producer with no
        transaction open there ends nothing. An unknown topic or partition is not retried."""

        def make(version: int) -> Any:
            cls = protocol.request_class(protocol.WRITE_TXN_MARKERS, version)
            marker = protocol.nested(cls, "WritableTxnMarker")
            marker_topic = protocol.nested(cls, "WritableTxnMarkerTopic")
            return cls(markers=(
                marker(
                    producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=False, coordinator_epoch=coordinator_epoch,
                    topics=(marker_topic(name=topic, partition_indexes=(partition,)),),
                ),
            ))  # fmt: skip

        async def attempt() -> None:
            response = await self._cluster.request_node(await self._partition_leader(topic, partition), protocol.WRITE_TXN_MARKERS, make)
            codes = [p.error_code for m in response.markers for t in m.topics for p in t.partitions]
            if codes != [0]:
                raise error_for(next((c for c in codes if c), -1), None, topic=topic, partition=partition)

        await self._retrying(attempt, final=frozenset({_UNKNOWN_TOPIC_OR_PARTITION}))

    async def describe_producers(self, topic: str, partition: int) -> list[ProducerState]:
        """The producers the partition's leader holds state for, by producer id, each with the
        first offset of the transaction it has open there (-1: none). An unknown topic or
        partition is not retried."""
        return (await self.describe_topic_producers(topic, [partition]))[partition]

    async def describe_topic_producers(self, topic: str, partitions: Iterable[int] | None = None) -> dict[int, list[ProducerState]]:
        """describe_producers for many partitions of a topic (None: all), one request per leader.
        An unknown topic or partition is one error, at once."""
        indexes = await self._partitions(topic, partitions)
        count = self._cluster.metadata.partition_count(topic) or 0
        for index in indexes:
            if not 0 <= index < count:
                raise UnknownTopicOrPartitionError(None, topic=topic, partition=index)

        def make(version: int, indexes: list[int]) -> Any:
            cls = protocol.request_class(protocol.DESCRIBE_PRODUCERS, version)
            return cls(topics=(protocol.nested(cls, "TopicRequest")(name=topic, partition_indexes=tuple(indexes)),))

        def read(response: Any) -> list[tuple[int, int, list[ProducerState]]]:
            return [
                (answer.partition_index, answer.error_code, sorted(
                    (ProducerState(p.producer_id, p.producer_epoch, p.last_sequence, p.last_timestamp, p.coordinator_epoch, p.current_txn_start_offset)
                     for p in answer.active_producers),
                    key=lambda p: p.producer_id,
                ))
                for t in response.topics for answer in t.partitions
            ]  # fmt: skip

        return await self._by_leader(topic, indexes, protocol.DESCRIBE_PRODUCERS, make, read)

    async def _partition_leader(self, topic: str, partition: int) -> int:
        """The node leading the partition, from fresh metadata."""
        await self._cluster.fetch_metadata([topic])
        meta = self._cluster.metadata
        count = meta.partition_count(topic)
        if count is None:
            raise error_for(meta.topic_errors.get(topic, _UNKNOWN_TOPIC_OR_PARTITION), None, topic=topic)
        if not 0 <= partition < count:
            raise UnknownTopicOrPartitionError(None, topic=topic, partition=partition)
        leader = meta.leader(topic, partition)
        if leader == NO_LEADER:
            raise error_for(_LEADER_NOT_AVAILABLE, None, topic=topic, partition=partition)
        return leader
