"""The transaction coordinator's APIs: InitProducerId with a transactional id,
AddPartitionsToTxn (v0-v3, the client's form), AddOffsetsToTxn, TxnOffsetCommit and EndTxn;
DescribeTransactions and ListTransactions (KIP-664); WriteTxnMarkers, which the coordinator sends
to the leaders of partitions it does not lead (and `kafka-transactions.sh abort` to end a hanging
transaction); DescribeProducers (KIP-664), which finds a hanging transaction's producer.

Transaction state is reached only through `broker.transactions` (txn/transactions.py). The
coordinator is the broker that coordinates groups (FindCoordinator key type 1 answers the same
broker as key type 0); elsewhere NOT_COORDINATOR, which clients answer by looking again.
A failure while serving (the metadata store failing) answers as the group coordinator does
(`coordinator_error`): NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE, retried by clients.

ACLs on TRANSACTIONAL_ID resources, as Kafka checks them: WRITE for InitProducerId,
AddPartitionsToTxn, AddOffsetsToTxn and EndTxn (and Produce with a transactional id,
handlers/produce.py), DESCRIBE for DescribeTransactions, ListTransactions (which lists only
those) and FindCoordinator (handlers/groups.py); otherwise TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
AddOffsetsToTxn also needs READ on the group. TxnOffsetCommit checks none of them, as Kafka's
(its group and topic checks are left out here: the group's coordinator hands it on to the
transactional id's without the client's credentials).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from diskless.wire import Request
from metadata import CommittedOffset

from ..api import BrokerApi, absent
from ..errors import error_code_for
from ..responses import NO_THROTTLE, make, response_module
from ..security.authorizer import CLUSTER_ACTION, DESCRIBE, GROUP, READ, TOPIC, TRANSACTIONAL_ID, WRITE
from ..cluster.slots import holder
from ..txn import inter_broker
from ..txn.coordinator import verification_error
from .groups import coordinator_error, is_coordinator

log = logging.getLogger(__name__)

FORWARD_TIMEOUT_S = 10.0  # a TxnOffsetCommit handed to the transactional id's coordinator
VERIFY_TIMEOUT_S = 5.0  # KIP-890 part 1: a partition leader asks another broker's coordinator


def _ms(value: Any) -> int:
    return round(value.total_seconds() * 1000)


def _start_time(ms: int) -> datetime.datetime:
    """An int64 millisecond timestamp kio writes even when it is -1 (no transaction open)."""
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)


async def _coordinating(broker: BrokerApi, transactional_id: str | None = None) -> bool:
    """Whether this broker holds the transactional id's coordinator slot (any slot: None)."""
    return await broker.transactions.ensure_loaded(transactional_id)


async def init_producer_id(broker: BrokerApi, request: Request) -> Any:
    """InitProducerId with a transactional id (called by produce.handle_init_producer_id)."""
    body, version = request.body, request.header.api_version
    mod = response_module(22, version)

    def answer(error: ErrorCode, producer_id: int = -1, producer_epoch: int = -1) -> Any:
        return make(mod.InitProducerIdResponse, throttle_time=NO_THROTTLE, error_code=error, producer_id=producer_id, producer_epoch=producer_epoch)

    if not may_write(broker, body.transactional_id):
        return answer(ErrorCode.transactional_id_authorization_failed)
    try:
        if not await _coordinating(broker, body.transactional_id):
            return answer(ErrorCode.not_coordinator)
        error, producer_id, producer_epoch = await broker.transactions.init_producer_id(
            body.transactional_id, _ms(body.transaction_timeout), getattr(body, "producer_id", -1), getattr(body, "producer_epoch", -1)
        )
    except Exception as exc:
        return answer(coordinator_error(exc, "InitProducerId", (), request))
    if error is ErrorCode.producer_fenced and version < 4:
        error = ErrorCode.invalid_producer_epoch  # PRODUCER_FENCED is known to clients from v4 (KIP-588)
    return answer(error, producer_id, producer_epoch)


def may_write(broker: BrokerApi, transactional_id: str) -> bool:
    return broker.security.allowed(WRITE, TRANSACTIONAL_ID, transactional_id)


def _fenced(error: ErrorCode, version: int, since: int) -> ErrorCode:
    """PRODUCER_FENCED only to clients that know it (KIP-588), INVALID_PRODUCER_EPOCH before."""
    return ErrorCode.invalid_producer_epoch if error is ErrorCode.producer_fenced and version < since else error


async def handle_add_partitions_to_txn(broker: BrokerApi, request: Request) -> Any:
    body, version = request.body, request.header.api_version
    mod = response_module(24, version)
    topics = [(t.name, tuple(t.partitions)) for t in body.v3_and_below_topics]
    errors: dict[tuple[str, int], ErrorCode] = {}
    unknown = {
        (name, p)
        for name, partitions in topics
        for p in partitions
        if not broker.registry.has_partition(name, p) or not broker.security.allowed(WRITE, TOPIC, name)
    }
    try:
        if not may_write(broker, body.v3_and_below_transactional_id):
            error, unknown = ErrorCode.transactional_id_authorization_failed, set()
        elif not await _coordinating(broker, body.v3_and_below_transactional_id):
            error = ErrorCode.not_coordinator
        elif unknown:
            error = ErrorCode.operation_not_attempted
        else:
            error = await broker.transactions.add_partitions(
                body.v3_and_below_transactional_id, body.v3_and_below_producer_id, body.v3_and_below_producer_epoch,
                [(name, p) for name, partitions in topics for p in partitions],
            )  # fmt: skip
    except Exception as exc:
        error = coordinator_error(exc, "AddPartitionsToTxn", (), request)
    error = _fenced(error, version, 2)
    for name, partitions in topics:
        for p in partitions:
            if (name, p) in unknown:
                allowed = broker.security.allowed(WRITE, TOPIC, name)
                errors[(name, p)] = ErrorCode.unknown_topic_or_partition if allowed else ErrorCode.topic_authorization_failed
            else:
                errors[(name, p)] = error
    return make(
        mod.AddPartitionsToTxnResponse,
        throttle_time=NO_THROTTLE,
        results_by_topic_v3_and_below=tuple(
            make(
                mod.AddPartitionsToTxnTopicResult,
                name=name,
                results_by_partition=tuple(
                    make(mod.AddPartitionsToTxnPartitionResult, partition_index=p, partition_error_code=errors[(name, p)]) for p in partitions
                ),
            )
            for name, partitions in topics
        ),
    )


async def handle_add_offsets_to_txn(broker: BrokerApi, request: Request) -> Any:
    body, version = request.body, request.header.api_version
    mod = response_module(25, version)
    try:
        if not may_write(broker, body.transactional_id):
            error = ErrorCode.transactional_id_authorization_failed
        elif not broker.security.allowed(READ, GROUP, body.group_id):
            error = ErrorCode.group_authorization_failed
        elif not await _coordinating(broker, body.transactional_id):
            error = ErrorCode.not_coordinator
        else:
            error = await broker.transactions.add_offsets(body.transactional_id, body.producer_id, body.producer_epoch, body.group_id)
    except Exception as exc:
        error = coordinator_error(exc, "AddOffsetsToTxn", (body.group_id,), request)
    return make(mod.AddOffsetsToTxnResponse, throttle_time=NO_THROTTLE, error_code=_fenced(error, version, 2))


async def handle_txn_offset_commit(broker: BrokerApi, request: Request) -> Any:
    body, version = request.body, request.header.api_version
    mod = response_module(28, version)
    now = broker.clock()
    offsets = [
        CommittedOffset(
            t.name, p.partition_index, p.committed_offset,
            None if getattr(p, "committed_leader_epoch", -1) < 0 else p.committed_leader_epoch, p.committed_metadata or "", now,
        )  # fmt: skip
        for t in body.topics
        for p in t.partitions
    ]
    # Kafka's order: WRITE on the transactional id, READ on the group, then READ on each topic
    # (the partitions of a topic the principal may not read are refused, the others committed).
    unreadable = {t.name for t in body.topics if not broker.security.allowed(READ, TOPIC, t.name)}
    errors = {(o.topic, o.partition): ErrorCode.topic_authorization_failed for o in offsets if o.topic in unreadable}
    offsets = [o for o in offsets if o.topic not in unreadable]
    # A request handed on by the group's coordinator (once, never back) was checked there.
    handed_on = request.header.client_id == inter_broker.CLIENT_ID
    try:
        if not may_write(broker, body.transactional_id):
            error, errors = ErrorCode.transactional_id_authorization_failed, {}
        elif not broker.security.allowed(READ, GROUP, body.group_id):
            error, errors = ErrorCode.group_authorization_failed, {}
        elif not offsets:
            error = ErrorCode.none  # every partition already answered
        elif not handed_on and not is_coordinator(broker, body.group_id):
            error = ErrorCode.not_coordinator  # only the group's coordinator knows its members
        elif not handed_on and (member_error := await broker.groups.validate_txn_offset_commit(
            body.group_id, getattr(body, "generation_id", -1), getattr(body, "member_id", ""), getattr(body, "group_instance_id", None)
        )) is not ErrorCode.none:  # fmt: skip
            # KIP-447 (v3+): a zombie whose partitions a rebalance moved away commits nothing.
            error = member_error
        elif await _coordinating(broker, body.transactional_id):
            error = await broker.transactions.txn_offset_commit(body.transactional_id, body.producer_id, body.producer_epoch, body.group_id, offsets)
        elif not handed_on:
            readable = dataclasses.replace(body, topics=tuple(t for t in body.topics if t.name not in unreadable))
            error, forwarded = await _forward_txn_offset_commit(broker, readable)
            errors = {**forwarded, **errors}
        else:
            error = ErrorCode.not_coordinator
    except Exception as exc:
        error = coordinator_error(exc, "TxnOffsetCommit", (body.group_id,), request)
    error = _fenced(error, version, 3)
    return make(
        mod.TxnOffsetCommitResponse,
        throttle_time=NO_THROTTLE,
        topics=tuple(
            make(
                mod.TxnOffsetCommitResponseTopic,
                name=t.name,
                partitions=tuple(
                    make(mod.TxnOffsetCommitResponsePartition, partition_index=p.partition_index, error_code=errors.get((t.name, p.partition_index), error))
                    for p in t.partitions
                ),
            )
            for t in body.topics
        ),
    )


async def _forward_txn_offset_commit(broker: BrokerApi, body: Any) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
    """The group's coordinator (here) hands a TxnOffsetCommit to the transactional id's, which
    holds the transaction (Kafka's group coordinator keeps the pending offsets itself; here the
    transaction coordinator does, and commits them with the markers). Its per-partition answers
    are the client's; unreachable, it is COORDINATOR_NOT_AVAILABLE, which clients retry."""
    node = holder(broker.cluster.slots, body.transactional_id)
    registration = broker.cluster.brokers.get(node) if node is not None else None
    address = None if registration is None or node == broker.settings.node_id else broker.inter_broker.address(registration)
    if address is None:
        return ErrorCode.coordinator_not_available, {}
    try:
        answers = await broker.inter_broker.txn_offset_commit(address, body, FORWARD_TIMEOUT_S)
    except (OSError, TimeoutError) as exc:
        log.warning("TxnOffsetCommit of group %r for transactional id %r: broker %d unreachable (%s)", body.group_id, body.transactional_id, node, exc)
        return ErrorCode.coordinator_not_available, {}
    return ErrorCode.unknown_server_error, answers  # a partition the answer lacks: unknown


async def handle_end_txn(broker: BrokerApi, request: Request) -> Any:
    body, version = request.body, request.header.api_version
    mod = response_module(26, version)
    try:
        if not may_write(broker, body.transactional_id):
            error = ErrorCode.transactional_id_authorization_failed
        elif not await _coordinating(broker, body.transactional_id):
            error = ErrorCode.not_coordinator
        else:
            error = await broker.transactions.end_txn(body.transactional_id, body.producer_id, body.producer_epoch, body.committed)
    except Exception as exc:
        error = coordinator_error(exc, "EndTxn", (), request)
    return make(mod.EndTxnResponse, throttle_time=NO_THROTTLE, error_code=_fenced(error, version, 2))


async def handle_describe_transactions(broker: BrokerApi, request: Request) -> Any:
    """DescribeTransactions (KIP-664): each id's state, or TRANSACTIONAL_ID_NOT_FOUND with the
    other fields at their schema defaults (0, ""), as Kafka answers it."""
    body, version = request.body, request.header.api_version
    mod = response_module(65, version)
    states = []
    try:
        await _coordinating(broker)
        failure = ErrorCode.none
    except Exception as exc:
        failure = coordinator_error(exc, "DescribeTransactions", (), request)
    for transactional_id in body.transactional_ids:
        if not broker.security.allowed(DESCRIBE, TRANSACTIONAL_ID, transactional_id):
            here, record, error = False, None, ErrorCode.transactional_id_authorization_failed
        else:
            here = failure is ErrorCode.none and await _coordinating(broker, transactional_id)
            record = broker.transactions.core.get(transactional_id) if here else None
            error = (failure if failure is not ErrorCode.none else ErrorCode.not_coordinator if not here
                     else ErrorCode.none if record is not None else ErrorCode.transactional_id_not_found)  # fmt: skip
        topics: dict[str, list[int]] = {}
        for topic, index in record.partitions if record is not None else ():
            topics.setdefault(topic, []).append(index)
        states.append(
            make(
                mod.TransactionState,
                error_code=error,
                transactional_id=transactional_id,
                transaction_state=record.state if record is not None else "",
                transaction_timeout=datetime.timedelta(milliseconds=record.timeout_ms if record is not None else 0),
                transaction_start_time=_start_time(record.txn_start_ms if record is not None else 0),
                producer_id=record.producer_id if record is not None else 0,
                producer_epoch=record.producer_epoch if record is not None else 0,
                topics=tuple(make(mod.TopicData, topic=t, partitions=tuple(ps)) for t, ps in topics.items()),
            )
        )
    return make(mod.DescribeTransactionsResponse, throttle_time=NO_THROTTLE, transaction_states=tuple(states))


async def handle_list_transactions(broker: BrokerApi, request: Request) -> Any:
    """ListTransactions (KIP-664; v1 the duration filter of KIP-994)."""
    body, version = request.body, request.header.api_version
    mod = response_module(66, version)
    try:
        await _coordinating(broker)  # as Kafka: each broker lists the transactions of the slots it holds
    except Exception as exc:
        error = coordinator_error(exc, "ListTransactions", (), request)
        return make(mod.ListTransactionsResponse, throttle_time=NO_THROTTLE, error_code=error, unknown_state_filters=(), transaction_states=())
    listed, unknown = broker.transactions.core.list_transactions(
        body.state_filters, body.producer_id_filters, getattr(body, "duration_filter", -1), broker.clock()
    )
    return make(
        mod.ListTransactionsResponse,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        unknown_state_filters=tuple(unknown),
        transaction_states=tuple(
            make(mod.TransactionState, transactional_id=r.transactional_id, producer_id=r.producer_id, transaction_state=r.state)
            for r in listed
            if broker.security.allowed(DESCRIBE, TRANSACTIONAL_ID, r.transactional_id)
        ),
    )


MARKER_DURABLE_TIMEOUT_S = 10.0


async def handle_write_txn_markers(broker: BrokerApi, request: Request) -> Any:
    """WriteTxnMarkers v1, from the transaction coordinator on another broker: append each
    marker to the partitions this broker leads, answer once each is durable (or its error:
    NOT_LEADER_OR_FOLLOWER, and the coordinator asks the new leader)."""
    body, version = request.body, request.header.api_version
    mod = response_module(27, version)
    allowed = broker.security.cluster_allowed(CLUSTER_ACTION)
    results = []
    for marker in body.markers:
        errors: dict[tuple[str, int], ErrorCode] = {}
        waits = []
        for topic in marker.topics:
            for index in topic.partition_indexes:
                key = (topic.name, index)
                partition = broker.registry.leader(topic.name, index)
                if not allowed:
                    errors[key] = ErrorCode.cluster_authorization_failed
                elif partition is None:
                    errors[key] = absent(broker, topic.name, index)
                else:
                    try:
                        offset = partition.append_marker(
                            marker.producer_id, marker.producer_epoch, marker.transaction_result, marker.coordinator_epoch, broker.clock()
                        )
                    except Exception as exc:
                        errors[key] = error_code_for(exc, f"transaction marker for {topic.name}-{index}")
                    else:
                        errors[key] = ErrorCode.none
                        waits.append((key, partition.until_durable(offset + 1)))
        for key, wait in waits:
            try:
                await asyncio.wait_for(wait, MARKER_DURABLE_TIMEOUT_S)
            except Exception as exc:
                errors[key] = error_code_for(exc, f"transaction marker for {key[0]}-{key[1]}")
        results.append(
            make(
                mod.WritableTxnMarkerResult,
                producer_id=marker.producer_id,
                topics=tuple(
                    make(
                        mod.WritableTxnMarkerTopicResult,
                        name=t.name,
                        partitions=tuple(
                            make(mod.WritableTxnMarkerPartitionResult, partition_index=i, error_code=errors[(t.name, i)]) for i in t.partition_indexes
                        ),
                    )
                    for t in marker.topics
                ),
            )
        )
    return make(mod.WriteTxnMarkersResponse, markers=tuple(results))


async def handle_describe_producers(broker: BrokerApi, request: Request) -> Any:
    """DescribeProducers v0 (KIP-664): per partition this broker leads, the producers its
    producer state holds, with the first offset of the transaction each has open there
    (-1: none). READ on the topic, as Kafka. The coordinator epoch of a producer's last marker
    is not kept by the partition: always -1, as Kafka answers before any marker."""
    body, version = request.body, request.header.api_version
    mod = response_module(61, version)
    topics = []
    for topic in body.topics:
        allowed = broker.security.allowed(READ, TOPIC, topic.name)
        partitions = []
        for index in topic.partition_indexes:
            leader = broker.registry.leader(topic.name, index) if allowed else None
            error = ErrorCode.topic_authorization_failed if not allowed else ErrorCode.none if leader is not None else absent(broker, topic.name, index)
            producers = []
            if leader is not None:
                for producer_id in leader.producers.producer_ids():
                    entry = leader.producers.last_entry(producer_id)
                    if entry is None:
                        continue
                    start = leader.txns.ongoing_first_offset(producer_id)
                    producers.append(make(
                        mod.ProducerState, producer_id=producer_id, producer_epoch=entry.producer_epoch, last_sequence=entry.last_sequence,
                        last_timestamp=entry.last_timestamp_ms, coordinator_epoch=entry.coordinator_epoch, current_txn_start_offset=-1 if start is None else start,
                    ))  # fmt: skip
            partitions.append(make(mod.PartitionResponse, partition_index=index, error_code=error, error_message=None, active_producers=tuple(producers)))
        topics.append(make(mod.TopicResponse, name=topic.name, partitions=tuple(partitions)))
    return make(mod.DescribeProducersResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))


async def verify_elsewhere(broker: BrokerApi, transactional_id: str | None, batches: list[tuple[str, int, int, int]]) -> dict[tuple[str, int], ErrorCode]:
    """KIP-890 part 1 when the transactional id's coordinator is another broker: `batches`
    are (topic, partition, producer id, producer epoch) of transactional batches that would
    open their producer's transaction in a partition this broker leads. One DescribeTransactions
    to the coordinator answers for all of them (as Kafka's AddPartitionsToTxn v4 verifyOnly
    does). Unreachable, it is NOT_ENOUGH_REPLICAS, which producers retry (Kafka maps the
    coordinator's unavailability so too; Produce answers each code as given here,
    errors.TxnVerificationFailed); TRANSACTIONAL_ID_AUTHORIZATION_FAILED (the
    inter-broker principal is no super user) accepts, as Kafka before 3.6 did. With the coordinator here, `broker.transactions.verify` answers in process."""
    if not batches or not transactional_id or is_coordinator(broker, transactional_id):
        return {}
    node = holder(broker.cluster.slots, transactional_id)
    registration = broker.cluster.brokers.get(node) if node is not None else None
    address = None if registration is None else broker.inter_broker.address(registration)
    if address is None:
        return {(t, p): ErrorCode.not_enough_replicas for t, p, _, _ in batches}
    try:
        state = await broker.inter_broker.describe_transaction(address, transactional_id, VERIFY_TIMEOUT_S)
    except (OSError, TimeoutError) as exc:
        log.warning("verifying transactional id %r with its coordinator, broker %d: unreachable (%s)", transactional_id, node, exc)
        return {(t, p): ErrorCode.not_enough_replicas for t, p, _, _ in batches}
    if state.error_code in (ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available):
        return {(t, p): ErrorCode.not_enough_replicas for t, p, _, _ in batches}
    if state.error_code is ErrorCode.transactional_id_authorization_failed:
        return {(t, p): ErrorCode.none for t, p, _, _ in batches}
    if state.error_code is not ErrorCode.none:  # TRANSACTIONAL_ID_NOT_FOUND: no such transaction
        return {(t, p): ErrorCode.invalid_producer_id_mapping for t, p, _, _ in batches}
    added = [(topic.topic, p) for topic in state.topics for p in topic.partitions]
    return {
        (t, p): verification_error(state.producer_id, state.producer_epoch, state.transaction_state, added, pid, epoch, t, p)
        for t, p, pid, epoch in batches
    }
