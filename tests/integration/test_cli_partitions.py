"""`diskless partitions reassign` and `diskless partitions balance` (and Kafka's ElectLeaders, as
kafka-leader-election.sh sends it) against a real cluster: three
brokers on a real PostgreSQL and moto's S3 server. After a move, Metadata from every broker
shows the new leader, and an idempotent acks=all producer that ran throughout saw no error and
has every record acknowledged exactly once, in order. Refusals are one line and move nothing.
"""

from __future__ import annotations

import datetime
import subprocess
import sys
import threading
import uuid

from confluent_kafka import Consumer, ElectionType, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import TopicPartition as KafkaTopicPartition
from kafka import errors as kafka_errors
from kafka.admin import KafkaAdminClient
from kio.schema.errors import ErrorCode

from .conftest import WireClient
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

        # Reassigned, they stay: balancing leaves them with broker 1 (Kafka's reassigned replicas).
        kept = partitions_cli(postgres_database, "balance")
        assert (kept.returncode, kept.stdout) == (0, "balanced: broker 1 leads 3 (3 reassigned to it), broker 2 leads 0, broker 3 leads 0\n")
        forget = partitions_cli(postgres_database, "reassign", *(f"{topic}:{p}=auto" for p in range(3)))
        assert (forget.returncode, forget.stdout.splitlines()) == (
            0, [f"{topic}:{p}: reassignment forgotten; led by broker 1, placed by the controller from now on" for p in range(3)]
        )  # fmt: skip
        dry = partitions_cli(postgres_database, "balance", "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert len(dry.stdout.splitlines()) == 2 and all("would move from broker 1 to broker" in line for line in dry.stdout.splitlines())
        assert everyone_sees(cluster, topic, moved)  # neither forgetting nor a dry run moves anything

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
        # Reassigned to broker 1, it is their preferred leader: a preferred election keeps them there.
        kept = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, p) for p in range(3)]).result(timeout=DEADLINE_S)
        assert {tp.partition: err and err.code() for tp, err in kept.items()} == dict.fromkeys(range(3), KafkaError.ELECTION_NOT_NEEDED)
        assert partitions_cli(postgres_database, "reassign", *(f"{topic}:{p}=auto" for p in range(3))).returncode == 0
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
        assert bad.returncode == 2 and bad.stderr.splitlines()[-1].endswith("is not TOPIC:PARTITION=NODE or TOPIC:PARTITION=auto (e.g. orders:0=2)")
        assert everyone_sees(cluster, topic, spread)

        # A broker whose session expired is given a partition when it returns.
        victim = spread[0]
        cluster.brokers[victim].kill()
        others = ",".join(b.bootstrap for n, b in cluster.brokers.items() if n != victim)
        wait_until(lambda: len(AdminClient({"bootstrap.servers": others}).list_topics(timeout=10).brokers) == 2,
                   "the killed broker's session to expire")  # fmt: skip
        wait_until(lambda: victim not in leaders(others, topic).values(), "the controller to move the killed broker's partition")
        held = leaders(others, topic)
        result = partitions_cli(postgres_database, "reassign", f"{topic}:1={victim}")
        assert (result.returncode, result.stdout) == (0, f"{topic}:1: reassigned to broker {victim}, which is down: it takes the partition when "
                                                         f"it returns (led by broker {held[1]} until then)\n")  # fmt: skip
        assert leaders(others, topic) == held
        acked = producer.acked_count()
        wait_until(lambda: producer.acked_count() >= acked + 100, "produce to go on after the kill")
        cluster.brokers[victim].start()
        wait_until(lambda: leaders(others, topic)[1] == victim, "the returning broker to take partition 1")
        acked = producer.acked_count()
        wait_until(lambda: producer.acked_count() >= acked + 100, "produce to go on after its return")
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


def test_a_reassigned_partition_goes_back_to_its_broker_when_it_returns(cluster: Cluster, postgres_database: str) -> None:
    """The reassignment is kept: while its broker is away another leads the partition, and when
    it registers again the controller gives the partition back (the broker's joining makes it
    look at the balance), as Kafka's preferred-leader election does."""
    topic = f"home-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1)], operation_timeout=30)[topic].result(timeout=30)
    wait_until(lambda: (found := leaders(cluster.bootstrap, topic)) and all(v >= 1 for v in found.values()), "every partition to have a leader")
    result = partitions_cli(postgres_database, "reassign", f"{topic}:0=2", f"{topic}:1=2")
    assert result.returncode == 0, result.stderr
    wait_until(lambda: (found := leaders(cluster.bootstrap, topic)) and found[0] == found[1] == 2, "broker 2 to lead partitions 0 and 1")
    others = f"{cluster.brokers[1].bootstrap},{cluster.brokers[3].bootstrap}"
    cluster.brokers[2].kill()
    away = wait_until(lambda: (found := leaders(others, topic)) and found[0] in (1, 3) and found[1] in (1, 3) and found, "the controller to move them while broker 2 is away")
    cluster.brokers[2].start()
    back = wait_until(lambda: (found := leaders(others, topic)) and found[0] == found[1] == 2 and found, "partitions 0 and 1 back at broker 2")
    assert back[2] == away[2]  # the partition nobody reassigned stays where it was
    kept = partitions_cli(postgres_database, "balance")
    assert kept.returncode == 0 and "(2 reassigned to it)" in kept.stdout, kept.stdout


def _reassign(client: WireClient, asked: dict[tuple[str, int], list[int] | None]) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
    from kio.schema.alter_partition_reassignments.v0 import request as alter_v0

    topics: dict[str, list] = {}
    for (topic, partition), replicas in asked.items():
        topics.setdefault(topic, []).append(alter_v0.ReassignablePartition(partition_index=partition, replicas=None if replicas is None else tuple(replicas)))
    answer = client.request(alter_v0.AlterPartitionReassignmentsRequest(
        timeout=datetime.timedelta(seconds=30), topics=tuple(alter_v0.ReassignableTopic(name=t, partitions=tuple(ps)) for t, ps in topics.items()),
    ))  # fmt: skip
    assert answer.error_code is ErrorCode.none, answer
    return {(t.name, p.partition_index): (p.error_code, p.error_message) for t in answer.responses for p in t.partitions}


def _ongoing(client: WireClient) -> dict[tuple[str, int], tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
    from kio.schema.list_partition_reassignments.v0 import request as list_v0

    answer = client.request(list_v0.ListPartitionReassignmentsRequest(timeout=datetime.timedelta(seconds=30), topics=None))
    assert answer.error_code is ErrorCode.none, answer
    return {(t.name, p.partition_index): (p.replicas, p.adding_replicas, p.removing_replicas) for t in answer.topics for p in t.partitions}


def test_kafkas_reassignment_requests_move_list_and_cancel(cluster: Cluster) -> None:
    """AlterPartitionReassignments and ListPartitionReassignments (kafka-reassign-partitions.sh)
    as raw requests: one broker per partition; one that is down takes the partition when it
    returns, listed as ongoing until then; a cancel forgets it."""
    topic = f"kafka-reassign-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)], operation_timeout=30)[topic].result(timeout=30)
    wait_until(lambda: (found := leaders(cluster.bootstrap, topic)) and all(v >= 1 for v in found.values()), "every partition to have a leader")
    client = WireClient(cluster.brokers[1].bootstrap)
    try:
        assert _reassign(client, {(topic, 0): [3], (topic, 1): [2, 3], (topic, 5): [1], ("no-such-topic", 0): [1]}) == {
            (topic, 0): (ErrorCode.none, None),
            (topic, 1): (ErrorCode.invalid_replication_factor, "Partitions have one replica here (the bucket holds their data): name one broker, not 2."),
            (topic, 5): (ErrorCode.unknown_topic_or_partition, f"Unable to find partition {topic}-5."),
            ("no-such-topic", 0): (ErrorCode.unknown_topic_or_partition, "Unable to find partition no-such-topic-0."),
        }  # fmt: skip
        for replicas, message in [
            ([], "The manual partition assignment includes an empty replica list."),
            ([2, 2], "The manual partition assignment includes duplicate replicas: [2, 2]."),
            ([9], "The manual partition assignment includes broker 9, but no such broker is registered."),
        ]:
            assert _reassign(client, {(topic, 1): replicas}) == {(topic, 1): (ErrorCode.invalid_replica_assignment, message)}
        wait_until(lambda: leaders(cluster.bootstrap, topic)[0] == 3, "broker 3 to lead partition 0")
        assert _ongoing(client) == {}
        assert _reassign(client, {(topic, 0): None}) == {(topic, 0): (ErrorCode.no_reassignment_in_progress, f"No ongoing reassignment for {topic}-0.")}

        # Broker 2 is down: the reassignment waits for it, listed as ongoing; a cancel forgets it.
        cluster.brokers[2].kill()
        others = f"{cluster.brokers[1].bootstrap},{cluster.brokers[3].bootstrap}"
        before = wait_until(lambda: (found := leaders(others, topic)) and all(v in (1, 3) for v in found.values()) and found, "broker 2's session to expire")
        assert _reassign(client, {(topic, 1): [2]}) == {(topic, 1): (ErrorCode.none, None)}
        assert _ongoing(client) == {(topic, 1): ((2,), (2,), (before[1],))}
        assert _reassign(client, {(topic, 1): None}) == {(topic, 1): (ErrorCode.none, None)}
        assert _ongoing(client) == {}
        assert _reassign(client, {(topic, 1): [2]}) == {(topic, 1): (ErrorCode.none, None)}
        cluster.brokers[2].start()
        wait_until(lambda: leaders(others, topic)[1] == 2, "broker 2 to take partition 1 when it returns")
        wait_until(lambda: _ongoing(client) == {}, "the reassignment to be done")
        assert leaders(others, topic)[0] == 3
    finally:
        client.close()
    # kafka-python's admin client, as kafka-reassign-partitions.sh uses the Java one.
    admin_kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        assert admin_kp.alter_partition_reassignments({KafkaTopicPartition(topic, 0): [1], KafkaTopicPartition(topic, 1): [1, 3]}) == {
            KafkaTopicPartition(topic, 0): None, KafkaTopicPartition(topic, 1): kafka_errors.InvalidReplicationFactorError,
        }  # fmt: skip
        wait_until(lambda: leaders(cluster.bootstrap, topic)[0] == 1, "broker 1 to lead partition 0")
        assert admin_kp.list_partition_reassignments() == {}
    finally:
        admin_kp.close()


def test_assignments_at_creation_place_and_keep_partitions(cluster: Cluster, postgres_database: str) -> None:
    """CreateTopics and CreatePartitions with manual assignments (one broker per partition):
    each partition is led by the broker named and kept there, as a reassignment is."""
    from confluent_kafka.admin import NewPartitions

    topic = f"assigned-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 4, replica_assignment=[[2], [3], [1], [2]])], operation_timeout=30)[topic].result(timeout=30)
    assert wait_until(lambda: leaders(cluster.bootstrap, topic) == {0: 2, 1: 3, 2: 1, 3: 2} and leaders(cluster.bootstrap, topic),
                      "the assigned leaders")  # fmt: skip
    admin.create_partitions([NewPartitions(topic, 6, replica_assignment=[[3], [3]])])[topic].result(timeout=30)
    wait_until(lambda: leaders(cluster.bootstrap, topic) == {0: 2, 1: 3, 2: 1, 3: 2, 4: 3, 5: 3}, "the new partitions' assigned leaders")
    kept = partitions_cli(postgres_database, "balance")
    assert (kept.returncode, kept.stdout) == (0, "balanced: broker 1 leads 1 (1 reassigned to it), broker 2 leads 2 (2 reassigned to it), "
                                                 "broker 3 leads 3 (3 reassigned to it)\n")  # fmt: skip
    # Two replicas: Kafka's checks first (a count unlike the partition before), then ours.
    for assignment, code in (([[1, 2]], KafkaError.INVALID_REPLICATION_FACTOR), ([[2], [1, 3]], KafkaError.INVALID_REPLICA_ASSIGNMENT)):
        name = f"refused-{uuid.uuid4().hex[:8]}"
        future = admin.create_topics([NewTopic(name, len(assignment), replica_assignment=assignment)], operation_timeout=30)[name]
        try:
            future.result(timeout=30)
            raise AssertionError(f"{assignment} was accepted")
        except KafkaException as exc:
            assert exc.args[0].code() == code, exc
