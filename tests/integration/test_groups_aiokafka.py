"""Consumer groups with aiokafka, alone and mixed with confluent-kafka members in one group.

Records are produced once the group is stable; then every record is consumed exactly once
across the members, each from a partition the group gave it, and the offsets the members
commit are what a fresh consumer of the group reads back.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka import TopicPartition as AioTopicPartition
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

from .test_groups_confluent import HEARTBEAT_INTERVAL_MS, SESSION_TIMEOUT_MS, Member, described, new_group, produce

DEADLINE_S = 30.0
ASSIGNORS = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}


class Assignments(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.assigned: set[int] = set()

    async def on_partitions_revoked(self, revoked) -> None:
        self.assigned -= {tp.partition for tp in revoked}

    async def on_partitions_assigned(self, assigned) -> None:
        self.assigned = {tp.partition for tp in assigned}


class AioMember:
    def __init__(self, bootstrap: str, group: str, topic: str, strategy: str = "range") -> None:
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
            partition_assignment_strategy=(ASSIGNORS[strategy],),
        )
        self.topic = topic
        self.listener = Assignments()
        self.records: list[tuple[int, int, bytes]] = []

    @property
    def assigned(self) -> set[int]:
        return self.listener.assigned

    async def start(self) -> None:
        await self.consumer.start()
        self.consumer.subscribe([self.topic], listener=self.listener)

    async def poll(self) -> None:
        # getmany waits without a timeout while aiokafka's own rebalance is in progress; the
        # confluent member of a mixed group must be polled meanwhile to get there.
        try:
            batches = await asyncio.wait_for(self.consumer.getmany(timeout_ms=50), 0.2)
        except TimeoutError:
            return
        for messages in batches.values():
            self.records.extend((m.partition, m.offset, m.value) for m in messages)

    async def commit(self) -> None:
        await self.consumer.commit()


async def poll_until(aio_members, ck_members, condition, what: str, deadline_s: float = DEADLINE_S) -> None:
    """Poll every member round-robin (confluent ones on a worker thread) until `condition()`."""
    deadline = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > deadline:
            state = [sorted(m.assigned) for m in [*aio_members, *ck_members]]
            raise AssertionError(f"timed out waiting for {what}; assignments {state}")
        for member in aio_members:
            await member.poll()
        for member in ck_members:
            await asyncio.to_thread(member.poll)


def split_evenly(members, partitions: int):
    each = partitions // len(members)

    def condition() -> bool:
        sets = [m.assigned for m in members]
        return all(len(s) == each for s in sets) and set().union(*sets) == set(range(partitions))

    return condition


async def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int | None]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        return {p: await consumer.committed(AioTopicPartition(topic, p)) for p in range(partitions)}
    finally:
        await consumer.stop()


async def test_aiokafka_group(shared_group_broker, create_topic) -> None:
    bootstrap = shared_group_broker.bootstrap
    topic = create_topic(bootstrap, partitions=4)
    group = new_group()
    members = [AioMember(bootstrap, group, topic) for _ in range(2)]
    try:
        for member in members:
            await member.start()
        await poll_until(members, [], split_evenly(members, 4), "two partitions each")
        await asyncio.to_thread(produce, bootstrap, topic, 4, 25)
        await poll_until(members, [], lambda: sum(len(m.records) for m in members) >= 100, "100 records")
        for member in members:
            assert {p for p, _, _ in member.records} == member.assigned
            await member.commit()
        consumed = sorted((p, o) for m in members for p, o, _ in m.records)
        assert consumed == [(p, o) for p in range(4) for o in range(25)]
        assert await committed(bootstrap, group, topic, 4) == {p: 25 for p in range(4)}
    finally:
        for member in members:
            await member.consumer.stop()


EXPECTED_SPLIT = {
    "range": [{0, 1, 2}, {3, 4, 5}],
    "roundrobin": [{0, 2, 4}, {1, 3, 5}],
}


@pytest.mark.parametrize("leader", ["confluent", "aiokafka"])
@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
async def test_group_mixing_confluent_and_aiokafka_members(shared_group_broker, create_topic, strategy: str, leader: str) -> None:
    """The member that joins first leads, so each client computes the assignment once."""
    bootstrap = shared_group_broker.bootstrap
    topic = create_topic(bootstrap, partitions=6)
    group = new_group()
    aio_member = AioMember(bootstrap, group, topic, strategy)
    ck_member: Member | None = None
    aio, ck = [aio_member], []
    try:
        if leader == "aiokafka":
            await aio_member.start()
            await poll_until(aio, [], lambda: aio_member.assigned == set(range(6)), "the first member alone")
        ck_member = await asyncio.to_thread(Member, bootstrap, group, topic, **{"partition.assignment.strategy": strategy})
        ck.append(ck_member)
        if leader == "confluent":
            await poll_until([], ck, lambda: ck_member.assigned == set(range(6)), "the first member alone")
            await aio_member.start()
        everyone = [aio_member, ck_member]
        await poll_until(aio, ck, split_evenly(everyone, 6), "three partitions each")
        assert sorted([aio_member.assigned, ck_member.assigned], key=min) == EXPECTED_SPLIT[strategy]
        description = await asyncio.to_thread(described, bootstrap, group)
        assert description.partition_assignor == strategy
        assert len(description.members) == 2

        await asyncio.to_thread(produce, bootstrap, topic, 6, 20)
        await poll_until(aio, ck, lambda: sum(len(m.records) for m in everyone) >= 120, "120 records")
        for member in everyone:
            assert {p for p, _, _ in member.records} == member.assigned
        consumed = sorted((p, o) for m in everyone for p, o, _ in m.records)
        assert consumed == [(p, o) for p in range(6) for o in range(20)]
        await aio_member.commit()
        await asyncio.to_thread(ck_member.commit_processed)
        assert await committed(bootstrap, group, topic, 6) == {p: 20 for p in range(6)}
    finally:
        await aio_member.consumer.stop()
        if ck_member is not None:
            await asyncio.to_thread(ck_member.close)
