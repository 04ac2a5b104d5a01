"""plan_balance: the fewest moves that even out leadership over the live brokers; imbalanced:
when the controller uses it on its own (auto.leader.rebalance.enable)."""

from __future__ import annotations

from collections import Counter

from diskless.broker.cluster.controller import Move, imbalanced, plan_balance
from metadata import PartitionLeadership


def leaderships(spec: dict[str, list[int | None]]) -> list[PartitionLeadership]:
    return [PartitionLeadership(topic, p, leader, 5) for topic, leaders in spec.items() for p, leader in enumerate(leaders)]


def lead(counts: dict[int, int]) -> list[PartitionLeadership]:
    """`counts[node]` partitions of topic "t" led by each node."""
    owners = [node for node, count in counts.items() for _ in range(count)]
    return [PartitionLeadership("t", p, leader, 1) for p, leader in enumerate(owners)]


def after(ls: list[PartitionLeadership], moves: list[Move]) -> dict[tuple[str, int], int | None]:
    owners = {(p.topic, p.partition): p.leader_id for p in ls}
    owners.update({(m.topic, m.partition): m.leader_id for m in moves})
    return owners


def test_everything_on_one_broker_spreads_with_topics_spread_too() -> None:
    ls = leaderships({"a": [1] * 6, "b": [1] * 3})
    moves = plan_balance(ls, [1, 2, 3])
    assert len(moves) == 6
    assert all(m.expected_epoch == 5 for m in moves)
    owners = after(ls, moves)
    assert Counter(owners.values()) == {1: 3, 2: 3, 3: 3}
    for node in (1, 2, 3):
        assert Counter(topic for (topic, _), leader in owners.items() if leader == node) == {"a": 2, "b": 1}


def test_a_balanced_cluster_needs_no_move() -> None:
    assert plan_balance(leaderships({"a": [1, 2, 3, 1]}), [1, 2, 3]) == []
    assert plan_balance(leaderships({"a": [1, 1, 1]}), [1]) == []
    assert plan_balance(leaderships({"a": [1, 1]}), []) == []


def test_a_new_broker_takes_its_share_and_nothing_else_moves() -> None:
    ls = leaderships({"a": [1, 2, 1, 2, 1, 2]})
    moves = plan_balance(ls, [1, 2, 3])
    assert [(m.leader_id) for m in moves] == [3, 3]
    assert Counter(after(ls, moves).values()) == {1: 2, 2: 2, 3: 2}


def test_partitions_without_a_live_leader_are_left_to_the_controller() -> None:
    ls = leaderships({"a": [None, 4, 1, 1, 1]})
    moves = plan_balance(ls, [1, 2])
    assert moves == [Move("a", 2, 2, 5)]


# --- auto.leader.rebalance.enable: when is leadership off balance ------------------------------


def test_a_broker_that_joined_with_nothing_makes_the_cluster_imbalanced() -> None:
    assert imbalanced(lead({1: 3, 2: 3}), [1, 2, 3], 10)  # broker 3: 0 against a share of 2
    assert not imbalanced(lead({1: 3, 2: 3}), [1, 2], 10)


def test_one_partition_off_an_even_share_is_balance() -> None:
    assert not imbalanced(lead({1: 3, 2: 2, 3: 2}), [1, 2, 3], 10)
    assert not imbalanced(lead({1: 1, 2: 0}), [1, 2], 10)
    assert imbalanced(lead({1: 2, 2: 0}), [1, 2], 10)


def test_the_percentage_is_of_the_share() -> None:
    # 100 partitions over 2 brokers: share 50; 56 is 12% over it, 54 is 8%.
    assert imbalanced(lead({1: 56, 2: 44}), [1, 2], 10)
    assert not imbalanced(lead({1: 54, 2: 46}), [1, 2], 10)
    assert not imbalanced(lead({1: 56, 2: 44}), [1, 2], 20)


def test_dead_leaders_and_a_single_broker_are_not_imbalance() -> None:
    assert not imbalanced(lead({1: 6}), [1], 10)
    assert not imbalanced(lead({1: 2, 2: 2, 9: 4}), [1, 2], 10)  # broker 9 is dead: the controller's plan_leaders
