"""JoinGroup and SyncGroup of the classic group coordinator, with Kafka's exact answers."""

from __future__ import annotations

import itertools

from kio.schema.errors import ErrorCode

from diskless.broker.group import (
    Completion,
    GroupConfig,
    GroupCoordinator,
    GroupState,
    JoinGroupMember,
    JoinGroupResponse,
    Outcome,
    SyncGroupResponse,
)

GROUP = "g"
RANGE = ("range", b"range-meta")


class Harness:
    """Drives one coordinator and keeps every delivered answer by ticket (each exactly once)."""

    def __init__(self, **config: int) -> None:
        counter = itertools.count(1)
        self.c = GroupCoordinator(
            GroupConfig(**{"group_initial_rebalance_delay_ms": 0, **config}), new_uuid=lambda: f"u{next(counter)}"
        )
        self.answers: dict[int, object] = {}

    def collect(self, completions: tuple[Completion, ...]) -> tuple[Completion, ...]:
        for completion in completions:
            assert completion.ticket not in self.answers, completion
            self.answers[completion.ticket] = completion.response
        return completions

    def join(
        self,
        member_id: str = "",
        *,
        client: str = "c",
        instance: str | None = None,
        protocols: tuple[tuple[str, bytes], ...] = (RANGE,),
        protocol_type: str = "consumer",
        session_ms: int = 10_000,
        rebalance_ms: int = 30_000,
        require_known: bool = True,
        now: int = 0,
    ) -> Outcome[JoinGroupResponse]:
        out = self.c.join_group(
            GROUP, member_id, instance, client, "/10.0.0.1", protocol_type, list(protocols),
            session_ms, rebalance_ms, require_known, now,
        )
        self.collect(out.completions)
        return out

    def sync(
        self,
        member_id: str,
        generation_id: int,
        assignments: dict[str, bytes] | None = None,
        *,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
        now: int = 0,
    ) -> Outcome[SyncGroupResponse]:
        out = self.c.sync_group(
            GROUP, generation_id, member_id, None, protocol_type, protocol_name, list((assignments or {}).items()), now
        )
        self.collect(out.completions)
        return out

    def tick(self, now: int) -> tuple[Completion, ...]:
        return self.collect(self.c.tick(now))

    def settle(self, now: int) -> None:
        """Tick until no timer is due at `now` (a tick fires only what was due when it began)."""
        for _ in range(10):
            deadline = self.c.next_deadline_ms()
            if deadline is None or deadline > now:
                return
            self.tick(now)
        raise AssertionError("timers never settled")

    def new_member(self, client: str, *, protocols: tuple[tuple[str, bytes], ...] = (RANGE,), now: int = 0) -> tuple[str, int]:
        first = self.join(client=client, protocols=protocols, now=now)
        assert first.response is not None and first.response.error_code is ErrorCode.member_id_required
        member_id = first.response.member_id
        second = self.join(member_id, client=client, protocols=protocols, now=now)
        assert second.response is None and second.ticket is not None
        return member_id, second.ticket

    def state(self) -> GroupState:
        overview = self.c.group_overview(GROUP)
        assert overview is not None
        return overview.state

    def generation(self) -> int:
        overview = self.c.group_overview(GROUP)
        assert overview is not None
        return overview.generation_id


def test_first_join_without_member_id_gets_member_id_required() -> None:
    h = Harness()
    out = h.join(client="consumer-1")
    assert out == Outcome(JoinGroupResponse(ErrorCode.member_id_required, "consumer-1-u1"))
    overview = h.c.group_overview(GROUP)
    assert overview is not None
    assert (overview.state, overview.member_ids, overview.pending_member_ids) == (GroupState.EMPTY, (), {"consumer-1-u1"})


def test_join_before_v4_is_added_at_once_and_parked() -> None:
    h = Harness()
    out = h.join(client="old", require_known=False)
    assert (out.response, out.ticket) == (None, 1)
    assert h.state() is GroupState.PREPARING_REBALANCE
    h.tick(0)
    assert h.answers[1] == JoinGroupResponse(
        ErrorCode.none, "old-u1", 1, "consumer", "range", "old-u1", members=(JoinGroupMember("old-u1", None, b"range-meta"),)
    )


def test_two_members_join_leader_gets_member_list_follower_does_not() -> None:
    h = Harness()
    a, ticket_a = h.new_member("a", protocols=(("range", b"ma"),))
    b, ticket_b = h.new_member("b", protocols=(("range", b"mb"),))
    assert (a, b) == ("a-u1", "b-u2")
    h.tick(0)  # b arrived during the initial delay: it is extended once more
    assert h.answers == {} and h.state() is GroupState.PREPARING_REBALANCE
    h.tick(0)
    assert h.answers == {
        ticket_a: JoinGroupResponse(
            ErrorCode.none, a, 1, "consumer", "range", a,
            members=(JoinGroupMember(a, None, b"ma"), JoinGroupMember(b, None, b"mb")),
        ),
        ticket_b: JoinGroupResponse(ErrorCode.none, b, 1, "consumer", "range", a),
    }
    assert (h.state(), h.generation()) == (GroupState.COMPLETING_REBALANCE, 1)


def _completing_group(h: Harness) -> tuple[str, str]:
    a, _ = h.new_member("a")
    b, _ = h.new_member("b")
    h.settle(0)
    assert h.state() is GroupState.COMPLETING_REBALANCE
    return a, b


def test_follower_sync_waits_and_leader_sync_distributes_assignments() -> None:
    h = Harness()
    a, b = _completing_group(h)
    follower = h.sync(b, 1)
    assert (follower.response, follower.completions) == (None, ())
    leader = h.sync(a, 1, {a: b"assign-a", b: b"assign-b"})
    assert leader.response == SyncGroupResponse(ErrorCode.none, "consumer", "range", b"assign-a")
    assert leader.completions == (
        Completion(follower.ticket, GROUP, b, SyncGroupResponse(ErrorCode.none, "consumer", "range", b"assign-b")),
    )
    assert h.state() is GroupState.STABLE
    # A follower syncing after the group went Stable gets its assignment at once.
    assert h.sync(b, 1).response == SyncGroupResponse(ErrorCode.none, "consumer", "range", b"assign-b")


def test_members_left_out_by_the_leader_get_an_empty_assignment() -> None:
    h = Harness()
    a, b = _completing_group(h)
    leader = h.sync(a, 1, {a: b"x", "no-such-member": b"ignored"})
    assert leader.response == SyncGroupResponse(ErrorCode.none, "consumer", "range", b"x")
    assert h.sync(b, 1).response == SyncGroupResponse(ErrorCode.none, "consumer", "range", b"")


def test_sync_errors() -> None:
    h = Harness()
    a, b = _completing_group(h)
    assert h.sync(a, 2).response == SyncGroupResponse(ErrorCode.illegal_generation)
    assert h.sync("ghost", 1).response == SyncGroupResponse(ErrorCode.unknown_member_id)
    assert h.sync(a, 1, protocol_name="roundrobin").response == SyncGroupResponse(ErrorCode.inconsistent_group_protocol)
    assert h.sync(a, 1, protocol_type="connect").response == SyncGroupResponse(ErrorCode.inconsistent_group_protocol)
    out = h.c.sync_group("", 1, a, None, None, None, [], 0)
    assert out.response == SyncGroupResponse(ErrorCode.invalid_group_id)
    out = h.c.sync_group("missing", 1, a, None, None, None, [], 0)
    assert out.response == SyncGroupResponse(ErrorCode.unknown_member_id)
    # Matching protocol type and name are accepted (SyncGroup v5+).
    ok = h.sync(a, 1, {a: b"1"}, protocol_type="consumer", protocol_name="range")
    assert ok.response == SyncGroupResponse(ErrorCode.none, "consumer", "range", b"1")


def test_sync_to_an_empty_group_is_unknown_member() -> None:
    h = Harness()
    h.join(client="a")  # MEMBER_ID_REQUIRED leaves an Empty group behind
    assert h.state() is GroupState.EMPTY
    assert h.sync("a-u1", 0).response == SyncGroupResponse(ErrorCode.unknown_member_id)


def test_sync_while_preparing_rebalance_is_rebalance_in_progress() -> None:
    h = Harness()
    a, b = _completing_group(h)
    h.sync(a, 1, {a: b"1", b: b"2"})
    h.join(a)  # the leader rejoining a Stable group forces a rebalance
    assert h.state() is GroupState.PREPARING_REBALANCE
    assert h.sync(b, 1).response == SyncGroupResponse(ErrorCode.rebalance_in_progress)


def test_new_member_during_completing_rebalance_sends_parked_syncs_back_to_join() -> None:
    h = Harness()
    a, b = _completing_group(h)
    parked = h.sync(b, 1)
    assert parked.ticket is not None
    assert h.join(client="c").response == JoinGroupResponse(ErrorCode.member_id_required, "c-u3")
    out = h.join("c-u3", client="c")
    assert out.completions == (
        Completion(parked.ticket, GROUP, b, SyncGroupResponse(ErrorCode.rebalance_in_progress)),
    )
    assert h.state() is GroupState.PREPARING_REBALANCE


def test_rejoin_with_same_metadata_while_completing_repeats_the_answer() -> None:
    h = Harness()
    a, b = _completing_group(h)
    leader = h.join(a)
    assert leader.response == JoinGroupResponse(
        ErrorCode.none, a, 1, "consumer", "range", a,
        members=(JoinGroupMember(a, None, b"range-meta"), JoinGroupMember(b, None, b"range-meta")),
    )
    assert h.join(b).response == JoinGroupResponse(ErrorCode.none, b, 1, "consumer", "range", a)
    assert h.state() is GroupState.COMPLETING_REBALANCE


def test_follower_rejoining_a_stable_group_unchanged_gets_current_generation() -> None:
    h = Harness()
    a, b = _completing_group(h)
    h.sync(a, 1, {a: b"1", b: b"2"})
    assert h.join(b).response == JoinGroupResponse(ErrorCode.none, b, 1, "consumer", "range", a)
    assert h.state() is GroupState.STABLE


def test_changed_metadata_rebalances_and_bumps_generation() -> None:
    h = Harness()
    a, b = _completing_group(h)
    h.sync(a, 1, {a: b"1", b: b"2"})
    out_b = h.join(b, protocols=(("range", b"new-subscription"),))
    assert out_b.response is None and h.state() is GroupState.PREPARING_REBALANCE
    out_a = h.join(a)
    assert out_a.response == JoinGroupResponse(
        ErrorCode.none, a, 2, "consumer", "range", a,
        members=(JoinGroupMember(a, None, b"range-meta"), JoinGroupMember(b, None, b"new-subscription")),
    )
    assert out_a.completions == (
        Completion(out_b.ticket, GROUP, b, JoinGroupResponse(ErrorCode.none, b, 2, "consumer", "range", a)),
    )
    assert (h.state(), h.generation()) == (GroupState.COMPLETING_REBALANCE, 2)


def test_protocol_selection_by_votes_among_protocols_all_support() -> None:
    h = Harness()
    # sticky is a's favourite but b lacks it; of the rest, range gets two votes, roundrobin one.
    h.new_member("a", protocols=(("sticky", b"s"), ("roundrobin", b"r"), ("range", b"g")))
    h.new_member("b", protocols=(("range", b"g"), ("roundrobin", b"r")))
    h.new_member("c", protocols=(("range", b"g"), ("roundrobin", b"r"), ("sticky", b"s")))
    h.settle(0)
    overview = h.c.group_overview(GROUP)
    assert overview is not None and overview.protocol_name == "range"


def test_protocol_tie_goes_to_the_earliest_vote() -> None:
    h = Harness()
    h.new_member("a", protocols=(("roundrobin", b"r"), ("range", b"g")))
    h.new_member("b", protocols=(("range", b"g"), ("roundrobin", b"r")))
    h.settle(0)
    overview = h.c.group_overview(GROUP)
    assert overview is not None and overview.protocol_name == "roundrobin"


def test_inconsistent_group_protocol() -> None:
    h = Harness()
    a, b = _completing_group(h)
    assert h.join(client="x", protocol_type="connect").response == JoinGroupResponse(
        ErrorCode.inconsistent_group_protocol, ""
    )
    assert h.join(client="x", protocols=(("sticky", b""),)).response == JoinGroupResponse(
        ErrorCode.inconsistent_group_protocol, ""
    )
    assert h.join(a, protocols=(("sticky", b""),)).response == JoinGroupResponse(
        ErrorCode.inconsistent_group_protocol, a
    )
    # An Empty group accepts any protocol, but not an empty protocol type or list.
    fresh = Harness()
    assert fresh.join(protocol_type="").response == JoinGroupResponse(ErrorCode.inconsistent_group_protocol, "")
    assert fresh.join(protocols=()).response == JoinGroupResponse(ErrorCode.inconsistent_group_protocol, "")


def test_join_request_errors() -> None:
    h = Harness()
    assert h.join(session_ms=5_999).response == JoinGroupResponse(ErrorCode.invalid_session_timeout, "")
    assert h.join("m", session_ms=1_800_001).response == JoinGroupResponse(ErrorCode.invalid_session_timeout, "m")
    assert h.c.group_overview(GROUP) is None
    # A member id for a group that does not exist: the member must start over.
    assert h.join("stale-id").response == JoinGroupResponse(ErrorCode.unknown_member_id, "stale-id")
    out = h.c.join_group("", "m", None, "c", "h", "consumer", [RANGE], 10_000, 30_000, True, 0)
    assert out.response == JoinGroupResponse(ErrorCode.invalid_group_id, "m")
    h.join(client="a")
    assert h.join("unknown-member").response == JoinGroupResponse(ErrorCode.unknown_member_id, "unknown-member")


def test_group_max_size_reached() -> None:
    h = Harness(group_max_size=2)
    a, b = _completing_group(h)
    assert h.join(client="c").response == JoinGroupResponse(ErrorCode.group_max_size_reached, "")
    assert h.join(b).response == JoinGroupResponse(ErrorCode.none, b, 1, "consumer", "range", a)


def test_initial_rebalance_waits_for_the_delay_and_extends_for_new_members() -> None:
    h = Harness(group_initial_rebalance_delay_ms=3_000)
    a, ticket_a = h.new_member("a", now=0)
    assert h.c.next_deadline_ms() == 3_000
    h.tick(2_999)
    assert h.answers == {}
    b, ticket_b = h.new_member("b", now=1_000)
    h.tick(3_000)  # b joined meanwhile: wait one more delay
    assert h.answers == {} and h.c.next_deadline_ms() == 6_000
    h.tick(6_000)
    assert set(h.answers) == {ticket_a, ticket_b}
    assert h.generation() == 1


def test_initial_delay_is_capped_by_the_rebalance_timeout() -> None:
    h = Harness(group_initial_rebalance_delay_ms=3_000)
    h.new_member("a", now=0)  # rebalance timeout 30s: remaining after the first delay is 27s
    for t in range(1, 12):
        h.new_member(f"m{t}", now=t * 3_000 - 1)
        h.tick(t * 3_000)
        if h.state() is GroupState.COMPLETING_REBALANCE:
            break
    # Delays 3s at a time until the 30s budget is spent, then the phase ends anyway.
    assert h.state() is GroupState.COMPLETING_REBALANCE
    assert t * 3_000 == 30_000


def test_superseded_parked_join_is_released_without_answer() -> None:
    h = Harness()
    a, first_ticket = h.new_member("a")
    again = h.join(a)
    assert again.ticket is not None and again.ticket != first_ticket
    assert again.completions == (Completion(first_ticket, GROUP, a, None),)
    h.settle(0)
    assert isinstance(h.answers[again.ticket], JoinGroupResponse)
