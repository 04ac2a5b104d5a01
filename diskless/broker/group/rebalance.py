"""The rebalance machinery behind the request handlers: Kafka's GroupMetadataManager, minus I/O.

`Rebalancer` owns the groups, the timers and the answers to parked requests produced during
one call. The request handlers (coordinator.py) decide *whether* something happens; this
module makes it happen: adding, updating and removing members, preparing and completing the
join phase, propagating assignments, and reacting to expired timers.

Timers (keys, what fires them, what they do), all relative to the call's `now_ms`:

    ("join", group_id)            end of the join phase: rebalance timeout (max over members),
                                  or group.initial.rebalance.delay.ms for an Empty group's first
                                  rebalance, extended while new members keep arriving (KIP-134)
    ("sync", group_id)            rebalance timeout after the join phase: members that have not
                                  sent SyncGroup by then are removed and the group rebalances
    ("heartbeat", group_id, id)   session timeout of a member or pending member; a member just
                                  added uses the new-member join timeout instead

Everything runs on the coordinator's single task; nothing here is thread-safe.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from .config import GroupConfig
from .group import ClassicGroup, GroupState
from .member import Member
from .responses import UNKNOWN_MEMBER_ID, Completion, JoinGroupResponse, SyncGroupResponse
from .timers import Timers

EMPTY = GroupState.EMPTY
PREPARING_REBALANCE = GroupState.PREPARING_REBALANCE
COMPLETING_REBALANCE = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD


@dataclass(frozen=True, slots=True)
class InitialDelay:
    """Payload of the join timer of an initial rebalance (Kafka's InitialDelayedJoin)."""

    delay_ms: int
    remaining_ms: int


def join_key(group_id: str) -> tuple[str, str]:
    return ("join", group_id)


def sync_key(group_id: str) -> tuple[str, str]:
    return ("sync", group_id)


def heartbeat_key(group_id: str, member_id: str) -> tuple[str, str, str]:
    return ("heartbeat", group_id, member_id)


class Rebalancer:
    def __init__(self, config: GroupConfig, new_uuid: Callable[[], str] | None = None) -> None:
        self.config = config
        self.new_uuid = new_uuid or (lambda: str(uuid.uuid4()))
        self.groups: dict[str, ClassicGroup] = {}
        self.timers = Timers()
        self.now_ms = 0
        self.completions: list[Completion] = []
        self.caller_ticket: int | None = None
        self._last_ticket = 0

    # -- per-call bookkeeping --------------------------------------------------------------

    def begin(self, now_ms: int) -> None:
        self.now_ms = now_ms
        self.completions = []
        self.caller_ticket = None

    def new_member_id(self, client_id: str, group_instance_id: str | None) -> str:
        prefix = group_instance_id if group_instance_id is not None else client_id
        return f"{prefix}-{self.new_uuid()}"

    def park_join(self, group: ClassicGroup, member: Member) -> None:
        """Park the caller's JoinGroup on `member`; a JoinGroup parked before is superseded."""
        if member.awaiting_join is not None:
            self._answer(group, member.awaiting_join, member.member_id, None)
        self._last_ticket += 1
        member.awaiting_join = self.caller_ticket = self._last_ticket

    def park_sync(self, group: ClassicGroup, member: Member) -> None:
        if member.awaiting_sync is not None:
            self._answer(group, member.awaiting_sync, member.member_id, None)
        self._last_ticket += 1
        member.awaiting_sync = self.caller_ticket = self._last_ticket

    def complete_join(self, group: ClassicGroup, member: Member, response: JoinGroupResponse) -> bool:
        if member.awaiting_join is None:
            return False
        ticket, member.awaiting_join = member.awaiting_join, None
        self._answer(group, ticket, member.member_id, response)
        return True

    def complete_sync(self, group: ClassicGroup, member: Member, response: SyncGroupResponse) -> bool:
        if member.awaiting_sync is None:
            return False
        ticket, member.awaiting_sync = member.awaiting_sync, None
        self._answer(group, ticket, member.member_id, response)
        return True

    def _answer(
        self, group: ClassicGroup, ticket: int, member_id: str, response: JoinGroupResponse | SyncGroupResponse | None
    ) -> None:
        self.completions.append(Completion(ticket, group.group_id, member_id, response))

    def schedule_heartbeat(self, group: ClassicGroup, member_id: str, timeout_ms: int) -> None:
        self.timers.schedule(heartbeat_key(group.group_id, member_id), self.now_ms + timeout_ms)

    # -- membership ----------------------------------------------------------------------

    def add_member_and_rebalance(self, group: ClassicGroup, member: Member) -> None:
        """Add a member whose JoinGroup the caller parks, then rebalance or finish the join."""
        member.is_new = True
        if group.is_in(PREPARING_REBALANCE) and group.previous_state is EMPTY:
            group.new_member_added = True
        group.add(member)
        self.park_join(group, member)
        # Parked sockets cannot tell us the client went away, so a new member's join expires.
        self.schedule_heartbeat(group, member.member_id, self.config.group_new_member_join_timeout_ms)
        self.maybe_prepare_rebalance_or_complete_join(group)

    def drop_member(self, group: ClassicGroup, member_id: str) -> None:
        """Remove a member and its heartbeat; requests Kafka never answers are released."""
        member = group.remove(member_id)
        self.timers.cancel(heartbeat_key(group.group_id, member_id))
        if member is None:
            return
        for ticket in (member.awaiting_join, member.awaiting_sync):
            if ticket is not None:
                self._answer(group, ticket, member_id, None)
        member.awaiting_join = member.awaiting_sync = None

    def remove_current_member(self, group: ClassicGroup, member: Member) -> None:
        # A parked JoinGroup gets UNKNOWN_MEMBER_ID so a still-living client rejoins from scratch.
        self.complete_join(group, member, JoinGroupResponse(ErrorCode.unknown_member_id, UNKNOWN_MEMBER_ID))
        self.drop_member(group, member.member_id)

    def remove_member_and_update_group(self, group: ClassicGroup, member: Member) -> None:
        self.remove_current_member(group, member)
        if group.state in (STABLE, COMPLETING_REBALANCE):
            self.maybe_prepare_rebalance_or_complete_join(group)
        elif group.is_in(PREPARING_REBALANCE) and group.has_all_members_joined():
            self.complete_join_phase(group)

    def fence_replaced_static_member(self, group: ClassicGroup, old: Member) -> None:
        """Answer whatever the replaced instance still has parked with FENCED_INSTANCE_ID."""
        self.complete_join(group, old, JoinGroupResponse(ErrorCode.fenced_instance_id, old.member_id))
        self.complete_sync(group, old, SyncGroupResponse(ErrorCode.fenced_instance_id))
        self.timers.cancel(heartbeat_key(group.group_id, old.member_id))

    # -- join phase ----------------------------------------------------------------------

    def maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup) -> None:
        if group.can_rebalance():
            self.prepare_rebalance(group)
        else:
            self.maybe_complete_join_phase(group)

    def prepare_rebalance(self, group: ClassicGroup) -> None:
        if group.is_in(COMPLETING_REBALANCE):
            # Members waiting in SyncGroup must rejoin: their generation is over.
            self.reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        group.pending_sync_members.clear()
        self.timers.cancel(sync_key(group.group_id))
        is_initial_rebalance = group.is_in(EMPTY)
        if is_initial_rebalance:
            delay_ms = self.config.group_initial_rebalance_delay_ms
            remaining_ms = max(group.rebalance_timeout_ms() - delay_ms, 0)
            self.timers.schedule(join_key(group.group_id), self.now_ms + delay_ms, InitialDelay(delay_ms, remaining_ms))
        group.transition_to(PREPARING_REBALANCE, self.now_ms)
        if not is_initial_rebalance:
            self.maybe_complete_join_else_schedule(group)

    def maybe_complete_join_else_schedule(self, group: ClassicGroup) -> None:
        if group.has_all_members_joined():
            self.complete_join_phase(group)
        else:
            self.timers.schedule(join_key(group.group_id), self.now_ms + group.rebalance_timeout_ms())

    def maybe_complete_join_phase(self, group: ClassicGroup) -> None:
        # The initial rebalance always waits out its delay, even when everyone has joined.
        if not group.is_in(PREPARING_REBALANCE) or group.previous_state is EMPTY:
            return
        if group.has_all_members_joined():
            self.complete_join_phase(group)

    def complete_join_phase(self, group: ClassicGroup) -> None:
        """End the join phase: drop dynamic members that did not rejoin, start a generation."""
        self.timers.cancel(join_key(group.group_id))
        for member in group.not_yet_rejoined():
            if not member.is_static:  # static members keep their place until their session ends
                self.drop_member(group, member.member_id)
        if group.is_in(DEAD):
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined: wait another rebalance timeout, until sessions expire them.
            self.timers.schedule(join_key(group.group_id), self.now_ms + group.rebalance_timeout_ms())
            return
        group.init_next_generation(self.now_ms)
        if group.is_in(EMPTY):
            return
        leader = group.leader_id or ""
        member_list = group.current_member_list()
        for member in list(group.members.values()):
            is_leader = member.member_id == leader
            self.complete_join(
                group,
                member,
                JoinGroupResponse(
                    ErrorCode.none,
                    member.member_id,
                    group.generation_id,
                    group.protocol_type,
                    group.protocol_name,
                    leader,
                    members=member_list if is_leader else (),
                ),
            )
            self.schedule_heartbeat(group, member.member_id, member.session_timeout_ms)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        self.timers.schedule(sync_key(group.group_id), self.now_ms + group.rebalance_timeout_ms(), group.generation_id)

    # -- sync phase ----------------------------------------------------------------------

    def reset_and_propagate_assignment_error(self, group: ClassicGroup, error: ErrorCode) -> None:
        assert group.is_in(COMPLETING_REBALANCE), group.state
        for member in group.members.values():
            member.assignment = b""
        self.propagate_assignment(group, error)

    def set_and_propagate_assignment(self, group: ClassicGroup, assignment: dict[str, bytes]) -> None:
        assert group.is_in(COMPLETING_REBALANCE), group.state
        for member in group.members.values():
            member.assignment = assignment.get(member.member_id, b"")
        self.propagate_assignment(group, ErrorCode.none)

    def propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        ok = error is ErrorCode.none
        for member in group.members.values():
            response = SyncGroupResponse(
                error,
                group.protocol_type if ok else None,
                group.protocol_name if ok else None,
                member.assignment,
            )
            if self.complete_sync(group, member, response):
                # The session clock restarts once the member has its answer.
                self.schedule_heartbeat(group, member.member_id, member.session_timeout_ms)

    # -- timers --------------------------------------------------------------------------

    def on_join_timer(self, group_id: str, payload: InitialDelay | None) -> None:
        group = self.groups.get(group_id)
        if group is None or not group.is_in(PREPARING_REBALANCE):
            return
        if isinstance(payload, InitialDelay) and group.new_member_added and payload.remaining_ms != 0:
            group.new_member_added = False
            delay_ms = min(self.config.group_initial_rebalance_delay_ms, payload.remaining_ms)
            remaining_ms = max(payload.remaining_ms - payload.delay_ms, 0)
            self.timers.schedule(join_key(group_id), self.now_ms + delay_ms, InitialDelay(delay_ms, remaining_ms))
            return
        self.complete_join_phase(group)

    def on_sync_timer(self, group_id: str, generation_id: int) -> None:
        group = self.groups.get(group_id)
        if group is None or generation_id != group.generation_id:
            return
        if group.state not in (COMPLETING_REBALANCE, STABLE) or not group.pending_sync_members:
            return
        for member_id in list(group.pending_sync_members):
            self.drop_member(group, member_id)
        self.prepare_rebalance(group)

    def on_heartbeat_timer(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None or group.is_in(DEAD):
            return
        if group.is_pending_member(member_id):
            group.remove(member_id)
            if group.is_in(PREPARING_REBALANCE) and group.has_all_members_joined():
                self.complete_join_phase(group)
            return
        member = group.members.get(member_id)
        if member is not None and not member.has_satisfied_heartbeat():
            self.remove_member_and_update_group(group, member)
