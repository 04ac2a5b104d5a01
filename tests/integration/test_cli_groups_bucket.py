"""`diskless groups` and `diskless bucket` against a real broker and its bucket: the lag of a
group that committed, the segments the bucket holds, and `bucket verify` on a clean bucket and
on copies with a flipped byte and a missing index object."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from cold_tier.layout import parse_commit_key

DEADLINE_S = 30.0
RECORDS = 30
COMMITTED = 17


def diskless(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "diskless.cli.main", *args], capture_output=True, text=True, timeout=60)


def committed_segments(bucket: Path, topic: str) -> list:
    commits = bucket / topic / "0" / "commits"
    return sorted((parse_commit_key(f"{topic}/0/commits/{p.name}") for p in commits.glob("*.commit")), key=lambda s: s.base_offset)


def tiered_topic(broker, create_topic) -> tuple[str, list]:
    """A topic whose partition 0 has RECORDS one-record batches, its rolled segments in the bucket."""
    topic = create_topic(broker.bootstrap, partitions=1, configs={"segment.bytes": "1024"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(RECORDS):
        producer.produce(topic, value=f"v-{i:03d}-".encode() + b"x" * 100, partition=0)
        assert producer.flush(DEADLINE_S) == 0
    bucket = broker.data_dir / "bucket"
    local = broker.data_dir / "logs" / f"{topic}-0"
    deadline = time.monotonic() + DEADLINE_S
    while True:  # every rolled segment uploaded: the bucket ends where the active segment starts
        segments = committed_segments(bucket, topic)
        active_base = max(int(p.stem) for p in local.glob("*.log"))
        if segments and segments[-1].last_offset + 1 == active_base:
            return topic, segments
        assert time.monotonic() < deadline, "uploads did not finish"
        time.sleep(0.1)  # uploads run on the broker's own schedule; poll their effect


def test_groups_describe_shows_lag(shared_broker, create_topic) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=2)
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap, "acks": "all"})
    for i in range(RECORDS):
        producer.produce(topic, value=b"v%d" % i, partition=0)
    assert producer.flush(DEADLINE_S) == 0
    group = f"g-{uuid.uuid4().hex[:12]}"
    consumer = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, COMMITTED)], asynchronous=False)
    finally:
        consumer.close()

    result = diskless("groups", "describe", group, "-b", shared_broker.bootstrap)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"Consumer group '{group}' has no active members."
    assert lines[1].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
    assert lines[2].split() == [group, topic, "0", str(COMMITTED), str(RECORDS), str(RECORDS - COMMITTED), "-", "-", "-"]
    assert lines[3] == f"(state Empty, 0 member(s), total lag {RECORDS - COMMITTED})"
    assert len(lines) == 4

    listed = diskless("groups", "list", "-b", shared_broker.bootstrap)
    assert listed.returncode == 0 and group in listed.stdout.splitlines()

    missing = diskless("groups", "describe", f"g-{uuid.uuid4().hex[:12]}", "-b", shared_broker.bootstrap)
    assert missing.returncode == 2 and "does not exist" in missing.stderr

    deleted = diskless("groups", "delete", group, "-b", shared_broker.bootstrap)
    assert (deleted.returncode, deleted.stdout) == (0, f"deleted group {group}\n")
    assert group not in diskless("groups", "list", "-b", shared_broker.bootstrap).stdout.splitlines()


def test_bucket_ls_du_verify(shared_broker, create_topic, tmp_path) -> None:
    topic, segments = tiered_topic(shared_broker, create_topic)
    url = f"file://{shared_broker.data_dir / 'bucket'}"

    ls = diskless("bucket", "ls", topic, "--object-store", url)
    assert ls.returncode == 0, ls.stderr
    rows = [line.split() for line in ls.stdout.splitlines()]
    assert rows[0] == ["TOPIC", "PARTITION", "BASE-OFFSET", "LAST-OFFSET", "OFFSETS", "FIRST-TIMESTAMP", "MAX-TIMESTAMP", "BYTES", "EPOCH", "UPLOAD"]
    assert [(r[0], r[1], int(r[2]), int(r[3]), int(r[7]), r[9]) for r in rows[1:]] == [
        (topic, "0", s.base_offset, s.last_offset, s.size_bytes, s.upload_id) for s in segments
    ]
    assert rows[1][2] == "0"

    du = diskless("bucket", "du", topic, "--object-store", url)
    assert du.returncode == 0, du.stderr
    row = du.stdout.splitlines()[1].split()
    assert row[:4] == [topic, "0", str(len(segments)), str(sum(s.size_bytes for s in segments))]
    assert row[5:] == ["0", "0"]  # no uncommitted leftovers

    verify = diskless("bucket", "verify", topic, "--object-store", url)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    in_bucket = segments[-1].last_offset + 1  # one batch per record
    assert verify.stdout.splitlines()[-1].startswith(f"OK: 1 partition(s), {len(segments)} segment(s), {in_bucket} batch(es), ")

    # A copy of the bucket with one flipped byte inside the second segment's first batch.
    copy = tmp_path / "bucket"
    shutil.copytree(shared_broker.data_dir / "bucket" / topic, copy / topic)
    damaged = segments[1]
    log_object = copy / damaged.log_key
    data = bytearray(log_object.read_bytes())
    data[70] ^= 0xFF  # inside the records of the first batch: covered by its CRC
    log_object.write_bytes(bytes(data))
    (copy / segments[2].index_key).unlink()
    assert (copy / segments[0].txn_index_key).read_bytes() == b""  # no transactions: an empty index
    (copy / segments[0].txn_index_key).write_bytes(b"\x00" * 35)  # not whole 34-byte entries
    bad = diskless("bucket", "verify", "--object-store", f"file://{copy}")
    assert bad.returncode == 1
    problems = [line for line in bad.stdout.splitlines() if line.startswith("PROBLEM ")]
    assert len(problems) == 3, bad.stdout
    assert problems[0] == f"PROBLEM {segments[0].txn_index_key}: 35 bytes is not a whole number of 34-byte entries"
    assert problems[1].startswith(f"PROBLEM {damaged.log_key}: batch at byte 0: ") and "CRC" in problems[1].upper()
    assert problems[2] == f"PROBLEM {segments[2].index_key}: missing (named by {segments[2].commit_key})"
    assert bad.stdout.splitlines()[-1].startswith(f"3 problem(s): 1 partition(s), {len(segments)} segment(s), ")
