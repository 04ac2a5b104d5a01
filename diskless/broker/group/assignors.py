"""KIP-848's server-side assignors, `uniform` and `range`, sans-IO.

Kafka 4.0 (org.apache.kafka.coordinator.group.assignor) computes a group's target assignment
on the coordinator: the member's `group.remote.assignor` names the assignor (the group uses
the one most of its members ask for, `uniform` when none does). An assignor gets the members'
subscriptions, the partition counts of the subscribed topics and the previous target
assignment, and returns the new target assignment, one set of partitions per member.

  uniform  sticky and balanced (Kafka's UniformAssignor): a member keeps the partitions it
           held in the previous target while that keeps the group balanced; the others go
           to the subscribed members with the fewest, and partitions move from a member to a
           subscriber that holds two or more fewer until no such move is left.
  range    co-partitioned (Kafka's RangeAssignor): for each topic, its subscribers sorted by
           member id get consecutive ranges, the first `partitions % members` one more.

Pure functions over plain values; the result depends only on the arguments.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

# topic id -> partitions
Assignment = Mapping[uuid.UUID, frozenset[int]]

UNIFORM = "uniform"
RANGE = "range"
ASSIGNORS = (UNIFORM, RANGE)  # the first is the default (group.consumer.assignors)


@dataclass(frozen=True, slots=True)
class TopicInfo:
    topic_id: uuid.UUID
    name: str
    num_partitions: int


@dataclass(frozen=True, slots=True)
class MemberSpec:
    subscribed_topic_ids: frozenset[uuid.UUID]
    previous: Assignment  # the member's partitions in the previous target assignment


def assign(
    assignor: str, members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, TopicInfo]
) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    """The new target assignment for `members`, by `assignor` (UNIFORM or RANGE)."""
    if assignor == RANGE:
        return _range(members, topics)
    return _uniform(members, topics)


def _range(members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, TopicInfo]) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    result: dict[str, dict[uuid.UUID, frozenset[int]]] = {member_id: {} for member_id in members}
    for topic_id, topic in topics.items():
        subscribers = sorted(m for m, spec in members.items() if topic_id in spec.subscribed_topic_ids)
        if not subscribers or topic.num_partitions == 0:
            continue
        quota, extra = divmod(topic.num_partitions, len(subscribers))
        start = 0
        for index, member_id in enumerate(subscribers):
            count = quota + (1 if index < extra else 0)
            if count:
                result[member_id][topic_id] = frozenset(range(start, start + count))
            start += count
    return result


def _uniform(members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, TopicInfo]) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    owner: dict[tuple[uuid.UUID, int], str] = {}
    held: dict[str, set[tuple[uuid.UUID, int]]] = {member_id: set() for member_id in members}
    subscribers: dict[uuid.UUID, list[str]] = {
        topic_id: sorted(m for m, spec in members.items() if topic_id in spec.subscribed_topic_ids) for topic_id in topics
    }
    all_partitions = [
        (topic_id, p)
        for topic_id, topic in sorted(topics.items(), key=lambda item: item[1].name)
        if subscribers[topic_id]
        for p in range(topic.num_partitions)
    ]
    total = len(all_partitions)
    homogeneous = len({frozenset(spec.subscribed_topic_ids & topics.keys()) for spec in members.values()}) <= 1
    # Stickiness: keep what the previous target gave, up to a balanced share when every
    # member subscribes to the same topics (otherwise the moves below rebalance).
    ceiling = -(-total // len(members)) if members and homogeneous else total
    for member_id in sorted(members, key=lambda m: (-_size(members[m].previous), m)):
        spec = members[member_id]
        for topic_id in sorted(spec.previous, key=lambda t: topics[t].name if t in topics else ""):
            topic = topics.get(topic_id)
            if topic is None or topic_id not in spec.subscribed_topic_ids:
                continue
            for p in sorted(spec.previous[topic_id]):
                if p < topic.num_partitions and (topic_id, p) not in owner and len(held[member_id]) < ceiling:
                    owner[(topic_id, p)] = member_id
                    held[member_id].add((topic_id, p))
    for tp in all_partitions:
        if tp not in owner:
            member_id = min(subscribers[tp[0]], key=lambda m: (len(held[m]), m))
            owner[tp] = member_id
            held[member_id].add(tp)
    # Move partitions from a member to a subscriber holding at least two fewer, until none can.
    moved = True
    while moved:
        moved = False
        for member_id in sorted(held, key=lambda m: (-len(held[m]), m)):
            for tp in sorted(held[member_id], key=lambda tp: (topics[tp[0]].name, tp[1]), reverse=True):
                target = min(subscribers[tp[0]], key=lambda m: (len(held[m]), m))
                if len(held[target]) + 1 < len(held[member_id]):
                    held[member_id].remove(tp)
                    held[target].add(tp)
                    moved = True
                    break
            if moved:
                break
    result: dict[str, dict[uuid.UUID, frozenset[int]]] = {}
    for member_id, partitions in held.items():
        by_topic: dict[uuid.UUID, set[int]] = {}
        for topic_id, p in partitions:
            by_topic.setdefault(topic_id, set()).add(p)
        result[member_id] = {topic_id: frozenset(ps) for topic_id, ps in by_topic.items()}
    return result


def _size(assignment: Assignment) -> int:
    return sum(len(ps) for ps in assignment.values())


__all__ = ["ASSIGNORS", "RANGE", "UNIFORM", "Assignment", "MemberSpec", "TopicInfo", "assign"]
