"""A KIP-848 consumer group outlives its coordinator: its state is in PostgreSQL, so when the
coordinating broker is SIGKILLed the broker its slot moves to takes the group up where it was.
The members (confluent-kafka, `group.protocol=consumer`, unchanged) go on at their member
epochs with their partitions: no rejoin, no partition moved, no record read twice.

Three brokers, one PostgreSQL, one bucket (moto's S3 server).
"""

from __future__ import annotations


import pytest
from confluent_kafka import Producer
from kio.schema.consumer_group_describe.v0.request import ConsumerGroupDescribeRequest

from .conftest import WireClient
from .test_cluster import DEADLINE_S, Cluster, cluster, create, moto_bucket, wait_until  # noqa: F401 (fixtures)
from .test_cluster_coordinators import coordinators, group_coordinated_by
from .test_groups_consumer_protocol import Members, _consumer, _partitions

pytestmark = pytest.mark.skipif(
    tuple(int(x) for x in __import__("confluent_kafka").libversion()[0].split(".")[:2]) < (2, 10),
    reason="group.protocol=consumer needs librdkafka 2.10+",
)


def _produce(producer: Producer, topic: str, start: int, count: int) -> set[bytes]:
    values = set()
    for i in range(start, start + count):
        value = f"v{i}".encode()
        producer.produce(topic, value, partition=i % 4)
        values.add(value)
    assert producer.flush(DEADLINE_S) == 0
    return values


def _group_state(cluster: Cluster, group: str) -> tuple[int, dict[str, tuple[int, set[int]]]]:
    """(group epoch, client id -> (member epoch, partitions)): ConsumerGroupDescribe at the
    group's coordinator (confluent-kafka's AdminClient does not show the epochs)."""
    node = coordinators(cluster.brokers[1].bootstrap, [group])[group]
    client = WireClient(cluster.brokers[node].bootstrap)
    try:
        [d] = client.request(ConsumerGroupDescribeRequest(group_ids=(group,), include_authorized_operations=False)).groups
    finally:
        client.close()
    assert d.error_code == 0, d
    return d.group_epoch, {m.client_id: (m.member_epoch, {p for tp in m.assignment.topic_partitions for p in tp.partitions}) for m in d.members}


def test_a_killed_coordinators_consumer_group_goes_on_at_its_epochs_elsewhere(cluster: Cluster) -> None:
    survivors = f"{cluster.brokers[1].bootstrap},{cluster.brokers[2].bootstrap}"
    topic = create(cluster.bootstrap, 4)
    producer = Producer({"bootstrap.servers": survivors, "linger.ms": 5})
    group = group_coordinated_by(cluster, 3)
    # a and b share the four partitions; c joins and leaves before any record is produced, so
    # the group epoch (4) is not what two members joining afresh would make (2).
    members = Members(a=_consumer(survivors, group, topic, "a"), b=_consumer(survivors, group, topic, "b"))
    members.poll_until(lambda: members.covering(4) and all(_partitions(c) for c in members.consumers.values()), DEADLINE_S, "a and b share")
    members.consumers["c"], members.consumed["c"] = _consumer(survivors, group, topic, "c"), []
    members.poll_until(lambda: members.covering(4) and bool(_partitions(members.consumers["c"])), DEADLINE_S, "c takes a partition")
    members.consumers.pop("c").close()
    members.poll_until(lambda: members.covering(4), DEADLINE_S, "a and b share again")
    wait_until(lambda: _group_state(cluster, group)[0] == 4 and {e for e, _ in _group_state(cluster, group)[1].values()} == {4}, "the group to settle at epoch 4")
    expected = _produce(producer, topic, 0, 200)
    members.poll_until(lambda: len(members.values()) >= 200, DEADLINE_S, "200 records consumed")
    before_epoch, before = _group_state(cluster, group)
    held = {name: _partitions(c) for name, c in members.consumers.items()}
    assert (before_epoch, sorted(before)) == (4, ["a", "b"])
    assert before == {name: (4, partitions) for name, partitions in held.items()}

    cluster.brokers[3].kill()
    wait_until(lambda: coordinators(cluster.brokers[1].bootstrap, [group])[group] in (1, 2), "the group's slot to move to a live broker")
    expected |= _produce(producer, topic, 200, 200)
    members.poll_until(lambda: len(members.values()) >= 400, DEADLINE_S, "every record consumed after the move")
    # Taken up from the store: the same group epoch, the same members at the same epochs with
    # the same partitions; nobody rejoined.
    assert _group_state(cluster, group) == (before_epoch, before)
    assert {name: _partitions(c) for name, c in members.consumers.items()} == held
    values = members.values()
    assert len(values) == len(set(values)) == 400 and set(values) == expected
    for consumer in members.consumers.values():
        consumer.close()
