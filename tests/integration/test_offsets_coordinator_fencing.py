"""Committed offsets are fenced by the group's coordinator slot: a write carrying a (slot,
epoch) the store has moved past raises CoordinatorFenced and writes nothing (every backend),
and the broker answers NOT_COORDINATOR, so the members of a coordinator whose cluster view is
stale (a stall) cannot write an older offset over one committed through the slot's new holder.

The store scenario runs on every backend; the handler scenario drives OffsetCommit and
OffsetDelete through `Groups` over a real SQLite store, with the broker's own `_coordinator_of`
reading a view the test holds back.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from types import SimpleNamespace
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.offset_commit.v8 import request as offset_commit_v8
from kio.schema.offset_delete.v0 import request as offset_delete_v0

from diskless.broker.app import Broker
from diskless.broker.cluster.slots import slot_of
from diskless.broker.errors import NotGroupCoordinator
from diskless.broker.group import GroupConfig
from diskless.broker.group.consumer_coordinator import HeartbeatRequest
from diskless.broker.groups import Groups
from diskless.broker.handlers.commits import handle_offset_commit, handle_offset_delete
from diskless.wire import Request, RequestHeader
from metadata import CommittedOffset, CoordinatorFenced, MetadataStore, MetadataStorageError, PartitionLeadership, open_metadata_store, sqlite_url
from metadata.model import COORDINATOR_SLOTS

from .test_metadata_store import backend, store, url  # noqa: F401 (fixtures: every backend)

SLOTS = 4
OFFSET_COMMIT_KEY, OFFSET_DELETE_KEY = 8, 47
RETENTION_MS = 7 * 86_400_000
CONFIG = GroupConfig(group_initial_rebalance_delay_ms=0)


@pytest.fixture
async def opened(tmp_path: Any) -> AsyncIterator[MetadataStore]:
    """A real SQLite store of the test's own, for the scenarios driven through `Groups`."""
    store = await open_metadata_store(sqlite_url(tmp_path / "metadata.db"))
    yield store
    await store.close()


def offset(topic: str, partition: int, value: int, ts: int = 1_000) -> CommittedOffset:
    return CommittedOffset(topic, partition, value, None, "", ts)


async def committed(opened: MetadataStore, group_id: str) -> dict[int, int]:
    return {o.partition: o.offset for o in await opened.fetch_offsets(group_id)}


async def test_a_stale_slot_epoch_writes_nothing_and_the_current_one_writes(store: MetadataStore) -> None:  # noqa: F811
    topic = (await store.create_topic(f"t-{uuid.uuid4().hex[:10]}", 2, {})).name
    await store.create_coordinator_slots(SLOTS)
    assert await store.set_coordinator_slots([(2, 1, 0)]) == [1]  # broker 1 holds slot 2 at epoch 1
    await store.commit_offsets("g", [offset(topic, 0, 10), offset(topic, 1, 11)], (2, 1))
    assert await store.set_coordinator_slots([(2, 7, 1)]) == [2]  # the slot moves to broker 7

    await store.commit_offsets("g", [offset(topic, 0, 20)], (2, 2))  # through the new holder
    with pytest.raises(CoordinatorFenced) as fenced:
        await store.commit_offsets("g", [offset(topic, 0, 15), offset(topic, 1, 15)], (2, 1))  # the old holder, not told yet
    assert (fenced.value.slot, fenced.value.expected_epoch, fenced.value.found_epoch) == (2, 1, 2)
    with pytest.raises(CoordinatorFenced):
        await store.commit_offsets("g", [offset(topic, 0, 15), offset(f"t-{uuid.uuid4().hex[:10]}", 0, 1)], (2, 1))  # fenced first
    with pytest.raises(CoordinatorFenced):
        await store.commit_offsets("g", [offset(topic, 0, 15)], (9, 0))  # no such slot
    with pytest.raises(CoordinatorFenced):
        await store.delete_offsets("g", [(topic, 0)], (2, 1))
    with pytest.raises(CoordinatorFenced):
        await store.delete_group("g", (2, 1))
    with pytest.raises(CoordinatorFenced):
        await store.expire_group_offsets("g", 10_000, (2, 1))
    assert await committed(store, "g") == {0: 20, 1: 11}  # nothing of the stale holder landed

    assert await store.delete_offsets("g", [(topic, 1)], (2, 2)) == 1
    assert await store.expire_group_offsets("g", 500, (2, 2)) == 0
    assert await committed(store, "g") == {0: 20}
    await store.commit_offsets("g", [offset(topic, 1, 30)])  # unconditional: a caller that coordinates nothing
    assert await store.delete_group("g", (2, 2)) == 2
    assert await committed(store, "g") == {}


# --- the broker: OffsetCommit and OffsetDelete answer NOT_COORDINATOR once fenced ----------


class View:
    """What a broker's `_coordinator_of` reads: its node id and its last cluster view."""

    def __init__(self, node_id: int, slots: list[PartitionLeadership]) -> None:
        self.config = SimpleNamespace(node_id=node_id)
        self.cluster = SimpleNamespace(slots={s.partition: s for s in slots})
        self.membership = None  # no session to lapse
        self._coordinating_epochs = {s.partition: s.leader_epoch for s in slots if s.leader_id == node_id}  # taken up, as _apply_view does

    def coordinator_of(self, key: str) -> tuple[int, int] | None:
        return Broker._coordinator_of(self, key)  # type: ignore[arg-type]


def broker(opened: MetadataStore, view: View, topic: str, clock: list[int]) -> Any:
    return SimpleNamespace(
        groups=Groups(CONFIG, opened, lambda: clock[0], RETENTION_MS, view.coordinator_of),
        security=SimpleNamespace(allowed=lambda *_: True),
        registry=SimpleNamespace(topics={topic: SimpleNamespace(num_partitions=2)}),
        cluster=view.cluster,
        settings=SimpleNamespace(node_id=view.config.node_id),
    )


async def offset_commit(at: Any, group: str, topic: str, offsets: dict[int, int]) -> list[ErrorCode]:
    mod = offset_commit_v8
    body = mod.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=(mod.OffsetCommitRequestTopic(name=topic, partitions=tuple(
            mod.OffsetCommitRequestPartition(partition_index=p, committed_offset=o, committed_leader_epoch=-1, committed_metadata="")
            for p, o in offsets.items()
        )),),
    )  # fmt: skip
    answer = await handle_offset_commit(at, Request(RequestHeader(OFFSET_COMMIT_KEY, 8, 1, "test"), body))
    return [p.error_code for t in answer.topics for p in t.partitions]


async def offset_delete(at: Any, group: str, topic: str, partition: int) -> ErrorCode:
    mod = offset_delete_v0
    body = mod.OffsetDeleteRequest(
        group_id=group, topics=(mod.OffsetDeleteRequestTopic(name=topic, partitions=(mod.OffsetDeleteRequestPartition(partition_index=partition),)),)
    )
    return (await handle_offset_delete(at, Request(RequestHeader(OFFSET_DELETE_KEY, 0, 1, "test"), body))).error_code


async def test_a_coordinator_with_a_stale_view_answers_not_coordinator(opened: MetadataStore) -> None:
    made, group = await topic_and_group(opened)
    topic = made.name
    slot = slot_of(group, SLOTS)
    await opened.create_coordinator_slots(SLOTS)
    assert await opened.set_coordinator_slots([(slot, 1, 0)]) == [1]
    clock = [1_000]
    a = broker(opened, View(1, [PartitionLeadership(COORDINATOR_SLOTS, s, 1, 1 if s == slot else 0) for s in range(SLOTS)]), topic, clock)
    assert await offset_commit(a, group, topic, {0: 5, 1: 5}) == [ErrorCode.none] * 2
    assert await a.groups.expire_offsets(lambda _: True) == 0  # the group is seen empty here from now

    # The controller moves the slot to broker 2; broker 1 stalls and still believes it holds it.
    assert await opened.set_coordinator_slots([(slot, 2, 1)]) == [2]
    b = broker(opened, View(2, [PartitionLeadership(COORDINATOR_SLOTS, s, 2, 2) for s in range(SLOTS)]), topic, clock)
    assert await offset_commit(b, group, topic, {0: 9}) == [ErrorCode.none]
    assert await offset_commit(a, group, topic, {0: 6, 1: 6}) == [ErrorCode.not_coordinator] * 2  # a zombie member's
    assert await offset_delete(a, group, topic, 1) is ErrorCode.not_coordinator
    clock[0] += RETENTION_MS + max(CONFIG.group_max_session_timeout_ms, CONFIG.group_consumer_max_session_timeout_ms)
    assert await a.groups.expire_offsets(lambda _: True) == 0  # partition 1's offset is past retention: fenced
    assert await committed(opened, group) == {0: 9, 1: 5}


def joining(group: str, member: str, topic: str) -> HeartbeatRequest:
    """ConsumerGroupHeartbeat of `member` joining `group` (epoch 0), subscribed to `topic`."""
    return HeartbeatRequest(group, member, 0, rebalance_timeout_ms=30_000, subscribed_topic_names=(topic,), owned={})


async def topic_and_group(opened: MetadataStore) -> tuple[Any, str]:
    """A new topic of two partitions, and a new group id."""
    return await opened.create_topic(f"t-{uuid.uuid4().hex[:10]}", 2, {}), f"g-{uuid.uuid4().hex[:10]}"


async def group_of_broker_1(opened: MetadataStore) -> tuple[Any, str, int]:
    """A topic of two partitions, and a group whose coordinator slot broker 1 holds at epoch 1."""
    topic, group = await topic_and_group(opened)
    slot = slot_of(group, SLOTS)
    await opened.create_coordinator_slots(SLOTS)
    assert await opened.set_coordinator_slots([(slot, 1, 0)]) == [1]
    return topic, group, slot


async def test_a_consumer_group_is_taken_up_by_its_slots_next_holder_and_the_old_one_is_fenced(opened: MetadataStore) -> None:
    """KIP-848 state, through `Groups` over a real SQLite store: broker 1 writes the group as
    its member joins; broker 2, not its coordinator, does not read it (its copy would be stale
    by the time the slot came: NOT_COORDINATOR, or not found for the console); once the slot
    is 2's, the member's next heartbeat there goes on at its epoch with its partitions, and
    stalled broker 1's next write is fenced: it answers NOT_COORDINATOR and forgets the group."""
    topic, group, slot = await group_of_broker_1(opened)
    clock = [1_000]
    slots = [PartitionLeadership(COORDINATOR_SLOTS, s, 1, 1 if s == slot else 0) for s in range(SLOTS)]
    a = broker(opened, View(1, slots), topic.name, clock)
    b_view = View(2, slots)
    b = broker(opened, b_view, topic.name, clock)
    join = joining(group, "m1", topic.name)
    joined = await a.groups.consumer_group_heartbeat(join, [topic])
    assert (joined.error_code, joined.member_epoch, joined.assignment) == (ErrorCode.none, 1, {topic.topic_id: frozenset({0, 1})})
    with pytest.raises(NotGroupCoordinator):  # ConsumerGroupDescribe answers NOT_COORDINATOR
        await b.groups.consumer_group_describe([group])
    assert [d.error_code for d in await b.groups.consumer_group_describe([group], strict=False)] == [ErrorCode.group_id_not_found]
    assert b.groups.consumer.groups == {}

    assert await opened.set_coordinator_slots([(slot, 2, 1)]) == [2]
    b_view.cluster.slots[slot] = PartitionLeadership(COORDINATOR_SLOTS, slot, 2, 2)
    b_view._coordinating_epochs = {slot: 2}
    owned = {topic.topic_id: frozenset({0, 1})}
    beat = HeartbeatRequest(group, "m1", 1, owned=owned)
    answer = await b.groups.consumer_group_heartbeat(beat, [topic])
    assert (answer.error_code, answer.member_epoch, answer.assignment) == (ErrorCode.none, 1, None)  # nothing changed
    [described] = await b.groups.consumer_group_describe([group])
    assert (described.group_epoch, [(m.member_id, m.member_epoch, m.assignment) for m in described.members]) == (1, [("m1", 1, owned)])
    # Broker 1 has not heard: a second member joins there; its write is fenced.
    late = await a.groups.consumer_group_heartbeat(joining(group, "m2", topic.name), [topic])
    assert late.error_code is ErrorCode.not_coordinator
    assert not a.groups.consumer.is_consumer_group(group)
    assert [m.member_id for m in (await b.groups.consumer_group_describe([group]))[0].members] == ["m1"]
    assert json.loads(await opened.get_consumer_group(group))["group_epoch"] == 1
    # Broker 2 cut off from the store (its session may lapse, the slot move on): its
    # members look the coordinator up again.
    b_view.membership = SimpleNamespace(may_write=lambda: False)
    with pytest.raises(NotGroupCoordinator):
        await b.groups.consumer_group_heartbeat(beat, [topic])
    assert await offset_commit(b, group, topic.name, {0: 1}) == [ErrorCode.not_coordinator]
    b_view.membership = None

    # A third broker takes the slot up: the stored group is read at once, its member's
    # session running from then (it never heartbeats there: it expires a session later).
    assert await opened.set_coordinator_slots([(slot, 3, 2)]) == [3]
    c_clock = [50_000]
    c = broker(opened, View(3, [PartitionLeadership(COORDINATOR_SLOTS, s, 3, 3 if s == slot else 0) for s in range(SLOTS)]), topic.name, c_clock)
    c.groups.take_up(lambda g: g == group)
    await asyncio.gather(*c.groups._taking_up)
    assert c.groups.consumer.is_consumer_group(group)
    assert c.groups.consumer.next_deadline_ms() == 50_000 + CONFIG.group_consumer_session_timeout_ms


class Held:
    """The store, with reads and writes of consumer group state held until the test lets them go."""

    def __init__(self, opened: MetadataStore) -> None:
        self.opened = opened
        self.reads, self.writes = asyncio.Event(), asyncio.Event()
        self.reading, self.writing = asyncio.Event(), asyncio.Event()  # a read, a write has come

    def __getattr__(self, name: str) -> Any:
        return getattr(self.opened, name)

    async def get_consumer_group(self, group_id: str) -> str | None:
        self.reading.set()
        await self.reads.wait()
        return await self.opened.get_consumer_group(group_id)

    async def put_consumer_group(self, group_id: str, state: str, coordinator: tuple[int, int] | None = None) -> None:
        self.writing.set()
        await self.writes.wait()
        await self.opened.put_consumer_group(group_id, state, coordinator)


async def test_a_group_unloaded_while_read_or_written_is_not_taken_up_from_that_read(opened: MetadataStore) -> None:
    """The slot moves (`unload`) while the group's state is being read, or written: what the
    read found is not used (NOT_COORDINATOR: the member looks again), and a written state is
    not taken for this broker's copy; the next request reads the store afresh."""
    topic, group = await topic_and_group(opened)
    held = Held(opened)
    groups = Groups(CONFIG, held, lambda: 1_000, RETENTION_MS)
    join = joining(group, "m1", topic.name)
    reading = asyncio.ensure_future(groups.consumer_group_heartbeat(join, [topic]))
    await held.reading.wait()
    groups.unload(lambda _: True)
    held.reads.set()
    with pytest.raises(NotGroupCoordinator):
        await reading
    assert not groups.consumer.is_consumer_group(group)

    writing = asyncio.ensure_future(groups.consumer_group_heartbeat(join, [topic]))
    await held.writing.wait()
    groups.unload(lambda _: True)
    held.writes.set()
    assert (await writing).error_code is ErrorCode.not_coordinator
    assert json.loads(await opened.get_consumer_group(group))["group_epoch"] == 1  # written, but not this broker's copy
    answer = await groups.consumer_group_heartbeat(HeartbeatRequest(group, "m1", 1, owned={topic.topic_id: frozenset({0, 1})}), [topic])
    assert (answer.error_code, answer.member_epoch) == (ErrorCode.none, 1)  # read afresh: m1 goes on


class Gated:
    """The store, each write of consumer group state held at its own gate (in call order)."""

    def __init__(self, opened: MetadataStore) -> None:
        self.opened = opened
        self.gates: list[asyncio.Event] = []
        self.arrived = asyncio.Condition()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.opened, name)

    async def put_consumer_group(self, group_id: str, state: str, coordinator: tuple[int, int] | None = None) -> None:
        gate = asyncio.Event()
        async with self.arrived:
            self.gates.append(gate)
            self.arrived.notify_all()
        await gate.wait()
        await self.opened.put_consumer_group(group_id, state, coordinator)

    async def held(self, count: int) -> None:
        async with self.arrived:
            await self.arrived.wait_for(lambda: len(self.gates) >= count)


async def test_a_stale_write_failing_after_the_slot_came_back_leaves_the_fresh_copy(opened: MetadataStore) -> None:
    """m2's join is written at slot epoch 1, slowly; the slot moves away and back (epoch 3),
    the group is read again and m3 joins there. m2's stale write is fenced: it answers
    NOT_COORDINATOR and leaves the fresh copy alone, so m1 goes on, and no newcomer is given
    the partitions m1 still holds."""
    topic, group, slot = await group_of_broker_1(opened)
    epoch = [1]
    gated = Gated(opened)
    groups = Groups(CONFIG, gated, lambda: 1_000, RETENTION_MS, lambda g: (slot_of(g, SLOTS), epoch[0]))

    first = asyncio.ensure_future(groups.consumer_group_heartbeat(joining(group, "m1", topic.name), [topic]))
    await gated.held(1)
    gated.gates[0].set()
    assert (await first).assignment == {topic.topic_id: frozenset({0, 1})}
    stale = asyncio.ensure_future(groups.consumer_group_heartbeat(joining(group, "m2", topic.name), [topic]))
    await gated.held(2)
    assert await opened.set_coordinator_slots([(slot, 2, 1)]) == [2]
    assert await opened.set_coordinator_slots([(slot, 1, 2)]) == [3]
    groups.unload(lambda _: True)
    epoch[0] = 3
    fresh = asyncio.ensure_future(groups.consumer_group_heartbeat(joining(group, "m3", topic.name), [topic]))
    await gated.held(3)
    gated.gates[1].set()
    assert (await stale).error_code is ErrorCode.not_coordinator
    assert groups.consumer.is_consumer_group(group)  # the fresh copy stays
    gated.gates[2].set()
    joined = await fresh
    assert (joined.error_code, joined.assignment) == (ErrorCode.none, {})  # m1 holds both still

    async def answered(request: HeartbeatRequest) -> Any:  # its writes let through
        task = asyncio.ensure_future(groups.consumer_group_heartbeat(request, [topic]))
        while not task.done():
            for gate in gated.gates:
                gate.set()
            await asyncio.sleep(0.001)
        return task.result()

    m1 = await answered(HeartbeatRequest(group, "m1", 1, owned={topic.topic_id: frozenset({0, 1})}))
    assert m1.error_code is ErrorCode.none and m1.member_epoch == 1  # revoking one partition for m3, at its epoch
    assert (await answered(joining(group, "m4", topic.name))).assignment == {}  # nothing m1 still holds


class Down:
    """The store, with writes and reads of consumer group state failing while `down`."""

    def __init__(self, opened: MetadataStore) -> None:
        self.opened = opened
        self.down = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.opened, name)

    def _check(self, operation: str) -> None:
        if self.down:
            raise MetadataStorageError(operation, "connection refused")

    async def get_consumer_group(self, group_id: str) -> str | None:
        self._check("get_consumer_group")
        return await self.opened.get_consumer_group(group_id)

    async def put_consumer_group(self, group_id: str, state: str, coordinator: tuple[int, int] | None = None) -> None:
        self._check("put_consumer_group")
        await self.opened.put_consumer_group(group_id, state, coordinator)


async def test_a_store_outage_answers_coordinator_not_available_and_the_group_goes_on_after(opened: MetadataStore) -> None:
    """While the store is down, a heartbeat that changes the group is answered
    COORDINATOR_NOT_AVAILABLE (retriable; nothing it changed was given out) and the group is
    dropped here; a steady heartbeat is still answered. Once the store is back, the members go
    on from what it holds, at their epochs."""
    topic, group = await topic_and_group(opened)
    store = Down(opened)
    groups = Groups(CONFIG, store, lambda: 1_000, RETENTION_MS)

    both = {topic.topic_id: frozenset({0, 1})}
    assert (await groups.consumer_group_heartbeat(joining(group, "m1", topic.name), [topic])).assignment == both
    store.down = True
    steady = await groups.consumer_group_heartbeat(HeartbeatRequest(group, "m1", 1, owned=both), [topic])
    assert (steady.error_code, steady.member_epoch) == (ErrorCode.none, 1)
    refused = await groups.consumer_group_heartbeat(joining(group, "m2", topic.name), [topic])
    assert refused.error_code is ErrorCode.coordinator_not_available
    assert not groups.consumer.is_consumer_group(group)
    with pytest.raises(MetadataStorageError):  # read again while down: the handler answers an error
        await groups.consumer_group_heartbeat(HeartbeatRequest(group, "m1", 1, owned=both), [topic])
    store.down = False
    back = await groups.consumer_group_heartbeat(HeartbeatRequest(group, "m1", 1, owned=both), [topic])
    assert (back.error_code, back.member_epoch) == (ErrorCode.none, 1)
    [described] = await groups.consumer_group_describe([group])
    assert [(m.member_id, m.member_epoch, m.assignment) for m in described.members] == [("m1", 1, both)]  # m2 was never a member
