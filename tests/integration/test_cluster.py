"""Three brokers, one PostgreSQL, one bucket (moto's S3 server): leadership spread and followed
by clients, a broker killed (disk and all) and its partitions taken over from the bucket with
no acknowledged record lost, a rolling restart without a produce error, and a broker cut off
from the database that stops acknowledging before its partitions can move.

Each durability account counts: acknowledged and missing (0), acknowledged at another offset
(0), duplicates (0, idempotent producers), values never sent (0).
"""

from __future__ import annotations

import random
import shutil
import socket
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from .acked_writes import AckingProducer, CommittingConsumer, account, stored_offsets
from .broker_process import BrokerProcess, free_port
from .moto_s3 import MotoS3

DEADLINE_S = 60
SESSION_MS = 2000
HEARTBEAT_MS = 200


class Blackhole:
    """A TCP proxy to PostgreSQL that the test can cut: while cut, bytes stop flowing both ways
    and new connections hang, as when a network path dies."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self.cut = threading.Event()
        self._server = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:
                client.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                while self.cut.is_set():
                    time.sleep(0.01)  # a dead path: hold the bytes until it heals
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._server.close()


@pytest.fixture
def moto_bucket():
    server = MotoS3()
    server.start()
    try:
        yield server, server.url(server.create_bucket(), prefix="cluster")
    finally:
        server.stop()


class Cluster:
    def __init__(self, root: Path, metadata_url: str, bucket_url: str, env: dict[str, str], size: int = 3) -> None:
        self.root = root
        self.brokers = {
            node: BrokerProcess(
                root / f"broker-{node}", "--node-id", str(node), "--metadata", metadata_url, "--object-store", bucket_url,
                "--broker-session-timeout-ms", str(SESSION_MS), "--broker-heartbeat-interval-ms", str(HEARTBEAT_MS),
                "--group-initial-rebalance-delay-ms", "0", "--log-retention-check-interval-ms", "500", env=env,
            )  # fmt: skip
            for node in range(1, size + 1)
        }

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def start(self) -> Cluster:
        try:
            for broker in self.brokers.values():
                broker.start()
        except BaseException:
            self.close()  # the brokers already started would outlive the test
            raise
        # The cluster has formed once every broker sees every other (a heartbeat later).
        for broker in self.brokers.values():
            wait_until(
                lambda: len(AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=DEADLINE_S).brokers) == len(self.brokers),
                f"broker at {broker.bootstrap} to see the whole cluster",
            )
        return self

    def close(self) -> None:
        for broker in self.brokers.values():
            broker.close()


@pytest.fixture
def cluster(tmp_path, postgres_database, moto_bucket):
    moto, bucket_url = moto_bucket
    running = Cluster(tmp_path, postgres_database, bucket_url, moto.env()).start()
    try:
        yield running
    finally:
        running.close()


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=DEADLINE_S)
    return {p.id: p.leader for p in md.topics[topic].partitions.values()}


def wait_until(condition, what: str, deadline_s: float = DEADLINE_S):
    deadline = time.monotonic() + deadline_s
    while not (result := condition()):
        assert time.monotonic() < deadline, f"gave up after {deadline_s}s waiting for {what}"
        time.sleep(0.05)  # polling the cluster with a deadline: nothing to wait on instead
    return result


def create(bootstrap: str, partitions: int) -> str:
    name = f"t-{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=10)[name].result(DEADLINE_S)
    wait_until(
        lambda: len(found := leaders(bootstrap, name)) == partitions and all(leader >= 1 for leader in found.values()),
        f"every partition of {name} to have a leader",
    )
    return name


def test_three_brokers_share_leadership_and_serve_clients(cluster: Cluster) -> None:
    topic = create(cluster.bootstrap, 6)
    # Leadership is spread: two partitions each, and every broker reports the same view once
    # its view has the new topic's leaders (within a heartbeat; `create` asked one of them).
    expected = wait_until(
        lambda: len(found := leaders(cluster.brokers[1].bootstrap, topic)) == 6 and all(leader >= 1 for leader in found.values()) and found,
        "broker 1 to show the new topic's leaders",
    )
    assert Counter(expected.values()) == Counter({1: 2, 2: 2, 3: 2})
    for broker in cluster.brokers.values():  # every broker's view converges within a heartbeat
        wait_until(lambda: leaders(broker.bootstrap, topic) == expected, f"broker at {broker.bootstrap} to show the leaders")
    md = AdminClient({"bootstrap.servers": cluster.brokers[2].bootstrap}).list_topics(timeout=DEADLINE_S)
    assert sorted((b.id, b.port) for b in md.brokers.values()) == sorted((n, b.port) for n, b in cluster.brokers.items())
    assert len({md.cluster_id} | {AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=DEADLINE_S).cluster_id for b in cluster.brokers.values()}) == 1

    producer = AckingProducer(cluster.bootstrap, topic, 6)
    producer.start()
    wait_until(lambda: producer.acks() >= 600, "600 acknowledged records")
    producer.stopping.set()
    producer.join(DEADLINE_S)
    assert producer.errors == []
    account(cluster.bootstrap, topic, 6, producer)


@pytest.mark.slow
def test_killed_brokers_lose_no_acknowledged_record(cluster: Cluster) -> None:
    """Ten times: SIGKILL a random broker (leader, coordinator or controller), delete its disk,
    restart it, under an idempotent acks=all producer and a consumer group committing as it
    reads. Every acknowledged record is there exactly once at its offset, and the group's
    stored offsets are never behind a commit it was told succeeded."""
    partitions = 12
    topic = create(cluster.bootstrap, partitions)
    producer = AckingProducer(cluster.bootstrap, topic, partitions)
    producer.start()
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = CommittingConsumer(cluster.bootstrap, topic, group)
    consumer.start()
    rng = random.Random(11)

    def commits_kept() -> None:
        with consumer.lock:
            acknowledged = dict(consumer.committed)
        stored = stored_offsets(cluster.bootstrap, topic, group, partitions)
        behind = {p: (stored.get(p), offset) for p, offset in acknowledged.items() if stored.get(p, -1) < offset}
        assert behind == {}, f"stored offsets behind acknowledged commits: {behind}"

    try:
        for _ in range(10):
            target = producer.acks() + rng.randrange(300, 1500)
            wait_until(lambda: producer.acks() >= target, f"{target} acknowledged records")
            node = rng.choice(sorted(cluster.brokers))
            victim = cluster.brokers[node]
            victim.kill()
            shutil.rmtree(victim.data_dir)
            # The others take its partitions over once its session expires.
            wait_until(lambda: node not in leaders(cluster.brokers[1 + node % 3].bootstrap, topic).values(), f"broker {node}'s partitions to move")
            victim.start()
            commits_kept()
        producer.stopping.set()
        producer.join(DEADLINE_S * 4)
        assert not producer.is_alive()
        assert producer.errors == []
        acknowledged = set(producer.acked)
        wait_until(lambda: consumer.has_read(acknowledged), "the group to read every acknowledged record")
        consumer.stopping.set()
        consumer.join(DEADLINE_S)
        assert consumer.errors == []
        assert len(consumer.committed) == partitions  # every partition's commits were counted
        commits_kept()
        assert {v for v in consumer.values if v not in producer.acked} <= {b"%d" % i for i in range(producer.sent)}  # no garbage
        assert all(leader >= 1 for leader in leaders(cluster.bootstrap, topic).values())
        account(cluster.bootstrap, topic, partitions, producer)
    finally:
        producer.stopping.set()
        consumer.stopping.set()


def test_a_joining_broker_gets_its_share_of_leadership(tmp_path, postgres_database, moto_bucket) -> None:
    # auto.leader.rebalance.enable: the controller evens leadership out when a broker joins;
    # the moves fence the old leaders, and an idempotent producer writing throughout loses,
    # duplicates and reorders nothing.
    moto, bucket_url = moto_bucket
    cluster = Cluster(tmp_path, postgres_database, bucket_url, moto.env())
    first_two = [cluster.brokers[1], cluster.brokers[2]]
    producer = None
    try:
        for broker in first_two:
            broker.start()
        for broker in first_two:
            wait_until(lambda: len(AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=DEADLINE_S).brokers) == 2,
                       f"broker at {broker.bootstrap} to see both brokers")  # fmt: skip
        bootstrap = ",".join(b.bootstrap for b in first_two)
        topic = create(bootstrap, 6)
        assert Counter(leaders(bootstrap, topic).values()) == Counter({1: 3, 2: 3})
        producer = AckingProducer(bootstrap, topic, 6)
        producer.start()
        wait_until(lambda: producer.acks() >= 300, "300 acknowledged records")
        cluster.brokers[3].start()
        wait_until(lambda: Counter(leaders(cluster.bootstrap, topic).values()) == Counter({1: 2, 2: 2, 3: 2}),
                   "two partitions led by each of the three brokers")  # fmt: skip
        target = producer.acks() + 300
        wait_until(lambda: producer.acks() >= target, f"{target} acknowledged records")
        producer.stopping.set()
        producer.join(DEADLINE_S * 4)
        assert producer.errors == []
        account(cluster.bootstrap, topic, 6, producer)
    finally:
        if producer is not None:
            producer.stopping.set()
        cluster.close()


@pytest.mark.slow
def test_a_rolling_restart_fails_no_produce(cluster: Cluster) -> None:
    partitions = 6
    topic = create(cluster.bootstrap, partitions)
    producer = AckingProducer(cluster.bootstrap, topic, partitions)
    producer.start()
    try:
        for node, broker in cluster.brokers.items():
            target = producer.acks() + 300
            wait_until(lambda: producer.acks() >= target, f"{target} acknowledged records")
            assert broker.stop() == 0  # SIGTERM: hands its partitions over first
            wait_until(lambda: node not in leaders(cluster.bootstrap, topic).values(), f"broker {node}'s partitions to move")
            broker.start()
        target = producer.acks() + 300
        wait_until(lambda: producer.acks() >= target, f"{target} acknowledged records")
        producer.stopping.set()
        producer.join(DEADLINE_S * 4)
        assert producer.errors == []
        account(cluster.bootstrap, topic, partitions, producer)
    finally:
        producer.stopping.set()


@pytest.mark.slow
def test_a_broker_cut_off_from_the_database_stops_acknowledging(tmp_path, postgres_server, postgres_database, moto_bucket) -> None:
    """Broker 1 reaches PostgreSQL through a proxy the test cuts. Clients still reach it. It
    must stop acknowledging writes before its session can expire and its partitions move;
    the others take them over; no offset is acknowledged twice."""
    moto, bucket_url = moto_bucket
    pg_port = int(postgres_database.rsplit(":", 1)[1].split("/")[0])
    proxy = Blackhole(pg_port)
    proxied = postgres_database.replace(f":{pg_port}/", f":{proxy.port}/")
    running = Cluster(tmp_path, postgres_database, bucket_url, moto.env())
    running.brokers[1].extra_args[running.brokers[1].extra_args.index(postgres_database)] = proxied
    running.start()
    try:
        topic = create(running.bootstrap, 6)
        producer = AckingProducer(running.bootstrap, topic, 6)
        producer.start()
        wait_until(lambda: producer.acks() >= 500, "500 acknowledged records")
        proxy.cut.set()
        wait_until(lambda: 1 not in leaders(running.brokers[2].bootstrap, topic).values(), "broker 1's partitions to move")
        target = producer.acks() + 500
        wait_until(lambda: producer.acks() >= target, f"{target} acknowledged records after the move")
        producer.stopping.set()
        producer.join(DEADLINE_S * 4)
        assert producer.errors == []
        offsets = Counter(at for at in producer.acked.values() if at[1] is not None)  # implicit acks have none
        assert [at for at, n in offsets.items() if n > 1] == []  # no offset acknowledged twice
        account(running.brokers[2].bootstrap, topic, 6, producer)
        # It says why it stopped: its heartbeats time out against the unreachable database.
        wait_until(lambda: "cluster heartbeat failed" in running.brokers[1].log_text(), "broker 1 to log its failed heartbeat")
    finally:
        proxy.cut.clear()
        running.close()
        proxy.close()
