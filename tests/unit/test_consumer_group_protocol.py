"""The KIP-848 consumer group coordinator core (group/consumer_coordinator.py), no I/O."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from diskless.broker.group.assignors import RANGE, UNIFORM, MemberSpec, TopicInfo, assign
from diskless.broker.group.config import GroupConfig
from diskless.broker.group.consumer_coordinator import ConsumerGroupCoordinator, HeartbeatRequest

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
TOPICS = {"a": TopicInfo(T1, "a", 4), "b": TopicInfo(T2, "b", 2)}
SESSION_MS = GroupConfig().group_consumer_session_timeout_ms


def join(c, member, now=0, topics=("a",), instance=None, assignor=None, group="g"):
    return c.heartbeat(
        HeartbeatRequest(group, member, 0, instance_id=instance, rebalance_timeout_ms=30_000,
                         subscribed_topic_names=tuple(topics), server_assignor=assignor, owned={}),
        TOPICS, now,
    )


def beat(c, member, epoch, owned, now=0, instance=None, group="g"):
    return c.heartbeat(HeartbeatRequest(group, member, epoch, instance_id=instance, owned=owned), TOPICS, now)


def settle(c, members, now=0):
    """Heartbeat every member, each reporting exactly what it was last given, until nothing changes."""
    for _ in range(10):
        changed = False
        for member_id, state in members.items():
            r = beat(c, member_id, state["epoch"], state["owned"], now)
            assert r.error_code is ErrorCode.none, r
            if r.assignment is not None and r.assignment != state["owned"]:
                state["owned"] = dict(r.assignment)
                changed = True
            if r.member_epoch != state["epoch"]:
                state["epoch"] = r.member_epoch
                changed = True
        if not changed:
            return
    raise AssertionError("did not settle")


def test_first_member_gets_every_partition_at_epoch_1():
    c = ConsumerGroupCoordinator()
    r = join(c, "m1")
    assert (r.error_code, r.member_epoch, r.heartbeat_interval_ms) == (ErrorCode.none, 1, 5000)
    assert r.assignment == {T1: frozenset({0, 1, 2, 3})}
    assert c.describe("g").group_state == "Stable"


def test_second_member_waits_for_revocation_before_assignment():
    c = ConsumerGroupCoordinator()
    first = join(c, "m1")
    r2 = join(c, "m2")
    # m1 still holds everything: m2 joins at the new epoch with nothing yet (unreleased).
    assert (r2.member_epoch, r2.assignment) == (2, {})
    assert c.describe("g").group_state == "Reconciling"
    # m1 is told to keep two partitions: it is revoking the other two, still at epoch 1.
    r1 = beat(c, "m1", 1, first.assignment)
    assert r1.member_epoch == 1 and sum(map(len, r1.assignment.values())) == 2
    # m2 still gets nothing: m1 has not reported the revocation.
    assert beat(c, "m2", 2, {}).assignment is None
    # m1 reports it let them go: it moves to epoch 2; then m2 takes the released ones.
    kept = r1.assignment
    r1 = beat(c, "m1", 1, kept)
    assert (r1.member_epoch, r1.assignment) == (2, None)  # same partitions, new epoch
    r2 = beat(c, "m2", 2, {})
    assert r2.assignment == {T1: frozenset({0, 1, 2, 3}) - kept[T1]}
    assert c.describe("g").group_state == "Stable"


def test_leave_moves_partitions_and_session_expiry_fences():
    c = ConsumerGroupCoordinator()
    members = {m: {"epoch": join(c, m).member_epoch, "owned": {}} for m in ("m1", "m2", "m3")}
    settle(c, members)
    owned = [frozenset(s["owned"].get(T1, ())) for s in members.values()]
    assert sorted(map(len, owned)) == [1, 1, 2] and frozenset().union(*owned) == frozenset(range(4))
    left = c.heartbeat(HeartbeatRequest("g", "m3", -1), TOPICS, 0)
    assert (left.error_code, left.member_epoch) == (ErrorCode.none, -1)
    del members["m3"]
    settle(c, members)
    assert sorted(len(s["owned"][T1]) for s in members.values()) == [2, 2]
    # m2 stops heartbeating: after the session timeout m1 holds all four.
    assert beat(c, "m1", members["m1"]["epoch"], members["m1"]["owned"], 1000).error_code is ErrorCode.none
    assert c.tick(SESSION_MS - 1) == []
    assert c.tick(SESSION_MS) == [("g", "m2")]
    assert beat(c, "m2", members["m2"]["epoch"], members["m2"]["owned"], 1000 + SESSION_MS).error_code is ErrorCode.unknown_member_id
    del members["m2"]
    settle(c, members, now=1000 + SESSION_MS)
    assert members["m1"]["owned"] == {T1: frozenset(range(4))}


def test_epoch_checks():
    c = ConsumerGroupCoordinator()
    r = join(c, "m1")
    assert beat(c, "m1", 5, r.assignment).error_code is ErrorCode.fenced_member_epoch
    assert beat(c, "nobody", 1, {}).error_code is ErrorCode.unknown_member_id
    assert c.heartbeat(HeartbeatRequest("g", "m1", -3), TOPICS, 0).error_code is ErrorCode.invalid_request
    assert c.heartbeat(HeartbeatRequest("g", "", 0, rebalance_timeout_ms=1, subscribed_topic_names=("a",), owned={}), TOPICS, 0).error_code is ErrorCode.invalid_request
    assert join(c, "m9", assignor="sticky").error_code is ErrorCode.unsupported_assignor
    # RE2/J's syntax, as Kafka: Python's re would take the lookahead, the backreference and the
    # possessive quantifier; Kafka refuses them, so do we.
    for pattern in ("(", "(?=a)b", "(a)\\1", "a++", "[z-a]"):
        bad_regex = HeartbeatRequest("g", "m9", 0, rebalance_timeout_ms=1, subscribed_topic_regex=pattern, owned={})
        answer = c.heartbeat(bad_regex, TOPICS, 0)
        assert answer.error_code is ErrorCode.invalid_regular_expression, pattern
        assert answer.error_message.startswith(f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: "), answer.error_message


def test_static_member_keeps_its_partitions_across_a_restart():
    c = ConsumerGroupCoordinator()
    a = join(c, "m1", instance="i1")
    join(c, "m2", instance="i2")
    assert join(c, "m3", instance="i1").error_code is ErrorCode.unreleased_instance_id
    left = c.heartbeat(HeartbeatRequest("g", "m1", -2, instance_id="i1"), TOPICS, 0)
    assert (left.error_code, left.member_epoch) == (ErrorCode.none, -2)
    back = join(c, "m3", instance="i1")
    # The new incarnation takes the old one's place: its share of the target, at the group's epoch.
    assert (back.error_code, back.member_epoch) == (ErrorCode.none, 2)
    assert back.assignment[T1] < a.assignment[T1] and len(back.assignment[T1]) == 2
    assert [m.member_id for m in c.describe("g").members] == ["m2", "m3"]
    assert beat(c, "m1", 1, {}, instance="i1").error_code is ErrorCode.unknown_member_id


def test_regex_subscription_and_offset_commit_epochs():
    c = ConsumerGroupCoordinator()
    r = c.heartbeat(HeartbeatRequest("g", "m1", 0, rebalance_timeout_ms=1000, subscribed_topic_regex="[ab]", owned={}), TOPICS, 0)
    assert r.assignment == {T1: frozenset(range(4)), T2: frozenset(range(2))}
    assert c.validate_offset_commit("g", "m1", 1, 9) is ErrorCode.none
    assert c.validate_offset_commit("g", "m1", 0, 9) is ErrorCode.stale_member_epoch
    assert c.validate_offset_commit("g", "m1", 1, 8) is ErrorCode.unsupported_version
    assert c.validate_offset_commit("g", "x", 1, 9) is ErrorCode.unknown_member_id
    assert c.validate_offset_commit("g", "", -1, 9) is ErrorCode.unknown_member_id  # members exist
    assert c.delete_group("g") is ErrorCode.non_empty_group


def test_assignors_balance_and_range_is_co_partitioned():
    members = {m: MemberSpec(frozenset({T1, T2}), {}) for m in ("x", "y")}
    topics = {T1: TOPICS["a"], T2: TOPICS["b"]}
    ranged = assign(RANGE, members, topics)
    assert ranged == {"x": {T1: frozenset({0, 1}), T2: frozenset({0})}, "y": {T1: frozenset({2, 3}), T2: frozenset({1})}}
    uniform = assign(UNIFORM, members, topics)
    assert sorted(sum(map(len, a.values())) for a in uniform.values()) == [3, 3]
    # Sticky: a third member takes partitions without moving the others' kept ones.
    members3 = {m: MemberSpec(frozenset({T1, T2}), uniform[m]) for m in ("x", "y")} | {"z": MemberSpec(frozenset({T1, T2}), {})}
    again = assign(UNIFORM, members3, topics)
    assert sorted(sum(map(len, a.values())) for a in again.values()) == [2, 2, 2]
    for m in ("x", "y"):
        for t, ps in again[m].items():
            assert ps <= uniform[m].get(t, frozenset())



def test_a_member_waiting_for_unreleased_partitions_is_asked_back_sooner():
    """The newcomer's target holds partitions the first member still owns: until they are
    released it is answered a tenth of the heartbeat interval, then the interval again."""
    c = ConsumerGroupCoordinator()
    first = join(c, "m1")
    assert first.heartbeat_interval_ms == 5000 and first.assignment == {T1: frozenset({0, 1, 2, 3})}
    waiting = join(c, "m2")
    assert (waiting.heartbeat_interval_ms, waiting.assignment) == (500, {})
    revoking = beat(c, "m1", first.member_epoch, first.assignment)
    assert revoking.heartbeat_interval_ms == 5000 and revoking.assignment == {T1: frozenset({0, 1})}
    beat(c, "m1", revoking.member_epoch, revoking.assignment)
    taken = beat(c, "m2", waiting.member_epoch, {})
    assert taken.heartbeat_interval_ms == 5000 and taken.assignment == {T1: frozenset({2, 3})}


def test_a_restored_group_goes_on_where_its_old_coordinator_left_it():
    """The state `export`ed mid-rebalance (m1 revoking half of its partitions for the newcomer
    m2, a static member m3 away with epoch -2) is `restore`d by another coordinator: the same
    heartbeats get the same answers from both, no partition is given while m1 holds it, and
    the restored members' sessions start at the restore."""
    old = ConsumerGroupCoordinator()
    first = join(old, "m1")
    static = join(old, "m3", topics=("b",), instance="i3")
    assert beat(old, "m3", -2, static.assignment, instance="i3").error_code is ErrorCode.none  # leaves for now
    waiting = join(old, "m2")
    assert (waiting.member_epoch, waiting.assignment) == (3, {})
    text = old.export("g")
    new = ConsumerGroupCoordinator()
    new.restore("g", text, 100_000)
    assert new.export("g") == text
    assert new.describe("g") == old.describe("g")
    for c in (old, new):
        # m2 is still waiting: m1 holds the partitions it is to have until it revokes them.
        assert beat(c, "m2", 3, {}, now=100_000).assignment is None
        revoking = beat(c, "m1", first.member_epoch, first.assignment, now=100_000)
        assert (revoking.member_epoch, revoking.assignment) == (first.member_epoch, {T1: frozenset({0, 1})})
        assert beat(c, "m2", 3, {}, now=100_000).assignment is None
        assert beat(c, "m1", first.member_epoch, revoking.assignment, now=100_000).member_epoch == 3
        assert beat(c, "m2", 3, {}, now=100_000).assignment == {T1: frozenset({2, 3})}
        # The static member comes back as a new incarnation and takes its partitions back.
        back = join(c, "m3-again", topics=("b",), instance="i3", now=100_000)
        assert (back.error_code, back.assignment) == (ErrorCode.none, {T2: frozenset({0, 1})})
    assert new.export("g") == old.export("g")
    # m1 and m2 heartbeat no more: their sessions, restarted at the restore, end a session later.
    assert new.tick(100_000 + SESSION_MS - 1) == []
    assert sorted(new.tick(100_000 + SESSION_MS)) == [("g", "m1"), ("g", "m2"), ("g", "m3-again")]
    assert new.describe("g").group_state == "Empty" and new.export("g") is not None  # kept: still a consumer group


def test_an_unreadable_stored_state_is_refused_and_the_group_stays_unknown():
    c = ConsumerGroupCoordinator()
    join(c, "m1")
    text = c.export("g")
    for bad in ("{", "[]", text.replace('"version":1', '"version":9'), text.replace('"state":"stable"', '"state":"?"')):
        other = ConsumerGroupCoordinator()
        try:
            other.restore("g", bad, 0)
            raise AssertionError(f"{bad!r} was restored")
        except ValueError:
            pass
        assert not other.is_consumer_group("g")


def test_only_what_changes_the_group_marks_it_to_be_written():
    """The shell writes a group's state only when `changed`: a steady heartbeat leaves it
    unmarked (nothing is serialised), a join, a revocation, a leave or an expiry marks it, and
    `export` unmarks it."""
    c = ConsumerGroupCoordinator()
    first = join(c, "m1")
    assert c.changed("g")
    text = c.export("g")
    assert not c.changed("g")
    assert beat(c, "m1", first.member_epoch, first.assignment, now=1_000).error_code is ErrorCode.none
    assert not c.changed("g") and c.export("g") == text  # steady: the same state
    waiting = join(c, "m2", now=1_000)
    assert c.changed("g")
    c.export("g")
    revoking = beat(c, "m1", first.member_epoch, first.assignment, now=1_000)
    assert revoking.assignment == {T1: frozenset({0, 1})} and c.changed("g")
    c.export("g")
    assert beat(c, "m2", waiting.member_epoch, {}, now=1_000).assignment is None and not c.changed("g")  # still waiting
    assert beat(c, "m1", revoking.member_epoch, revoking.assignment, now=1_000).member_epoch == 2 and c.changed("g")
    c.export("g")
    assert sorted(c.tick(1_000 + SESSION_MS)) == [("g", "m1"), ("g", "m2")] and c.changed("g")
    c.export("g")
    assert not c.changed("g")
    assert c.delete_group("g") is ErrorCode.none and c.changed("g")  # its stored state is to go
    assert c.export("g") is None and not c.changed("g")


def test_an_empty_group_is_kept_and_restored_at_its_epochs():
    """Once its last member leaves, a group's state is still exported (Kafka keeps its
    ConsumerGroupMetadata record): another coordinator restores it Empty at the same epochs,
    and the next member joins it at the epoch after them, not as a new group at epoch 1."""
    old = ConsumerGroupCoordinator()
    first = join(old, "m1")
    join(old, "m2")
    assert beat(old, "m1", -1, first.assignment).error_code is ErrorCode.none
    assert beat(old, "m2", -1, {}).error_code is ErrorCode.none
    gone = old.describe("g")
    assert (gone.group_state, gone.group_epoch, gone.assignment_epoch, gone.members) == ("Empty", 4, 2, ())
    text = old.export("g")
    assert text is not None
    new = ConsumerGroupCoordinator()
    new.restore("g", text, 0)
    assert new.is_consumer_group("g") and new.is_empty("g")
    assert new.describe("g") == gone
    assert [(g.group_id, g.group_state, g.group_type) for g in new.list_groups()] == [("g", "Empty", "consumer")]
    assert new.validate_offset_commit("g", "", -1, 9) is ErrorCode.none  # an admin's commit, as to any empty group
    again = join(new, "m3")
    assert (again.error_code, again.member_epoch, again.assignment) == (ErrorCode.none, 5, {T1: frozenset({0, 1, 2, 3})})
