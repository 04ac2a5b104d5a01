"""Heartbeats, session and rebalance timeouts, LeaveGroup and static membership (KIP-345)."""

from __future__ import annotations

import itertools

from kio.schema.errors import ErrorCode

from diskless.broker.group import (
    Completion,
    GroupConfig,
    GroupCoordinator,
    GroupOverview,
    GroupState,
    JoinGroupMember,
    JoinGroupResponse,
    LeaveGroupResponse,
    LeaveMemberResponse,
    Outcome,
    SyncGroupResponse,
)

GROUP = "g"
RANGE = ("range", b"range-meta")
SESSION_MS = 10_000
REBALANCE_MS = 30_000


class Harness:
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
        rebalance_ms: int = REBALANCE_MS,
        skip: bool = False,
        now: int = 0,
    ) -> Outcome[JoinGroupResponse]:
        out = self.c.join_group(
            GROUP, member_id, instance, client, "/10.0.0.1", "consumer", list(protocols),
            SESSION_MS, rebalance_ms, True, now, supports_skip_assignment=skip,
        )
        self.collect(out.completions)
        return out

    def sync(
        self, member_id: str, generation_id: int, assignments: dict[str, bytes] | None = None,
        *, instance: str | None = None, now: int = 0,
    ) -> Outcome[SyncGroupResponse]:
        out = self.c.sync_group(
            GROUP, generation_id, member_id, instance, None, None, list((assignments or {}).items()), now
        )
        self.collect(out.completions)
        return out

    def heartbeat(self, member_id: str, generation_id: int, *, instance: str | None = None, now: int = 0) -> ErrorCode:
        return self.c.heartbeat(GROUP, generation_id, member_id, instance, now)

    def leave(self, *members: tuple[str, str | None], now: int = 0) -> Outcome[LeaveGroupResponse]:
        out = self.c.leave_group(GROUP, list(members), now)
        self.collect(out.completions)
        return out

    def tick(self, now: int) -> tuple[Completion, ...]:
        return self.collect(self.c.tick(now))

    def settle(self, now: int) -> None:
        for _ in range(10):
            deadline = self.c.next_deadline_ms()
            if deadline is None or deadline > now:
                return
            self.tick(now)
        raise AssertionError("timers never settled")

    def overview(self) -> GroupOverview:
        overview = self.c.group_overview(GROUP)
        assert overview is not None
        return overview

    def stable_group(
        self, *clients: str, instances: dict[str, str] | None = None,
        protocols: tuple[tuple[str, bytes], ...] = (RANGE,), rebalance_ms: int = REBALANCE_MS,
    ) -> list[str]:
        """Members join at t=0 and sync; each gets the assignment b"assign-<client>"."""
        instances = instances or {}
        ids = []
        for client in clients:
            instance = instances.get(client)
            first = self.join(client=client, instance=instance, protocols=protocols, rebalance_ms=rebalance_ms)
            if instance is None:
                assert first.response is not None and first.response.error_code is ErrorCode.member_id_required
                member_id = first.response.member_id
                assert self.join(member_id, client=client, protocols=protocols, rebalance_ms=rebalance_ms).ticket
            else:
                member_id = self.overview().static_members[instance]
            ids.append(member_id)
        self.settle(0)
        generation = self.overview().generation_id
        leader = self.overview().leader_id
        assignment = {m: f"assign-{c}".encode() for m, c in zip(ids, clients)}
        self.sync(leader or "", generation, assignment, instance=instances.get(clients[ids.index(leader or "")]))
        for member_id, client in zip(ids, clients):
            if member_id != leader:
                self.sync(member_id, generation, instance=instances.get(client))
        assert self.overview().state is GroupState.STABLE
        return ids


# -- heartbeats and timeouts -------------------------------------------------------------------


def test_heartbeat_answers_by_state() -> None:
    h = Harness()
    a, b = h.stable_group("a", "b")
    assert h.heartbeat(a, 1) is ErrorCode.none
    assert h.heartbeat(a, 0) is ErrorCode.illegal_generation
    assert h.heartbeat("ghost", 1) is ErrorCode.unknown_member_id
    assert h.c.heartbeat("missing", 1, a, None, 0) is ErrorCode.unknown_member_id
    assert h.c.heartbeat("", 1, a, None, 0) is ErrorCode.invalid_group_id
    h.join(a)  # the leader rejoins: PreparingRebalance
    assert h.heartbeat(b, 1) is ErrorCode.rebalance_in_progress
    h.join(b)  # everyone is back: CompletingRebalance, generation 2
    assert h.overview().state is GroupState.COMPLETING_REBALANCE
    assert h.heartbeat(b, 2) is ErrorCode.none  # allowed between JoinGroup and SyncGroup


def test_session_expiry_removes_member_and_triggers_rebalance() -> None:
    h = Harness()
    a, b = h.stable_group("a", "b")
    assert h.heartbeat(a, 1, now=5_000) is ErrorCode.none
    assert h.c.next_deadline_ms() == SESSION_MS  # b's session, restarted by its SyncGroup at t=0
    assert h.tick(SESSION_MS) == ()
    overview = h.overview()
    assert (overview.state, overview.member_ids) == (GroupState.PREPARING_REBALANCE, (a,))
    assert h.heartbeat(a, 1, now=10_001) is ErrorCode.rebalance_in_progress
    out = h.join(a, now=10_002)
    assert out.response == JoinGroupResponse(
        ErrorCode.none, a, 2, "consumer", "range", a, members=(JoinGroupMember(a, None, b"range-meta"),)
    )
    assert h.heartbeat(b, 1, now=10_003) is ErrorCode.unknown_member_id


def test_rebalance_timeout_removes_members_that_did_not_rejoin() -> None:
    h = Harness()
    a, b = h.stable_group("a", "b")
    parked = h.join(a, now=1_000)
    assert parked.ticket is not None and h.overview().state is GroupState.PREPARING_REBALANCE
    for t in range(5_000, 31_000, 5_000):  # b stays alive but never rejoins
        assert h.heartbeat(b, 1, now=t) is ErrorCode.rebalance_in_progress
        h.tick(t)
    assert h.c.next_deadline_ms() == 1_000 + REBALANCE_MS
    h.tick(1_000 + REBALANCE_MS)
    assert h.answers[parked.ticket] == JoinGroupResponse(
        ErrorCode.none, a, 2, "consumer", "range", a, members=(JoinGroupMember(a, None, b"range-meta"),)
    )
    assert h.overview().member_ids == (a,)
    assert h.heartbeat(b, 1, now=31_001) is ErrorCode.unknown_member_id


def test_leader_that_does_not_rejoin_is_replaced_by_one_that_did() -> None:
    h = Harness()
    a, b = h.stable_group("a", "b")
    # A follower with new metadata triggers the rebalance (and retries its JoinGroup); the
    # leader stays away.
    parked = h.join(b, protocols=(("range", b"v2"),), now=0)
    retried = h.join(b, protocols=(("range", b"v2"),), now=0)
    assert retried.completions == (Completion(parked.ticket, GROUP, b, None),)
    h.tick(REBALANCE_MS)
    answers = [r for r in h.answers.values() if isinstance(r, JoinGroupResponse)]
    assert answers[-1] == JoinGroupResponse(
        ErrorCode.none, b, 2, "consumer", "range", b, members=(JoinGroupMember(b, None, b"v2"),)
    )
    assert h.overview().member_ids == (b,)


def test_new_member_join_expires_after_new_member_join_timeout() -> None:
    h = Harness()
    (a,) = h.stable_group("a", rebalance_ms=600_000)
    first = h.join(client="n", rebalance_ms=600_000)
    assert first.response is not None
    parked = h.join(first.response.member_id, client="n", rebalance_ms=600_000)
    for t in range(5_000, 300_000, 5_000):  # a stays alive without rejoining
        h.heartbeat(a, 1, now=t)
        h.tick(t)
    assert parked.ticket not in h.answers
    h.heartbeat(a, 1, now=300_000)
    h.tick(300_000)
    assert h.answers[parked.ticket] == JoinGroupResponse(ErrorCode.unknown_member_id, "")
    assert h.overview().member_ids == (a,)


def test_pending_member_expires_after_its_session_timeout() -> None:
    h = Harness()
    first = h.join(client="p")
    assert first.response == JoinGroupResponse(ErrorCode.member_id_required, "p-u1")
    h.tick(SESSION_MS - 1)
    assert h.overview().pending_member_ids == {"p-u1"}
    h.tick(SESSION_MS)
    assert h.overview().pending_member_ids == frozenset()
    assert h.join("p-u1", client="p", now=SESSION_MS).response == JoinGroupResponse(ErrorCode.unknown_member_id, "p-u1")


def test_join_phase_waits_for_pending_members_until_they_expire() -> None:
    h = Harness()
    (a,) = h.stable_group("a")
    assert h.join(client="p", now=1_000).response == JoinGroupResponse(ErrorCode.member_id_required, "p-u2")
    parked = h.join(a, now=1_000)
    assert parked.ticket is not None
    h.tick(1_000 + SESSION_MS)  # the pending id never came back
    assert h.answers[parked.ticket] == JoinGroupResponse(
        ErrorCode.none, a, 2, "consumer", "range", a, members=(JoinGroupMember(a, None, b"range-meta"),)
    )


def test_members_that_never_sync_are_removed_after_the_rebalance_timeout() -> None:
    h = Harness()
    a, b = "a-u1", "b-u2"
    h.join(client="a")
    h.join(a, client="a")
    h.join(client="b")
    h.join(b, client="b")
    h.settle(0)
    assert h.sync(a, 1, {a: b"x", b: b"y"}).response == SyncGroupResponse(ErrorCode.none, "consumer", "range", b"x")
    for t in range(5_000, REBALANCE_MS, 5_000):
        assert h.heartbeat(b, 1, now=t) is ErrorCode.none
        assert h.heartbeat(a, 1, now=t) is ErrorCode.none
    h.tick(REBALANCE_MS)  # b never sent SyncGroup
    overview = h.overview()
    assert (overview.state, overview.member_ids) == (GroupState.PREPARING_REBALANCE, (a,))


# -- LeaveGroup --------------------------------------------------------------------------------


def test_batched_leave_answers_per_member_and_rebalances() -> None:
    h = Harness()
    a, b, c = h.stable_group("a", "b", "c")
    out = h.leave((b, None), (c, None), ("ghost", None))
    assert out == Outcome(
        LeaveGroupResponse(
            ErrorCode.none,
            (
                LeaveMemberResponse(b, None, ErrorCode.none),
                LeaveMemberResponse(c, None, ErrorCode.none),
                LeaveMemberResponse("ghost", None, ErrorCode.unknown_member_id),
            ),
        )
    )
    assert h.overview().state is GroupState.PREPARING_REBALANCE
    assert h.join(a).response == JoinGroupResponse(
        ErrorCode.none, a, 2, "consumer", "range", a, members=(JoinGroupMember(a, None, b"range-meta"),)
    )


def test_last_member_leaving_empties_the_group_with_a_new_generation() -> None:
    h = Harness()
    (a,) = h.stable_group("a")
    assert h.leave((a, None)).response == LeaveGroupResponse(ErrorCode.none, (LeaveMemberResponse(a, None, ErrorCode.none),))
    overview = h.overview()
    assert (overview.state, overview.generation_id, overview.protocol_name) == (GroupState.EMPTY, 2, None)


def test_leave_errors() -> None:
    h = Harness()
    out = h.c.leave_group("missing", [("m1", None), ("", "i1")], 0)
    assert out.response == LeaveGroupResponse(
        ErrorCode.none,
        (LeaveMemberResponse("m1", None, ErrorCode.unknown_member_id), LeaveMemberResponse("", "i1", ErrorCode.unknown_member_id)),
    )
    assert h.c.leave_group("", [("m1", None)], 0).response == LeaveGroupResponse(ErrorCode.invalid_group_id)
    h.stable_group("a")
    assert h.leave(("", "unknown-instance")).response == LeaveGroupResponse(
        ErrorCode.none, (LeaveMemberResponse("", "unknown-instance", ErrorCode.unknown_member_id),)
    )
    assert h.overview().state is GroupState.STABLE  # nobody left: no rebalance


def test_leaving_member_with_a_parked_join_gets_unknown_member_id() -> None:
    h = Harness()
    a, b = h.stable_group("a", "b")
    parked = h.join(a)
    out = h.leave((a, None))
    assert out.completions == (Completion(parked.ticket, GROUP, a, JoinGroupResponse(ErrorCode.unknown_member_id, "")),)
    assert h.overview().member_ids == (b,)


def test_leaving_member_with_a_parked_sync_is_released_and_others_rejoin() -> None:
    h = Harness()
    a, b = "a-u1", "b-u2"
    for client, member_id in (("a", a), ("b", b)):
        h.join(client=client)
        h.join(member_id, client=client)
    h.settle(0)
    parked = h.sync(b, 1)
    out = h.leave((b, None))
    # Kafka never answers that SyncGroup; the shell is told to drop it.
    assert out.completions == (Completion(parked.ticket, GROUP, b, None),)
    overview = h.overview()
    assert (overview.state, overview.member_ids) == (GroupState.PREPARING_REBALANCE, (a,))


def test_pending_member_can_leave_and_that_rebalances_a_stable_group() -> None:
    h = Harness()
    h.stable_group("a")
    assert h.join(client="p").response == JoinGroupResponse(ErrorCode.member_id_required, "p-u2")
    assert h.leave(("p-u2", None)).response == LeaveGroupResponse(
        ErrorCode.none, (LeaveMemberResponse("p-u2", None, ErrorCode.none),)
    )
    overview = h.overview()
    assert (overview.state, overview.pending_member_ids) == (GroupState.PREPARING_REBALANCE, frozenset())


# -- static membership (KIP-345) ---------------------------------------------------------------


def test_static_member_restart_keeps_assignment_without_rebalance() -> None:
    h = Harness()
    s, d = h.stable_group("s", "d", instances={"s": "inst-s"})
    assert s == "inst-s-u1"
    out = h.join(client="s", instance="inst-s", now=1_000)
    new_id = "inst-s-u3"
    # Before v9 the old leader id comes back so the restarted leader does not assign again.
    assert out == Outcome(JoinGroupResponse(ErrorCode.none, new_id, 1, "consumer", "range", s))
    overview = h.overview()
    assert (overview.state, overview.generation_id, overview.leader_id) == (GroupState.STABLE, 1, new_id)
    assert overview.static_members == {"inst-s": new_id}
    assert h.sync(new_id, 1, instance="inst-s").response == SyncGroupResponse(
        ErrorCode.none, "consumer", "range", b"assign-s"
    )
    assert h.heartbeat(d, 1) is ErrorCode.none  # the other member is not disturbed


def test_old_static_member_id_is_fenced() -> None:
    h = Harness()
    s, _ = h.stable_group("s", "d", instances={"s": "inst-s"})
    h.join(client="s", instance="inst-s")
    assert h.heartbeat(s, 1, instance="inst-s") is ErrorCode.fenced_instance_id
    assert h.heartbeat(s, 1) is ErrorCode.unknown_member_id
    assert h.sync(s, 1, instance="inst-s").response == SyncGroupResponse(ErrorCode.fenced_instance_id)
    assert h.join(s, instance="inst-s").response == JoinGroupResponse(ErrorCode.fenced_instance_id, s)
    assert h.leave((s, "inst-s")).response == LeaveGroupResponse(
        ErrorCode.none, (LeaveMemberResponse(s, "inst-s", ErrorCode.fenced_instance_id),)
    )
    assert h.join("d-u2", instance="other").response == JoinGroupResponse(ErrorCode.unknown_member_id, "d-u2")


def test_static_leader_restart_with_skip_assignment() -> None:
    h = Harness()
    s, d = h.stable_group("s", "d", instances={"s": "inst-s"})
    out = h.join(client="s", instance="inst-s", skip=True)
    new_id = "inst-s-u3"
    assert out.response == JoinGroupResponse(
        ErrorCode.none, new_id, 1, "consumer", "range", new_id, skip_assignment=True,
        members=(JoinGroupMember(d, None, b"range-meta"), JoinGroupMember(new_id, "inst-s", b"range-meta")),
    )


def test_parked_requests_of_a_replaced_static_member_are_fenced() -> None:
    h = Harness()
    s, d = h.stable_group("s", "d", instances={"s": "inst-s"})
    parked = h.join(s, instance="inst-s")  # the leader rejoins: PreparingRebalance
    out = h.join(client="s", instance="inst-s")  # ... and restarts before the phase ends
    assert out.completions[0] == Completion(parked.ticket, GROUP, s, JoinGroupResponse(ErrorCode.fenced_instance_id, s))
    assert out.ticket is not None and h.overview().state is GroupState.PREPARING_REBALANCE


def test_static_rejoin_that_changes_the_protocol_rebalances() -> None:
    h = Harness()
    (s,) = h.stable_group("s", instances={"s": "inst-s"})
    out = h.join(client="s", instance="inst-s", protocols=(("roundrobin", b"rr"), RANGE))
    assert out.response == JoinGroupResponse(
        ErrorCode.none, "inst-s-u2", 2, "consumer", "roundrobin", "inst-s-u2",
        members=(JoinGroupMember("inst-s-u2", "inst-s", b"rr"),),
    )


def test_static_rejoin_while_completing_rebalance_starts_over() -> None:
    h = Harness()
    h.join(client="s", instance="inst-s")
    h.settle(0)
    assert h.overview().state is GroupState.COMPLETING_REBALANCE
    out = h.join(client="s", instance="inst-s")
    assert out.response == JoinGroupResponse(
        ErrorCode.none, "inst-s-u2", 2, "consumer", "range", "inst-s-u2",
        members=(JoinGroupMember("inst-s-u2", "inst-s", b"range-meta"),),
    )


def test_static_member_that_does_not_rejoin_keeps_its_place() -> None:
    h = Harness()
    s, d = h.stable_group("s", "d", instances={"s": "inst-s"})
    parked = h.join(d, protocols=(("range", b"v2"),), now=1_000)  # the follower changes its subscription
    for t in range(5_000, 31_000, 5_000):  # s stays alive but does not rejoin
        assert h.heartbeat(s, 1, instance="inst-s", now=t) is ErrorCode.rebalance_in_progress
        h.tick(t)
    h.tick(1_000 + REBALANCE_MS)
    # d, the only member that rejoined, now leads; s is still listed for the assignment.
    assert h.answers[parked.ticket] == JoinGroupResponse(
        ErrorCode.none, d, 2, "consumer", "range", d,
        members=(JoinGroupMember(s, "inst-s", b"range-meta"), JoinGroupMember(d, None, b"v2")),
    )
    assert h.heartbeat(s, 1, instance="inst-s", now=31_001) is ErrorCode.illegal_generation


def test_admin_removes_static_member_by_instance_id() -> None:
    h = Harness()
    s, d = h.stable_group("s", "d", instances={"s": "inst-s"})
    assert h.leave(("", "inst-s")).response == LeaveGroupResponse(
        ErrorCode.none, (LeaveMemberResponse("", "inst-s", ErrorCode.none),)
    )
    overview = h.overview()
    assert (overview.member_ids, overview.static_members, overview.state) == ((d,), {}, GroupState.PREPARING_REBALANCE)


def test_pending_member_id_with_an_instance_id_is_a_server_error() -> None:
    h = Harness()
    assert h.join(client="p").response == JoinGroupResponse(ErrorCode.member_id_required, "p-u1")
    assert h.join("p-u1", instance="i").response == JoinGroupResponse(ErrorCode.unknown_server_error, "")
