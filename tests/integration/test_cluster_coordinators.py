"""Coordinator slots in a cluster: groups and transactional ids are coordinated by the broker
holding their slot, spread over the brokers; every broker answers FindCoordinator alike; a
killed coordinator's slots move to the others, and its group goes on from its committed
offsets at the new coordinator.

Three brokers, one PostgreSQL, one bucket (moto's S3 server).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter

from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest

from diskless.broker.cluster.slots import DEFAULT_SLOTS, slot_of

from .conftest import WireClient
from .test_cluster import DEADLINE_S, Cluster, cluster, create, moto_bucket, wait_until  # noqa: F401 (fixtures)

GROUP_KEY, TRANSACTION_KEY = 0, 1


def coordinators(bootstrap: str, keys: list[str], key_type: int = GROUP_KEY) -> dict[str, int]:
    """FindCoordinator v4 for every key: the node id each is coordinated by (-1: none yet)."""
    client = WireClient(bootstrap)
    try:
        answer = client.request(FindCoordinatorRequest(key_type=key_type, coordinator_keys=tuple(keys)))
    finally:
        client.close()
    return {c.key: c.node_id for c in answer.coordinators}


def group_coordinated_by(cluster: Cluster, node: int) -> str:
    """A fresh group id whose coordinator slot broker `node` holds."""
    candidates = [f"g-{uuid.uuid4().hex[:8]}" for _ in range(200)]
    return wait_until(
        lambda: next((g for g, holder in coordinators(cluster.brokers[1].bootstrap, candidates).items() if holder == node), None),
        f"a group coordinated by broker {node}",
    )


def test_coordination_is_spread_and_every_broker_agrees(cluster: Cluster) -> None:
    keys = [f"group-{i}" for i in range(60)]
    found = wait_until(  # the controller evens the slots out once the third broker has joined
        lambda: (seen := coordinators(cluster.brokers[1].bootstrap, keys)) and set(seen.values()) == {1, 2, 3} and seen,
        "the groups' coordinators to be spread over the three brokers",
    )
    # Coordination is per slot: keys of one slot share their coordinator.
    by_slot: dict[int, set[int]] = {}
    for key, node in found.items():
        by_slot.setdefault(slot_of(key, DEFAULT_SLOTS), set()).add(node)
    assert all(len(nodes) == 1 for nodes in by_slot.values())
    for broker in cluster.brokers.values():
        wait_until(lambda: coordinators(broker.bootstrap, keys) == found, f"broker at {broker.bootstrap} to answer alike")
    # Transactional ids hash to the same slots.
    assert coordinators(cluster.brokers[2].bootstrap, keys, TRANSACTION_KEY) == found
    # The 50 slots are spread evenly: 17, 17 and 16 over the three brokers.
    per_slot = {slot: nodes.pop() for slot, nodes in by_slot.items()}
    assert max(Counter(per_slot.values()).values()) <= 17


def _consume(bootstrap: str, group: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return values


def test_a_killed_coordinators_group_goes_on_from_its_commits_elsewhere(cluster: Cluster) -> None:
    topic = create(cluster.bootstrap, 3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5})
    sent = [f"v{i}".encode() for i in range(300)]
    for i, value in enumerate(sent[:150]):
        producer.produce(topic, value, partition=i % 3)
    assert producer.flush(DEADLINE_S) == 0
    # A group coordinated by broker 3 (not the first broker, which holds the controller lease).
    candidates = [f"g-{uuid.uuid4().hex[:8]}" for _ in range(200)]
    group = wait_until(
        lambda: next((g for g, node in coordinators(cluster.brokers[1].bootstrap, candidates).items() if node == 3), None),
        "a group coordinated by broker 3",
    )
    first = _consume(cluster.bootstrap, group, topic, 150)
    assert sorted(first) == sorted(sent[:150])

    cluster.brokers[3].kill()
    moved = wait_until(
        lambda: (node := coordinators(cluster.brokers[1].bootstrap, [group])[group]) in (1, 2) and node,
        "the group's slot to move to a live broker",
    )
    for i, value in enumerate(sent[150:]):
        producer.produce(topic, value, partition=i % 3)
    assert producer.flush(DEADLINE_S) == 0
    bootstrap = f"{cluster.brokers[1].bootstrap},{cluster.brokers[2].bootstrap}"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in range(3)], timeout=DEADLINE_S)
    finally:
        consumer.close()
    assert {tp.partition: tp.offset for tp in committed} == {0: 50, 1: 50, 2: 50}  # kept across the move
    second = _consume(bootstrap, group, topic, 150)
    assert sorted(second) == sorted(sent[150:])  # from the commits on: nothing read twice
    assert moved in (1, 2)
