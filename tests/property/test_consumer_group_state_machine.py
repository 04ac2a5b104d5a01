"""Random KIP-848 clients against the consumer group coordinator; invariants after every step.

Clients behave as the protocol asks: they hold what the last heartbeat answer gave them,
report it as their owned partitions, rejoin with epoch 0 (holding nothing) when fenced, and
sometimes leave, fall silent until their session expires, or change subscription; topics
sometimes gain partitions. The properties:

  * no partition is held by two live clients at once (revocation comes before assignment);
  * a member's epoch never exceeds the group epoch, and the target epoch never goes back;
  * once every live client heartbeats until nothing changes, the partitions of the topics
    they subscribe to are held exactly once (disjoint and covering), and the group is Stable.
"""

from __future__ import annotations

import uuid

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from kio.schema.errors import ErrorCode

from diskless.broker.group.assignors import TopicInfo
from diskless.broker.group.config import GroupConfig
from diskless.broker.group.consumer_coordinator import ConsumerGroupCoordinator, HeartbeatRequest

GROUP = "g"
IDS = {"a": uuid.UUID(int=1), "b": uuid.UUID(int=2)}
SESSION_MS = GroupConfig().group_consumer_session_timeout_ms


class Client:
    def __init__(self, member_id: str, topics: tuple[str, ...], assignor: str | None) -> None:
        self.member_id = member_id
        self.topics = topics
        self.assignor = assignor
        self.epoch = 0
        self.owned: dict[uuid.UUID, frozenset[int]] = {}
        self.joined = False


class ConsumerGroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.coordinator = ConsumerGroupCoordinator()
        self.partitions = {"a": 3, "b": 2}
        self.clients: dict[str, Client] = {}
        self.last_beat: dict[str, int] = {}
        self.now_ms = 0
        self.next_id = 0
        self.target_epoch = 0

    def topics(self) -> dict[str, TopicInfo]:
        return {name: TopicInfo(IDS[name], name, n) for name, n in self.partitions.items()}

    def _beat(self, client: Client) -> None:
        if client.joined:
            request = HeartbeatRequest(GROUP, client.member_id, client.epoch, owned=dict(client.owned))
        else:
            request = HeartbeatRequest(
                GROUP, client.member_id, 0, rebalance_timeout_ms=60_000, subscribed_topic_names=client.topics,
                server_assignor=client.assignor, owned={},
            )  # fmt: skip
        r = self.coordinator.heartbeat(request, self.topics(), self.now_ms)
        if r.error_code in (ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id):
            client.joined, client.epoch, client.owned = False, 0, {}
            return
        assert r.error_code is ErrorCode.none, r
        self.last_beat[client.member_id] = self.now_ms
        client.joined = True
        client.epoch = r.member_epoch
        if r.assignment is not None:
            client.owned = {t: ps for t, ps in r.assignment.items() if ps}

    @precondition(lambda self: len(self.clients) < 5)
    @rule(topics=st.sampled_from([("a",), ("b",), ("a", "b")]), assignor=st.sampled_from([None, "uniform", "range"]))
    def join(self, topics: tuple[str, ...], assignor: str | None) -> None:
        self.next_id += 1
        client = Client(f"m{self.next_id}", topics, assignor)
        self.clients[client.member_id] = client
        self._beat(client)

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        self._beat(self.clients[data.draw(st.sampled_from(sorted(self.clients)))])

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        client = self.clients.pop(data.draw(st.sampled_from(sorted(self.clients))))
        r = self.coordinator.heartbeat(HeartbeatRequest(GROUP, client.member_id, -1), self.topics(), self.now_ms)
        assert r.error_code in (ErrorCode.none, ErrorCode.unknown_member_id)

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def fall_silent(self, data: st.DataObject) -> None:
        """A client stops heartbeating; once its session expires it is removed (and it knows
        it lost its partitions: the client's own session timer says so)."""
        silent = data.draw(st.sampled_from(sorted(self.clients)))
        self.now_ms += SESSION_MS // 2
        for client in self.clients.values():
            if client.member_id != silent:
                self._beat(client)
        self.now_ms += SESSION_MS // 2 + 1
        removed = self.coordinator.tick(self.now_ms)
        assert (GROUP, silent) in removed
        del self.clients[silent]
        for _, member_id in removed:  # others beat at now - SESSION/2 - 1: alive
            assert member_id == silent

    @rule(topic=st.sampled_from(["a", "b"]))
    def add_partition(self, topic: str) -> None:
        self.partitions[topic] += 1

    @precondition(lambda self: self.clients)
    @rule()
    def settle(self) -> None:
        for _ in range(20):
            before = {m: (c.epoch, dict(c.owned)) for m, c in self.clients.items()}
            for client in list(self.clients.values()):
                self._beat(client)
            if before == {m: (c.epoch, dict(c.owned)) for m, c in self.clients.items()}:
                break
        else:
            raise AssertionError("the group did not settle")
        subscribed = {t for c in self.clients.values() for t in c.topics}
        held = [(t, p) for c in self.clients.values() for t, ps in c.owned.items() for p in ps]
        expected = [(IDS[t], p) for t in subscribed for p in range(self.partitions[t])]
        assert sorted(held) == sorted(expected)
        assert self.coordinator.describe(GROUP).group_state == "Stable"

    @invariant()
    def no_partition_held_twice(self) -> None:
        seen: dict[tuple[uuid.UUID, int], str] = {}
        for client in self.clients.values():
            for t, ps in client.owned.items():
                for p in ps:
                    assert (t, p) not in seen, f"{(t, p)} held by {seen[(t, p)]} and {client.member_id}"
                    seen[(t, p)] = client.member_id

    @invariant()
    def epochs(self) -> None:
        group = self.coordinator.groups.get(GROUP)
        if group is None:
            return
        assert group.target_epoch >= self.target_epoch
        self.target_epoch = group.target_epoch
        assert group.target_epoch <= group.group_epoch
        for member in group.members.values():
            assert member.member_epoch <= group.group_epoch


ConsumerGroupMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestConsumerGroupMachine = ConsumerGroupMachine.TestCase
