"""The classic group coordinator, sans-IO: Kafka's JoinGroup/SyncGroup/Heartbeat/LeaveGroup.

It follows Kafka's Java coordinator (org.apache.kafka.coordinator.group GroupMetadataManager,
ClassicGroup, GroupCoordinatorService) request by request, including KIP-345 static
membership, KIP-394 MEMBER_ID_REQUIRED, KIP-134 initial rebalance delay, KIP-814
skip_assignment and the pending-sync timeout. Every method takes plain values and `now_ms`
and returns values; nothing awaits, reads a clock, or touches storage.

How the shell drives it:

  * call the request methods; answer `Outcome.response` now, or remember `Outcome.ticket`
    and answer it when a `Completion` with that ticket shows up (responses.py);
  * deliver every `Outcome.completions` entry, whoever's call produced it;
  * call `tick(now_ms)` when `next_deadline_ms()` is reached (and again while it is still
    <= now: a tick fires only the timers due when it starts) and deliver what it returns.

The group's state in the store: Kafka appends a group's metadata to __consumer_offsets when
a generation's assignment is in and when the group empties, and answers after the append.
Here `unstored` tells the shell what to write (classic_snapshot.py), `stored` what was written,
and `restore` takes a group up from it at a new coordinator; the shell writes before it hands
out the call's answers.

A JoinGroup/SyncGroup that Kafka would leave unanswered forever is reported as a Completion
without a response so the shell can release it.

One coordinator per broker, used by one task; it is not thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from kio.schema.errors import ErrorCode

from . import classic_snapshot
from .config import GroupConfig
from .group import ClassicGroup, MemberRejected
from .member import Member, Protocols
from .rebalance import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    InitialDelay,
    Rebalancer,
    join_key,
    sync_key,
)
from .views import GroupOverview, describe, listed, overview
from .responses import (
    UNKNOWN_MEMBER_ID,
    Completion,
    GroupDescription,
    JoinGroupResponse,
    LeaveGroupResponse,
    LeaveMemberResponse,
    ListedGroup,
    Outcome,
    R,
    SyncGroupResponse,
)


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    protocol_type: str
    protocols: Protocols
    session_timeout_ms: int
    rebalance_timeout_ms: int
    require_known_member_id: bool
    supports_skip_assignment: bool


class GroupCoordinator:
    def __init__(self, config: GroupConfig | None = None, *, new_uuid: Callable[[], str] | None = None) -> None:
        """`new_uuid` makes member ids (`<client or instance id>-<uuid>`); tests pass a counter."""
        self._rb = Rebalancer(config or GroupConfig(), new_uuid)
        self._stored: dict[str, int] = {}  # group id -> the group's version the store's row holds

    @property
    def groups(self) -> Mapping[str, ClassicGroup]:
        return self._rb.groups

    # -- the group's state in the store (classic_snapshot.py) ------------------------------

    def unstored(self, group_id: str) -> tuple[int, str | None] | None:
        """What the store must be told of the group: (its version, its state or None to delete
        its row); None when the store holds what it should. A Stable group's state is kept, an
        Empty group has no row, a rebalancing group keeps its last Stable generation's."""
        if not self.is_unstored(group_id):
            return None
        group = self._rb.groups[group_id]
        return (group.version, classic_snapshot.to_text(group) if group.is_in(STABLE) else None)

    def is_unstored(self, group_id: str) -> bool:
        """Whether `unstored` has something for the group (cheaply: no state is encoded)."""
        group = self._rb.groups.get(group_id)
        if group is None:
            return False
        stored = self._stored.get(group_id)
        return (group.is_in(STABLE) and stored != group.version) or (group.is_in(EMPTY) and stored is not None)

    def unstored_groups(self) -> list[str]:
        """The groups `unstored` has something for."""
        return [group_id for group_id in self._rb.groups if self.is_unstored(group_id)]

    def stored(self, group: ClassicGroup, version: int, text: str | None) -> None:
        """The store now holds what `unstored` gave for `version` of `group` (which may have
        moved on since; if it was deleted or replaced meanwhile, nothing is recorded)."""
        if self._rb.groups.get(group.group_id) is not group:
            return
        if text is None:
            self._stored.pop(group.group_id, None)
        else:
            self._stored[group.group_id] = version

    def restore(self, group_id: str, text: str, now_ms: int) -> None:
        """Take up a group from its stored state (ValueError if unreadable): Stable, its members'
        sessions running from `now_ms`. A group already known here is kept as it is."""
        group = classic_snapshot.from_text(group_id, text, now_ms)
        rb = self._rb
        if group_id in rb.groups:
            return
        rb.begin(now_ms)
        rb.groups[group_id] = group
        for member in group.members.values():
            rb.schedule_heartbeat(group, member.member_id, member.session_timeout_ms)
        self._stored[group_id] = group.version

    # -- JoinGroup -----------------------------------------------------------------------

    def join_group(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        require_known_member_id: bool,
        now_ms: int,
        *,
        supports_skip_assignment: bool = False,
    ) -> Outcome[JoinGroupResponse]:
        """JoinGroup. `require_known_member_id` is true from v4, `supports_skip_assignment` from v9.

        For v0, pass the session timeout as the rebalance timeout, as Kafka does.
        """
        request = JoinRequest(
            group_id,
            member_id,
            group_instance_id,
            client_id,
            client_host,
            protocol_type,
            tuple((name, bytes(metadata)) for name, metadata in protocols),
            session_timeout_ms,
            rebalance_timeout_ms,
            require_known_member_id,
            supports_skip_assignment,
        )
        self._rb.begin(now_ms)
        return self._finish(self._join(request))

    def _join(self, r: JoinRequest) -> JoinGroupResponse | None:
        rb = self._rb
        if r.group_id == "":
            return JoinGroupResponse(ErrorCode.invalid_group_id, r.member_id)
        config = rb.config
        if not config.group_min_session_timeout_ms <= r.session_timeout_ms <= config.group_max_session_timeout_ms:
            return JoinGroupResponse(ErrorCode.invalid_session_timeout, r.member_id)
        is_unknown_member = r.member_id == UNKNOWN_MEMBER_ID
        group = rb.groups.get(r.group_id)
        if group is None:
            # Only a member without an id may create a group.
            if not is_unknown_member:
                return JoinGroupResponse(ErrorCode.unknown_member_id, r.member_id)
            group = rb.groups[r.group_id] = ClassicGroup(r.group_id, rb.now_ms)
        if not self._accept_joining_member(group, r.member_id):
            rb.drop_member(group, r.member_id)
            return JoinGroupResponse(ErrorCode.group_max_size_reached, UNKNOWN_MEMBER_ID)
        if is_unknown_member:
            return self._join_new_member(group, r)
        return self._join_existing_member(group, r)

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        max_size = self._rb.config.group_max_size
        if group.state in (EMPTY, DEAD):
            return True
        if group.is_in(PREPARING_REBALANCE):
            # Counting members awaiting join sheds the last rejoiners if the limit shrank.
            member = group.members.get(member_id)
            return (member is not None and member.awaiting_join is not None) or group.num_awaiting_join() < max_size
        return member_id in group.members or len(group.members) < max_size

    def _join_new_member(self, group: ClassicGroup, r: JoinRequest) -> JoinGroupResponse | None:
        rb = self._rb
        if group.is_in(DEAD):
            return JoinGroupResponse(ErrorCode.coordinator_not_available, UNKNOWN_MEMBER_ID)
        if not group.supports_protocols(r.protocol_type, frozenset(name for name, _ in r.protocols)):
            return JoinGroupResponse(ErrorCode.inconsistent_group_protocol, UNKNOWN_MEMBER_ID)
        new_member_id = rb.new_member_id(r.client_id, r.group_instance_id)
        if r.group_instance_id is not None:
            existing_member_id = group.static_members.get(r.group_instance_id)
            if existing_member_id is not None:
                return self._rejoin_static_member(group, r, existing_member_id, new_member_id)
            rb.add_member_and_rebalance(group, self._new_member(r, new_member_id))
            return None
        if r.require_known_member_id:
            # KIP-394: hand out the id first, so a client that dies before rejoining leaves
            # only a pending id behind (expiring after one session), not a member.
            group.add_pending_member(new_member_id)
            rb.schedule_heartbeat(group, new_member_id, r.session_timeout_ms)
            return JoinGroupResponse(ErrorCode.member_id_required, new_member_id)
        rb.add_member_and_rebalance(group, self._new_member(r, new_member_id))
        return None

    def _join_existing_member(self, group: ClassicGroup, r: JoinRequest) -> JoinGroupResponse | None:
        rb = self._rb
        member_id = r.member_id
        if group.is_in(DEAD):
            return JoinGroupResponse(ErrorCode.coordinator_not_available, member_id)
        if not group.supports_protocols(r.protocol_type, frozenset(name for name, _ in r.protocols)):
            return JoinGroupResponse(ErrorCode.inconsistent_group_protocol, member_id)
        if group.is_pending_member(member_id):
            if r.group_instance_id is not None:
                # Kafka hits an IllegalStateException here: pending ids are only given to
                # dynamic members. Its request handler answers UNKNOWN_SERVER_ERROR.
                return JoinGroupResponse(ErrorCode.unknown_server_error, UNKNOWN_MEMBER_ID)
            rb.add_member_and_rebalance(group, self._new_member(r, member_id))
            return None
        try:
            member = group.validate_member(member_id, r.group_instance_id)
        except MemberRejected as rejected:
            return JoinGroupResponse(rejected.error_code, member_id)
        if group.is_in(PREPARING_REBALANCE):
            return self._update_member_and_rebalance(group, member, r)
        if group.is_in(COMPLETING_REBALANCE):
            if member.matches(r.protocols):
                # Probably a retry after a lost JoinGroup response: repeat this generation's answer.
                return self._current_join_response(group, member_id, with_members=group.is_leader(member_id))
            return self._update_member_and_rebalance(group, member, r)
        if group.is_in(STABLE):
            # A leader's JoinGroup forces a rebalance: it is how the leader reacts to changes
            # that do not show in member metadata (e.g. new partitions).
            if group.is_leader(member_id) or not member.matches(r.protocols):
                return self._update_member_and_rebalance(group, member, r)
            return self._current_join_response(group, member_id, with_members=False)
        return JoinGroupResponse(ErrorCode.unknown_member_id, member_id)

    def _rejoin_static_member(
        self, group: ClassicGroup, r: JoinRequest, old_member_id: str, new_member_id: str
    ) -> JoinGroupResponse | None:
        """A known group.instance.id joined without a member id: it restarted (KIP-345)."""
        rb = self._rb
        current_leader = group.leader_id or ""
        old, member = group.replace_static_member(r.group_instance_id or "", old_member_id, new_member_id)
        rb.fence_replaced_static_member(group, old)
        rb.schedule_heartbeat(group, new_member_id, member.session_timeout_ms)
        group.update_member(member, r.protocols, r.rebalance_timeout_ms, r.session_timeout_ms)
        rb.park_join(group, member)
        if group.is_in(STABLE):
            if group.protocol_name != group.select_protocol():
                rb.maybe_prepare_rebalance_or_complete_join(group)
                return None
            # No rebalance: the instance takes over its old assignment under the new id.
            if r.supports_skip_assignment:
                # v9+: the leader gets the member list but is told not to assign (KIP-814).
                is_leader = group.is_leader(new_member_id)
                response = replace(
                    self._current_join_response(group, new_member_id, with_members=is_leader),
                    skip_assignment=is_leader,
                )
            else:
                # Before v9 a returning leader must not believe it leads (it would assign
                # again, and a Stable group would not pass that on), so it gets the old id.
                response = JoinGroupResponse(
                    ErrorCode.none,
                    new_member_id,
                    group.generation_id,
                    group.protocol_type,
                    group.protocol_name,
                    current_leader,
                )
            rb.complete_join(group, member, response)
        elif group.is_in(COMPLETING_REBALANCE):
            # The leader may already be assigning to the old id: start over.
            rb.prepare_rebalance(group)
        else:
            rb.maybe_complete_join_phase(group)
        return None

    def _update_member_and_rebalance(self, group: ClassicGroup, member: Member, r: JoinRequest) -> None:
        group.update_member(member, r.protocols, r.rebalance_timeout_ms, r.session_timeout_ms)
        self._rb.park_join(group, member)
        self._rb.maybe_prepare_rebalance_or_complete_join(group)

    @staticmethod
    def _new_member(r: JoinRequest, member_id: str) -> Member:
        return Member(
            member_id,
            r.group_instance_id,
            r.client_id,
            r.client_host,
            r.rebalance_timeout_ms,
            r.session_timeout_ms,
            r.protocol_type,
            r.protocols,
        )

    @staticmethod
    def _current_join_response(group: ClassicGroup, member_id: str, *, with_members: bool) -> JoinGroupResponse:
        return JoinGroupResponse(
            ErrorCode.none,
            member_id,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            group.leader_id or "",
            members=group.current_member_list() if with_members else (),
        )

    # -- SyncGroup -----------------------------------------------------------------------

    def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Iterable[tuple[str, bytes]],
        now_ms: int,
    ) -> Outcome[SyncGroupResponse]:
        """SyncGroup. `protocol_type`/`protocol_name` are None before v5 (not checked then)."""
        self._rb.begin(now_ms)
        return self._finish(
            self._sync(group_id, generation_id, member_id, group_instance_id, protocol_type, protocol_name, assignments)
        )

    def _sync(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Iterable[tuple[str, bytes]],
    ) -> SyncGroupResponse | None:
        rb = self._rb
        if group_id == "":
            return SyncGroupResponse(ErrorCode.invalid_group_id)
        group = rb.groups.get(group_id)
        if group is None or group.is_in(EMPTY):
            return SyncGroupResponse(ErrorCode.unknown_member_id)
        if group.is_in(DEAD):
            return SyncGroupResponse(ErrorCode.coordinator_not_available)
        try:
            member = group.validate_member(member_id, group_instance_id)
        except MemberRejected as rejected:
            return SyncGroupResponse(rejected.error_code)
        if generation_id != group.generation_id:
            return SyncGroupResponse(ErrorCode.illegal_generation)
        if _inconsistent(protocol_type, group.protocol_type) or _inconsistent(protocol_name, group.protocol_name):
            return SyncGroupResponse(ErrorCode.inconsistent_group_protocol)
        if group.is_in(PREPARING_REBALANCE):
            return SyncGroupResponse(ErrorCode.rebalance_in_progress)
        if group.is_in(COMPLETING_REBALANCE):
            rb.park_sync(group, member)
            self._remove_pending_sync_member(group, member_id)
            if group.is_leader(member_id):
                # Members the leader left out get an empty assignment; unknown ids are ignored.
                assignment = dict(assignments)
                rb.set_and_propagate_assignment(group, assignment)
                group.transition_to(STABLE, rb.now_ms)
            return None
        # Stable: a follower that missed the propagation, or a repeat.
        self._remove_pending_sync_member(group, member_id)
        return SyncGroupResponse(ErrorCode.none, group.protocol_type, group.protocol_name, member.assignment)

    def _remove_pending_sync_member(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            self._rb.timers.cancel(sync_key(group.group_id))

    # -- Heartbeat -----------------------------------------------------------------------

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None, now_ms: int
    ) -> ErrorCode:
        rb = self._rb
        rb.begin(now_ms)
        if group_id == "":
            return ErrorCode.invalid_group_id
        group = rb.groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.is_in(DEAD):
            return ErrorCode.coordinator_not_available
        try:
            member = group.validate_member(member_id, group_instance_id)
        except MemberRejected as rejected:
            return rejected.error_code
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.is_in(EMPTY):
            return ErrorCode.unknown_member_id
        rb.schedule_heartbeat(group, member.member_id, member.session_timeout_ms)
        if group.is_in(PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        # CompletingRebalance too: consumers may heartbeat between JoinGroup and SyncGroup.
        return ErrorCode.none

    # -- LeaveGroup ----------------------------------------------------------------------

    def leave_group(
        self, group_id: str, members: Sequence[tuple[str, str | None]], now_ms: int
    ) -> Outcome[LeaveGroupResponse]:
        """LeaveGroup for (member_id, group_instance_id) pairs; v0-v2 send one pair.

        An admin removes a static member by instance id with member_id "" (KIP-345).
        """
        rb = self._rb
        rb.begin(now_ms)
        if group_id == "":
            return self._finish(LeaveGroupResponse(ErrorCode.invalid_group_id))
        group = rb.groups.get(group_id)
        if group is None:
            unknown = tuple(LeaveMemberResponse(m, i, ErrorCode.unknown_member_id) for m, i in members)
            return self._finish(LeaveGroupResponse(ErrorCode.none, unknown))
        if group.is_in(DEAD):
            return self._finish(LeaveGroupResponse(ErrorCode.coordinator_not_available))
        responses = [self._leave_one(group, member_id, instance_id) for member_id, instance_id in members]
        if any(response.error_code is ErrorCode.none for response in responses):
            if group.state in (STABLE, COMPLETING_REBALANCE):
                rb.maybe_prepare_rebalance_or_complete_join(group)
            elif group.is_in(PREPARING_REBALANCE):
                rb.maybe_complete_join_phase(group)
        return self._finish(LeaveGroupResponse(ErrorCode.none, tuple(responses)))

    def _leave_one(self, group: ClassicGroup, member_id: str, group_instance_id: str | None) -> LeaveMemberResponse:
        rb = self._rb
        if member_id == UNKNOWN_MEMBER_ID:
            static_member_id = group.static_members.get(group_instance_id) if group_instance_id is not None else None
            if static_member_id is None:
                return LeaveMemberResponse(member_id, group_instance_id, ErrorCode.unknown_member_id)
            rb.remove_current_member(group, group.members[static_member_id])
        elif group.is_pending_member(member_id):
            rb.drop_member(group, member_id)
        else:
            try:
                member = group.validate_member(member_id, group_instance_id)
            except MemberRejected as rejected:
                return LeaveMemberResponse(member_id, group_instance_id, rejected.error_code)
            rb.remove_current_member(group, member)
        return LeaveMemberResponse(member_id, group_instance_id, ErrorCode.none)

    # -- OffsetCommit, DescribeGroups, ListGroups, DeleteGroups ---------------------------

    def validate_offset_commit(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        now_ms: int,
        *,
        is_transactional: bool = False,
        api_version: int = 8,
    ) -> ErrorCode:
        """The error Kafka answers an OffsetCommit (or TxnOffsetCommit) with, NONE to accept.

        Committing with generation -1 to a group that does not exist creates it, Empty and
        without protocol type, as Kafka does for consumers using assign(): it then shows in
        ListGroups/DescribeGroups and must be deleted with DeleteGroups.
        """
        rb = self._rb
        rb.begin(now_ms)
        group = rb.groups.get(group_id)
        if group is None:
            if generation_id < 0:
                rb.groups[group_id] = ClassicGroup(group_id, now_ms)
                return ErrorCode.none
            if not is_transactional and api_version >= 9:
                return ErrorCode.group_id_not_found
            return ErrorCode.illegal_generation
        return group.validate_offset_commit(generation_id, member_id, group_instance_id, is_transactional)

    def describe_group(self, group_id: str, *, api_version: int = 0) -> GroupDescription:
        """DescribeGroups for one group; `api_version` decides how a missing group is reported."""
        return describe(self._rb.groups.get(group_id), group_id, api_version)

    def list_groups(self, states_filter: Iterable[str] = (), types_filter: Iterable[str] = ()) -> list[ListedGroup]:
        """ListGroups; filters match case-insensitively, an empty filter matches everything."""
        return listed(self._rb.groups.values(), states_filter, types_filter)

    def delete_group(self, group_id: str, now_ms: int) -> ErrorCode:
        """DeleteGroups for one group; on NONE the shell also deletes the group's offsets."""
        rb = self._rb
        rb.begin(now_ms)
        group = rb.groups.get(group_id)
        if group is None or group.is_in(DEAD):
            return ErrorCode.group_id_not_found
        if not group.is_in(EMPTY):
            return ErrorCode.non_empty_group
        group.transition_to(DEAD, now_ms)
        for member_id in list(group.pending_join_members):
            rb.drop_member(group, member_id)
        rb.timers.cancel(join_key(group_id))
        rb.timers.cancel(sync_key(group_id))
        del rb.groups[group_id]
        self._stored.pop(group_id, None)  # the shell deletes the row with the offsets
        return ErrorCode.none

    def group_overview(self, group_id: str) -> GroupOverview | None:
        group = self._rb.groups.get(group_id)
        return None if group is None else overview(group)

    def member_protocol_metadata(self, group_id: str) -> tuple[bytes, ...]:
        """The metadata of every protocol each member offers, in any state of the group.

        OffsetDelete reads consumer subscriptions from it: DescribeGroups shows metadata only
        once the group is Stable, but a rebalancing group still consumes its topics.
        """
        group = self._rb.groups.get(group_id)
        if group is None:
            return ()
        return tuple(metadata for member in group.members.values() for _, metadata in member.protocols)

    # -- time and shutdown ---------------------------------------------------------------

    def next_deadline_ms(self) -> int | None:
        """When `tick` next has work to do; None when no timer is set."""
        return self._rb.timers.next_deadline_ms()

    def tick(self, now_ms: int) -> tuple[Completion, ...]:
        """Fire the timers due at `now_ms`: session expiry, end of join phase, sync expiry."""
        rb = self._rb
        rb.begin(now_ms)
        started_at = rb.timers.seq
        while (timer := rb.timers.pop_due(now_ms, started_at)) is not None:
            kind, group_id, *rest = timer.key
            if kind == "join":
                payload = timer.payload if isinstance(timer.payload, InitialDelay) else None
                rb.on_join_timer(group_id, payload)
            elif kind == "sync":
                rb.on_sync_timer(group_id, timer.payload)
            else:
                rb.on_heartbeat_timer(group_id, rest[0])
        return tuple(rb.completions)

    def unload(self, now_ms: int, which: Callable[[str], bool] | None = None) -> tuple[Completion, ...]:
        """Give up every group, or those `which` names (shutdown, or another broker now
        coordinates them: their slot moved).

        Parked requests are answered NOT_COORDINATOR, as Kafka does, so clients look for the
        new coordinator.
        """
        rb = self._rb
        rb.begin(now_ms)
        gone = [group for group_id, group in rb.groups.items() if which is None or which(group_id)]
        for group in gone:
            group.transition_to(DEAD, now_ms)
            for member in group.members.values():
                if group.previous_state is PREPARING_REBALANCE:
                    rb.complete_join(group, member, JoinGroupResponse(ErrorCode.not_coordinator, member.member_id))
                rb.complete_sync(group, member, SyncGroupResponse(ErrorCode.not_coordinator))
            del rb.groups[group.group_id]
            self._stored.pop(group.group_id, None)
        ids = {group.group_id for group in gone}
        rb.timers.cancel_where(lambda key: isinstance(key, tuple) and len(key) > 1 and key[1] in ids)
        return tuple(rb.completions)

    def _finish(self, response: R | None) -> Outcome[R]:
        """Package a handler's result: answered now, or parked under the caller's ticket."""
        rb = self._rb
        ticket = rb.caller_ticket
        completions = rb.completions
        if ticket is None:
            assert response is not None, "a request was neither answered nor parked"
            return Outcome(response, None, tuple(completions))
        assert response is None, "a parked request was also answered directly"
        for i, completion in enumerate(completions):
            if completion.ticket == ticket:  # the wait ended within this very call
                del completions[i]
                assert completion.response is not None
                return Outcome(completion.response, None, tuple(completions))  # type: ignore[arg-type]
        return Outcome(None, ticket, tuple(completions))


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current


__all__ = ["GroupCoordinator", "GroupOverview", "JoinRequest"]
