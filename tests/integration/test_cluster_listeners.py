"""Several listeners per broker in a cluster: each broker registers every listener's advertised
address, and Metadata and FindCoordinator answer a client with the other brokers' addresses on
the listener it came in on, as Kafka does. A broker without that listener is left out, and its
partitions answer LISTENER_NOT_FOUND.

Three brokers, one PostgreSQL, one bucket (moto's S3 server). Brokers 1 and 2 have a second
listener, EXTERNAL, advertised as localhost:PORT (the first is 127.0.0.1:PORT); broker 3 has
only the first.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from .broker_process import BrokerProcess, free_port
from .test_cluster_coordinators import coordinators
from .test_cluster import DEADLINE_S, HEARTBEAT_MS, SESSION_MS, moto_bucket, wait_until  # noqa: F401 (fixture)


@pytest.fixture
def brokers(tmp_path, postgres_database, moto_bucket):  # noqa: F811
    moto, bucket_url = moto_bucket
    external = {1: free_port(), 2: free_port()}
    started: dict[int, BrokerProcess] = {}
    try:
        for node in (1, 2, 3):
            listeners = (
                ["--listeners", f"EXTERNAL://127.0.0.1:{external[node]}", "--listener-security-protocol-map", "EXTERNAL:PLAINTEXT",
                 "--advertised-listeners", f"EXTERNAL://localhost:{external[node]}"]
                if node in external else []
            )  # fmt: skip
            started[node] = BrokerProcess(
                tmp_path / f"broker-{node}", "--node-id", str(node), "--metadata", postgres_database, "--object-store", bucket_url,
                "--broker-session-timeout-ms", str(SESSION_MS), "--broker-heartbeat-interval-ms", str(HEARTBEAT_MS),
                "--group-initial-rebalance-delay-ms", "0", *listeners, env=moto.env(),
            ).start()  # fmt: skip
        for broker in started.values():
            wait_until(lambda: len(_metadata(broker.bootstrap).brokers) == 3, f"broker at {broker.bootstrap} to see the cluster")
        yield started, external
    finally:
        for broker in started.values():
            broker.close()


def _metadata(bootstrap: str, topic: str | None = None):
    return AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=DEADLINE_S)


def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    return {p.id: p.leader for p in _metadata(bootstrap, topic).topics[topic].partitions.values()}


def test_metadata_answers_each_listener_with_its_own_addresses(brokers) -> None:
    started, external = brokers
    plain = {node: ("127.0.0.1", b.port) for node, b in started.items()}
    outside = {node: ("localhost", port) for node, port in external.items()}
    for node, broker in started.items():
        md = _metadata(broker.bootstrap)
        assert {b.id: (b.host, b.port) for b in md.brokers.values()} == plain
    for node, port in external.items():
        md = _metadata(f"127.0.0.1:{port}")
        assert {b.id: (b.host, b.port) for b in md.brokers.values()} == outside  # broker 3 has no EXTERNAL listener

    name = f"t-{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": started[1].bootstrap})  # kept until the answer: a destroyed client fails its futures
    admin.create_topics([NewTopic(name, 6, 1)])[name].result(DEADLINE_S)
    led = wait_until(
        lambda: len(found := _leaders(started[1].bootstrap, name)) == 6 and all(leader >= 1 for leader in found.values()) and found,
        "every partition to have a leader",
    )
    assert Counter(led.values()) == Counter({1: 2, 2: 2, 3: 2})
    # Through EXTERNAL, broker 3's partitions have no leader a client there could reach.
    seen = wait_until(
        lambda: {p.id: (p.leader, p.error.code() if p.error else None)
                 for p in _metadata(f"127.0.0.1:{external[2]}", name).topics[name].partitions.values()},  # fmt: skip
        "broker 2 to know every leader",
    )
    assert seen == {
        index: (-1, KafkaError.LISTENER_NOT_FOUND) if leader == 3 else (leader, None) for index, leader in led.items()
    }


def test_clients_of_the_second_listener_produce_and_consume_through_it(brokers) -> None:
    """A producer and a consumer group bootstrapped on EXTERNAL reach leaders and the group
    coordinator at their EXTERNAL addresses. The coordinator takes the commit of a partition
    another broker leads."""
    started, external = brokers
    bootstrap = f"127.0.0.1:{external[2]}"
    name = f"t-{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 3, 1)])[name].result(DEADLINE_S)
    led = wait_until(
        lambda: (found := _leaders(started[1].bootstrap, name)) and sorted(found.values()) == [1, 2, 3] and found,
        "one partition on each broker",
    )
    reachable = sorted(index for index, leader in led.items() if leader != 3)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    sent = [f"v{i}".encode() for i in range(200)]
    failures: list = []
    for i, value in enumerate(sent):
        producer.produce(name, value, partition=reachable[i % 2], on_delivery=lambda err, _msg: err and failures.append(err))
    assert producer.flush(DEADLINE_S) == 0
    assert failures == []
    connected = {b.id: (b.host, b.port) for b in _metadata(bootstrap).brokers.values()}
    assert connected == {1: ("localhost", external[1]), 2: ("localhost", external[2])}

    # A group whose coordinator slot broker 1 holds (broker 3 has no EXTERNAL listener).
    candidates = [f"g-{uuid.uuid4().hex[:8]}" for _ in range(200)]
    group = wait_until(
        lambda: next((g for g, node in coordinators(started[1].bootstrap, candidates).items() if node == 1), None),
        "a group coordinated by broker 1",
    )
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([name])
    got: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(got) < len(sent) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
        consumer.commit(asynchronous=False)  # through the coordinator found on EXTERNAL
        committed = {tp.partition: tp.offset for tp in consumer.committed(consumer.assignment(), timeout=DEADLINE_S)}
    finally:
        consumer.close()
    assert sorted(got) == sorted(sent)
    assert {p: offset for p, offset in committed.items() if p in reachable} == {reachable[0]: 100, reachable[1]: 100}
