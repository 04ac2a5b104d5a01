"""OffsetCommit validation, DescribeGroups, ListGroups, DeleteGroups, unload and generations."""

from __future__ import annotations

import itertools

from kio.schema.errors import ErrorCode

from diskless.broker.group import (
    Completion,
    GroupConfig,
    GroupCoordinator,
    GroupDescription,
    GroupState,
    JoinGroupResponse,
    ListedGroup,
    MemberDescription,
    SyncGroupResponse,
)

RANGE = ("range", b"range-meta")


def coordinator() -> GroupCoordinator:
    counter = itertools.count(1)
    return GroupCoordinator(GroupConfig(group_initial_rebalance_delay_ms=0), new_uuid=lambda: f"u{next(counter)}")


def join(c: GroupCoordinator, group: str, member_id: str = "", *, client: str = "c", instance: str | None = None):
    return c.join_group(group, member_id, instance, client, "/10.0.0.9", "consumer", [RANGE], 10_000, 30_000, True, 0)


def completing_group(c: GroupCoordinator, group: str, *clients: str) -> list[str]:
    ids = []
    for client in clients:
        first = join(c, group, client=client)
        assert first.response is not None
        ids.append(first.response.member_id)
        assert join(c, group, first.response.member_id, client=client).ticket is not None
    for _ in range(3):
        c.tick(0)
    overview = c.group_overview(group)
    assert overview is not None and overview.state is GroupState.COMPLETING_REBALANCE
    return ids


def stable_group(c: GroupCoordinator, group: str, *clients: str) -> list[str]:
    ids = completing_group(c, group, *clients)
    assignments = [(m, f"assign-{m}".encode()) for m in ids]
    out = c.sync_group(group, 1, ids[0], None, None, None, assignments, 0)
    assert out.response == SyncGroupResponse(ErrorCode.none, "consumer", "range", f"assign-{ids[0]}".encode())
    return ids


# -- OffsetCommit --------------------------------------------------------------------------------


def test_simple_commit_creates_an_empty_group() -> None:
    c = coordinator()
    assert c.validate_offset_commit("simple", -1, "", None, 0) is ErrorCode.none
    assert c.list_groups() == [ListedGroup("simple", "", "Empty")]
    assert c.validate_offset_commit("simple", -1, "", None, 1) is ErrorCode.none


def test_commit_with_a_generation_to_a_missing_group() -> None:
    c = coordinator()
    assert c.validate_offset_commit("missing", 1, "m", None, 0) is ErrorCode.illegal_generation
    assert c.validate_offset_commit("missing", 1, "m", None, 0, api_version=9) is ErrorCode.group_id_not_found
    assert (
        c.validate_offset_commit("missing", 1, "m", None, 0, is_transactional=True, api_version=9)
        is ErrorCode.illegal_generation
    )
    assert c.list_groups() == []


def test_commit_validation_in_a_stable_group() -> None:
    c = coordinator()
    a, b = stable_group(c, "g", "a", "b")
    assert c.validate_offset_commit("g", 1, a, None, 0) is ErrorCode.none
    assert c.validate_offset_commit("g", 0, a, None, 0) is ErrorCode.illegal_generation
    assert c.validate_offset_commit("g", 1, "ghost", None, 0) is ErrorCode.unknown_member_id
    assert c.validate_offset_commit("g", 1, a, "no-such-instance", 0) is ErrorCode.unknown_member_id
    # No member id and no generation: only for an Empty group, except for transactions.
    assert c.validate_offset_commit("g", -1, "", None, 0) is ErrorCode.unknown_member_id
    assert c.validate_offset_commit("g", -1, "", None, 0, is_transactional=True) is ErrorCode.none


def test_commit_validation_while_rebalancing() -> None:
    c = coordinator()
    a, b = completing_group(c, "g", "a", "b")
    assert c.validate_offset_commit("g", 1, a, None, 0) is ErrorCode.rebalance_in_progress
    assert c.validate_offset_commit("g", 1, a, None, 0, is_transactional=True) is ErrorCode.none
    c.sync_group("g", 1, a, None, None, None, [], 0)
    join(c, "g", a)  # the leader rejoins: PreparingRebalance, generation still 1
    assert c.validate_offset_commit("g", 1, b, None, 0) is ErrorCode.none


def test_commit_from_a_fenced_static_member() -> None:
    c = coordinator()
    first = join(c, "g", client="s", instance="inst")
    assert first.ticket is not None
    c.tick(0)
    c.sync_group("g", 1, "inst-u1", "inst", None, None, [], 0)
    restarted = join(c, "g", client="s", instance="inst")
    assert restarted.response is not None and restarted.response.member_id == "inst-u2"
    assert c.validate_offset_commit("g", 1, "inst-u1", "inst", 0) is ErrorCode.fenced_instance_id
    assert c.validate_offset_commit("g", 1, "inst-u2", "inst", 0) is ErrorCode.none


# -- DescribeGroups and ListGroups ------------------------------------------------------------


def test_describe_stable_group() -> None:
    c = coordinator()
    a, b = stable_group(c, "g", "a", "b")
    assert c.describe_group("g") == GroupDescription(
        "g",
        ErrorCode.none,
        "Stable",
        "consumer",
        "range",
        (
            MemberDescription(a, None, "a", "/10.0.0.9", b"range-meta", f"assign-{a}".encode()),
            MemberDescription(b, None, "b", "/10.0.0.9", b"range-meta", f"assign-{b}".encode()),
        ),
    )


def test_describe_rebalancing_group_has_no_protocol_or_metadata() -> None:
    c = coordinator()
    a, b = stable_group(c, "g", "a", "b")
    join(c, "g", a)
    assert c.describe_group("g") == GroupDescription(
        "g",
        ErrorCode.none,
        "PreparingRebalance",
        "consumer",
        "",
        (
            MemberDescription(a, None, "a", "/10.0.0.9", b"", f"assign-{a}".encode()),
            MemberDescription(b, None, "b", "/10.0.0.9", b"", f"assign-{b}".encode()),
        ),
    )


def test_describe_missing_group_depends_on_version() -> None:
    c = coordinator()
    assert c.describe_group("nope", api_version=5) == GroupDescription("nope", ErrorCode.none, "Dead")
    assert c.describe_group("nope", api_version=6) == GroupDescription(
        "nope", ErrorCode.group_id_not_found, "Dead", error_message="Group nope not found."
    )


def test_list_groups_with_filters() -> None:
    c = coordinator()
    stable_group(c, "stable", "a")
    completing_group(c, "completing", "b")
    c.validate_offset_commit("simple", -1, "", None, 0)
    everything = [
        ListedGroup("stable", "consumer", "Stable"),
        ListedGroup("completing", "consumer", "CompletingRebalance"),
        ListedGroup("simple", "", "Empty"),
    ]
    assert c.list_groups() == everything
    assert c.list_groups(states_filter=["STABLE", "empty"]) == [everything[0], everything[2]]
    assert c.list_groups(types_filter=["Classic"]) == everything
    assert c.list_groups(types_filter=["consumer"]) == []


# -- DeleteGroups ------------------------------------------------------------------------------


def test_delete_group() -> None:
    c = coordinator()
    (a,) = stable_group(c, "g", "a")
    assert c.delete_group("missing", 0) is ErrorCode.group_id_not_found
    assert c.delete_group("g", 0) is ErrorCode.non_empty_group
    c.leave_group("g", [(a, None)], 0)
    assert c.group_overview("g").state is GroupState.EMPTY  # type: ignore[union-attr]
    assert c.delete_group("g", 0) is ErrorCode.none
    assert c.group_overview("g") is None
    assert c.describe_group("g").group_state == "Dead"
    assert c.delete_group("g", 0) is ErrorCode.group_id_not_found


def test_delete_empty_group_with_pending_member_cancels_its_timer() -> None:
    c = coordinator()
    join(c, "g", client="p")
    assert c.next_deadline_ms() == 10_000
    assert c.delete_group("g", 0) is ErrorCode.none
    assert c.next_deadline_ms() is None
    assert join(c, "g", "p-u1", client="p").response == JoinGroupResponse(ErrorCode.unknown_member_id, "p-u1")


# -- generations and unload --------------------------------------------------------------------


def test_every_completed_join_phase_bumps_the_generation() -> None:
    c = coordinator()
    (a,) = stable_group(c, "g", "a")
    for generation in (2, 3, 4):
        out = join(c, "g", a)  # a leader's JoinGroup always starts a new generation
        assert out.response is not None and out.response.generation_id == generation
        c.sync_group("g", generation, a, None, None, None, [], 0)
    assert c.group_overview("g").generation_id == 4  # type: ignore[union-attr]


def test_unload_answers_parked_requests_not_coordinator() -> None:
    c = coordinator()
    a, b = completing_group(c, "syncing", "a", "b")
    parked_sync = c.sync_group("syncing", 1, b, None, None, None, [], 0)
    x, _ = stable_group(c, "joining", "x", "y")
    parked_join = join(c, "joining", x)
    assert parked_sync.ticket is not None and parked_join.ticket is not None
    assert set(c.unload(0)) == {
        Completion(parked_sync.ticket, "syncing", b, SyncGroupResponse(ErrorCode.not_coordinator)),
        Completion(parked_join.ticket, "joining", x, JoinGroupResponse(ErrorCode.not_coordinator, x)),
    }
    assert c.list_groups() == [] and c.next_deadline_ms() is None


def test_unloading_some_groups_keeps_the_others_and_their_timers() -> None:
    """A coordinator slot moved away: its groups' parked requests are answered
    NOT_COORDINATOR and their timers dropped; groups of the slots still held stay as they were."""
    c = coordinator()
    a, b = completing_group(c, "moved", "a", "b")
    parked_sync = c.sync_group("moved", 1, b, None, None, None, [], 0)
    (x,) = stable_group(c, "kept", "x")
    assert parked_sync.ticket is not None
    assert set(c.unload(0, lambda group_id: group_id == "moved")) == {
        Completion(parked_sync.ticket, "moved", b, SyncGroupResponse(ErrorCode.not_coordinator)),
    }
    assert [g.group_id for g in c.list_groups()] == ["kept"]
    assert c.group_overview("moved") is None
    kept = c.group_overview("kept")
    assert kept is not None and kept.generation_id == 1
    assert c.heartbeat("kept", 1, x, None, 0) is ErrorCode.none
    assert c.next_deadline_ms() is not None  # the kept member's session timer
