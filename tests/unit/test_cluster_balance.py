"""plan_balance: the fewest moves that even out leadership over the live brokers; imbalanced:
when the controller uses it on its own (auto.leader.rebalance.enable)."""

from __future__ import annotations

from collections import Counter

from diskless.broker.cluster.controller import Move, imbalanced, plan_balance, plan_homecoming
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


# --- partitions reassigned to a broker (preferred_leader) -----------------------------------


def reassigned(leader: list[int | None], preferred: list[int | None]) -> list[PartitionLeadership]:
    return [PartitionLeadership("t", p, lead, 3, pref) for p, (lead, pref) in enumerate(zip(leader, preferred))]


def test_a_reassigned_partition_stays_with_its_broker_and_the_others_even_out_around_it() -> None:
    # Broker 1 was asked to lead partitions 0-3: balance leaves them there and spreads the rest.
    ls = reassigned([1, 1, 1, 1, 1, 1, 2, 3], [1, 1, 1, 1, None, None, None, None])
    assert imbalanced(ls, [1, 2, 3], 10)
    moves = plan_balance(ls, [1, 2, 3])
    owners = after(ls, moves)
    assert [owners[("t", p)] for p in range(4)] == [1, 1, 1, 1]
    assert sorted(m.partition for m in moves) == [4, 5] and {m.leader_id for m in moves} <= {2, 3}
    assert Counter(owners.values()) == {1: 4, 2: 2, 3: 2}
    # Once there, nothing else can move (the loads stay uneven: the controller finds no move).
    assert plan_balance(reassigned([1, 1, 1, 1, 2, 3, 2, 3], [1, 1, 1, 1, None, None, None, None]), [1, 2, 3]) == []
    assert plan_balance(reassigned([1, 1, 1, 1, 1, 1], [1] * 6), [1, 2, 3]) == []


def test_a_partition_away_from_its_live_broker_goes_home_and_one_whose_broker_is_dead_is_free() -> None:
    ls = reassigned([2, 2, 3, 3], [3, None, 9, None])  # 9 is not alive
    assert plan_homecoming(ls, [1, 2, 3]) == [Move("t", 0, 3, 3)]  # every controller pass, balance check or not
    assert plan_homecoming(ls, [1, 2]) == []  # 3 is away: partition 0 stays where it is
    moves = plan_balance(ls, [1, 2, 3])
    assert moves[0] == Move("t", 0, 3, 3)  # home first
    owners = after(ls, moves)
    assert owners[("t", 0)] == 3 and Counter(owners.values()) == {1: 1, 2: 1, 3: 2}
    assert plan_balance(reassigned([3, 2, 1, 3], [3, None, 9, None]), [1, 2, 3]) == []


def test_a_leaderless_partition_goes_to_its_live_broker_else_to_the_least_loaded() -> None:
    from diskless.broker.cluster.controller import plan_leaders

    ls = reassigned([None, None, 1, 1, 1], [3, 7, None, None, None])
    assert plan_leaders(ls, [1, 2, 3]) == [Move("t", 0, 3, 3), Move("t", 1, 2, 3)]
