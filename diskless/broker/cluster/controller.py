"""Leadership decisions: which live broker leads each partition. Pure: leaderships and the
live brokers in, moves out; the membership shell applies them with compare-and-set writes.

One broker at a time acts as controller (it holds the store's "controller" lease). Each pass
it gives every partition without a live leader to the live broker that leads the fewest
partitions (ties: the lowest node id), as Kafka's controller elects a leader when the old one
is fenced. Partitions whose leader lives are not moved: a move fences the old leader's writes,
so it is done only when the leader is gone (dead session, controlled shutdown) or asked for.

A partition reassigned to a broker (`preferred_leader`: Kafka's preferred replica, set by a
reassignment) goes to that broker whenever it lives, and balancing never moves it elsewhere:
as Kafka's preferred-leader election, balancing first brings such partitions home, then evens
out the others.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from metadata import PartitionLeadership


@dataclass(frozen=True, slots=True)
class Move:
    topic: str
    partition: int
    leader_id: int
    expected_epoch: int  # the epoch the move is conditional on


def plan_leaders(leaderships: Sequence[PartitionLeadership], live: Iterable[int]) -> list[Move]:
    """Moves that give every partition without a live leader one, spreading the load."""
    live_ids = sorted(set(live))
    if not live_ids:
        return []
    load = Counter({node: 0 for node in live_ids})
    orphans = []
    for p in leaderships:
        if p.leader_id in load:
            load[p.leader_id] += 1
        else:
            orphans.append(p)
    moves = []
    for p in orphans:
        target = p.preferred_leader if p.preferred_leader in load else min(live_ids, key=lambda node: (load[node], node))
        load[target] += 1
        moves.append(Move(p.topic, p.partition, target, p.leader_epoch))
    return moves


def plan_homecoming(leaderships: Sequence[PartitionLeadership], live: Iterable[int]) -> list[Move]:
    """Moves that give each partition led by a live broker other than the live one it was
    reassigned to back to that one: a reassignment completes whenever its broker lives (as in
    Kafka, whatever auto.leader.rebalance.enable says)."""
    live_ids = set(live)
    return [
        Move(p.topic, p.partition, p.preferred_leader, p.leader_epoch)
        for p in leaderships
        if p.preferred_leader in live_ids and p.leader_id in live_ids and p.leader_id != p.preferred_leader
    ]  # fmt: skip


def initial_leaders(num_partitions: int, live: Iterable[int], leaders_per_node: dict[int, int]) -> list[int]:
    """Leaders for the partitions of a new topic: round robin over the live brokers, starting
    with the least loaded, as Kafka spreads a new topic's replicas."""
    live_ids = sorted(set(live), key=lambda node: (leaders_per_node.get(node, 0), node))
    return [live_ids[index % len(live_ids)] for index in range(num_partitions)] if live_ids else []


def imbalanced(leaderships: Sequence[PartitionLeadership], live: Iterable[int], percentage: int) -> bool:
    """Kafka's leader.imbalance.per.broker.percentage with an even share as every broker's
    preference: whether some live broker leads more or fewer partitions than its share by more
    than `percentage` percent of that share, while the busiest and the idlest differ by more
    than one (what plan_balance evens out, as far as partitions not reassigned allow)."""
    live_ids = set(live)
    if len(live_ids) < 2:
        return False
    counts = Counter(p.leader_id for p in leaderships if p.leader_id in live_ids)
    share = sum(counts.values()) / len(live_ids)
    loads = [counts[node] for node in live_ids]
    return max(loads) - min(loads) > 1 and any(abs(load - share) > share * percentage / 100 for load in loads)


def plan_balance(leaderships: Sequence[PartitionLeadership], live: Iterable[int]) -> list[Move]:
    """Moves that even out leadership over the live brokers (`diskless partitions balance`,
    our preferred-leader election: there are no replicas, so every live broker is a preferred
    leader and the preference is an even share). Each move takes a partition from the most
    loaded broker to the least loaded one, until their loads differ by at most one; the fewest
    moves that get there, since each move fences the old leader and makes the new one rebuild
    the partition's tail. From the busiest broker it takes first a partition of the topic it
    leads most of, so topics spread too. Partitions reassigned to a live broker go there first
    (plan_homecoming) and are never moved elsewhere. Partitions without a live leader are the
    controller's (plan_leaders), not moved here. Each move costs the brokers and the busiest
    broker's topics, not the partitions (20,000 partitions over five brokers in well under a second)."""
    live_ids = sorted(set(live))
    if len(live_ids) < 2:
        return []
    moves = plan_homecoming(leaderships, live_ids)  # reassigned partitions first go home, and stay
    home = {(m.topic, m.partition): m.leader_id for m in moves}
    load = dict.fromkeys(live_ids, 0)
    led: dict[int, Counter[str]] = {node: Counter() for node in live_ids}  # partitions led, by topic
    free: dict[int, dict[str, list[PartitionLeadership]]] = {node: {} for node in live_ids}  # movable ones, by partition
    for p in sorted(leaderships, key=lambda p: (p.topic, p.partition)):
        owner = home.get((p.topic, p.partition), p.leader_id)
        if owner not in load:
            continue  # no live leader: the controller's (plan_leaders)
        load[owner] += 1
        led[owner][p.topic] += 1
        if p.preferred_leader not in load:
            free[owner].setdefault(p.topic, []).append(p)
    # The topics with movable partitions on each broker, by how many partitions of them it leads.
    by_count: dict[int, dict[int, dict[str, None]]] = {node: {} for node in live_ids}
    for node in live_ids:
        for topic in free[node]:
            by_count[node].setdefault(led[node][topic], {})[topic] = None

    def recount(node: int, topic: str, change: int) -> None:
        bucket = by_count[node].get(led[node][topic])
        if bucket is not None:
            bucket.pop(topic, None)
            if not bucket:
                del by_count[node][led[node][topic]]
        led[node][topic] += change
        if topic in free[node]:
            by_count[node].setdefault(led[node][topic], {})[topic] = None

    while True:
        givers = [node for node in live_ids if free[node]]
        if not givers:
            return moves
        busiest = max(givers, key=lambda node: (load[node], -node))
        idlest = min(live_ids, key=lambda node: (load[node], node))
        if load[busiest] - load[idlest] <= 1:
            return moves
        # The topic the busiest leads most of beside what the idlest leads (no topic can beat
        # one that the idlest lacks entirely within the busiest's fullest bucket); its lowest partition.
        best, best_gap = "", -math.inf
        for count in sorted(by_count[busiest], reverse=True):
            if count <= best_gap:
                break
            for topic in by_count[busiest][count]:
                gap = count - led[idlest][topic]
                if gap > best_gap:
                    best, best_gap = topic, gap
                    if gap == count:
                        break
        topic = best
        chosen = free[busiest][topic].pop(0)
        if not free[busiest][topic]:
            del free[busiest][topic]
        bisect.insort(free[idlest].setdefault(topic, []), chosen, key=lambda p: p.partition)
        recount(busiest, topic, -1)
        recount(idlest, topic, +1)
        load[busiest] -= 1
        load[idlest] += 1
        moves.append(Move(chosen.topic, chosen.partition, idlest, chosen.leader_epoch))


PREFERRED, UNCLEAN = 0, 1  # ElectLeaders' election types


@dataclass(frozen=True, slots=True)
class Election:
    """What an ElectLeaders request decides: the moves to make, and for each asked-for
    partition that is not moved, why (a Kafka error name: ELECTION_NOT_NEEDED and the like)."""

    moves: list[Move]
    unmoved: dict[tuple[str, int], str]


def plan_election(
    leaderships: Sequence[PartitionLeadership], live: Iterable[int], election_type: int, asked: Iterable[tuple[str, int]] | None
) -> Election:
    """Kafka's ElectLeaders (kafka-leader-election.sh) on partitions without replicas.

    Both kinds give a partition without a live leader one now, as the controller's next pass
    would (nothing is lost by it: everything acknowledged is in the bucket, so no election here
    is unclean). PREFERRED also moves a live leader's partition where `plan_balance` would
    (every live broker is a preferred replica, the preference an even share); UNCLEAN leaves
    live leaders alone, as Kafka elects only for partitions that have no leader. `asked` None
    means every partition. A partition that is not moved is ELECTION_NOT_NEEDED when its leader
    lives, else the kind's "no one to elect" error; an unknown one UNKNOWN_TOPIC_OR_PARTITION."""
    live_ids = set(live)
    known = {(p.topic, p.partition) for p in leaderships}
    wanted = known if asked is None else set(asked)
    candidates = plan_leaders(leaderships, live_ids)
    if election_type == PREFERRED:
        candidates += plan_balance(leaderships, live_ids)
    moves = [m for m in candidates if (m.topic, m.partition) in wanted]
    moved = {(m.topic, m.partition) for m in moves}
    leader_of = {(p.topic, p.partition): p.leader_id for p in leaderships}
    nobody = "PREFERRED_LEADER_NOT_AVAILABLE" if election_type == PREFERRED else "ELIGIBLE_LEADERS_NOT_AVAILABLE"
    unmoved = {}
    for tp in sorted(wanted - moved):
        if tp not in known:
            unmoved[tp] = "UNKNOWN_TOPIC_OR_PARTITION"
        else:
            unmoved[tp] = "ELECTION_NOT_NEEDED" if leader_of[tp] in live_ids else nobody
    return Election(moves, unmoved)


@dataclass(frozen=True, slots=True)
class Reassignment:
    """What an AlterPartitionReassignments request decides: the preferences to record
    (topic, partition, node id or None to forget), the moves to make now, and per asked-for
    partition a Kafka error name and message (NONE, None when accepted)."""

    preferred: list[tuple[str, int, int | None]]
    moves: list[Move]
    results: dict[tuple[str, int], tuple[str, str | None]]


def plan_reassignment(
    leaderships: Sequence[PartitionLeadership], registered: dict[int, bool], asked: dict[tuple[str, int], list[int] | None]
) -> Reassignment:
    """Kafka's AlterPartitionReassignments (kafka-reassign-partitions.sh) on partitions with one
    replica: `replicas` [N] makes registered broker N the partition's preferred leader (kept
    while N lives, controller.py's header) and moves leadership there now if N is alive
    (`registered`: node id -> alive); a dead N takes it when it returns, the reassignment
    listed as ongoing meanwhile. Null cancels an ongoing one (the preference is forgotten)."""
    current = {(p.topic, p.partition): p for p in leaderships}
    preferred: list[tuple[str, int, int | None]] = []
    moves: list[Move] = []
    results: dict[tuple[str, int], tuple[str, str | None]] = {}
    for (topic, partition), replicas in asked.items():
        p = current.get((topic, partition))
        if p is None:
            results[(topic, partition)] = ("UNKNOWN_TOPIC_OR_PARTITION", f"Unable to find partition {topic}-{partition}.")
        elif replicas is None:
            if is_reassigning(p):
                preferred.append((topic, partition, None))
                results[(topic, partition)] = ("NONE", None)
            else:
                results[(topic, partition)] = ("NO_REASSIGNMENT_IN_PROGRESS", f"No ongoing reassignment for {topic}-{partition}.")
        elif not replicas:
            results[(topic, partition)] = ("INVALID_REPLICA_ASSIGNMENT", "The manual partition assignment includes an empty replica list.")
        elif len(set(replicas)) != len(replicas):
            results[(topic, partition)] = ("INVALID_REPLICA_ASSIGNMENT", f"The manual partition assignment includes duplicate replicas: {replicas}.")
        elif (missing := next((n for n in replicas if n not in registered), None)) is not None:
            results[(topic, partition)] = (
                "INVALID_REPLICA_ASSIGNMENT", f"The manual partition assignment includes broker {missing}, but no such broker is registered."
            )  # fmt: skip
        elif len(replicas) > 1:
            results[(topic, partition)] = (
                "INVALID_REPLICATION_FACTOR",
                f"Partitions have one replica here (the bucket holds their data): name one broker, not {len(replicas)}.",
            )  # fmt: skip
        else:
            node = replicas[0]
            preferred.append((topic, partition, node))
            if registered[node] and p.leader_id != node:
                moves.append(Move(topic, partition, node, p.leader_epoch))
            results[(topic, partition)] = ("NONE", None)
    return Reassignment(preferred, moves, results)


def is_reassigning(p: PartitionLeadership) -> bool:
    """A reassignment not yet done: the partition is not led by the broker it was given to."""
    return p.preferred_leader is not None and p.leader_id != p.preferred_leader
