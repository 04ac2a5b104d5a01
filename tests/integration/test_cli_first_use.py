"""What a new user of the `diskless` tools met, against a real `diskless serve` (started with
`--num-partitions 2` and the ACL authorizer): a produce line without the key separator stops the command as Kafka's
console producer does; `transactions describe` of a transactional id in state Empty; `topics
create` without `--partitions` takes the broker's default; a binding the broker refuses is one
readable line; and `serve` on an address in use names it."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import sys
import uuid

import pytest
from confluent_kafka import Producer as ConfluentProducer

from diskless.client import Admin, Consumer, TopicPartition

from .broker_process import BrokerProcess

DEADLINE_S = 30.0


def diskless(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "diskless.cli.main", *args], input=stdin, capture_output=True, timeout=120,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return subprocess.CompletedProcess(result.args, result.returncode, result.stdout.decode(), result.stderr.decode())


@pytest.fixture(scope="module")
def two_partition_broker(tmp_path_factory):
    """A broker whose num.partitions is 2, with ACLs checked (its PLAINTEXT clients, User:ANONYMOUS, are super users)."""
    process = BrokerProcess(tmp_path_factory.mktemp("first-use") / "data", "--num-partitions", "2",
                            "--authorizer", "acl", "--super-users", "User:ANONYMOUS").start()  # fmt: skip
    try:
        yield process
    finally:
        process.close()


def new_topic(bootstrap: str, partitions: int = 1) -> str:
    topic = f"t-{uuid.uuid4().hex[:12]}"
    result = diskless("topics", "create", topic, "--partitions", str(partitions), "-b", bootstrap)
    assert result.returncode == 0, result.stderr
    return topic


async def end_offset(bootstrap: str, topic: str) -> int:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        return (await admin.list_offsets(topic, "latest"))[0].offset


async def read_all(bootstrap: str, topic: str, count: int) -> list[tuple[bytes | None, bytes | None]]:
    got: list[tuple[bytes | None, bytes | None]] = []
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        async with asyncio.timeout(DEADLINE_S):
            while len(got) < count:
                for records in (await consumer.getmany(timeout_ms=1000)).values():
                    got.extend((r.key, r.value) for r in records)
    return got


# --- produce --key-separator ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stdin", "sent", "line"),
    [
        (b"k1:v1\nnokey\nk3:v3\n", [(b"k1", b"v1")], "on line number 2: 'nokey'; the record before it was sent to {topic}"),
        (b"a:1\r\nb:2\r\n\r\nc:3\r\n", [(b"a", b"1"), (b"b", b"2")], "on line number 3: ''; the 2 records before it were sent to {topic}"),
        (b"nokey", [], "on line number 1: 'nokey'; nothing was sent"),
    ],
)  # fmt: skip
def test_a_line_without_the_key_separator_stops_produce(two_partition_broker, stdin, sent, line):
    bootstrap = two_partition_broker.bootstrap
    topic = new_topic(bootstrap)

    result = diskless("produce", topic, "-b", bootstrap, "--key-separator", ":", stdin=stdin)

    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"diskless produce: no key separator ':' found {line.format(topic=topic)}\n"
    assert asyncio.run(end_offset(bootstrap, topic)) == len(sent)
    if sent:
        assert asyncio.run(read_all(bootstrap, topic, len(sent))) == sent


def test_the_line_number_counts_every_block_of_input(two_partition_broker):
    bootstrap = two_partition_broker.bootstrap
    topic = new_topic(bootstrap)
    lines = [b"key-%06d:value-%06d" % (i, i) for i in range(60_000)]  # 1.3 MB: read in two blocks at least

    result = diskless("produce", topic, "-b", bootstrap, "--key-separator", ":", stdin=b"\n".join([*lines, b"the end", b"k:v"]))

    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        f"diskless produce: no key separator ':' found on line number 60001: 'the end'; the 60000 records before it were sent to {topic}\n"
    )
    assert asyncio.run(end_offset(bootstrap, topic)) == 60_000


# --- transactions describe ----------------------------------------------------------------------


def test_describe_a_transactional_id_in_state_empty(two_partition_broker):
    bootstrap = two_partition_broker.bootstrap
    transactional_id = f"tx-{uuid.uuid4().hex[:8]}"
    producer = ConfluentProducer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(DEADLINE_S)

    listed = diskless("transactions", "list", "-b", bootstrap)
    assert listed.returncode == 0, listed.stderr
    (producer_id,) = [row.split()[2] for row in listed.stdout.splitlines()[1:] if row.split()[0] == transactional_id]
    described = diskless("transactions", "describe", "--transactional-id", transactional_id, "-b", bootstrap)

    assert (described.returncode, described.stderr) == (0, "")
    assert [row.split() for row in described.stdout.splitlines()] == [
        ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState", "CurrentTransactionStartTimeMs",
         "TransactionDurationMs", "TopicPartitions"],
        ["1", transactional_id, producer_id, "0", "Empty", "None", "None"],
    ]  # fmt: skip


# --- topics create ------------------------------------------------------------------------------


def test_topics_create_without_partitions_takes_the_brokers_default(two_partition_broker):
    bootstrap = two_partition_broker.bootstrap
    default, three = f"t-{uuid.uuid4().hex[:12]}", f"t-{uuid.uuid4().hex[:12]}"

    created = diskless("topics", "create", default, "-b", bootstrap)
    explicit = diskless("topics", "create", three, "--partitions", "3", "-b", bootstrap)

    assert (created.returncode, created.stdout, created.stderr) == (0, f"created topic {default} with 2 partition(s)\n", "")
    assert (explicit.returncode, explicit.stdout, explicit.stderr) == (0, f"created topic {three} with 3 partition(s)\n", "")

    async def counts() -> list[int]:
        async with Admin(bootstrap_servers=bootstrap) as admin:
            described = await admin.describe_topics([default, three])
        return [len(described[name].partitions) for name in (default, three)]

    assert asyncio.run(counts()) == [2, 3]


def test_topics_create_help_names_the_default():
    text = " ".join(diskless("topics", "create", "--help").stdout.split())
    assert "--partitions PARTITIONS number of partitions (default: the broker's default, num.partitions, as kafka-topics.sh)" in text


# --- acls add -----------------------------------------------------------------------------------


def test_a_binding_the_broker_refuses_is_one_readable_line(two_partition_broker):
    result = diskless("acls", "add", "--allow-principal", "Group:ops", "--operation", "READ", "--topic", "orders",
                      "-b", two_partition_broker.bootstrap)  # fmt: skip
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        "diskless acls add: INVALID_REQUEST: Invalid principal 'Group:ops': expected User:NAME "
        "(refused binding: ALLOW Group:ops READ on TOPIC 'orders' (LITERAL) from host *)\n"
    )


# --- serve on an address in use -----------------------------------------------------------------


@pytest.fixture
def taken_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize(
    ("flags", "what"),
    [
        (("--listen", "127.0.0.1:{port}"), "listener PLAINTEXT://127.0.0.1:{port}"),
        (("--listen", "127.0.0.1:0", "--http", "127.0.0.1:{port}"), "the admin HTTP endpoint (--http) 127.0.0.1:{port}"),
        (("--listen", "127.0.0.1:0", "--listeners", "CLIENT://127.0.0.1:{port}", "--listener-security-protocol-map", "CLIENT:PLAINTEXT"),
         "listener CLIENT://127.0.0.1:{port}"),
    ],
)  # fmt: skip
def test_serve_on_an_address_in_use_names_it(tmp_path, taken_port, flags, what):
    data_dir = tmp_path / "data"
    result = diskless("serve", "--data-dir", str(data_dir), *(flag.format(port=taken_port) for flag in flags))
    assert (result.returncode, result.stdout) == (1, "")
    expected = f"ERROR diskless: cannot start: cannot bind {what.format(port=taken_port)}: [Errno 98] Address already in use"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} " + re.escape(expected) + "\n", result.stderr), result.stderr
    assert not data_dir.exists()
