"""plan_election: ElectLeaders on partitions without replicas (controller.py)."""

from __future__ import annotations

from diskless.broker.cluster.controller import PREFERRED, UNCLEAN, Move, plan_election
from metadata import PartitionLeadership


def leaderships(leaders: list[int | None], topic: str = "t") -> list[PartitionLeadership]:
    return [PartitionLeadership(topic, p, leader, 4) for p, leader in enumerate(leaders)]


def test_preferred_evens_out_the_partitions_asked_for_and_leaves_the_rest() -> None:
    ls = leaderships([1, 1, 1, 1])
    every = plan_election(ls, [1, 2], PREFERRED, None)
    assert every.moves == [Move("t", 0, 2, 4), Move("t", 1, 2, 4)]
    assert every.unmoved == {("t", 2): "ELECTION_NOT_NEEDED", ("t", 3): "ELECTION_NOT_NEEDED"}
    # A partition's preferred leader is where the even spread puts it: 3 stays with broker 1.
    some = plan_election(ls, [1, 2], PREFERRED, [("t", 3), ("t", 0)])
    assert some.moves == [Move("t", 0, 2, 4)]
    assert some.unmoved == {("t", 3): "ELECTION_NOT_NEEDED"}


def test_unclean_leaves_live_leaders_alone_and_elects_where_the_leader_is_gone() -> None:
    ls = leaderships([1, 1, 3, None])
    election = plan_election(ls, [1, 2], UNCLEAN, None)
    assert election.moves == [Move("t", 2, 2, 4), Move("t", 3, 2, 4)]
    assert election.unmoved == {("t", 0): "ELECTION_NOT_NEEDED", ("t", 1): "ELECTION_NOT_NEEDED"}


def test_preferred_also_gives_a_leaderless_partition_a_leader() -> None:
    election = plan_election(leaderships([1, 9]), [1, 2], PREFERRED, [("t", 1)])
    assert election.moves == [Move("t", 1, 2, 4)] and election.unmoved == {}


def test_nobody_to_elect_and_unknown_partitions() -> None:
    ls = leaderships([7, 8])
    assert plan_election(ls, [], PREFERRED, None).unmoved == {("t", 0): "PREFERRED_LEADER_NOT_AVAILABLE", ("t", 1): "PREFERRED_LEADER_NOT_AVAILABLE"}
    unclean = plan_election(ls, [], UNCLEAN, [("t", 0), ("t", 2), ("u", 0)])
    assert unclean.moves == []
    assert unclean.unmoved == {("t", 0): "ELIGIBLE_LEADERS_NOT_AVAILABLE", ("t", 2): "UNKNOWN_TOPIC_OR_PARTITION", ("u", 0): "UNKNOWN_TOPIC_OR_PARTITION"}


def test_one_broker_has_nothing_to_elect() -> None:
    election = plan_election(leaderships([1, 1, 1]), [1], PREFERRED, None)
    assert election.moves == [] and set(election.unmoved.values()) == {"ELECTION_NOT_NEEDED"}
