"""A KIP-848 consumer group outlives its coordinator: its state is in PostgreSQL, so when the
coordinating broker is SIGKILLed the broker its slot moves to takes the group up where it was.
The members (confluent-kafka, `group.protocol=consumer`, unchanged) go on at their member
epochs with their partitions: no rejoin, no partition moved, no record read twice.

Three brokers, one PostgreSQL, one bucket (moto's S3 server).
"""

from __future__ import annotations


import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.consumer_group_describe.v0.request import ConsumerGroupDescribeRequest
from kio.schema.list_groups.v5.request import ListGroupsRequest

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


def _described(cluster: Cluster, group: str):
    """ConsumerGroupDescribe of `group` at its coordinator (confluent-kafka's AdminClient does
    not show the epochs)."""
    node = coordinators(cluster.brokers[1].bootstrap, [group])[group]
    client = WireClient(cluster.brokers[node].bootstrap)
    try:
        [d] = client.request(ConsumerGroupDescribeRequest(group_ids=(group,), include_authorized_operations=False)).groups
    finally:
        client.close()
    return d


def _group_state(cluster: Cluster, group: str) -> tuple[int, dict[str, tuple[int, set[int]]]]:
    """(group epoch, client id -> (member epoch, partitions)) at the group's coordinator."""
    d = _described(cluster, group)
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


def test_an_empty_consumer_group_stays_one_when_another_broker_takes_it_over(cluster: Cluster) -> None:  # noqa: F811
    """Its last member gone, the group's state stays in PostgreSQL (as Kafka keeps its
    ConsumerGroupMetadata record): once its coordinator is stopped (SIGTERM), the broker its
    slot moves to lists it as a consumer group, Empty, with its committed offsets, and
    ConsumerGroupDescribe answers it at its epochs; a new member joins it at the next epoch."""
    survivors = f"{cluster.brokers[1].bootstrap},{cluster.brokers[2].bootstrap}"
    topic = create(cluster.bootstrap, 4)
    group = group_coordinated_by(cluster, 3)
    members = Members(a=_consumer(survivors, group, topic, "a", **{"enable.auto.commit": "false"}))
    members.poll_until(lambda: _partitions(members.consumers["a"]) == {0, 1, 2, 3}, DEADLINE_S, "a holds every partition")
    members.consumers["a"].commit(offsets=[TopicPartition(topic, p, 0) for p in range(4)], asynchronous=False)
    members.consumers.pop("a").close()  # leaves: group epoch 2, the target assignment still epoch 1's

    def described() -> tuple[int, str, int, int, int]:
        d = _described(cluster, group)
        return d.error_code, d.group_state, d.group_epoch, d.assignment_epoch, len(d.members)

    def listed(nodes: tuple[int, ...]) -> list[tuple[int, str, str, str]]:
        """ListGroups v5 at each of `nodes`: (node, protocol type, state, group type) of the group."""
        found = []
        for node in nodes:
            client = WireClient(cluster.brokers[node].bootstrap)
            try:
                answer = client.request(ListGroupsRequest(states_filter=(), types_filter=()))
            finally:
                client.close()
            assert answer.error_code == 0, answer
            found += [(node, g.protocol_type, g.group_state, g.group_type) for g in answer.groups if g.group_id == group]
        return found

    wait_until(lambda: described() == (0, "Empty", 2, 1, 0), "the group to be Empty at epoch 2")
    assert listed((1, 2, 3)) == [(3, "consumer", "Empty", "consumer")]

    cluster.brokers[3].stop()
    node = wait_until(lambda: (n := coordinators(cluster.brokers[1].bootstrap, [group])[group]) in (1, 2) and n, "the group's slot to move to a live broker")
    assert wait_until(lambda: listed((1, 2)), "the group to be listed by its new coordinator") == [(node, "consumer", "Empty", "consumer")]
    assert wait_until(lambda: (answer := described())[0] == 0 and answer, "ConsumerGroupDescribe at the new coordinator") == (0, "Empty", 2, 1, 0)
    reader = Consumer({"bootstrap.servers": survivors, "group.id": group, "enable.auto.commit": False})
    try:
        assert {tp.partition: tp.offset for tp in reader.committed([TopicPartition(topic, p) for p in range(4)], timeout=DEADLINE_S)} == dict.fromkeys(range(4), 0)
    finally:
        reader.close()
    members = Members(b=_consumer(survivors, group, topic, "b"))
    members.poll_until(lambda: _partitions(members.consumers["b"]) == {0, 1, 2, 3}, DEADLINE_S, "b holds every partition")
    assert _group_state(cluster, group) == (3, {"b": (3, {0, 1, 2, 3})})
    members.consumers["b"].close()
