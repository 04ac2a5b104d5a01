"""Read-only views of groups: DescribeGroups, ListGroups and an overview for admin and tests.

A group known only by its committed offsets (the coordinator holds no state for it: after a
restart, or a group whose consumers only commit) is what Kafka shows once it has loaded such
a group from __consumer_offsets: an Empty group of protocol type "consumer" without members.
The shell passes which groups have offsets; the `*_with_offsets` functions decide the answer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from kio.schema.errors import ErrorCode

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
        if api_version >= 6:
            return GroupDescription(group_id, ErrorCode.group_id_not_found, GroupState.DEAD.value, error_message=f"Group {group_id} not found.")
        return GroupDescription(group_id, ErrorCode.none, GroupState.DEAD.value)
    protocol_name = group.protocol_name if group.is_in(GroupState.STABLE) else None
    return GroupDescription(
        group_id,
        ErrorCode.none,
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


def described_with_offsets(description: GroupDescription, has_offsets: bool) -> GroupDescription:
    """`description` of a group the coordinator may not know, given whether it has offsets."""
    if description.group_state == GroupState.DEAD.value and has_offsets:
        return replace(description, error_code=ErrorCode.none, group_state=GroupState.EMPTY.value, protocol_type="consumer", error_message=None)
    return description


def listed_with_offsets(
    listed_groups: Iterable[ListedGroup],
    known_group_ids: Iterable[str],
    group_ids_with_offsets: Iterable[str],
    states_filter: Iterable[str],
) -> list[ListedGroup]:
    """ListGroups sorted by group id: `listed_groups` (the coordinator's, already filtered by
    `states_filter`) plus, when the filter admits Empty, the groups known only by their offsets.
    A group the coordinator knows (`known_group_ids`, unfiltered) in another state was filtered
    out and stays out."""
    by_id = {g.group_id: g for g in listed_groups}
    states = {s.lower() for s in states_filter}
    if not states or GroupState.EMPTY.value.lower() in states:
        known = set(known_group_ids)
        for group_id in group_ids_with_offsets:
            if group_id not in known:
                by_id[group_id] = ListedGroup(group_id, "consumer", GroupState.EMPTY.value)
    return [by_id[group_id] for group_id in sorted(by_id)]


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
