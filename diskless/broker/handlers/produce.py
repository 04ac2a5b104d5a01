"""Produce: validate batch headers and CRCs, append as bytes, answer per partition."""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from diskless.wire import Request

from ..api import BrokerApi
from ..errors import error_code_for
from ..responses import NO_THROTTLE, make, response_module, timestamp

log = logging.getLogger(__name__)

VALID_ACKS = (0, 1, -1)


async def handle_produce(broker: BrokerApi, request: Request) -> Any:
    body = request.body
    mod = response_module(0, request.header.api_version)
    now = broker.clock()
    topics = []
    for topic_data in body.topic_data:
        results = []
        for data in topic_data.partition_data:
            error, message, info = ErrorCode.none, None, None
            partition = broker.registry.leader(topic_data.name, data.index)
            if body.acks not in VALID_ACKS:
                error = ErrorCode.invalid_required_acks
            elif partition is None:
                error = ErrorCode.unknown_topic_or_partition
            elif not data.records:
                error, message = ErrorCode.corrupt_message, "produce request without record batches"
            else:
                try:
                    info = partition.append(data.records, now)
                except Exception as exc:
                    error, message = error_code_for(exc, f"produce to {topic_data.name}-{data.index}"), str(exc)
                    if error is not ErrorCode.unknown_server_error:
                        log.warning("produce to %s-%d from %s rejected: %s", topic_data.name, data.index, request.header.client_id, exc)
            results.append(
                make(
                    mod.PartitionProduceResponse,
                    index=data.index,
                    error_code=error,
                    base_offset=info.first_offset if info else -1,
                    log_append_time=timestamp(info.log_append_time_ms) if info else None,
                    log_start_offset=partition.log_start_offset if info else -1,
                    record_errors=(),
                    error_message=message,
                )
            )
        topics.append(make(mod.TopicProduceResponse, name=topic_data.name, partition_responses=tuple(results)))
    if body.acks == 0:
        return None
    return make(mod.ProduceResponse, responses=tuple(topics), throttle_time=NO_THROTTLE)


async def handle_init_producer_id(broker: BrokerApi, request: Request) -> Any:
    """InitProducerId for idempotent producers: a fresh producer id at epoch 0, as Kafka gives
    producers without a transactional id. Transactions are not supported."""
    body = request.body
    mod = response_module(22, request.header.api_version)
    if body.transactional_id is not None:
        log.warning("refusing InitProducerId with transactional.id %r: transactions are not supported", body.transactional_id)
        return make(mod.InitProducerIdResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.transactional_id_authorization_failed, producer_id=-1, producer_epoch=-1)
    producer_id = await broker.allocate_producer_id()
    return make(mod.InitProducerIdResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, producer_id=producer_id, producer_epoch=0)
