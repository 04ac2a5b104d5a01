"""The producer's transactions (Kafka's TransactionManager, transactions v1): a producer with a
`transactional_id` gets its producer id and epoch from the transaction coordinator
(FindCoordinator key type 1, InitProducerId), adds each partition to the open transaction
before its first record goes (AddPartitionsToTxn), adds a group's offsets
(AddOffsetsToTxn, then TxnOffsetCommit at the group coordinator), and ends the transaction
with EndTxn once every record sent in it is acknowledged.

    async with Producer(bootstrap_servers=..., transactional_id="orders-enricher") as producer:
        async with producer.transaction():           # commit, or abort on an exception
            await producer.send("out", b"v")
            await producer.send_offsets_to_transaction({TopicPartition("in", 0): 42}, "group")

Coordinator errors (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS)
make the next attempt look the coordinator up again; CONCURRENT_TRANSACTIONS (the previous
transaction still finishing) is retried after `retry_backoff_ms`; PRODUCER_FENCED and
INVALID_PRODUCER_EPOCH are fatal: another producer with the same transactional id took over.
TxnOffsetCommit answered ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID or FENCED_INSTANCE_ID (the
consumer's `group_metadata()` is stale) makes the transaction abortable, as Java's.

A record batch that fails for good (the sender calls `batch_failed`) puts the manager in
Java's abortable error state: the transaction lacks those records, so adding to it and
committing it raise `TransactionAbortableError` until it is aborted; the producer then takes a
new epoch (InitProducerId with the transactional id, as Java after KIP-360), since the failed
batch left a gap in its partition's sequence numbers. Fenced while producing is fatal. A
transactional producer never gets a producer id without its transactional id.

Used from the producer's event loop only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

from . import protocol
from .cluster import Cluster
from .errors import IllegalStateError, KafkaError, KafkaTimeoutError, TransactionAbortableError, error_for
from .structs import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition

GROUP_KEY, TRANSACTION_KEY = 0, 1
_MEMBER_ERRORS = (22, 25, 82)  # ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID
_COORDINATOR_ERRORS = (14, 15, 16)  # loading, not available, not coordinator
_CONCURRENT_TRANSACTIONS = 51
_FENCED = (47, 90)  # INVALID_PRODUCER_EPOCH, PRODUCER_FENCED
ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN = protocol.ADD_PARTITIONS_TO_TXN, protocol.ADD_OFFSETS_TO_TXN
END_TXN, TXN_OFFSET_COMMIT = protocol.END_TXN, protocol.TXN_OFFSET_COMMIT


class TransactionManager:
    def __init__(self, transactional_id: str, transaction_timeout_ms: int, cluster: Cluster, retry_backoff_ms: int, timeout_ms: int) -> None:
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.cluster = cluster
        self.retry_backoff_ms = retry_backoff_ms
        self.timeout_ms = timeout_ms  # how long one operation retries (max_block_ms)
        self.producer_id = -1
        self.producer_epoch = -1
        self.in_transaction = False
        self.partitions: set[tuple[str, int]] = set()
        self.offsets_added = False
        self.fatal: KafkaError | None = None
        self.abortable: BaseException | None = None  # why the open transaction must be aborted

    @property
    def error(self) -> BaseException | None:
        """The fatal or abortable error the manager is in, if any."""
        return self.fatal if self.fatal is not None else self.abortable

    def batch_failed(self, error: BaseException) -> None:
        """A record batch of the open transaction failed for good (Java's abortable error;
        fatal when the producer was fenced)."""
        if getattr(error, "errno", None) in _FENCED:
            self.fatal = error  # type: ignore[assignment]
        elif self.abortable is None:
            self.abortable = error

    # --- requests to the coordinator ---------------------------------------------------------

    async def _coordinator_call(
        self, api_key: int, make: Callable[[int], Any], error_of: Callable[[Any], int], group_id: str | None = None
    ) -> Any:
        """Send to the transaction coordinator (or, with `group_id`, to that group's coordinator)
        until an answer without a retriable error."""
        key, key_type = (self.transactional_id, TRANSACTION_KEY) if group_id is None else (group_id, GROUP_KEY)
        deadline = time.monotonic() + self.timeout_ms / 1000
        while True:
            try:
                node = await self.cluster.coordinator(key, key_type)
                response = await self.cluster.request_coordinator(node, api_key, make)
                code = error_of(response)
            except KafkaError as exc:
                self.cluster.forget_coordinator(key, key_type)
                if not exc.retriable:
                    raise
                code, response = -1, None
            if code == 0:
                return response
            if code > 0:
                if code in _COORDINATOR_ERRORS:
                    self.cluster.forget_coordinator(key, key_type)
                error = error_for(code)
                if code in _FENCED:
                    self.fatal = error
                    raise error
                if code in _MEMBER_ERRORS:
                    # Java's TxnOffsetCommitHandler: the consumer lost its generation, so the
                    # records it transformed may be processed again by the new owner: abort.
                    self.abortable = error
                    raise error
                if not (error.retriable or code == _CONCURRENT_TRANSACTIONS):
                    raise error
            if time.monotonic() > deadline:
                raise KafkaTimeoutError(f"{protocol.api_name(api_key)} of transactional id {self.transactional_id!r}", self.timeout_ms)
            await asyncio.sleep(self.retry_backoff_ms / 1000)

    async def init(self) -> tuple[int, int]:
        """InitProducerId with the transactional id: (producer id, epoch); fences older producers."""

        def make(version: int) -> Any:
            cls = protocol.request_class(protocol.INIT_PRODUCER_ID, version)
            return protocol.build(
                cls, transactional_id=self.transactional_id, transaction_timeout=protocol.ms(self.transaction_timeout_ms),
                producer_id=-1, producer_epoch=-1,
            )  # fmt: skip

        response = await self._coordinator_call(protocol.INIT_PRODUCER_ID, make, lambda r: r.error_code)
        self.producer_id, self.producer_epoch = response.producer_id, response.producer_epoch
        return self.producer_id, self.producer_epoch

    def _check(self) -> None:
        if self.fatal is not None:
            raise self.fatal
        if self.abortable is not None:
            raise TransactionAbortableError(self.transactional_id, self.abortable)
        if not self.in_transaction:
            raise IllegalStateError("no transaction is open: call begin_transaction() first")

    def check_end(self, commit: bool) -> None:
        """Whether the open transaction may end so: abort is allowed in the abortable state."""
        if commit or self.fatal is not None:
            self._check()
        elif not self.in_transaction:
            raise IllegalStateError("no transaction is open: call begin_transaction() first")

    def begin(self) -> None:
        if self.fatal is not None:
            raise self.fatal
        if self.abortable is not None:
            raise TransactionAbortableError(self.transactional_id, self.abortable)
        if self.in_transaction:
            raise IllegalStateError("a transaction is already open")
        self.in_transaction = True
        self.partitions = set()
        self.offsets_added = False

    async def add_partition(self, topic: str, partition: int) -> None:
        """AddPartitionsToTxn before the partition's first record of the transaction."""
        self._check()
        if (topic, partition) in self.partitions:
            return

        def make(version: int) -> Any:
            mod_request = protocol.request_class(ADD_PARTITIONS_TO_TXN, version)
            topic_cls = _nested(mod_request, "AddPartitionsToTxnTopic")
            return protocol.build(
                mod_request, v3_and_below_transactional_id=self.transactional_id, v3_and_below_producer_id=self.producer_id,
                v3_and_below_producer_epoch=self.producer_epoch,
                v3_and_below_topics=(topic_cls(name=topic, partitions=(partition,)),),
            )  # fmt: skip

        def error_of(response: Any) -> int:
            return max((p.partition_error_code for t in response.results_by_topic_v3_and_below for p in t.results_by_partition), default=0)

        await self._coordinator_call(ADD_PARTITIONS_TO_TXN, make, error_of)
        self.partitions.add((topic, partition))

    async def send_offsets(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata], group: str | ConsumerGroupMetadata) -> None:
        """AddOffsetsToTxn at the transaction coordinator, then TxnOffsetCommit at the group's
        coordinator (FindCoordinator key type 0), as Java's TransactionManager. `group` is a
        group id (aiokafka's signature: committed as a simple group, generation -1) or the
        consumer's `group_metadata()`, whose generation and member id the group coordinator
        checks (TxnOffsetCommit v3+, KIP-447)."""
        self._check()
        meta = group if isinstance(group, ConsumerGroupMetadata) else ConsumerGroupMetadata(group)

        def add(version: int) -> Any:
            cls = protocol.request_class(ADD_OFFSETS_TO_TXN, version)
            return protocol.build(cls, transactional_id=self.transactional_id, producer_id=self.producer_id,
                                  producer_epoch=self.producer_epoch, group_id=meta.group_id)  # fmt: skip

        await self._coordinator_call(ADD_OFFSETS_TO_TXN, add, lambda r: r.error_code)
        self.offsets_added = True
        by_topic: dict[str, list[tuple[int, OffsetAndMetadata]]] = {}
        for tp, offset in offsets.items():
            by_topic.setdefault(tp.topic, []).append((tp.partition, offset if isinstance(offset, OffsetAndMetadata) else OffsetAndMetadata(offset)))

        def commit(version: int) -> Any:
            cls = protocol.request_class(TXN_OFFSET_COMMIT, version)
            topic_cls, partition_cls = _nested(cls, "TxnOffsetCommitRequestTopic"), _nested(cls, "TxnOffsetCommitRequestPartition")
            topics = tuple(
                topic_cls(name=t, partitions=tuple(
                    protocol.build(partition_cls, partition_index=p, committed_offset=o.offset, committed_leader_epoch=o.leader_epoch,
                                   committed_metadata=o.metadata)
                    for p, o in ps
                ))
                for t, ps in by_topic.items()
            )  # fmt: skip
            return protocol.build(cls, transactional_id=self.transactional_id, group_id=meta.group_id, producer_id=self.producer_id,
                                  producer_epoch=self.producer_epoch, generation_id=meta.generation_id, member_id=meta.member_id,
                                  group_instance_id=meta.group_instance_id, topics=topics)  # fmt: skip

        def error_of(response: Any) -> int:
            return max((p.error_code for t in response.topics for p in t.partitions), default=0)

        await self._coordinator_call(TXN_OFFSET_COMMIT, commit, error_of, group_id=meta.group_id)

    async def end(self, commit: bool) -> bool:
        """EndTxn, once every record of the transaction is acknowledged (the caller flushed).
        A transaction that added nothing ends without a request, as the Java client's.

        Aborting in the abortable error state also takes a new epoch (InitProducerId with the
        transactional id); returns True then: the producer's sequences restart at 0. If that
        fails, the transaction stays open in its error state, and aborting again retries it
        without a second EndTxn."""
        self.check_end(commit)
        if self.partitions or self.offsets_added:

            def make(version: int) -> Any:
                cls = protocol.request_class(END_TXN, version)
                return protocol.build(cls, transactional_id=self.transactional_id, producer_id=self.producer_id,
                                      producer_epoch=self.producer_epoch, committed=commit)  # fmt: skip

            await self._coordinator_call(END_TXN, make, lambda r: r.error_code)
            self.partitions = set()
            self.offsets_added = False
        renewed = self.abortable is not None
        if renewed:
            await self.init()
        self.in_transaction = False
        self.abortable = None
        return renewed


def _nested(request_cls: type, name: str) -> type:
    """A nested entity class of a kio request's module (AddPartitionsToTxnTopic, ...)."""
    import sys

    return getattr(sys.modules[request_cls.__module__], name)
