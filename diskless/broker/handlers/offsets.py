"""ListOffsets (earliest, latest, max timestamp, by timestamp) and DeleteRecords."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from diskless.wire import Request

from ..api import BrokerApi, absent
from ..errors import error_code_for
from ..partition import PartitionLeader
from ..partition.epoch_history import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, end_offset_for
from ..responses import NO_THROTTLE, make, response_module
from ..security.authorizer import DELETE, DESCRIBE, TOPIC
from .fetch import _check_leader_epoch

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4


async def handle_list_offsets(broker: BrokerApi, request: Request) -> Any:
    mod = response_module(2, request.header.api_version)
    topics = []
    for topic in request.body.topics:
        results = []
        for wanted in topic.partitions:
            partition, error = _described_leader(broker, topic.name, wanted.partition_index, getattr(wanted, "current_leader_epoch", -1))
            found_offset, found_timestamp = -1, -1
            epoch = partition.leader_epoch if partition is not None else -1
            if error is ErrorCode.none:
                try:
                    found = await _list_offset(partition, wanted.timestamp, getattr(request.body, "isolation_level", 0))
                except Exception as exc:
                    error = error_code_for(exc, f"list offsets of {topic.name}-{wanted.partition_index}")
                else:
                    if found is not None:
                        found_timestamp, found_offset = found
            results.append(
                make(
                    mod.ListOffsetsPartitionResponse,
                    partition_index=wanted.partition_index,
                    error_code=error,
                    timestamp=found_timestamp,
                    offset=found_offset,
                    leader_epoch=epoch,
                )
            )
        topics.append(make(mod.ListOffsetsTopicResponse, name=topic.name, partitions=tuple(results)))
    return make(mod.ListOffsetsResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))


async def _list_offset(partition: PartitionLeader, timestamp: int, isolation_level: int = 0) -> tuple[int, int] | None:
    """(timestamp, offset) answering ListOffsets for `timestamp`, or None if no record
    qualifies; the latest offset of read_committed (isolation_level 1) is the last stable offset."""
    if timestamp == LATEST:
        return (-1, partition.last_stable_offset if isolation_level == 1 else partition.high_watermark)
    if timestamp == EARLIEST:
        return (-1, partition.log_start_offset)
    if timestamp == EARLIEST_LOCAL:
        return (-1, partition.local_log_start_offset)
    fetchable_below = partition.last_stable_offset if isolation_level == 1 else partition.high_watermark
    if timestamp == MAX_TIMESTAMP:
        return await partition.max_timestamp_offset(fetchable_below)
    return await partition.offset_for_timestamp(timestamp, fetchable_below)


async def handle_delete_records(broker: BrokerApi, request: Request) -> Any:
    mod = response_module(21, request.header.api_version)
    topics = []
    for topic in request.body.topics:
        results = []
        for wanted in topic.partitions:
            partition = broker.registry.leader(topic.name, wanted.partition_index)
            error, low_watermark = ErrorCode.none, -1
            if not broker.security.allowed(DELETE, TOPIC, topic.name):
                error = ErrorCode.topic_authorization_failed
            elif partition is None:
                error = absent(broker, topic.name, wanted.partition_index)
            else:
                high_watermark = partition.high_watermark
                offset = high_watermark if wanted.offset == -1 else wanted.offset
                if not 0 <= offset <= high_watermark:
                    error = ErrorCode.offset_out_of_range
                else:
                    try:
                        low_watermark = await partition.delete_records(offset)
                    except Exception as exc:
                        error = error_code_for(exc, f"delete records of {topic.name}-{wanted.partition_index}")
            results.append(
                make(mod.DeleteRecordsPartitionResult, partition_index=wanted.partition_index, low_watermark=low_watermark, error_code=error)
            )
        topics.append(make(mod.DeleteRecordsTopicResult, name=topic.name, partitions=tuple(results)))
    return make(mod.DeleteRecordsResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))


async def handle_offset_for_leader_epoch(broker: BrokerApi, request: Request) -> Any:
    """OffsetForLeaderEpoch (KIP-101, KIP-320): where each asked leader epoch of a partition
    ended, as its leader knows (partition/epoch_history.py). Consumers ask it after a leader
    change to check that the log they read was not truncated; the current epoch ends at the
    log end, an earlier one where the next leadership began. DESCRIBE on the topic, as Kafka;
    the leader alone answers (no followers here)."""
    mod = response_module(23, request.header.api_version)
    topics = []
    for topic in request.body.topics:
        results = []
        for wanted in topic.partitions:
            partition, error = _described_leader(broker, topic.topic, wanted.partition, wanted.current_leader_epoch)
            epoch, end_offset = UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if error is ErrorCode.none:
                try:
                    starts = await partition.epoch_starts()
                except Exception as exc:
                    error = error_code_for(exc, f"leader epochs of {topic.topic}-{wanted.partition}")
                else:
                    epoch, end_offset = end_offset_for(starts, wanted.leader_epoch, partition.log_end_offset)
            results.append(make(mod.EpochEndOffset, error_code=error, partition=wanted.partition, leader_epoch=epoch, end_offset=end_offset))
        topics.append(make(mod.OffsetForLeaderTopicResult, topic=topic.topic, partitions=tuple(results)))
    return make(mod.OffsetForLeaderEpochResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))


def _described_leader(broker: BrokerApi, topic: str, index: int, current_leader_epoch: int) -> tuple[PartitionLeader | None, ErrorCode]:
    """The partition's leader here and the error a request about it gets first: DESCRIBE on the
    topic, a leader here (`absent`), the current leader epoch (KIP-320)."""
    if not broker.security.allowed(DESCRIBE, TOPIC, topic):
        return None, ErrorCode.topic_authorization_failed
    partition = broker.registry.leader(topic, index)
    if partition is None:
        return None, absent(broker, topic, index)
    return partition, _check_leader_epoch(current_leader_epoch, partition.leader_epoch)
