"""A KIP-848 consumer group's state, and the reconciliation of one member, sans-IO.

Follows Kafka 4.0's org.apache.kafka.coordinator.group.modern.consumer (ConsumerGroup,
ConsumerGroupMember) and CurrentAssignmentBuilder:

  group epoch        bumped whenever what the assignment depends on changes: a member joins
                     or leaves, a subscription changes, a subscribed topic gains partitions
  target assignment  what the assignor computed at `target_epoch`; recomputed once
                     `group_epoch > target_epoch`
  member epoch       the epoch of the target assignment the member has reconciled to; a
                     member moves to a new target in steps, each answered in a heartbeat:
                       1. partitions it holds that the target gives to others are revoked
                          first (UNREVOKED_PARTITIONS; the member keeps its epoch until it
                          reports, in its owned partitions, that it let them go);
                       2. then it takes the target's epoch and the partitions that nobody
                          holds any more; partitions another member still holds wait
                          (UNRELEASED_PARTITIONS) and are handed over on a later heartbeat.
  partition owners   every partition held or being revoked, and by whom: a partition is
                     never given to a member while another still holds it.

Everything here is plain data mutated by consumer_coordinator.py, which one task calls.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from enum import Enum

from .assignors import Assignment

# Member epochs with a meaning of their own (ConsumerGroupHeartbeatRequest).
JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

TopicPartition = tuple[uuid.UUID, int]


class MemberState(Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


class ConsumerGroupState(Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rack_id: str | None = None
    rebalance_timeout_ms: int = 300_000
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    pending_revocation: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)


@dataclass(slots=True)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    target_epoch: int = 0
    assignor_name: str = ""
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target: dict[str, dict[uuid.UUID, frozenset[int]]] = field(default_factory=dict)
    owners: dict[TopicPartition, str] = field(default_factory=dict)
    # What the last target assignment was computed from: subscribed topic -> (id, partitions).
    subscription_metadata: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.target_epoch:
            return ConsumerGroupState.ASSIGNING
        for member in self.members.values():
            if member.member_epoch != self.target_epoch or member.state is not MemberState.STABLE:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def release(self, member: ConsumerMember) -> None:
        """Forget every partition `member` holds or is revoking."""
        for assignment in (member.assigned, member.pending_revocation):
            for topic_id, partitions in assignment.items():
                for p in partitions:
                    if self.owners.get((topic_id, p)) == member.member_id:
                        del self.owners[(topic_id, p)]

    def claim(self, member: ConsumerMember) -> None:
        for assignment in (member.assigned, member.pending_revocation):
            for topic_id, partitions in assignment.items():
                for p in partitions:
                    self.owners[(topic_id, p)] = member.member_id

    def remove(self, member_id: str) -> ConsumerMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self.release(member)
        self.target.pop(member_id, None)
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        return member


def reconcile(
    group: ConsumerGroup, member: ConsumerMember, owned: Assignment | None
) -> tuple[int, MemberState, dict[uuid.UUID, frozenset[int]], dict[uuid.UUID, frozenset[int]]]:
    """Kafka's CurrentAssignmentBuilder.build: the member's next (epoch, state, assigned,
    pending revocation) given the group's target and the partitions the member reports it
    owns (`owned`, None when the heartbeat did not say)."""
    target_epoch = group.target_epoch
    if member.state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member.member_epoch, member.state, member.assigned, member.pending_revocation
        return _next_assignment(group, member, member.member_epoch, owned)
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return member.member_epoch, member.state, member.assigned, member.pending_revocation
        return _next_assignment(group, member, min(member.member_epoch + 1, target_epoch), owned)
    return _next_assignment(group, member, member.member_epoch, owned)


def _next_assignment(
    group: ConsumerGroup, member: ConsumerMember, member_epoch: int, owned: Assignment | None
) -> tuple[int, MemberState, dict[uuid.UUID, frozenset[int]], dict[uuid.UUID, frozenset[int]]]:
    target = group.target.get(member.member_id, {})
    kept: dict[uuid.UUID, frozenset[int]] = {}
    revoking: dict[uuid.UUID, frozenset[int]] = {}
    adding: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for topic_id in set(target) | set(member.assigned):
        wanted = target.get(topic_id, frozenset())
        current = member.assigned.get(topic_id, frozenset())
        if keep := current & wanted:
            kept[topic_id] = keep
        if revoke := current - wanted:
            revoking[topic_id] = revoke
        free = set()
        for p in wanted - current:
            owner = group.owners.get((topic_id, p))
            if owner is None or owner == member.member_id:  # its own: revoked, then given back
                free.add(p)
            else:
                unreleased = True
        if free:
            adding[topic_id] = frozenset(free)
    if revoking and _owns_any(owned, revoking):
        return member_epoch, MemberState.UNREVOKED_PARTITIONS, kept, revoking
    for topic_id, partitions in adding.items():
        kept[topic_id] = kept.get(topic_id, frozenset()) | partitions
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return group.target_epoch, state, kept, {}


def _owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    if owned is None:
        return True  # the member did not say: assume it still holds them
    return any(owned.get(topic_id, frozenset()) & ps for topic_id, ps in partitions.items())


def is_subset(owned: Assignment | None, assigned: Assignment) -> bool:
    if owned is None:
        return False
    return all(ps <= assigned.get(topic_id, frozenset()) for topic_id, ps in owned.items())


__all__ = [
    "JOIN_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
    "ConsumerGroup",
    "ConsumerGroupState",
    "ConsumerMember",
    "MemberState",
    "is_subset",
    "reconcile",
]
