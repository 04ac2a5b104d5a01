"""`diskless partitions reassign` and `diskless partitions balance` (and Kafka's ElectLeaders, as
kafka-leader-election.sh sends it) against a real cluster: three
brokers on a real PostgreSQL and moto's S3 server. After a move, Metadata from every broker
shows the new leader, and an idempotent acks=all producer that ran throughout saw no error and
has every record acknowledged exactly once, in order. Refusals are one line and move nothing.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid

from confluent_kafka import Consumer, ElectionType, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from .test_cluster import DEADLINE_S, Cluster, cluster, leaders, moto_bucket, wait_until  # noqa: F401 (cluster, moto_bucket: fixtures)


def partitions_cli(metadata_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    action, *rest = args
    return subprocess.run(
        [sys.executable, "-m", "diskless.cli.main", "partitions", action, "--metadata", metadata_url, *rest],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


class SteadyProducer:
    """Records to every partition of a topic until stopped; keeps each delivery's outcome."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 2})
        self.topic, self.partitions = topic, partitions
        self.acked: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        self.errors: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked[msg.partition()].append((msg.offset(), msg.value()))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.producer.produce(self.topic, b"v-%d" % self.sent, partition=self.sent % self.partitions, on_delivery=self._delivered)
            self.sent += 1
            self.producer.poll(0.005)

    def acked_count(self) -> int:
        return sum(len(v) for v in self.acked.values())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(DEADLINE_S)
        assert self.producer.flush(DEADLINE_S) == 0


def everyone_sees(cluster: Cluster, topic: str, expected: dict[int, int]) -> bool:
    return all(leaders(b.bootstrap, topic) == expected for b in cluster.brokers.values() if b.process is not None)


def read_all(bootstrap: str, topic: str, partitions: int, counts: dict[int, int]) -> dict[int, list[tuple[int, bytes]]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}

    def done() -> bool:
        for message in consumer.consume(500, 0.5):
            assert message.error() is None, message.error()
            seen[message.partition()].append((message.offset(), message.value()))
        return all(len(seen[p]) >= counts[p] for p in range(partitions))

    try:
        wait_until(done, "every acknowledged record to be read back")
    finally:
        consumer.close()
    return seen


def test_reassign_and_balance_move_leaders_under_a_producer(cluster: Cluster, postgres_database: str) -> None:
    topic = f"reassign-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for future in admin.create_topics([NewTopic(topic, 3, 1)], operation_timeout=30).values():
        future.result(timeout=30)
    before = wait_until(lambda: (found := leaders(cluster.bootstrap, topic)) and all(v >= 1 for v in found.values()) and found,
                        "every partition to have a leader")  # fmt: skip
    producer = SteadyProducer(cluster.bootstrap, topic, 3)
    try:
        wait_until(lambda: producer.acked_count() >= 100, "the producer to be under way")

        # Every partition to broker 1, then evened out again.
        moved = {p: 1 for p in range(3)}
        result = partitions_cli(postgres_database, "reassign", *(f"{topic}:{p}=1" for p in range(3)))
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert len(lines) == 3
        for p, leader in before.items():
            expected = f"{topic}:{p}: already led by broker 1" if leader == 1 else f"{topic}:{p}: leader {leader} -> 1 (epoch "
            assert any(line.startswith(expected) for line in lines), (expected, lines)
        wait_until(lambda: everyone_sees(cluster, topic, moved), "every broker's Metadata to show broker 1 leading all")
        acked = producer.acked_count()
        wait_until(lambda: producer.acked_count() >= acked + 100, "produce to go on after the reassignment")

        dry = partitions_cli(postgres_database, "balance", "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert len(dry.stdout.splitlines()) == 2 and all("would move from broker 1 to broker" in line for line in dry.stdout.splitlines())
        assert everyone_sees(cluster, topic, moved)  # a dry run moves nothing

        result = partitions_cli(postgres_database, "balance")
        assert result.returncode == 0, result.stderr
        assert len(result.stdout.splitlines()) == 2
        # The spread as one broker shows it (a second read may come from a broker still behind).
        spread = wait_until(lambda: (found := leaders(cluster.bootstrap, topic)) and sorted(found.values()) == [1, 2, 3] and found,
                            "leadership to be spread")  # fmt: skip
        wait_until(lambda: everyone_sees(cluster, topic, spread), "every broker to agree on the spread")
        again = partitions_cli(postgres_database, "balance")
        assert (again.returncode, again.stdout.strip()) == (0, "balanced: broker 1 leads 1, broker 2 leads 1, broker 3 leads 1")
        acked = producer.acked_count()
        wait_until(lambda: producer.acked_count() >= acked + 100, "produce to go on after balancing")

        # The same through Kafka's ElectLeaders (kafka-leader-election.sh, AdminClient.elect_leaders):
        # all to broker 1 again, then a preferred election of every partition spreads them.
        assert partitions_cli(postgres_database, "reassign", *(f"{topic}:{p}=1" for p in range(3))).returncode == 0
        wait_until(lambda: everyone_sees(cluster, topic, moved), "every broker to show broker 1 leading all again")
        asked = [TopicPartition(topic, p) for p in range(3)] + [TopicPartition(topic, 7)]
        unclean = admin.elect_leaders(ElectionType.UNCLEAN, asked).result(timeout=DEADLINE_S)
        assert {tp.partition: err and err.code() for tp, err in unclean.items()} == {
            0: KafkaError.ELECTION_NOT_NEEDED, 1: KafkaError.ELECTION_NOT_NEEDED, 2: KafkaError.ELECTION_NOT_NEEDED,
            7: KafkaError.UNKNOWN_TOPIC_OR_PART}  # fmt: skip
        elected = admin.elect_leaders(ElectionType.PREFERRED, None).result(timeout=DEADLINE_S)
        assert sorted((tp.topic, err) for tp, err in elected.items()) == [(topic, None), (topic, None)]  # two moved off broker 1
        spread = wait_until(lambda: (found := leaders(cluster.bootstrap, topic)) and sorted(found.values()) == [1, 2, 3] and found,
                            "the election to spread leadership")  # fmt: skip
        wait_until(lambda: everyone_sees(cluster, topic, spread), "every broker to agree on the elected leaders")
        again = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, p) for p in range(3)]).result(timeout=DEADLINE_S)
        assert {tp.partition: err and err.code() for tp, err in again.items()} == dict.fromkeys(range(3), KafkaError.ELECTION_NOT_NEEDED)
        acked = producer.acked_count()
        wait_until(lambda: producer.acked_count() >= acked + 100, "produce to go on after the election")

        # Refusals: one line each, nothing moved.
        for args, message in [
            ((f"{topic}:0=9",), "unknown broker 9 (registered brokers: 1, 2, 3); nothing was moved"),
            ((f"{topic}:7=2",), f"unknown partition {topic}:7 (topic '{topic}' has 3 partitions); nothing was moved"),
            (("no-such-topic:0=2",), "unknown topic 'no-such-topic'; nothing was moved"),
            ((f"{topic}:0=2", f"{topic}:0=3"), f"{topic}:0 is given two leaders; nothing was moved"),
        ]:
            result = partitions_cli(postgres_database, "reassign", *args)
            assert (result.returncode, result.stdout, result.stderr) == (1, "", f"diskless partitions reassign: {message}\n")
        bad = partitions_cli(postgres_database, "reassign", f"{topic}-0-to-2")
        assert bad.returncode == 2 and bad.stderr.splitlines()[-1].endswith("is not TOPIC:PARTITION=NODE (e.g. orders:0=2)")
        assert everyone_sees(cluster, topic, spread)

        # A broker whose session expired cannot be given a partition.
        victim = spread[0]
        cluster.brokers[victim].kill()
        others = ",".join(b.bootstrap for n, b in cluster.brokers.items() if n != victim)
        wait_until(lambda: len(AdminClient({"bootstrap.servers": others}).list_topics(timeout=10).brokers) == 2,
                   "the killed broker's session to expire")  # fmt: skip
        result = partitions_cli(postgres_database, "reassign", f"{topic}:1={victim}")
        assert (result.returncode, result.stderr) == (1, f"diskless partitions reassign: broker {victim} is not alive (its session expired); nothing was moved\n")
        wait_until(lambda: victim not in leaders(others, topic).values(), "the controller to move the killed broker's partition")
        acked = producer.acked_count()
        wait_until(lambda: producer.acked_count() >= acked + 100, "produce to go on after the kill")
    finally:
        producer.stop()

    assert producer.errors == [], (len(producer.errors), sorted(set(producer.errors)))
    assert producer.acked_count() == producer.sent
    counts = {p: len(v) for p, v in producer.acked.items()}
    stored = read_all(others, topic, 3, counts)
    for p in range(3):
        # An implicit ack (offset None: librdkafka saw a later request succeed after this one's
        # answer was lost) is checked by its value; every other ack by its offset too.
        assert [offset for offset, _ in stored[p]] == list(range(len(stored[p])))  # no gap
        assert sorted(value for _, value in stored[p]) == sorted(value for _, value in producer.acked[p])  # each ack once, nothing else
        known = sorted(record for record in producer.acked[p] if record[0] is not None)
        assert len({offset for offset, _ in known}) == len(known)  # no offset acknowledged twice
        assert set(known) <= set(stored[p])
