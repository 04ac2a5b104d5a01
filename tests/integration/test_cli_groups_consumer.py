"""`diskless groups describe` and `reset-offsets` on a KIP-848 group (confluent-kafka with
`group.protocol=consumer`, unchanged) against a real broker: described through
ConsumerGroupDescribe as kafka-consumer-groups does (its member, assignment, state and
epochs, not the Dead that DescribeGroups answers for such a group), Empty once the member
left, and reset refused with Kafka's message while the member is active, done once it left.
A classic group is still described through DescribeGroups."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

DEADLINE_S = 30.0
RECORDS = {0: 6, 1: 9}  # records per partition
COMMITTED = {0: 2, 1: 5}

pytestmark = pytest.mark.skipif(
    tuple(int(x) for x in __import__("confluent_kafka").libversion()[0].split(".")[:2]) < (2, 10),
    reason="group.protocol=consumer needs librdkafka 2.10+",
)


def diskless(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "diskless.cli.main", *args], capture_output=True, text=True, timeout=60)


def rows(stdout: str) -> list[list[str]]:
    return [line.split() for line in stdout.splitlines() if line.strip()]


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in RECORDS], timeout=DEADLINE_S)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found}


def filled_topic(bootstrap: str, create_topic) -> str:
    topic = create_topic(bootstrap, partitions=len(RECORDS))
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for partition, count in RECORDS.items():
        for i in range(count):
            producer.produce(topic, value=b"v%d" % i, partition=partition)
    assert producer.flush(DEADLINE_S) == 0
    return topic


def test_a_consumer_protocol_group_is_described_and_reset_as_kafka_does(shared_group_broker, create_topic) -> None:
    bootstrap = shared_group_broker.bootstrap
    topic = filled_topic(bootstrap, create_topic)
    group = f"g-{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    member = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer", "client.id": "cli-member",
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
    })  # fmt: skip
    try:
        member.subscribe([topic])
        deadline = time.monotonic() + DEADLINE_S
        while True:  # the member holds both partitions, at the group's epoch (Stable)
            member.poll(0.1)
            d = admin.describe_consumer_groups([group])[group].result(timeout=DEADLINE_S)
            if len(member.assignment()) == 2 and d.state.name == "STABLE":
                break
            assert time.monotonic() < deadline, f"the member did not settle: {member.assignment()}, {d.state}"
        member_id = d.members[0].member_id
        host = d.members[0].host
        member.commit(offsets=[TopicPartition(topic, p, o) for p, o in COMMITTED.items()], asynchronous=False)
        lag = sum(RECORDS[p] - COMMITTED[p] for p in RECORDS)

        described = diskless("groups", "describe", group, "-b", bootstrap)
        assert (described.returncode, described.stderr) == (0, "")
        assert rows(described.stdout) == [
            ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"],
            *([group, topic, str(p), str(COMMITTED[p]), str(RECORDS[p]), str(RECORDS[p] - COMMITTED[p]), member_id, host, "cli-member"] for p in RECORDS),
            ["(state", "Stable,", "1", "member(s),", "total", "lag", f"{lag})"],
        ]  # fmt: skip

        members = diskless("groups", "describe", group, "--members", "--verbose", "-b", bootstrap)
        assert (members.returncode, members.stderr) == (0, "")
        assert rows(members.stdout) == [
            ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"],
            [group, member_id, host, "cli-member", "2", "1", f"{topic}:0,1", "1", f"{topic}:0,1"],
        ]
        state = diskless("groups", "describe", group, "--state", "--verbose", "-b", bootstrap)
        assert (state.returncode, state.stderr) == (0, "")
        assert rows(state.stdout)[0] == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]
        assert rows(state.stdout)[1][0] == group and rows(state.stdout)[1][3:] == ["uniform", "Stable", "1", "1", "1"]

        refused = diskless("groups", "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute", "-b", bootstrap)
        assert (refused.returncode, refused.stdout) == (1, "")
        assert refused.stderr == f"\nError: Assignments can only be reset if the group '{group}' is inactive, but the current state is Stable.\n"
        assert committed(bootstrap, group, topic) == COMMITTED
    finally:
        member.close()  # leaves the group (member epoch -1)

    # Empty now, its offsets kept: described as such, and reset.
    described = diskless("groups", "describe", group, "-b", bootstrap)
    assert (described.returncode, described.stderr) == (0, "")
    assert rows(described.stdout) == [
        ["Consumer", "group", f"'{group}'", "has", "no", "active", "members."],
        ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"],
        *([group, topic, str(p), str(COMMITTED[p]), str(RECORDS[p]), str(RECORDS[p] - COMMITTED[p]), "-", "-", "-"] for p in RECORDS),
        ["(state", "Empty,", "0", "member(s),", "total", "lag", f"{lag})"],
    ]  # fmt: skip
    state = diskless("groups", "describe", group, "--state", "--verbose", "-b", bootstrap)
    assert rows(state.stdout)[2][3:] == ["uniform", "Empty", "2", "1", "0"]  # the leave bumped the group epoch
    reset = diskless("groups", "reset-offsets", group, "--topic", topic, "--to-latest", "--execute", "-b", bootstrap)
    assert (reset.returncode, reset.stderr) == (0, "")
    assert rows(reset.stdout) == [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], *([group, topic, str(p), str(n)] for p, n in RECORDS.items())]
    assert committed(bootstrap, group, topic) == RECORDS


def test_a_classic_group_is_still_described_through_describe_groups(shared_group_broker, create_topic) -> None:
    bootstrap = shared_group_broker.bootstrap
    topic = filled_topic(bootstrap, create_topic)
    group = f"g-{uuid.uuid4().hex[:12]}"
    member = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "client.id": "cli-classic", "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "partition.assignment.strategy": "range",
    })  # fmt: skip
    try:
        member.subscribe([topic])
        deadline = time.monotonic() + DEADLINE_S
        while len(member.assignment()) < 2:
            assert time.monotonic() < deadline, "the classic member got no assignment"
            member.poll(0.1)
        members = diskless("groups", "describe", group, "--members", "--verbose", "-b", bootstrap)
        assert (members.returncode, members.stderr) == (0, "")
        [header, row] = rows(members.stdout)
        assert header == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
        assert row[0] == group and row[3:] == ["cli-classic", "2", "-", f"{topic}:0,1", "-", "-"]
        state = diskless("groups", "describe", group, "--state", "--verbose", "-b", bootstrap)
        assert rows(state.stdout)[1][3:] == ["range", "Stable", "-", "-", "1"]
    finally:
        member.close()
    missing = diskless("groups", "describe", f"g-{uuid.uuid4().hex[:12]}", "--members", "-b", bootstrap)
    assert missing.returncode == 2 and "does not exist" in missing.stderr
