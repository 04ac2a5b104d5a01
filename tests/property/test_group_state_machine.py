"""Random clients against the classic group coordinator; invariants checked after every step.

The model is deliberately thin: clients remember what the coordinator told them and send
plausible (and sometimes stale) requests. The properties are about the coordinator itself:
every parked request is answered exactly once and no answer is lost, the group's bookkeeping
stays consistent, generations never go back, and a Stable group's members agree on one
protocol every one of them supports.
"""

from __future__ import annotations

import itertools
from collections import Counter

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from kio.schema.errors import ErrorCode

from diskless.broker.group import (
    Completion,
    GroupConfig,
    GroupCoordinator,
    GroupState,
    JoinGroupResponse,
    Outcome,
)
from diskless.broker.group.group import ClassicGroup

GROUP = "g"
PROTOCOL_CHOICES = [
    (("range", b"r"),),
    (("roundrobin", b"rr"), ("range", b"r")),
    (("range", b"r2"), ("roundrobin", b"rr")),
]
INSTANCES = [None, None, None, "static-a", "static-b"]


class Client:
    def __init__(self, instance: str | None) -> None:
        self.instance = instance
        self.member_id = ""
        self.generation_id = -1
        self.members: tuple[str, ...] = ()


class GroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        counter = itertools.count(1)
        self.coordinator = GroupCoordinator(
            GroupConfig(group_initial_rebalance_delay_ms=0), new_uuid=lambda: f"u{next(counter)}"
        )
        self.clients = [Client(instance) for instance in INSTANCES]
        self.now_ms = 0
        self.outstanding: dict[int, int] = {}  # ticket -> client index
        self.max_generation = 0

    # -- plumbing ----------------------------------------------------------------------------

    def _deliver(self, completions: tuple[Completion, ...]) -> None:
        for completion in completions:
            assert completion.ticket in self.outstanding, completion
            client = self.clients[self.outstanding.pop(completion.ticket)]
            if isinstance(completion.response, JoinGroupResponse):
                self._learn(client, completion.response)

    def _outcome(self, index: int, out: Outcome) -> None:  # type: ignore[type-arg]
        assert (out.response is None) != (out.ticket is None), out
        self._deliver(out.completions)
        if out.ticket is not None:
            assert out.ticket not in self.outstanding
            self.outstanding[out.ticket] = index
        elif isinstance(out.response, JoinGroupResponse):
            self._learn(self.clients[index], out.response)

    @staticmethod
    def _learn(client: Client, response: JoinGroupResponse) -> None:
        if response.error_code in (ErrorCode.none, ErrorCode.member_id_required):
            client.member_id = response.member_id
            client.generation_id = response.generation_id
            client.members = tuple(m.member_id for m in response.members)
        elif response.error_code in (ErrorCode.unknown_member_id, ErrorCode.fenced_instance_id):
            client.member_id = ""
            client.generation_id = -1

    def _group(self) -> ClassicGroup | None:
        return self.coordinator._rb.groups.get(GROUP)

    # -- rules ---------------------------------------------------------------------------------

    @rule(index=st.integers(0, len(INSTANCES) - 1), protocols=st.sampled_from(PROTOCOL_CHOICES),
          rebalance_ms=st.sampled_from([1_000, 30_000]))
    def join(self, index: int, protocols: tuple[tuple[str, bytes], ...], rebalance_ms: int) -> None:
        client = self.clients[index]
        for _ in range(2):  # like real clients, rejoin at once after MEMBER_ID_REQUIRED
            out = self.coordinator.join_group(
                GROUP, client.member_id, client.instance, f"client{index}", "/127.0.0.1", "consumer",
                list(protocols), 10_000, rebalance_ms, True, self.now_ms,
            )
            self._outcome(index, out)
            if out.response is None or out.response.error_code is not ErrorCode.member_id_required:
                break

    @rule(index=st.integers(0, len(INSTANCES) - 1))
    def sync(self, index: int) -> None:
        client = self.clients[index]
        assignments = [(m, f"{m}@{client.generation_id}".encode()) for m in client.members]
        out = self.coordinator.sync_group(
            GROUP, client.generation_id, client.member_id, client.instance, None, None, assignments, self.now_ms
        )
        self._outcome(index, out)

    @precondition(lambda self: self._leader_index() is not None)
    @rule()
    def leader_syncs(self) -> None:
        # Steers runs into Stable: the leader answers as soon as it knows it leads.
        index = self._leader_index()
        assert index is not None
        self.sync(index)

    @precondition(lambda self: bool(self._follower_indexes()))
    @rule(data=st.data())
    def follower_syncs(self, data: st.DataObject) -> None:
        self.sync(data.draw(st.sampled_from(self._follower_indexes())))

    def _synced_indexes(self) -> list[int]:
        group = self._group()
        if group is None or group.state is not GroupState.COMPLETING_REBALANCE:
            return []
        return [
            index
            for index, client in enumerate(self.clients)
            if client.member_id in group.members and client.generation_id == group.generation_id
        ]

    def _leader_index(self) -> int | None:
        group = self._group()
        leaders = [i for i in self._synced_indexes() if group and self.clients[i].member_id == group.leader_id]
        return leaders[0] if leaders else None

    def _follower_indexes(self) -> list[int]:
        return [i for i in self._synced_indexes() if i != self._leader_index()]

    @rule(index=st.integers(0, len(INSTANCES) - 1))
    def heartbeat(self, index: int) -> None:
        client = self.clients[index]
        error = self.coordinator.heartbeat(GROUP, client.generation_id, client.member_id, client.instance, self.now_ms)
        assert error in (
            ErrorCode.none, ErrorCode.rebalance_in_progress, ErrorCode.illegal_generation,
            ErrorCode.unknown_member_id, ErrorCode.fenced_instance_id,
        )

    @rule(indexes=st.lists(st.integers(0, len(INSTANCES) - 1), min_size=1, max_size=3, unique=True))
    def leave(self, indexes: list[int]) -> None:
        pairs = [(self.clients[i].member_id, self.clients[i].instance) for i in indexes]
        out = self.coordinator.leave_group(GROUP, pairs, self.now_ms)
        assert out.response is not None and out.ticket is None
        self._deliver(out.completions)
        for i in indexes:
            self.clients[i].member_id = ""

    @precondition(lambda self: bool(self.outstanding))
    @rule(data=st.data())
    def waiting_client_leaves(self, data: st.DataObject) -> None:
        # Leaving (or being removed by an admin) while a request is parked must not lose it.
        index = data.draw(st.sampled_from(sorted(set(self.outstanding.values()))))
        self.leave([index])

    @rule(elapsed_ms=st.sampled_from([0, 50, 1_000, 5_000, 12_000, 31_000]))
    def advance(self, elapsed_ms: int) -> None:
        self.now_ms += elapsed_ms
        for _ in range(20):
            deadline = self.coordinator.next_deadline_ms()
            if deadline is None or deadline > self.now_ms:
                break
            self._deliver(self.coordinator.tick(self.now_ms))
        deadline = self.coordinator.next_deadline_ms()
        assert deadline is None or deadline > self.now_ms

    @precondition(lambda self: self._group() is not None)
    @rule()
    def offset_commit_is_answered(self) -> None:
        client = self.clients[0]
        error = self.coordinator.validate_offset_commit(
            GROUP, client.generation_id, client.member_id, client.instance, self.now_ms
        )
        assert isinstance(error, ErrorCode)

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def parked_requests_are_exactly_the_unanswered_ones(self) -> None:
        group = self._group()
        parked: set[int] = set()
        if group is not None:
            for member in group.members.values():
                parked.update(t for t in (member.awaiting_join, member.awaiting_sync) if t is not None)
        assert parked == set(self.outstanding)

    @invariant()
    def bookkeeping_is_consistent(self) -> None:
        group = self._group()
        if group is None:
            return
        members = group.members
        assert (not members) == (group.state is GroupState.EMPTY) or group.state is GroupState.PREPARING_REBALANCE
        if members:
            assert group.leader_id in members
        else:
            assert group.leader_id is None
        assert not group.pending_join_members & members.keys()
        assert group.static_members == {
            m.group_instance_id: m.member_id for m in members.values() if m.group_instance_id is not None
        }
        expected = Counter(name for m in members.values() for name, _ in m.protocols)
        assert +group.supported_protocols == expected
        if group.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            assert group.protocol_name is not None
            assert all(group.protocol_name in m.protocol_names for m in members.values())
            assert all(m.awaiting_join is None for m in members.values())
        if group.state is not GroupState.COMPLETING_REBALANCE:
            assert all(m.awaiting_sync is None for m in members.values())

    @invariant()
    def generations_never_go_back(self) -> None:
        group = self._group()
        if group is not None:
            assert group.generation_id >= self.max_generation
            self.max_generation = group.generation_id


GroupMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestGroupStateMachine = GroupMachine.TestCase
