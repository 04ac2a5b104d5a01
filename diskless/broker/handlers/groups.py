"""FindCoordinator and the classic group protocol: JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, DescribeGroups, ListGroups, DeleteGroups. This broker coordinates every group.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from diskless.wire import Request

from ..responses import NO_THROTTLE, make, response_module
from ..server import PEER_HOST

if TYPE_CHECKING:
    from ..app import Broker

GROUP_KEY = 0
NO_AUTHORIZED_OPERATIONS = -2147483648


def _ms(value: Any) -> int:
    return round(value.total_seconds() * 1000)


def _kafka(code: Any) -> ErrorCode:
    return ErrorCode(int(code))


def _nullable(value: str | None, version: int, nullable_from: int) -> str | None:
    """Protocol names are nullable only from some version on; "" before that."""
    return value if version >= nullable_from else (value or "")


async def handle_find_coordinator(broker: Broker, request: Request) -> Any:
    body, version = request.body, request.header.api_version
    mod = response_module(10, version)
    host, port = broker.advertised_address
    key_type = getattr(body, "key_type", GROUP_KEY)

    def answer(key: str) -> dict[str, Any]:
        if key_type != GROUP_KEY:
            return dict(key=key, error_code=ErrorCode.coordinator_not_available, error_message="transactions are not supported", node_id=-1, host="", port=-1)
        return dict(key=key, error_code=ErrorCode.none, error_message=None, node_id=broker.config.node_id, host=host, port=port)

    if version >= 4:
        coordinators = tuple(make(mod.Coordinator, **answer(key)) for key in body.coordinator_keys)
        return make(mod.FindCoordinatorResponse, throttle_time=NO_THROTTLE, coordinators=coordinators)
    return make(mod.FindCoordinatorResponse, throttle_time=NO_THROTTLE, **answer(body.key))


async def handle_join_group(broker: Broker, request: Request) -> Any:
    body, version = request.body, request.header.api_version
    mod = response_module(11, version)
    session_timeout_ms = _ms(body.session_timeout)
    result = await broker.groups.join_group(
        group_id=body.group_id,
        member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        client_id=request.header.client_id or "",
        client_host=PEER_HOST.get(),
        protocol_type=body.protocol_type,
        protocols=[(p.name, p.metadata) for p in body.protocols],
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=_ms(body.rebalance_timeout) if version >= 1 else session_timeout_ms,
        require_known_member_id=version >= 4,
        supports_skip_assignment=version >= 9,
    )
    members = tuple(
        make(mod.JoinGroupResponseMember, member_id=m.member_id, group_instance_id=m.group_instance_id, metadata=m.metadata)
        for m in result.members
    )
    return make(
        mod.JoinGroupResponse,
        throttle_time=NO_THROTTLE,
        error_code=_kafka(result.error_code),
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=_nullable(result.protocol_name, version, 7),
        leader=result.leader,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=members,
    )


async def handle_sync_group(broker: Broker, request: Request) -> Any:
    body, version = request.body, request.header.api_version
    mod = response_module(14, version)
    result = await broker.groups.sync_group(
        group_id=body.group_id,
        generation_id=body.generation_id,
        member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        protocol_type=getattr(body, "protocol_type", None),
        protocol_name=getattr(body, "protocol_name", None),
        assignments=[(a.member_id, a.assignment) for a in body.assignments],
    )
    return make(
        mod.SyncGroupResponse,
        throttle_time=NO_THROTTLE,
        error_code=_kafka(result.error_code),
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )


async def handle_heartbeat(broker: Broker, request: Request) -> Any:
    body = request.body
    mod = response_module(12, request.header.api_version)
    error = broker.groups.heartbeat(
        group_id=body.group_id,
        generation_id=body.generation_id,
        member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
    )
    return make(mod.HeartbeatResponse, throttle_time=NO_THROTTLE, error_code=_kafka(error))


async def handle_leave_group(broker: Broker, request: Request) -> Any:
    body, version = request.body, request.header.api_version
    mod = response_module(13, version)
    if version >= 3:
        leaving = [(m.member_id, m.group_instance_id) for m in body.members]
    else:
        leaving = [(body.member_id, None)]
    result = await broker.groups.leave_group(body.group_id, leaving)
    error = _kafka(result.error_code)
    if version < 3 and error is ErrorCode.none and result.members:
        error = _kafka(result.members[0].error_code)
    members = tuple(
        make(mod.MemberResponse, member_id=m.member_id, group_instance_id=m.group_instance_id, error_code=_kafka(m.error_code))
        for m in result.members
    ) if version >= 3 else ()
    return make(mod.LeaveGroupResponse, throttle_time=NO_THROTTLE, error_code=error, members=members)


async def handle_describe_groups(broker: Broker, request: Request) -> Any:
    body, version = request.body, request.header.api_version
    mod = response_module(15, version)
    with_offsets = set(await broker.store.list_groups_with_offsets())
    groups = []
    for group_id in body.groups:
        d = broker.groups.coordinator.describe_group(group_id, api_version=version)
        state, protocol_type = d.group_state, d.protocol_type
        if state == "Dead" and group_id in with_offsets:
            state, protocol_type = "Empty", "consumer"  # known only by its committed offsets
        members = tuple(
            make(
                mod.DescribedGroupMember,
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.member_metadata,
                member_assignment=m.member_assignment,
            )
            for m in d.members
        )
        groups.append(
            make(
                mod.DescribedGroup,
                error_code=_kafka(d.error_code),
                group_id=group_id,
                group_state=state,
                protocol_type=protocol_type,
                protocol_data=d.protocol_data,
                members=members,
                authorized_operations=NO_AUTHORIZED_OPERATIONS,
            )
        )
    return make(mod.DescribeGroupsResponse, throttle_time=NO_THROTTLE, groups=tuple(groups))


async def handle_list_groups(broker: Broker, request: Request) -> Any:
    body = request.body
    mod = response_module(16, request.header.api_version)
    states = tuple(getattr(body, "states_filter", ()) or ())
    coordinator = broker.groups.coordinator
    listed = {g.group_id: (g.protocol_type, g.group_state) for g in coordinator.list_groups(states)}
    if not states or "empty" in {s.lower() for s in states}:
        # Groups known only by their committed offsets are Empty; a group the coordinator
        # knows in another state was filtered out above and must stay out.
        known = {g.group_id for g in coordinator.list_groups()}
        for group_id in await broker.store.list_groups_with_offsets():
            if group_id not in known:
                listed[group_id] = ("consumer", "Empty")
    groups = tuple(
        make(mod.ListedGroup, group_id=group_id, protocol_type=protocol_type, group_state=state)
        for group_id, (protocol_type, state) in sorted(listed.items())
    )
    return make(mod.ListGroupsResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, groups=groups)


async def handle_delete_groups(broker: Broker, request: Request) -> Any:
    mod = response_module(42, request.header.api_version)
    results = []
    for group_id in request.body.groups_names:
        error = await broker.groups.delete_group(group_id)
        results.append(make(mod.DeletableGroupResult, group_id=group_id, error_code=error))
    return make(mod.DeleteGroupsResponse, throttle_time=NO_THROTTLE, results=tuple(results))
