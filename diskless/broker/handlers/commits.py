"""OffsetCommit, OffsetFetch and OffsetDelete: committed offsets of consumer groups."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from diskless.wire import Request

from ..responses import NO_THROTTLE, make, response_module

if TYPE_CHECKING:
    from ..app import Broker


async def handle_offset_commit(broker: Broker, request: Request) -> Any:
    body, version = request.body, request.header.api_version
    mod = response_module(8, version)
    offsets = [
        (topic.name, p.partition_index, p.committed_offset, _epoch(getattr(p, "committed_leader_epoch", -1)), p.committed_metadata)
        for topic in body.topics
        for p in topic.partitions
    ]
    errors = iter(
        await broker.groups.commit_offsets(
            body.group_id,
            body.generation_id_or_member_epoch,
            body.member_id,
            getattr(body, "group_instance_id", None),
            version,
            offsets,
            known=lambda topic, partition: broker.partitions.get(topic, partition) is not None,
        )
    )
    topics = tuple(
        make(
            mod.OffsetCommitResponseTopic,
            name=topic.name,
            partitions=tuple(make(mod.OffsetCommitResponsePartition, partition_index=p.partition_index, error_code=next(errors)) for p in topic.partitions),
        )
        for topic in body.topics
    )
    return make(mod.OffsetCommitResponse, throttle_time=NO_THROTTLE, topics=topics)


def _epoch(value: int) -> int | None:
    return None if value < 0 else value


async def _fetch_group(broker: Broker, mod: Any, group_id: str, topics: Any, partition_cls: str, topic_cls: str) -> tuple:
    wanted = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    committed = {(o.topic, o.partition): o for o in await broker.groups.fetch_offsets(group_id, wanted)}
    if wanted is None:
        wanted = sorted(committed)
    by_topic: dict[str, list[Any]] = defaultdict(list)
    for topic, partition in wanted:
        found = committed.get((topic, partition))
        by_topic[topic].append(
            make(
                getattr(mod, partition_cls),
                partition_index=partition,
                committed_offset=found.offset if found else -1,
                committed_leader_epoch=found.leader_epoch if found and found.leader_epoch is not None else -1,
                metadata=found.metadata if found else "",
                error_code=ErrorCode.none,
            )
        )
    return tuple(make(getattr(mod, topic_cls), name=topic, partitions=tuple(parts)) for topic, parts in by_topic.items())


async def handle_offset_fetch(broker: Broker, request: Request) -> Any:
    body, version = request.body, request.header.api_version
    mod = response_module(9, version)
    if version >= 8:
        groups = []
        for group in body.groups:
            topics = await _fetch_group(broker, mod, group.group_id, group.topics, "OffsetFetchResponsePartitions", "OffsetFetchResponseTopics")
            groups.append(make(mod.OffsetFetchResponseGroup, group_id=group.group_id, topics=topics, error_code=ErrorCode.none))
        return make(mod.OffsetFetchResponse, throttle_time=NO_THROTTLE, groups=tuple(groups))
    topics = await _fetch_group(broker, mod, body.group_id, body.topics, "OffsetFetchResponsePartition", "OffsetFetchResponseTopic")
    return make(mod.OffsetFetchResponse, throttle_time=NO_THROTTLE, topics=topics, error_code=ErrorCode.none)


async def handle_offset_delete(broker: Broker, request: Request) -> Any:
    body = request.body
    mod = response_module(47, request.header.api_version)
    wanted = [(t.name, p.partition_index) for t in body.topics for p in t.partitions]
    error, errors = await broker.groups.delete_offsets(body.group_id, wanted)
    topics = tuple(
        make(
            mod.OffsetDeleteResponseTopic,
            name=t.name,
            partitions=tuple(
                make(mod.OffsetDeleteResponsePartition, partition_index=p.partition_index, error_code=errors.get((t.name, p.partition_index), ErrorCode.none))
                for p in t.partitions
            ),
        )
        for t in body.topics
    ) if error is ErrorCode.none else ()
    return make(mod.OffsetDeleteResponse, error_code=error, throttle_time=NO_THROTTLE, topics=topics)
