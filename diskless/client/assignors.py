"""Partition assignment strategies, run by the group leader: range, roundrobin, cooperative-sticky.

Each takes the members' subscriptions and the partition count of every subscribed topic, and
returns each member's partitions. Members are ordered by group.instance.id when both have one,
else by member id, as Java's `AbstractPartitionAssignor.MemberInfo` orders them, so that a
group mixing this client with Java or librdkafka consumers gets the same answer whoever leads:

    range        per topic, the subscribed members in order get consecutive ranges; the first
                 `partitions % members` get one extra (RangeAssignor)
    roundrobin   every partition of every subscribed topic, sorted by topic then partition,
                 dealt in turn to the next member (circularly) subscribed to its topic
                 (RoundRobinAssignor)
    cooperative-sticky
                 members keep what they own (by the subscription's owned_partitions; on a
                 conflict the highest generation wins), the rest is balanced so that counts
                 differ by at most one among members able to take a partition; then, as
                 KIP-429 requires, a partition moving from one member to another is left
                 out of this round: its owner revokes it and rejoins, and the next round
                 hands it to its new owner.

Pure functions of their arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .structs import TopicPartition


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    member_id: str
    topics: tuple[str, ...]
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = -1
    group_instance_id: str | None = None


Assignor = Callable[[Mapping[str, MemberSubscription], Mapping[str, int]], dict[str, list[TopicPartition]]]


def _ordered(members: Mapping[str, MemberSubscription]) -> list[MemberSubscription]:
    # Java orders members by group.instance.id when every member has one, else by member id.
    if members and all(m.group_instance_id is not None for m in members.values()):
        return sorted(members.values(), key=lambda m: (m.group_instance_id or "", m.member_id))
    return sorted(members.values(), key=lambda m: m.member_id)


def assign_range(members: Mapping[str, MemberSubscription], partitions_per_topic: Mapping[str, int]) -> dict[str, list[TopicPartition]]:
    assignment: dict[str, list[TopicPartition]] = {m: [] for m in members}
    ordered = _ordered(members)
    for topic in sorted(partitions_per_topic):
        subscribers = [m for m in ordered if topic in m.topics]
        if not subscribers:
            continue
        count = partitions_per_topic[topic]
        per_member, extra = divmod(count, len(subscribers))
        for i, member in enumerate(subscribers):
            start = per_member * i + min(i, extra)
            length = per_member + (1 if i < extra else 0)
            assignment[member.member_id].extend(TopicPartition(topic, p) for p in range(start, start + length))
    return assignment


def assign_roundrobin(
    members: Mapping[str, MemberSubscription], partitions_per_topic: Mapping[str, int]
) -> dict[str, list[TopicPartition]]:
    assignment: dict[str, list[TopicPartition]] = {m: [] for m in members}
    ordered = _ordered(members)
    if not ordered:
        return assignment
    subscribed = {t for m in ordered for t in m.topics}
    turn = 0
    for topic in sorted(t for t in partitions_per_topic if t in subscribed):
        for partition in range(partitions_per_topic[topic]):
            while topic not in ordered[turn % len(ordered)].topics:
                turn += 1
            assignment[ordered[turn % len(ordered)].member_id].append(TopicPartition(topic, partition))
            turn += 1
    return assignment


def assign_cooperative_sticky(
    members: Mapping[str, MemberSubscription], partitions_per_topic: Mapping[str, int]
) -> dict[str, list[TopicPartition]]:
    ordered = _ordered(members)
    assignment: dict[str, list[TopicPartition]] = {m.member_id: [] for m in ordered}
    topics_of = {m.member_id: set(m.topics) for m in ordered}
    every = [
        TopicPartition(topic, p)
        for topic in sorted(partitions_per_topic)
        if any(topic in t for t in topics_of.values())
        for p in range(partitions_per_topic[topic])
    ]
    valid = set(every)

    # Who owns what now: the highest generation's claim wins a conflict.
    owner: dict[TopicPartition, str] = {}
    for member in sorted(ordered, key=lambda m: -m.generation_id):
        for tp in member.owned_partitions:
            if tp in valid and tp not in owner and tp.topic in topics_of[member.member_id]:
                owner[tp] = member.member_id
                assignment[member.member_id].append(tp)

    # Members with equal subscriptions may hold at most ceil(P / M): give up the excess.
    total, count = len(every), len(ordered)
    if count and all(topics_of[m.member_id] == topics_of[ordered[0].member_id] for m in ordered):
        max_quota = -(-total // count)
        min_quota = total // count
        extra_slots = total - min_quota * count
        for member in ordered:
            owned = assignment[member.member_id]
            allowed = max_quota if extra_slots and len(owned) >= max_quota else min_quota
            if allowed == max_quota and len(owned) >= max_quota:
                extra_slots -= 1
            owned.sort()
            del owned[allowed:]
    kept = {tp for tps in assignment.values() for tp in tps}

    # Hand out the rest, each to the eligible member holding the fewest.
    for tp in every:
        if tp in kept:
            continue
        eligible = [m.member_id for m in ordered if tp.topic in topics_of[m.member_id]]
        chosen = min(eligible, key=lambda m: len(assignment[m]))
        assignment[chosen].append(tp)

    # Move single partitions from the fullest to the emptiest eligible member until balanced.
    for _ in range(total):
        moved = False
        for giver in sorted(assignment, key=lambda m: -len(assignment[m])):
            for tp in sorted(assignment[giver], reverse=True):
                takers = [m for m in assignment if tp.topic in topics_of[m] and len(assignment[m]) + 1 < len(assignment[giver])]
                if takers:
                    taker = min(takers, key=lambda m: (len(assignment[m]), m))
                    assignment[giver].remove(tp)
                    assignment[taker].append(tp)
                    moved = True
                    break
            if moved:
                break
        if not moved:
            break

    # KIP-429: a partition still owned by another member is revoked first, assigned next round.
    for member_id, tps in assignment.items():
        assignment[member_id] = sorted(tp for tp in tps if owner.get(tp, member_id) == member_id)
    return assignment


ASSIGNORS: dict[str, Assignor] = {
    "range": assign_range,
    "roundrobin": assign_roundrobin,
    "cooperative-sticky": assign_cooperative_sticky,
}
