"""Produce: validate batch headers and CRCs, append as bytes, answer per partition."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from diskless.wire import Request

from ..errors import error_code_for
from ..responses import NO_THROTTLE, make, response_module, timestamp

if TYPE_CHECKING:
    from ..app import Broker

log = logging.getLogger(__name__)

VALID_ACKS = (0, 1, -1)


async def handle_produce(broker: Broker, request: Request) -> Any:
    body = request.body
    mod = response_module(0, request.header.api_version)
    now = broker.clock()
    topics = []
    for topic_data in body.topic_data:
        results = []
        for data in topic_data.partition_data:
            error, message, info = ErrorCode.none, None, None
            partition = broker.partitions.get(topic_data.name, data.index)
            if body.acks not in VALID_ACKS:
                error = ErrorCode.invalid_required_acks
            elif partition is None:
                error = ErrorCode.unknown_topic_or_partition
            elif not data.records:
                error, message = ErrorCode.corrupt_message, "produce request without record batches"
            else:
                try:
                    info = await broker.append(partition, data.records, now)
                except Exception as exc:
                    error, message = error_code_for(exc), str(exc)
                    if error is ErrorCode.unknown_server_error:
                        log.exception("produce to %s-%d failed", topic_data.name, data.index)
                    else:
                        log.warning("produce to %s-%d from %s rejected: %s", topic_data.name, data.index, request.header.client_id, exc)
            results.append(
                make(
                    mod.PartitionProduceResponse,
                    index=data.index,
                    error_code=error,
                    base_offset=info.first_offset if info else -1,
                    log_append_time=timestamp(info.log_append_time_ms) if info else None,
                    log_start_offset=info.log_start_offset if info else -1,
                    record_errors=(),
                    error_message=message,
                )
            )
        topics.append(make(mod.TopicProduceResponse, name=topic_data.name, partition_responses=tuple(results)))
    if body.acks == 0:
        return None
    return make(mod.ProduceResponse, responses=tuple(topics), throttle_time=NO_THROTTLE)
