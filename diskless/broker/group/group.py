"""The state of one classic consumer group (Kafka's ClassicGroup / GroupMetadata).

States and the only legal transitions (anything else is a bug and raises):

    Empty               <- PreparingRebalance
    PreparingRebalance  <- Empty, Stable, CompletingRebalance
    CompletingRebalance <- PreparingRebalance
    Stable              <- CompletingRebalance
    Dead                <- any

Invariants: `members` is empty exactly when the state is Empty or Dead (pending members, who
got MEMBER_ID_REQUIRED and have not rejoined yet, are not members); the leader is a member
whenever there are members; `supported_protocols[name]` counts the members that list `name`.
Members are kept in insertion order, which makes leader succession and protocol votes
deterministic (Kafka uses a HashMap, so any order is Kafka-compatible).

The group is mutated only by the coordinator (coordinator.py), on one task.
"""

from __future__ import annotations

from collections import Counter
from enum import Enum

from kio.schema.errors import ErrorCode

from .member import Member, Protocols
from .responses import JoinGroupMember


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


class IllegalGroupTransition(Exception):
    """A transition the state machine forbids: a bug in the coordinator, never a client error."""

    def __init__(self, group_id: str, current: GroupState, target: GroupState) -> None:
        super().__init__(f"group {group_id!r} cannot go from {current.value} to {target.value}")
        self.group_id = group_id
        self.current = current
        self.target = target


class MemberRejected(Exception):
    """Internal: a request names a member the group does not accept; carries Kafka's answer."""

    def __init__(self, error_code: ErrorCode) -> None:
        super().__init__(error_code.name)
        self.error_code = error_code


class ClassicGroup:
    def __init__(self, group_id: str, now_ms: int) -> None:
        self.group_id = group_id
        self.state = GroupState.EMPTY
        self.previous_state = GroupState.DEAD
        self.state_timestamp_ms = now_ms
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}  # group_instance_id -> member_id
        self.pending_join_members: set[str] = set()  # told MEMBER_ID_REQUIRED, not yet back
        self.pending_sync_members: set[str] = set()  # joined this generation, not yet synced
        self.supported_protocols: Counter[str] = Counter()
        # Set when a member joins during the initial rebalance: extends its delay once more.
        self.new_member_added = False
        # Counts the changes of what the store keeps of the group (classic_snapshot.py): state
        # transitions and static members' new ids.
        self.version = 0

    # -- state ---------------------------------------------------------------------------

    def is_in(self, state: GroupState) -> bool:
        return self.state is state

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[target]:
            raise IllegalGroupTransition(self.group_id, self.state, target)
        self.previous_state = self.state
        self.state = target
        self.state_timestamp_ms = now_ms
        self.version += 1

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    # -- membership ----------------------------------------------------------------------

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_join_members

    def add_pending_member(self, member_id: str) -> None:
        assert member_id not in self.members, member_id
        self.pending_join_members.add(member_id)

    def add(self, member: Member) -> None:
        if member.group_instance_id is not None:
            assert member.group_instance_id not in self.static_members, member.group_instance_id
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        assert self.protocol_type == member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.supported_protocols.update(member.protocol_names)
        self.pending_join_members.discard(member.member_id)

    def remove(self, member_id: str) -> Member | None:
        """Forget a member or a pending member; the caller answers its parked requests."""
        member = self.members.pop(member_id, None)
        if member is not None:
            self.supported_protocols.subtract(member.protocol_names)
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_join_members.discard(member_id)
        self.pending_sync_members.discard(member_id)
        return member

    def update_member(
        self, member: Member, protocols: Protocols, rebalance_timeout_ms: int, session_timeout_ms: int
    ) -> None:
        self.supported_protocols.subtract(member.protocol_names)
        member.protocols = protocols
        self.supported_protocols.update(member.protocol_names)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms

    def replace_static_member(
        self, group_instance_id: str, old_member_id: str, new_member_id: str
    ) -> tuple[Member, Member]:
        """Give a static member a new member id, keeping everything else (KIP-345).

        Returns (old, new); the caller fences the old member's parked requests.
        """
        old = self.members.pop(old_member_id)
        new = Member(
            new_member_id,
            old.group_instance_id,
            old.client_id,
            old.client_host,
            old.rebalance_timeout_ms,
            old.session_timeout_ms,
            old.protocol_type,
            old.protocols,
            old.assignment,
        )
        self.members[new_member_id] = new
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        self.version += 1
        # Like Kafka, the old id stays in pending_sync_members: if the old instance had not
        # synced yet, the pending-sync expiry still removes it and rebalances.
        return old, new

    def validate_member(self, member_id: str, group_instance_id: str | None) -> Member:
        """Kafka's ClassicGroup.validateMember: the member exists and is not a fenced static instance."""
        if group_instance_id is not None:
            existing = self.static_members.get(group_instance_id)
            if existing is None:
                raise MemberRejected(ErrorCode.unknown_member_id)
            if existing != member_id:
                raise MemberRejected(ErrorCode.fenced_instance_id)
        member = self.members.get(member_id)
        if member is None:
            raise MemberRejected(ErrorCode.unknown_member_id)
        return member

    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join is not None)

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join() and not self.pending_join_members

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if m.awaiting_join is None]

    def rebalance_timeout_ms(self) -> int:
        """The group waits as long as its most patient member (max of members' timeouts)."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else promote a member that did; False if none did."""
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].awaiting_join is not None:
            return True
        for member in self.members.values():
            if member.awaiting_join is not None:
                self.leader_id = member.member_id
                return True
        return False

    # -- protocols -----------------------------------------------------------------------

    def supports_protocols(self, protocol_type: str, protocol_names: frozenset[str]) -> bool:
        """Whether a member with these protocols may join: one of them must suit everyone."""
        if self.is_in(GroupState.EMPTY):
            return protocol_type != "" and bool(protocol_names)
        return self.protocol_type == protocol_type and any(
            self.supported_protocols[name] == len(self.members) for name in protocol_names
        )

    def select_protocol(self) -> str:
        """Each member votes for its favourite protocol that every member supports; most votes wins.

        Kafka leaves ties to HashMap order; here the tie goes to the protocol whose first vote
        came earliest in member order, so the choice is reproducible.
        """
        if not self.members:
            raise ValueError(f"cannot select a protocol for empty group {self.group_id!r}")
        candidates = {name for name, count in self.supported_protocols.items() if count == len(self.members)}
        votes: Counter[str] = Counter(m.vote(candidates) for m in self.members.values())
        return max(votes, key=lambda name: votes[name])  # max() keeps the first of equals

    # -- generations ---------------------------------------------------------------------

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)
        self.pending_sync_members.clear()

    def current_member_list(self) -> tuple[JoinGroupMember, ...]:
        assert self.protocol_name is not None
        name = self.protocol_name
        return tuple(
            JoinGroupMember(m.member_id, m.group_instance_id, m.metadata(name)) for m in self.members.values()
        )

    def validate_offset_commit(
        self, generation_id: int, member_id: str, group_instance_id: str | None, is_transactional: bool
    ) -> ErrorCode:
        """Kafka's ClassicGroup.validateOffsetCommit, as an error code."""
        if self.is_in(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if generation_id < 0 and self.is_in(GroupState.EMPTY):
            # An admin client or a consumer that manages its own partitions (assign()).
            return ErrorCode.none
        if generation_id >= 0 or member_id != "" or group_instance_id is not None:
            try:
                self.validate_member(member_id, group_instance_id)
            except MemberRejected as rejected:
                return rejected.error_code
            if generation_id != self.generation_id:
                return ErrorCode.illegal_generation
        elif not is_transactional and not self.is_in(GroupState.EMPTY):
            # No member id and no generation (OffsetCommit v0/v1 style): only an Empty group.
            return ErrorCode.unknown_member_id
        if not is_transactional and self.is_in(GroupState.COMPLETING_REBALANCE):
            # The member holds the new generation but not its assignment yet.
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none
