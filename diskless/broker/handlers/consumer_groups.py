"""KIP-848's consumer group protocol: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69).

Served, like the classic group APIs, only by the group's coordinator (the holder of its
coordinator slot, `groups.is_coordinator`); others answer NOT_COORDINATOR and the member
looks the coordinator up again. The decisions are the sans-IO core's
(group/consumer_coordinator.py); this module turns kio bodies into its values and back.
Partitions travel by topic id, as in Kafka.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from diskless.wire import Request

from ..api import PEER_HOST, BrokerApi
from ..group.consumer_coordinator import HeartbeatRequest
from ..responses import NO_THROTTLE, make, response_module
from ..security.authorizer import DESCRIBE, GROUP
from .groups import NO_AUTHORIZED_OPERATIONS, answers_failure


def _ms(value: Any) -> int:
    return round(value.total_seconds() * 1000)


def _heartbeat_failed(request: Request, error: ErrorCode) -> Any:
    mod = response_module(68, request.header.api_version)
    return make(
        mod.ConsumerGroupHeartbeatResponse,
        throttle_time=NO_THROTTLE,
        error_code=error,
        error_message=None,
        member_id=request.body.member_id or None,
        member_epoch=request.body.member_epoch,
        heartbeat_interval=NO_THROTTLE,
        assignment=None,
    )


@answers_failure("ConsumerGroupHeartbeat", lambda body: (body.group_id,), _heartbeat_failed)
async def handle_consumer_group_heartbeat(broker: BrokerApi, request: Request) -> Any:
    body, version = request.body, request.header.api_version
    mod = response_module(68, version)
    owned = None if body.topic_partitions is None else {tp.topic_id: frozenset(tp.partitions) for tp in body.topic_partitions}
    heartbeat = HeartbeatRequest(
        group_id=body.group_id,
        member_id=body.member_id,
        member_epoch=body.member_epoch,
        instance_id=body.instance_id,
        rack_id=body.rack_id,
        rebalance_timeout_ms=_ms(body.rebalance_timeout),
        subscribed_topic_names=None if body.subscribed_topic_names is None else tuple(body.subscribed_topic_names),
        subscribed_topic_regex=getattr(body, "subscribed_topic_regex", None),
        server_assignor=body.server_assignor,
        owned=owned,
        client_id=request.header.client_id or "",
        client_host=PEER_HOST.get(),
        api_version=version,
    )
    result = await broker.groups.consumer_group_heartbeat(heartbeat, broker.registry.topics.values())
    assignment = None
    if result.assignment is not None:
        assignment = make(mod.Assignment, topic_partitions=_topic_partitions(mod, broker, result.assignment, with_names=False))
    return make(
        mod.ConsumerGroupHeartbeatResponse,
        throttle_time=NO_THROTTLE,
        error_code=result.error_code,
        error_message=result.error_message,
        member_id=result.member_id,
        member_epoch=result.member_epoch,
        heartbeat_interval=_timedelta_ms(result.heartbeat_interval_ms),
        assignment=assignment,
    )


def _timedelta_ms(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


def _topic_partitions(mod: Any, broker: BrokerApi, assignment: Mapping[uuid.UUID, frozenset[int]], *, with_names: bool) -> tuple[Any, ...]:
    entries = []
    for topic_id, partitions in assignment.items():
        if not partitions:
            continue
        topic = broker.registry.topic_by_id(topic_id)
        name = topic.name if topic is not None else ""
        entries.append((name, topic_id, tuple(sorted(partitions))))
    entries.sort()
    return tuple(
        make(mod.TopicPartitions, topic_id=topic_id, topic_name=name, partitions=partitions) if with_names else make(mod.TopicPartitions, topic_id=topic_id, partitions=partitions)
        for name, topic_id, partitions in entries
    )


def _describe_failed(request: Request, error: ErrorCode) -> Any:
    mod = response_module(69, request.header.api_version)
    groups = tuple(
        make(mod.DescribedGroup, error_code=error, error_message=None, group_id=g, group_state="", group_epoch=-1,
             assignment_epoch=-1, assignor_name="", members=(), authorized_operations=NO_AUTHORIZED_OPERATIONS)  # fmt: skip
        for g in request.body.group_ids
    )
    return make(mod.ConsumerGroupDescribeResponse, throttle_time=NO_THROTTLE, groups=groups)


@answers_failure("ConsumerGroupDescribe", lambda body: body.group_ids, _describe_failed, acl=DESCRIBE)
async def handle_consumer_group_describe(broker: BrokerApi, request: Request) -> Any:
    body = request.body
    mod = response_module(69, request.header.api_version)
    groups = []
    for d in await broker.groups.consumer_group_describe(body.group_ids):
        members = tuple(
            make(
                mod.Member,
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=m.subscribed_topic_names,
                subscribed_topic_regex=m.subscribed_topic_regex,
                assignment=make(mod.Assignment, topic_partitions=_topic_partitions(mod, broker, m.assignment, with_names=True)),
                target_assignment=make(mod.Assignment, topic_partitions=_topic_partitions(mod, broker, m.target_assignment, with_names=True)),
                member_type=1,  # v1: 1 for a member of this protocol (0 classic, -1 unknown)
            )
            for m in d.members
        )
        found = d.error_code is ErrorCode.none
        groups.append(
            make(
                mod.DescribedGroup,
                error_code=d.error_code,
                error_message=d.error_message,
                group_id=d.group_id,
                group_state=d.group_state if found else "",
                group_epoch=d.group_epoch if found else -1,
                assignment_epoch=d.assignment_epoch if found else -1,
                assignor_name=d.assignor_name,
                members=members,
                authorized_operations=broker.security.authorized_operations(GROUP, d.group_id)
                if found and body.include_authorized_operations else NO_AUTHORIZED_OPERATIONS,
            )
        )
    return make(mod.ConsumerGroupDescribeResponse, throttle_time=NO_THROTTLE, groups=tuple(groups))
