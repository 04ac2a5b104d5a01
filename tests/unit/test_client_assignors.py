"""Assignment strategies: range and roundrobin as Java computes them, cooperative-sticky's rules."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from diskless.client.assignors import (
    MemberSubscription,
    assign_cooperative_sticky,
    assign_range,
    assign_roundrobin,
)
from diskless.client.structs import TopicPartition as TP


def members(*specs: tuple[str, tuple[str, ...]]) -> dict[str, MemberSubscription]:
    return {m: MemberSubscription(m, topics) for m, topics in specs}


def test_range_gives_consecutive_ranges_and_extras_to_the_first_members() -> None:
    result = assign_range(members(("c2", ("t",)), ("c1", ("t",)), ("c0", ("t",))), {"t": 7})
    assert result == {
        "c0": [TP("t", 0), TP("t", 1), TP("t", 2)],
        "c1": [TP("t", 3), TP("t", 4)],
        "c2": [TP("t", 5), TP("t", 6)],
    }


def test_range_works_topic_by_topic() -> None:
    # Java's RangeAssignor javadoc example: C0 and C1 on t0 and t1 with 3 partitions each.
    result = assign_range(members(("C0", ("t0", "t1")), ("C1", ("t0", "t1"))), {"t0": 3, "t1": 3})
    assert result == {
        "C0": [TP("t0", 0), TP("t0", 1), TP("t1", 0), TP("t1", 1)],
        "C1": [TP("t0", 2), TP("t1", 2)],
    }


def test_roundrobin_deals_sorted_partitions_in_turn() -> None:
    # Java's RoundRobinAssignor javadoc example.
    result = assign_roundrobin(members(("C0", ("t0", "t1")), ("C1", ("t0", "t1"))), {"t0": 3, "t1": 3})
    assert result == {
        "C0": [TP("t0", 0), TP("t0", 2), TP("t1", 1)],
        "C1": [TP("t0", 1), TP("t1", 0), TP("t1", 2)],
    }


def test_roundrobin_skips_members_not_subscribed_to_a_topic() -> None:
    # Java's javadoc: C0 on t0; C1 on t0, t1; C2 on t0, t1, t2 (1, 2 and 3 partitions).
    result = assign_roundrobin(
        members(("C0", ("t0",)), ("C1", ("t0", "t1")), ("C2", ("t0", "t1", "t2"))), {"t0": 1, "t1": 2, "t2": 3}
    )
    assert result == {
        "C0": [TP("t0", 0)],
        "C1": [TP("t1", 0)],
        "C2": [TP("t1", 1), TP("t2", 0), TP("t2", 1), TP("t2", 2)],
    }


def test_unknown_topics_and_members_without_topics_get_nothing() -> None:
    for assign in (assign_range, assign_roundrobin, assign_cooperative_sticky):
        result = assign(members(("a", ("t",)), ("b", ())), {"t": 2})
        assert result["b"] == [] and sorted(result["a"]) == [TP("t", 0), TP("t", 1)]


def test_static_members_are_ordered_by_instance_id() -> None:
    subs = {
        "z-member": MemberSubscription("z-member", ("t",), group_instance_id="a-instance"),
        "a-member": MemberSubscription("a-member", ("t",), group_instance_id="b-instance"),
    }
    result = assign_range(subs, {"t": 2})
    assert result == {"z-member": [TP("t", 0)], "a-member": [TP("t", 1)]}


def test_cooperative_sticky_keeps_owned_partitions_and_balances() -> None:
    subs = {
        "a": MemberSubscription("a", ("t",), tuple(TP("t", p) for p in range(6)), generation_id=3),
        "b": MemberSubscription("b", ("t",)),
    }
    first = assign_cooperative_sticky(subs, {"t": 6})
    # a keeps three of its six; the three moving to b are held back this round (KIP-429).
    assert len(first["a"]) == 3 and first["b"] == []
    assert set(first["a"]) <= set(subs["a"].owned_partitions)
    # Next round: a owns only what it kept, b takes the rest.
    subs = {
        "a": MemberSubscription("a", ("t",), tuple(first["a"]), generation_id=4),
        "b": MemberSubscription("b", ("t",), (), generation_id=4),
    }
    second = assign_cooperative_sticky(subs, {"t": 6})
    assert second["a"] == first["a"]
    assert sorted(second["a"] + second["b"]) == [TP("t", p) for p in range(6)]


def test_cooperative_sticky_resolves_conflicting_claims_by_generation() -> None:
    subs = {
        "old": MemberSubscription("old", ("t",), (TP("t", 0),), generation_id=1),
        "new": MemberSubscription("new", ("t",), (TP("t", 0),), generation_id=2),
    }
    result = assign_cooperative_sticky(subs, {"t": 2})
    assert result == {"new": [TP("t", 0)], "old": [TP("t", 1)]}


subscription_sets = st.lists(st.sets(st.sampled_from(["t0", "t1", "t2"]), min_size=1), min_size=1, max_size=5)


@settings(max_examples=150)
@given(subscription_sets, st.lists(st.integers(min_value=0, max_value=6), min_size=3, max_size=3))
def test_every_strategy_assigns_each_subscribed_partition_exactly_once(topic_sets, counts) -> None:
    subs = {f"m{i}": MemberSubscription(f"m{i}", tuple(sorted(t))) for i, t in enumerate(topic_sets)}
    partitions = {"t0": counts[0], "t1": counts[1], "t2": counts[2]}
    subscribed = {t for ts in topic_sets for t in ts}
    expected = sorted(TP(t, p) for t in subscribed for p in range(partitions[t]))
    for assign in (assign_range, assign_roundrobin, assign_cooperative_sticky):
        result = assign(subs, partitions)
        got = sorted(tp for tps in result.values() for tp in tps)
        assert got == expected, assign.__name__
        for member_id, tps in result.items():
            assert all(tp.topic in subs[member_id].topics for tp in tps)


@settings(max_examples=100)
@given(st.integers(min_value=1, max_value=6), st.integers(min_value=0, max_value=30), st.randoms(use_true_random=False))
def test_cooperative_sticky_is_balanced_for_equal_subscriptions_after_revocations(count, partitions, rng) -> None:
    everything = [TP("t", p) for p in range(partitions)]
    owned: dict[str, list[TP]] = {f"m{i}": [] for i in range(count)}
    for tp in everything:  # an arbitrary, possibly lopsided, previous assignment
        owned[rng.choice(sorted(owned))].append(tp)
    for generation in range(1, 4):  # the rounds KIP-429 takes to settle
        subs = {m: MemberSubscription(m, ("t",), tuple(tps), generation) for m, tps in owned.items()}
        result = assign_cooperative_sticky(subs, {"t": partitions})
        for m, tps in result.items():
            previous_owners = {o for o, otps in owned.items() for tp in tps if tp in otps}
            assert previous_owners <= {m}  # never given a partition another member still owns
        owned = {m: list(tps) for m, tps in result.items()}
    sizes = [len(tps) for tps in owned.values()]
    assert sorted(tp for tps in owned.values() for tp in tps) == everything
    assert max(sizes) - min(sizes) <= 1
