"""Read-only views of groups: DescribeGroups, ListGroups and an overview for admin and tests."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .errors import ErrorCode
from .group import ClassicGroup, GroupState
from .responses import GroupDescription, ListedGroup, MemberDescription


@dataclass(frozen=True, slots=True)
class GroupOverview:
    group_id: str
    state: GroupState
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader_id: str | None
    member_ids: tuple[str, ...]
    pending_member_ids: frozenset[str]
    static_members: dict[str, str]  # group_instance_id -> member_id


def describe(group: ClassicGroup | None, group_id: str, api_version: int) -> GroupDescription:
    """Kafka's DescribeGroups answer: metadata and protocol name only once the group is Stable."""
    if group is None:
        # DescribeGroups v6 (KIP-1043) reports a missing group; older versions call it Dead.
        error = ErrorCode.GROUP_ID_NOT_FOUND if api_version >= 6 else ErrorCode.NONE
        return GroupDescription(group_id, error, GroupState.DEAD.value)
    protocol_name = group.protocol_name if group.is_in(GroupState.STABLE) else None
    return GroupDescription(
        group_id,
        ErrorCode.NONE,
        group.state.value,
        group.protocol_type or "",
        protocol_name or "",
        tuple(
            MemberDescription(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.metadata(protocol_name) if protocol_name is not None else b"",
                m.assignment,
            )
            for m in group.members.values()
        ),
    )


def listed(
    groups: Iterable[ClassicGroup], states_filter: Iterable[str], types_filter: Iterable[str]
) -> list[ListedGroup]:
    states = {s.lower() for s in states_filter}
    types = {t.lower() for t in types_filter}
    if types and "classic" not in types:
        return []
    return [
        ListedGroup(g.group_id, g.protocol_type or "", g.state.value)
        for g in groups
        if not states or g.state.value.lower() in states
    ]


def overview(group: ClassicGroup) -> GroupOverview:
    return GroupOverview(
        group.group_id,
        group.state,
        group.generation_id,
        group.protocol_type,
        group.protocol_name,
        group.leader_id,
        tuple(group.members),
        frozenset(group.pending_join_members),
        dict(group.static_members),
    )
