"""Offsets from brokers: ListOffsets routed to partition leaders, and OffsetFetch of a group.

`list_offsets(cluster, {tp: timestamp})` sends one request per leader, with the special
timestamps -1 (latest: the high watermark), -2 (earliest: the log start offset) and -3 (the
record with the largest timestamp), or a time in ms (the first offset whose timestamp is at
or after it). Retriable errors (stale leader, broken connection) refresh metadata and retry
until `timeout_ms`; other errors raise with the partition they concern.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from . import protocol
from .cluster import NO_LEADER, Cluster
from .errors import KafkaError, KafkaTimeoutError, LeaderNotAvailableError, error_for
from .retry import retrying
from .structs import OffsetAndMetadata, OffsetAndTimestamp, TopicPartition

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3


async def list_offsets(
    cluster: Cluster,
    timestamps: Mapping[TopicPartition, int],
    *,
    isolation_level: int = 0,
    timeout_ms: int = 60000,
) -> dict[TopicPartition, OffsetAndTimestamp | None]:
    """The answer per partition; None where no record has a timestamp that recent."""
    results: dict[TopicPartition, OffsetAndTimestamp | None] = {}

    def remaining() -> dict[TopicPartition, int]:
        return {tp: ts for tp, ts in timestamps.items() if tp not in results}

    async def attempt() -> dict[TopicPartition, OffsetAndTimestamp | None]:
        left = remaining()
        if left:
            await _attempt(cluster, left, isolation_level, results)
        return results

    async def on_retry(exc: KafkaError) -> None:
        if exc.invalid_metadata:
            try:
                await cluster.refresh({tp.topic for tp in remaining()})
            except KafkaError:
                pass

    return await retrying(
        attempt,
        retry_backoff_ms=cluster.retry_backoff_ms,
        timeout_ms=timeout_ms,
        on_retry=on_retry,
        on_deadline=lambda exc: KafkaTimeoutError(f"listing offsets ({exc})", timeout_ms),
    )


async def _attempt(
    cluster: Cluster,
    timestamps: Mapping[TopicPartition, int],
    isolation_level: int,
    results: dict[TopicPartition, OffsetAndTimestamp | None],
) -> None:
    meta = cluster.metadata
    if any(meta.leader(tp.topic, tp.partition) == NO_LEADER for tp in timestamps):
        await cluster.refresh({tp.topic for tp in timestamps})
    by_node: dict[int, dict[TopicPartition, int]] = defaultdict(dict)
    for tp, ts in timestamps.items():
        leader = meta.leader(tp.topic, tp.partition)
        if leader == NO_LEADER:
            count = meta.partition_count(tp.topic)
            code = meta.topic_errors.get(tp.topic, 3 if count is not None and tp.partition >= count else 5)
            raise error_for(code, None, topic=tp.topic, partition=tp.partition)
        by_node[leader][tp] = ts

    def make(version: int, wanted: dict[TopicPartition, int]) -> Any:
        cls = protocol.request_class(protocol.LIST_OFFSETS, version)
        topic_cls = protocol.nested(cls, "ListOffsetsTopic")
        partition_cls = protocol.nested(cls, "ListOffsetsPartition")
        by_topic: dict[str, list[Any]] = defaultdict(list)
        for tp, ts in wanted.items():
            by_topic[tp.topic].append(
                protocol.build(
                    partition_cls,
                    partition_index=tp.partition,
                    current_leader_epoch=meta.leader_epoch(tp.topic, tp.partition),
                    timestamp=ts,
                )
            )
        return protocol.build(
            cls,
            replica_id=-1,
            isolation_level=isolation_level,
            topics=tuple(topic_cls(name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        )

    responses = await asyncio.gather(
        *(cluster.request_node(node, protocol.LIST_OFFSETS, lambda v, w=wanted: make(v, w)) for node, wanted in by_node.items()),
        return_exceptions=True,
    )
    errors: list[KafkaError] = []
    for response in responses:
        if isinstance(response, BaseException):
            errors.append(response if isinstance(response, KafkaError) else KafkaError(str(response)))
            continue
        for t in response.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                if p.error_code:
                    errors.append(error_for(p.error_code, None, topic=t.name, partition=p.partition_index))
                elif p.offset < 0:
                    results[tp] = None
                else:
                    results[tp] = OffsetAndTimestamp(p.offset, p.timestamp, getattr(p, "leader_epoch", -1))
    if errors:
        errors.sort(key=lambda e: e.retriable)  # a permanent error wins: no point retrying
        raise errors[0]
    missing = [tp for tp in timestamps if tp not in results]
    if missing:
        raise LeaderNotAvailableError("no answer for these partitions", partitions=missing)


# --- committed offsets (OffsetFetch) ---------------------------------------------------------


def offset_fetch_request(version: int, group_id: str, partitions: list[TopicPartition] | None, require_stable: bool) -> Any:
    """OffsetFetch for one group: of `partitions`, or of every partition (None, v2+).

    From v8 the request names groups in a list (KIP-709); we always ask for one.
    """
    cls = protocol.request_class(protocol.OFFSET_FETCH, version)
    topics = None
    if partitions is not None:
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in partitions:
            by_topic[tp.topic].append(tp.partition)
        topic_name = "OffsetFetchRequestTopics" if protocol.has_field(cls, "groups") else "OffsetFetchRequestTopic"
        topic_cls = protocol.nested(cls, topic_name)
        topics = tuple(topic_cls(name=t, partition_indexes=tuple(ps)) for t, ps in by_topic.items())
    if protocol.has_field(cls, "groups"):
        group_cls = protocol.nested(cls, "OffsetFetchRequestGroup")
        return protocol.build(cls, groups=(protocol.build(group_cls, group_id=group_id, topics=topics),), require_stable=require_stable)
    return protocol.build(cls, group_id=group_id, topics=topics, require_stable=require_stable)


def committed_offsets(response: Any, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]:
    """The committed offsets in an OffsetFetch answer (partitions without one are left out).

    Raises the group's or a partition's error.
    """
    groups = getattr(response, "groups", None)
    body = response if groups is None else next((g for g in groups if g.group_id == group_id), None)
    if body is None:
        raise error_for(-1, "the OffsetFetch answer does not name the group", group=group_id)
    code = getattr(body, "error_code", 0)
    if code:
        raise error_for(code, None, group=group_id)
    found = {}
    for t in body.topics:
        for p in t.partitions:
            if p.error_code:
                raise error_for(p.error_code, None, group=group_id, topic=t.name, partition=p.partition_index)
            if p.committed_offset >= 0:
                found[TopicPartition(t.name, p.partition_index)] = OffsetAndMetadata(
                    p.committed_offset, p.metadata or "", getattr(p, "committed_leader_epoch", -1)
                )
    return found
