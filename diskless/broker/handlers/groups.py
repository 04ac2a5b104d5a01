"""FindCoordinator and the classic group protocol: JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, DescribeGroups, ListGroups, DeleteGroups. This broker coordinates the groups
whose coordinator slot it holds (cluster/slots.py); for others it answers NOT_COORDINATOR.

Group state is reached only through `broker.groups` (groups.py). An exception raised while a
request is served (the metadata store failing, a bug) is logged once with the API and the
group, and answered with an error code as Kafka's group coordinator answers it
(`coordinator_error`); the connection stays open.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from diskless.wire import Request

from ..api import PEER_HOST, BrokerApi
from ..errors import error_code_for
from ..responses import NO_THROTTLE, make, response_module
from ..security.authorizer import DELETE, DESCRIBE, GROUP, READ, TRANSACTIONAL_ID
from ..cluster.slots import holder
from ..security.session import SESSION

log = logging.getLogger(__name__)

GROUP_KEY = 0
TRANSACTION_KEY = 1  # the transaction coordinator is the group coordinator's broker (txn/transactions.py)
NO_AUTHORIZED_OPERATIONS = -2147483648

# Kafka's GroupCoordinatorService.normalizeException: a coordinator whose storage failed
# answers NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE, which clients retry after looking the
# coordinator up again; KAFKA_STORAGE_ERROR itself is fatal to a consumer's OffsetCommit.
_COORDINATOR_ERRORS = {
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
}

Handler = Callable[[BrokerApi, Request], Awaitable[Any]]


def coordinator_error(exc: Exception, api: str, group_ids: Iterable[str], request: Request) -> ErrorCode:
    """The code answering `exc`, raised while serving `api` for `group_ids`; logs it once.

    `error_code_for` logs an exception the broker's table does not know (with its traceback);
    a known one (the metadata store failed, ...) is logged here as one warning line.
    """
    ids = [repr(g) for g in group_ids]
    of = f" of group {ids[0]}" if len(ids) == 1 else f" of groups {', '.join(ids)}" if ids else ""
    what = f"{api}{of} from client {request.header.client_id!r}"
    code = error_code_for(exc, what)
    answer = _COORDINATOR_ERRORS.get(code, code)
    if code is not ErrorCode.unknown_server_error:
        log.warning("%s failed: %s; answering %s", what, exc, answer.name.upper())
    return answer


def is_coordinator(broker: BrokerApi, key: str) -> bool:
    """Whether this broker holds the coordinator slot of a group id or transactional id
    (cluster/slots.py): slots move like partitions, and members rediscover them, as in Kafka."""
    return holder(broker.cluster.slots, key) == broker.settings.node_id


def coordinator_address(broker: BrokerApi, key: str) -> tuple[int, str, int] | None:
    """(node id, host, port) of the key's coordinator on the client's listener, or None while
    its slot has no live holder."""
    node = holder(broker.cluster.slots, key)
    if node == broker.settings.node_id:
        return (node, *broker.advertised_address)
    registration = broker.cluster.brokers.get(node) if node is not None else None
    endpoint = None if registration is None else registration.endpoint(SESSION.get().listener.name)
    return None if endpoint is None or node is None else (node, *endpoint)


def answers_failure(
    api: str, group_ids: Callable[[Any], Iterable[str]], failure: Callable[[Request, ErrorCode], Any], acl: int | None = READ
) -> Callable[[Handler], Handler]:
    """Serve the request with the decorated handler; if it raises, answer `failure(request, code)`.
    The principal needs the `acl` operation on every group named (GROUP_AUTHORIZATION_FAILED)."""

    def decorate(handler: Handler) -> Handler:
        @functools.wraps(handler)
        async def guarded(broker: BrokerApi, request: Request) -> Any:
            if acl is not None and not all(broker.security.allowed(acl, GROUP, g) for g in group_ids(request.body)):
                return failure(request, ErrorCode.group_authorization_failed)
            try:
                if api not in ("FindCoordinator", "ListGroups") and not all(is_coordinator(broker, g) for g in group_ids(request.body)):
                    return failure(request, ErrorCode.not_coordinator)  # an ordinary answer: the client looks again
                return await handler(broker, request)
            except Exception as exc:
                return failure(request, coordinator_error(exc, api, group_ids(request.body), request))

        return guarded

    return decorate


def _ms(value: Any) -> int:
    return round(value.total_seconds() * 1000)


def _nullable(value: str | None, version: int, nullable_from: int) -> str | None:
    """Protocol names are nullable only from some version on; "" before that."""
    return value if version >= nullable_from else (value or "")


def _one_group(body: Any) -> tuple[str]:
    return (body.group_id,)


# --- FindCoordinator -----------------------------------------------------------------------


def _coordinator_keys(body: Any) -> tuple[str, ...]:
    return tuple(body.coordinator_keys) if hasattr(body, "coordinator_keys") else (body.key,)


def _find_coordinator_response(request: Request, answer: Callable[[str], dict[str, Any]]) -> Any:
    body, version = request.body, request.header.api_version
    mod = response_module(10, version)
    if version >= 4:
        coordinators = tuple(make(mod.Coordinator, **answer(key)) for key in body.coordinator_keys)
        return make(mod.FindCoordinatorResponse, throttle_time=NO_THROTTLE, coordinators=coordinators)
    return make(mod.FindCoordinatorResponse, throttle_time=NO_THROTTLE, **answer(body.key))


def _find_coordinator_failed(request: Request, error: ErrorCode) -> Any:
    return _find_coordinator_response(
        request, lambda key: dict(key=key, error_code=error, error_message=None, node_id=-1, host="", port=-1)
    )


@answers_failure("FindCoordinator", lambda body: _coordinator_keys(body) if getattr(body, "key_type", GROUP_KEY) == GROUP_KEY else (),
                 _find_coordinator_failed, acl=DESCRIBE)
async def handle_find_coordinator(broker: BrokerApi, request: Request) -> Any:
    key_type = getattr(request.body, "key_type", GROUP_KEY)

    def answer(key: str) -> dict[str, Any]:
        if key_type not in (GROUP_KEY, TRANSACTION_KEY):
            return dict(key=key, error_code=ErrorCode.invalid_request, error_message=f"unknown key type {key_type}", node_id=-1, host="", port=-1)
        if key_type == TRANSACTION_KEY and not broker.security.allowed(DESCRIBE, TRANSACTIONAL_ID, key):
            return dict(key=key, error_code=ErrorCode.transactional_id_authorization_failed, error_message=None, node_id=-1, host="", port=-1)
        coordinator = coordinator_address(broker, key)
        if coordinator is None:
            return dict(key=key, error_code=ErrorCode.coordinator_not_available, error_message="its coordinator slot has no holder yet",
                        node_id=-1, host="", port=-1)  # fmt: skip
        node_id, host, port = coordinator
        return dict(key=key, error_code=ErrorCode.none, error_message=None, node_id=node_id, host=host, port=port)

    return _find_coordinator_response(request, answer)


# --- JoinGroup, SyncGroup, Heartbeat, LeaveGroup -------------------------------------------


def _join_group_failed(request: Request, error: ErrorCode) -> Any:
    version = request.header.api_version
    return make(
        response_module(11, version).JoinGroupResponse,
        throttle_time=NO_THROTTLE,
        error_code=error,
        generation_id=-1,
        protocol_type=None,
        protocol_name=_nullable(None, version, 7),
        leader="",
        skip_assignment=False,
        member_id=request.body.member_id,
        members=(),
    )


@answers_failure("JoinGroup", _one_group, _join_group_failed)
async def handle_join_group(broker: BrokerApi, request: Request) -> Any:
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
        error_code=result.error_code,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=_nullable(result.protocol_name, version, 7),
        leader=result.leader,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=members,
    )


def _sync_group_response(request: Request, error: ErrorCode, protocol_type: str | None = None, protocol_name: str | None = None, assignment: bytes = b"") -> Any:
    return make(
        response_module(14, request.header.api_version).SyncGroupResponse,
        throttle_time=NO_THROTTLE,
        error_code=error,
        protocol_type=protocol_type,
        protocol_name=protocol_name,
        assignment=assignment,
    )


@answers_failure("SyncGroup", _one_group, _sync_group_response)
async def handle_sync_group(broker: BrokerApi, request: Request) -> Any:
    body = request.body
    result = await broker.groups.sync_group(
        group_id=body.group_id,
        generation_id=body.generation_id,
        member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        protocol_type=getattr(body, "protocol_type", None),
        protocol_name=getattr(body, "protocol_name", None),
        assignments=[(a.member_id, a.assignment) for a in body.assignments],
    )
    return _sync_group_response(request, result.error_code, result.protocol_type, result.protocol_name, result.assignment)


def _heartbeat_response(request: Request, error: ErrorCode) -> Any:
    return make(response_module(12, request.header.api_version).HeartbeatResponse, throttle_time=NO_THROTTLE, error_code=error)


@answers_failure("Heartbeat", _one_group, _heartbeat_response)
async def handle_heartbeat(broker: BrokerApi, request: Request) -> Any:
    body = request.body
    error = await broker.groups.heartbeat(
        group_id=body.group_id,
        generation_id=body.generation_id,
        member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
    )
    return _heartbeat_response(request, error)


def _leave_group_failed(request: Request, error: ErrorCode) -> Any:
    mod = response_module(13, request.header.api_version)
    return make(mod.LeaveGroupResponse, throttle_time=NO_THROTTLE, error_code=error, members=())


@answers_failure("LeaveGroup", _one_group, _leave_group_failed)
async def handle_leave_group(broker: BrokerApi, request: Request) -> Any:
    body, version = request.body, request.header.api_version
    mod = response_module(13, version)
    if version >= 3:
        leaving = [(m.member_id, m.group_instance_id) for m in body.members]
    else:
        leaving = [(body.member_id, None)]
    result = await broker.groups.leave_group(body.group_id, leaving)
    error = result.error_code
    if version < 3 and error is ErrorCode.none and result.members:
        error = result.members[0].error_code
    members = tuple(
        make(mod.MemberResponse, member_id=m.member_id, group_instance_id=m.group_instance_id, error_code=m.error_code)
        for m in result.members
    ) if version >= 3 else ()
    return make(mod.LeaveGroupResponse, throttle_time=NO_THROTTLE, error_code=error, members=members)


# --- DescribeGroups, ListGroups, DeleteGroups ----------------------------------------------


# Authorized operations (DescribeGroups v3+, when asked) come from the authorizer: with none
# configured, every operation a GROUP supports (security/authorizer.py).

def _described_group(mod: Any, group_id: str, error: ErrorCode, state: str, protocol_type: str = "", protocol_data: str = "", members: tuple[Any, ...] = (), operations: int = NO_AUTHORIZED_OPERATIONS, message: str | None = None) -> Any:
    return make(
        mod.DescribedGroup,
        error_code=error,
        error_message=message,  # v6+
        group_id=group_id,
        group_state=state,
        protocol_type=protocol_type,
        protocol_data=protocol_data,
        members=members,
        authorized_operations=operations,
    )


def _describe_groups_failed(request: Request, error: ErrorCode) -> Any:
    mod = response_module(15, request.header.api_version)
    groups = tuple(_described_group(mod, group_id, error, "") for group_id in request.body.groups)
    return make(mod.DescribeGroupsResponse, throttle_time=NO_THROTTLE, groups=groups)


@answers_failure("DescribeGroups", lambda body: body.groups, _describe_groups_failed, acl=DESCRIBE)
async def handle_describe_groups(broker: BrokerApi, request: Request) -> Any:
    body, version = request.body, request.header.api_version
    mod = response_module(15, version)
    groups = []
    for d in await broker.groups.describe_groups(body.groups, version):
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
        operations = broker.security.authorized_operations(GROUP, d.group_id) if getattr(body, "include_authorized_operations", False) and d.error_code is ErrorCode.none else NO_AUTHORIZED_OPERATIONS
        groups.append(_described_group(mod, d.group_id, d.error_code, d.group_state, d.protocol_type, d.protocol_data, members, operations, d.error_message))
    return make(mod.DescribeGroupsResponse, throttle_time=NO_THROTTLE, groups=tuple(groups))


def _list_groups_response(request: Request, error: ErrorCode, groups: tuple[Any, ...] = ()) -> Any:
    mod = response_module(16, request.header.api_version)
    return make(mod.ListGroupsResponse, throttle_time=NO_THROTTLE, error_code=error, groups=groups)


@answers_failure("ListGroups", lambda body: (), _list_groups_response, acl=None)
async def handle_list_groups(broker: BrokerApi, request: Request) -> Any:
    mod = response_module(16, request.header.api_version)
    states = tuple(getattr(request.body, "states_filter", ()) or ())
    types = tuple(getattr(request.body, "types_filter", ()) or ())  # v5 (KIP-848): "classic", "consumer"
    groups = tuple(
        make(mod.ListedGroup, group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.group_state, group_type=g.group_type)
        for g in await broker.groups.list_groups(states, types)
        # As Kafka: the groups coordinated here (admin clients ask every broker); all of them
        # with DESCRIBE on the cluster, else those the principal may DESCRIBE.
        if is_coordinator(broker, g.group_id)
        and (broker.security.cluster_allowed(DESCRIBE) or broker.security.allowed(DESCRIBE, GROUP, g.group_id))
    )
    return _list_groups_response(request, ErrorCode.none, groups)


async def handle_delete_groups(broker: BrokerApi, request: Request) -> Any:
    mod = response_module(42, request.header.api_version)
    results = []
    for group_id in request.body.groups_names:
        try:
            if not broker.security.allowed(DELETE, GROUP, group_id):
                error = ErrorCode.group_authorization_failed
            elif not is_coordinator(broker, group_id):
                error = ErrorCode.not_coordinator
            else:
                error = await broker.groups.delete_group(group_id)
        except Exception as exc:
            error = coordinator_error(exc, "DeleteGroups", (group_id,), request)
        results.append(make(mod.DeletableGroupResult, group_id=group_id, error_code=error))
    return make(mod.DeleteGroupsResponse, throttle_time=NO_THROTTLE, results=tuple(results))
