"""A classic consumer group outlives its coordinator: its Stable generation is in PostgreSQL, so
when the coordinating broker is SIGKILLed the broker its slot moves to takes the group up as it
was. The members (confluent-kafka with the classic protocol, unchanged) find the new
coordinator and heartbeat on at their generation: no rebalance, no partition moved, no record
read twice, as with Kafka's coordinator failover.

Three brokers, one PostgreSQL, one bucket (moto's S3 server).
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from .test_cluster import DEADLINE_S, Cluster, cluster, create, moto_bucket, wait_until  # noqa: F401 (fixtures)
from .test_cluster_coordinators import coordinators, group_coordinated_by


class Member:
    """A classic consumer that records every assignment event and what it consumed."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str) -> None:
        self.name = name
        self.events: list[tuple[str, frozenset[int]]] = []
        self.consumed: list[tuple[int, int, bytes]] = []  # (partition, offset, value)
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "client.id": name, "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "range", "session.timeout.ms": 30_000, "heartbeat.interval.ms": 500,
            "auto.commit.interval.ms": 200,
        })  # fmt: skip
        self.consumer.subscribe(
            [topic],
            on_assign=lambda c, ps: self.events.append(("assign", frozenset(p.partition for p in ps))),
            on_revoke=lambda c, ps: self.events.append(("revoke", frozenset(p.partition for p in ps))),
            on_lost=lambda c, ps: self.events.append(("lost", frozenset(p.partition for p in ps))),
        )  # fmt: skip

    def partitions(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}


def poll_until(members: list[Member], condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"{what} not reached in {DEADLINE_S}s: {[(m.name, sorted(m.partitions()), m.events) for m in members]}"
        for member in members:
            message = member.consumer.poll(0.05)
            if message is not None and message.error() is None:
                member.consumed.append((message.partition(), message.offset(), message.value()))


def committed(admin: AdminClient, group: str, topic: str) -> dict[int, int]:
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(4)])
    return {tp.partition: tp.offset for tp in admin.list_consumer_group_offsets([request])[group].result(timeout=DEADLINE_S).topic_partitions}


def produce(producer: Producer, topic: str, start: int, count: int) -> set[bytes]:
    values = set()
    for i in range(start, start + count):
        producer.produce(topic, b"v%d" % i, partition=i % 4)
        values.add(b"v%d" % i)
    assert producer.flush(DEADLINE_S) == 0
    return values


def test_a_killed_coordinators_classic_group_goes_on_at_its_generation_elsewhere(cluster: Cluster) -> None:
    survivors = f"{cluster.brokers[1].bootstrap},{cluster.brokers[2].bootstrap}"
    topic = create(cluster.bootstrap, 4)
    producer = Producer({"bootstrap.servers": survivors, "linger.ms": 5})
    group = group_coordinated_by(cluster, 3)
    members = [Member(survivors, group, topic, "a"), Member(survivors, group, topic, "b")]
    poll_until(members, lambda: all(len(m.partitions()) == 2 for m in members), "a and b share the four partitions")
    expected = produce(producer, topic, 0, 200)
    poll_until(members, lambda: sum(len(m.consumed) for m in members) >= 200, "200 records consumed")
    held = {m.name: m.partitions() for m in members}
    member_ids = {m.name: m.consumer.memberid() for m in members}
    events = {m.name: list(m.events) for m in members}

    cluster.brokers[3].kill()
    wait_until(lambda: coordinators(cluster.brokers[1].bootstrap, [group])[group] in (1, 2), "the group's slot to move to a live broker")
    expected |= produce(producer, topic, 200, 200)
    poll_until(members, lambda: sum(len(m.consumed) for m in members) >= 400, "every record consumed after the move")
    # The new coordinator knows the members at their generation: their auto-commits of every
    # position are taken there (a member it did not know would be refused and told to rejoin).
    survivors_admin = AdminClient({"bootstrap.servers": survivors})
    poll_until(members, lambda: committed(survivors_admin, group, topic) == {p: 100 for p in range(4)}, "every position committed at the new coordinator")
    assert {m.name: m.partitions() for m in members} == held
    assert {m.name: m.consumer.memberid() for m in members} == member_ids
    assert {m.name: m.events for m in members} == events  # no revoke, no loss, no new assignment
    values = [v for m in members for _, _, v in m.consumed]
    assert len(values) == len(set(values)) == 400 and set(values) == expected
    for member in members:
        offsets: dict[int, list[int]] = {}
        for partition, offset, _ in member.consumed:
            offsets.setdefault(partition, []).append(offset)
        assert all(o == list(range(len(o))) for o in offsets.values()), offsets
        member.consumer.close()
