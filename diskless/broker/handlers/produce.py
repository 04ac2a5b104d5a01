"""Produce: validate batch headers and CRCs, append as bytes, answer per partition."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from diskless.wire import Request
from hot_tier.records import CorruptBatch, peek_transactional, read_header

from ..api import BrokerApi, absent
from ..errors import DurabilityTimeout, OutOfOrderSequence, UnknownProducerId, error_code_for
from ..refused_batches import RETRIABLE_REFUSALS, settling
from ..responses import NO_THROTTLE, make, response_module, timestamp
from ..security.authorizer import IDEMPOTENT_WRITE, TOPIC, WRITE
from . import transactions

log = logging.getLogger(__name__)

VALID_ACKS = (0, 1, -1)


async def handle_produce(broker: BrokerApi, request: Request) -> Any:
    """Append every partition's batch, then answer: acks=0 not at all, acks=1 now, acks=all
    once each appended batch is durable (the high watermark passed it) or the request's
    timeout ran out (REQUEST_TIMED_OUT, as Kafka when replication does not finish in time)."""
    body = request.body
    mod = response_module(0, request.header.api_version)
    # A partition this broker is opening holds the request rather than refusing it (opening_gate.py).
    await broker.registry.until_open(
        [(t.name, p.index) for t in body.topic_data for p in t.partition_data], body.timeout.total_seconds()
    )
    now = broker.clock()
    transactional_id = getattr(body, "transactional_id", None)  # only transactional producers send one
    # As Kafka: a transactional batch comes with its transactional id, which the client may write.
    refused_id = not transactions.may_write(broker, transactional_id) if transactional_id else _has_transactional_batch(body)
    verified: dict[tuple[str, int], ErrorCode] = {}
    guards: dict[tuple[str, int], tuple[Any, int, object]] = {}  # (leader, producer id, guard) per partition verified elsewhere
    turn = None
    try:
        if transactional_id and not refused_id:
            opening = _opening_transactions(broker, body)
            if opening:
                turn, before = broker.transactions.produce_turns.take(transactional_id)
                if before is not None:
                    await asyncio.wait([before])  # an earlier request of the producer appends first (txn/produce_turns.py)
                    opening = _opening_transactions(broker, body)  # again: the request before may have opened some
            for topic, index, producer_id, _ in opening:
                leader = broker.registry.leader(topic, index)
                guards[(topic, index)] = (leader, producer_id, leader.txns.begin_verification(producer_id))
            verified = await transactions.verify_elsewhere(broker, transactional_id, opening)
        outcomes = _append_all(broker, request, now, refused_id, verified, guards)
    finally:
        if turn is not None:
            broker.transactions.produce_turns.end(transactional_id, turn)
    for leader, producer_id, guard in guards.values():
        leader.txns.end_verification(producer_id, guard)
    if body.acks == 0:
        return None
    if body.acks == -1:
        await _until_durable(outcomes, int(body.timeout.total_seconds() * 1000))
    topics = tuple(
        make(
            mod.TopicProduceResponse,
            name=name,
            partition_responses=tuple(
                make(
                    mod.PartitionProduceResponse,
                    index=index,
                    error_code=error,
                    base_offset=info.first_offset if info and error is ErrorCode.none else -1,
                    log_append_time=timestamp(info.log_append_time_ms) if info and error is ErrorCode.none else None,
                    log_start_offset=partition.log_start_offset if info and error is ErrorCode.none else -1,
                    record_errors=tuple(
                        make(mod.BatchIndexAndErrorMessage, batch_index=i, batch_index_error_message=m) for i, m in record_errors
                    ) if hasattr(mod, "BatchIndexAndErrorMessage") else (),
                    error_message=message,
                )
                for index, error, message, info, partition, record_errors in results
            ),
        )
        for name, results in outcomes.items()
    )
    return make(mod.ProduceResponse, responses=topics, throttle_time=NO_THROTTLE)


def _append_all(
    broker: BrokerApi, request: Request, now: int, refused_id: bool, verified: dict[tuple[str, int], ErrorCode],
    guards: dict[tuple[str, int], tuple[Any, int, object]],
) -> dict[str, list[list[Any]]]:
    """Append each partition's batch, in request order, without a wait (server.py: a
    connection's Produce requests append in the order they came)."""
    body = request.body
    # topic -> [partition index, error, message, AppendInfo | None, leader | None, record errors], in request order.
    outcomes: dict[str, list[list[Any]]] = {}
    for topic_data in body.topic_data:
        results = outcomes.setdefault(topic_data.name, [])
        for data in topic_data.partition_data:
            error, message, info, record_errors = ErrorCode.none, None, None, ()
            partition = broker.registry.leader(topic_data.name, data.index)
            if body.acks not in VALID_ACKS:
                error = ErrorCode.invalid_required_acks
            elif refused_id:
                error = ErrorCode.transactional_id_authorization_failed
            elif not broker.security.allowed(WRITE, TOPIC, topic_data.name):
                error = ErrorCode.topic_authorization_failed
            elif partition is None:
                error = absent(broker, topic_data.name, data.index)
                _remember_refusal(broker, topic_data.name, data.index, data.records, error, now)
            elif not data.records:
                error, message = ErrorCode.corrupt_message, "produce request without record batches"
            else:
                try:
                    verify = broker.transactions.verify
                    if (topic_data.name, data.index) in verified:
                        code = verified[(topic_data.name, data.index)]
                        if not _still_verified(guards.get((topic_data.name, data.index)), partition):
                            code = ErrorCode.not_enough_replicas  # the answer may be stale: the producer retries, verified again
                        verify = lambda *_, code=code: code  # noqa: E731 (the coordinator elsewhere answered)
                    info = partition.append(data.records, now, verify)
                except Exception as exc:
                    error, message = _durability_error(exc, f"produce to {topic_data.name}-{data.index}"), str(exc)
                    record_errors = getattr(exc, "record_errors", ())  # KIP-467: (batch_index, message) per record
                    if isinstance(exc, (OutOfOrderSequence, UnknownProducerId)):
                        earlier = broker.refused_batches.explains(
                            topic_data.name, data.index, exc.producer_id, exc.producer_epoch, exc.expected_sequence, now
                        )  # fmt: skip
                        if earlier is not None:
                            error = earlier
                            message = f"{exc}: the batch from sequence {exc.expected_sequence} was refused here ({earlier.name}); send it first"
                        elif partition.leader_epoch > 1 and exc.base_sequence > exc.expected_sequence and settling(partition.serving_since_ms, now):
                            error = ErrorCode.not_leader_or_follower
                            message = (f"{exc}: the partition is served here since {now - partition.serving_since_ms} ms; "
                                       f"the batch from sequence {exc.expected_sequence} may be on its way from the previous leader")
                    else:
                        _remember_refusal(broker, topic_data.name, data.index, data.records, error, now)
                    if error is not ErrorCode.unknown_server_error:
                        log.warning("produce to %s-%d from %s rejected: %s", topic_data.name, data.index, request.header.client_id, message)
            results.append([data.index, error, message, info, partition, record_errors])
    return outcomes


async def _until_durable(outcomes: dict[str, list[list[Any]]], timeout_ms: int) -> None:
    """Wait, at most `timeout_ms`, for every appended batch to be durable; mark the others failed."""
    waits = {
        asyncio.ensure_future(partition.until_durable(info.last_offset + 1)): outcome
        for results in outcomes.values()
        for outcome in results
        if (partition := outcome[4]) is not None and (info := outcome[3]) is not None and outcome[1] is ErrorCode.none
        and partition.high_watermark <= info.last_offset
    }
    if not waits:
        return
    done, pending = await asyncio.wait(waits, timeout=max(timeout_ms, 0) / 1000)
    for task in pending:
        task.cancel()
        outcome = waits[task]
        failure = DurabilityTimeout(outcome[4].topic, outcome[0], outcome[3].last_offset, timeout_ms)
        outcome[1], outcome[2] = error_code_for(failure), str(failure)
    for task in done:
        if (failure := task.exception()) is not None:
            outcome = waits[task]
            outcome[1], outcome[2] = _durability_error(failure, f"produce to {outcome[4].topic}-{outcome[0]}"), str(failure)


def _still_verified(guard: tuple[Any, int, object] | None, partition: Any) -> bool:
    """Whether a verification asked of another broker still describes the partition: neither a
    marker of the producer (it ended the transaction the answer saw) nor a new leadership (a
    leader opened afresh) came while it was asked."""
    if guard is None:
        return True
    leader, producer_id, token = guard
    return leader is partition and partition.txns.verification_holds(producer_id, token)


def _has_transactional_batch(body: Any) -> bool:
    """Whether a partition's batch says it is transactional (its attributes byte: every
    Produce request without a transactional id asks, so no header is parsed here)."""
    return any(peek_transactional(data.records) for topic_data in body.topic_data for data in topic_data.partition_data if data.records)


def _opening_transactions(broker: BrokerApi, body: Any) -> list[tuple[str, int, int, int]]:
    """(topic, partition, producer id, producer epoch) of the transactional batches that would
    open their producer's transaction in a partition this broker leads (KIP-890 part 1 asks
    the coordinator first). A batch whose header does not parse is left to the append's checks."""
    opening = []
    for topic_data in body.topic_data:
        for data in topic_data.partition_data:
            partition = broker.registry.leader(topic_data.name, data.index)
            if partition is None or not data.records:
                continue
            try:
                header = read_header(data.records, 0, check_crc=False)
            except CorruptBatch:
                continue
            if header.is_transactional and not header.is_control and not partition.txns.is_ongoing(header.producer_id):
                opening.append((topic_data.name, data.index, header.producer_id, header.producer_epoch))
    return opening


def _remember_refusal(broker: BrokerApi, topic: str, index: int, records: bytes | None, error: ErrorCode, now: int) -> None:
    """Keep a retriable refusal of an idempotent producer's batch: it may explain the gap before
    the producer's next batch (refused_batches.py)."""
    if error not in RETRIABLE_REFUSALS or not records:
        return
    try:
        header = read_header(records, 0, check_crc=False)
    except CorruptBatch:
        return
    if header.has_producer_id:
        broker.refused_batches.refused(topic, index, header.producer_id, header.producer_epoch, header.base_sequence, error, now)


def _durability_error(failure: BaseException, context: str) -> ErrorCode:
    """A batch fenced while it waited for durability, or appended after an earlier one was, (the store moved the partition to a newer
    leader epoch) answers NOT_LEADER_OR_FOLLOWER, as Kafka answers a write whose leader changed
    before its acks: Produce carries no leader epoch, and clients retry NOT_LEADER_OR_FOLLOWER
    at the new leader, where FENCED_LEADER_EPOCH fails the record (librdkafka)."""
    code = error_code_for(failure, context)
    return ErrorCode.not_leader_or_follower if code in (ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch) else code


async def handle_init_producer_id(broker: BrokerApi, request: Request) -> Any:
    """InitProducerId for idempotent producers: a fresh producer id at epoch 0, as Kafka gives
    producers without a transactional id; with one, the transaction coordinator answers
    (handlers/transactions.py)."""
    body = request.body
    mod = response_module(22, request.header.api_version)
    if body.transactional_id is not None:
        return await transactions.init_producer_id(broker, request)
    # As Kafka 3: an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic.
    security = broker.security
    if not (security.cluster_allowed(IDEMPOTENT_WRITE) or any(security.allowed(WRITE, TOPIC, name) for name in broker.registry.topics)):
        return make(mod.InitProducerIdResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.cluster_authorization_failed, producer_id=-1, producer_epoch=-1)
    producer_id = await broker.allocate_producer_id()
    return make(mod.InitProducerIdResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, producer_id=producer_id, producer_epoch=0)
