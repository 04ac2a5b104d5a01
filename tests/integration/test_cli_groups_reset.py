"""`diskless groups reset-offsets` against a real broker and a confluent-kafka group: refused
while the group has an active member (Kafka's message), a dry run that changes nothing, and the
exact committed offsets after each kind of reset (earliest, latest, offset, datetime)."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

DEADLINE_S = 30.0
BASE_MS = 1_700_000_000_000
P0_RECORDS, P1_RECORDS, P0_DELETED = 20, 10, 5


def diskless(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "diskless.cli.main", *args], capture_output=True, text=True, timeout=60)


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        found = consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=DEADLINE_S)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found}


def plan(stdout: str) -> list[list[str]]:
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split() == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"])
    return [line.split() for line in lines[start + 1 :] if line.strip()]


def test_reset_offsets(shared_group_broker, create_topic) -> None:
    bootstrap = shared_group_broker.bootstrap
    topic = create_topic(bootstrap, partitions=2)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for partition, count in ((0, P0_RECORDS), (1, P1_RECORDS)):
        for i in range(count):  # record i of each partition is stamped BASE_MS + i seconds
            producer.produce(topic, value=b"v%d" % i, partition=partition, timestamp=BASE_MS + i * 1000)
    assert producer.flush(DEADLINE_S) == 0
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deleted = admin.delete_records([TopicPartition(topic, 0, P0_DELETED)])
    assert next(iter(deleted.values())).result(timeout=DEADLINE_S).low_watermark == P0_DELETED

    group = f"g-{uuid.uuid4().hex[:12]}"
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        member.subscribe([topic])
        deadline = time.monotonic() + DEADLINE_S
        while len(member.assignment()) < 2:
            assert time.monotonic() < deadline, "the member got no assignment"
            member.poll(0.2)
        member.commit(offsets=[TopicPartition(topic, 0, 8), TopicPartition(topic, 1, 3)], asynchronous=False)
        refused = diskless("groups", "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute", "-b", bootstrap)
        assert refused.returncode == 1
        assert refused.stderr == (
            f"\nError: Assignments can only be reset if the group '{group}' is inactive, but the current state is Stable.\n"
        )
    finally:
        member.close()
    assert committed(bootstrap, group, topic) == {0: 8, 1: 3}

    def reset(*how: str) -> subprocess.CompletedProcess:
        result = diskless("groups", "reset-offsets", group, "--topic", topic, *how, "-b", bootstrap)
        assert result.returncode == 0, result.stderr
        return result

    dry = reset("--to-latest")  # neither --dry-run nor --execute: a dry run, with Kafka's warning
    assert dry.stdout.startswith("WARN: No action will be performed as the --execute option is missing.")
    assert plan(dry.stdout) == [[group, topic, "0", str(P0_RECORDS)], [group, topic, "1", str(P1_RECORDS)]]
    assert committed(bootstrap, group, topic) == {0: 8, 1: 3}
    dry = reset("--to-latest", "--dry-run")
    assert "WARN" not in dry.stdout
    assert committed(bootstrap, group, topic) == {0: 8, 1: 3}

    earliest = reset("--to-earliest", "--execute")
    assert plan(earliest.stdout) == [[group, topic, "0", str(P0_DELETED)], [group, topic, "1", "0"]]
    assert committed(bootstrap, group, topic) == {0: P0_DELETED, 1: 0}

    reset("--to-latest", "--execute")
    assert committed(bootstrap, group, topic) == {0: P0_RECORDS, 1: P1_RECORDS}

    high = reset("--to-offset", "15", "--execute")
    assert f"New offset (15) is higher than latest offset for topic partition {topic}-1. Value will be set to {P1_RECORDS}" in high.stdout
    assert committed(bootstrap, group, topic) == {0: 15, 1: P1_RECORDS}

    low = reset("--to-offset", "2", "--execute")
    assert f"New offset (2) is lower than earliest offset for topic partition {topic}-0. Value will be set to {P0_DELETED}" in low.stdout
    assert committed(bootstrap, group, topic) == {0: P0_DELETED, 1: 2}

    # 12.5 s after the first record: offset 13 is the first at or after it in partition 0;
    # partition 1 has nothing that recent and falls back to its log end offset.
    instant = datetime.fromtimestamp((BASE_MS + 12_500) / 1000, UTC).replace(tzinfo=None).isoformat(timespec="milliseconds")
    by_time = reset("--to-datetime", instant, "--execute")
    assert f"Warn: Partition 1 from topic {topic} is empty. Falling back to latest known offset." in by_time.stdout
    assert plan(by_time.stdout) == [[group, topic, "0", "13"], [group, topic, "1", str(P1_RECORDS)]]
    assert committed(bootstrap, group, topic) == {0: 13, 1: P1_RECORDS}

    only_one = diskless("groups", "reset-offsets", group, "--topic", f"{topic}:1", "--to-offset", "6", "--execute", "-b", bootstrap)
    assert only_one.returncode == 0, only_one.stderr
    assert plan(only_one.stdout) == [[group, topic, "1", "6"]]
    assert committed(bootstrap, group, topic) == {0: 13, 1: 6}
