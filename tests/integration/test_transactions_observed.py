"""The transaction coordinator as an operator sees and handles it, against a real `diskless
serve` and confluent-kafka transactional producers:

- its gauges and counters on /metrics and the transactions it coordinates on GET
  /v1/transactions, after one transaction committed, one aborted, one timed out and one held
  open;
- `diskless transactions abort` of a hanging transaction (open in a partition, its
  coordinator's state gone): read_committed consumers read past it, and none of its records;
  its one-line errors and exit codes;
- `find-hanging`: the transaction no coordinator knows is listed, those their coordinator
  holds are not;
- `abort --start-offset`: the producer found with DescribeProducers among several with
  transactions open in the partition, only its transaction aborted.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from diskless.client import Admin

from .broker_process import BrokerProcess, free_port

DEADLINE_S = 30.0
TIMEOUT_MS = 2000  # the silent producer's transaction.timeout.ms
HANGING_HEADER = ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset", "LastTimestamp", "Duration(min)"]


@pytest.fixture
def http_broker(tmp_path):
    http_port = free_port()
    process = BrokerProcess(tmp_path / "data", "--http", f"127.0.0.1:{http_port}").start()
    process.http = f"127.0.0.1:{http_port}"  # type: ignore[attr-defined]
    try:
        yield process
    finally:
        process.close()


def tid(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def transactional_producer(bootstrap: str, transactional_id: str, **extra: object) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5, **extra})
    producer.init_transactions(DEADLINE_S)
    return producer


def get(http: str, path: str) -> bytes:
    with urllib.request.urlopen(f"http://{http}{path}", timeout=10) as response:
        return response.read()


def coordinator_samples(http: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The diskless_transaction_coordinator_* samples of one scrape, by (name, labels)."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(get(http, "/metrics").decode())
        for sample in family.samples
        if sample.name.startswith("diskless_transaction_coordinator_")
    }


def by_state(**counts: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    states = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort")
    return {("diskless_transaction_coordinator_transactions", (("state", s),)): float(counts.get(s, 0)) for s in states}


def test_coordinator_state_in_metrics_and_admin_endpoint(http_broker, create_topic) -> None:
    bootstrap, http = http_broker.bootstrap, http_broker.http
    topic = create_topic(bootstrap, partitions=2)
    ids = {name: tid(name) for name in ("committed", "aborted", "silent", "open")}

    committed = transactional_producer(bootstrap, ids["committed"])
    committed.begin_transaction()
    for i in range(3):
        committed.produce(topic, value=f"c-{i}".encode(), partition=0)
    committed.commit_transaction(DEADLINE_S)

    aborted = transactional_producer(bootstrap, ids["aborted"])
    aborted.begin_transaction()
    for i in range(2):
        aborted.produce(topic, value=f"a-{i}".encode(), partition=1)
    aborted.flush(DEADLINE_S)
    aborted.abort_transaction(DEADLINE_S)

    silent = transactional_producer(bootstrap, ids["silent"], **{"transaction.timeout.ms": TIMEOUT_MS})
    silent.begin_transaction()
    silent.produce(topic, value=b"s", partition=0)
    silent.flush(DEADLINE_S)

    open_started_ms = int(time.time() * 1000)
    held = transactional_producer(bootstrap, ids["open"])  # transaction.timeout.ms 60000: open throughout
    held.begin_transaction()
    held.produce(topic, value=b"o", partition=1)
    held.produce(topic, value=b"o", partition=0)
    held.flush(DEADLINE_S)

    expected = {
        ("diskless_transaction_coordinator_open_transactions", ()): 1.0,
        **by_state(Ongoing=1, CompleteCommit=1, CompleteAbort=2),
        ("diskless_transaction_coordinator_completed_total", (("result", "committed"),)): 1.0,
        ("diskless_transaction_coordinator_completed_total", (("result", "aborted"),)): 2.0,
        ("diskless_transaction_coordinator_timed_out_total", ()): 1.0,
    }
    age_name = ("diskless_transaction_coordinator_oldest_open_transaction_age_seconds", ())
    deadline = time.monotonic() + DEADLINE_S
    while True:  # the silent transaction is aborted TIMEOUT_MS after it began
        samples = coordinator_samples(http)
        age_s = samples.pop(age_name)
        if samples == expected or time.monotonic() > deadline:
            break
        time.sleep(0.1)  # polling the endpoint, with a deadline: nothing to wait on instead
    scraped_ms = int(time.time() * 1000)
    assert samples == expected
    assert 0 < age_s <= (scraped_ms - open_started_ms) / 1000

    asked_ms = int(time.time() * 1000)
    route = json.loads(get(http, "/v1/transactions"))
    answered_ms = int(time.time() * 1000)
    described = asyncio.run(_describe(bootstrap, list(ids.values())))
    listed = {t["transactional_id"]: t for t in route["transactions"]}
    assert route["node_id"] == 1 and [t["transactional_id"] for t in route["transactions"]] == sorted(ids.values())
    start = listed[ids["open"]]["transaction_start_ms"]
    assert open_started_ms <= start <= scraped_ms
    assert asked_ms <= start + listed[ids["open"]]["age_ms"] <= answered_ms  # the age is the route's now minus the start
    for name in ("committed", "aborted", "silent"):
        assert 0 < listed[ids[name]]["transaction_start_ms"] <= start
    assert listed == {
        ids["committed"]: {
            "transactional_id": ids["committed"], "producer_id": described[ids["committed"]].producer_id, "producer_epoch": 0,
            "state": "CompleteCommit", "timeout_ms": 60000, "partitions": [], "groups": [],
            "transaction_start_ms": listed[ids["committed"]]["transaction_start_ms"], "age_ms": None,
        },
        ids["aborted"]: {
            "transactional_id": ids["aborted"], "producer_id": described[ids["aborted"]].producer_id, "producer_epoch": 0,
            "state": "CompleteAbort", "timeout_ms": 60000, "partitions": [], "groups": [],
            "transaction_start_ms": listed[ids["aborted"]]["transaction_start_ms"], "age_ms": None,
        },
        ids["silent"]: {  # the timeout bumped its epoch: the silent producer is fenced
            "transactional_id": ids["silent"], "producer_id": described[ids["silent"]].producer_id, "producer_epoch": 1,
            "state": "CompleteAbort", "timeout_ms": TIMEOUT_MS, "partitions": [], "groups": [],
            "transaction_start_ms": listed[ids["silent"]]["transaction_start_ms"], "age_ms": None,
        },
        ids["open"]: {
            "transactional_id": ids["open"], "producer_id": described[ids["open"]].producer_id, "producer_epoch": 0,
            "state": "Ongoing", "timeout_ms": 60000, "partitions": [{"topic": topic, "partition": 0}, {"topic": topic, "partition": 1}],
            "groups": [], "transaction_start_ms": start, "age_ms": listed[ids["open"]]["age_ms"],
        },
    }  # fmt: skip
    assert len({listed[i]["producer_id"] for i in ids.values()}) == 4

    held.abort_transaction(DEADLINE_S)
    after = coordinator_samples(http)
    assert after.pop(age_name) == 0.0
    assert after == {
        ("diskless_transaction_coordinator_open_transactions", ()): 0.0,
        **by_state(CompleteCommit=1, CompleteAbort=3),
        ("diskless_transaction_coordinator_completed_total", (("result", "committed"),)): 1.0,
        ("diskless_transaction_coordinator_completed_total", (("result", "aborted"),)): 3.0,
        ("diskless_transaction_coordinator_timed_out_total", ()): 1.0,
    }
    for producer in (committed, aborted, held):
        producer.flush(1)


async def _describe(bootstrap: str, transactional_ids: list[str]) -> dict:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        return await admin.describe_transactions(transactional_ids)


async def _producers(bootstrap: str, topic: str) -> list:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        return await admin.describe_producers(topic, 0)


async def _node_id(bootstrap: str) -> int:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        (broker,) = (await admin.describe_cluster()).brokers
        return broker.node_id


def cli(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "diskless.cli.main", "transactions", *args, "-b", bootstrap], capture_output=True, text=True, timeout=60
    )


def read_all(bootstrap: str, topic: str, isolation: str, expected: int) -> tuple[list[str], int]:
    """The values of partition 0 from its start, read until `expected` came and the position
    reached the end a consumer of `isolation` may read to; and that end."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:8]}", "isolation.level": isolation,
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
    })  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[str] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None:
                assert message.error() is None, message.error()
                got.append(message.value().decode())
                continue
            end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1]
            if len(got) >= expected and consumer.position([TopicPartition(topic, 0)])[0].offset >= end:
                return got, end
        raise AssertionError(f"{isolation}: {len(got)} of {expected} records within {DEADLINE_S}s")
    finally:
        consumer.close()


def end_offset(bootstrap: str, topic: str, isolation: str) -> int:
    """ListOffsets latest: the high watermark, or for read_committed the last stable offset."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ends-{uuid.uuid4().hex[:8]}", "isolation.level": isolation})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1]
    finally:
        consumer.close()


def test_cli_aborts_a_hanging_transaction(broker, create_topic) -> None:
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, partitions=1)
    committed = transactional_producer(bootstrap, tid("committed"))
    committed.begin_transaction()
    for i in range(3):
        committed.produce(topic, value=f"before-{i}".encode(), partition=0)
    committed.commit_transaction(DEADLINE_S)  # offsets 0-2, its marker 3

    hanging_id = tid("hanging")
    hanging = transactional_producer(bootstrap, hanging_id)
    hanging.begin_transaction()
    for i in range(5):
        hanging.produce(topic, value=f"hang-{i}".encode(), partition=0)
    hanging.flush(DEADLINE_S)  # offsets 4-8, durable, the transaction open
    described = asyncio.run(_describe(bootstrap, [hanging_id]))[hanging_id]
    assert (described.state, described.partitions) == ("Ongoing", ((topic, 0),))

    # The coordinator forgets it (its state removed from the store while the broker is down):
    # the partition still holds it open, and nothing will ever end it.
    broker.stop()
    with sqlite3.connect(broker.data_dir / "metadata.db") as db:
        assert db.execute("DELETE FROM transactions WHERE transactional_id = ?", (hanging_id,)).rowcount == 1
    db.close()
    broker.start()
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(3):
        plain.produce(topic, value=f"after-{i}".encode(), partition=0)
    plain.flush(DEADLINE_S)  # offsets 9-11
    assert cli(bootstrap, "list").stdout.split().count(hanging_id) == 0
    assert (end_offset(bootstrap, topic, "read_uncommitted"), end_offset(bootstrap, topic, "read_committed")) == (12, 4)

    # find-hanging names it: open since offset 4, and no coordinator knows its producer.
    (state,) = [p for p in asyncio.run(_producers(bootstrap, topic)) if p.current_transaction_start_offset >= 0]
    row = [topic, "0", str(described.producer_id), str(described.producer_epoch), "-1", "4", str(state.last_timestamp_ms), "0"]
    node_id = asyncio.run(_node_id(bootstrap))
    for scope in (("--topic", topic, "--partition", "0"), ("--broker-id", str(node_id))):
        result = cli(bootstrap, "find-hanging", *scope, "--max-transaction-timeout", "0")
        assert (result.returncode, result.stderr) == (0, "")
        assert [line.split() for line in result.stdout.splitlines()] == [HANGING_HEADER, row]
    # Within the default 15 minutes of its last write it is no candidate.
    result = cli(bootstrap, "find-hanging", "--topic", topic)
    assert (result.returncode, result.stdout.split(), result.stderr) == (0, HANGING_HEADER, "")

    result = cli(
        bootstrap, "abort", "--topic", topic, "--partition", "0", "--producer-id", str(described.producer_id),
        "--producer-epoch", str(described.producer_epoch), "--coordinator-epoch", "0",
    )  # fmt: skip
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    # The abort marker at 12 is durable once the command returns: the last stable offset is past it.
    assert (end_offset(bootstrap, topic, "read_uncommitted"), end_offset(bootstrap, topic, "read_committed")) == (13, 13)
    got, end = read_all(bootstrap, topic, "read_committed", 6)
    assert (got, end) == ([*(f"before-{i}" for i in range(3)), *(f"after-{i}" for i in range(3))], 13)
    result = cli(bootstrap, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0")
    assert (result.returncode, result.stdout.split(), result.stderr) == (0, HANGING_HEADER, "")
    got, end = read_all(bootstrap, topic, "read_uncommitted", 11)
    assert (got, end) == ([*(f"before-{i}" for i in range(3)), *(f"hang-{i}" for i in range(5)), *(f"after-{i}" for i in range(3))], 13)

    # Errors: one line each, 1 for the broker's answer, 2 for the arguments.
    ids = ("--producer-id", str(described.producer_id), "--producer-epoch", "0", "--coordinator-epoch", "0")
    unknown = f"nope-{uuid.uuid4().hex[:8]}"
    result = cli(bootstrap, "abort", "--topic", unknown, "--partition", "0", *ids)
    assert (result.returncode, result.stdout, result.stderr) == (
        1, "", f"diskless transactions abort: UNKNOWN_TOPIC_OR_PARTITION (topic={unknown})\n"
    )
    result = cli(bootstrap, "abort", "--topic", topic, "--partition", "7", *ids)
    assert (result.returncode, result.stdout, result.stderr) == (
        1, "", f"diskless transactions abort: UNKNOWN_TOPIC_OR_PARTITION (topic={topic}, partition=7)\n"
    )
    result = cli(bootstrap, "find-hanging", "--topic", unknown)
    assert (result.returncode, result.stdout, result.stderr) == (
        1, "", f"diskless transactions find-hanging: UNKNOWN_TOPIC_OR_PARTITION (topic={unknown})\n"
    )
    result = cli(bootstrap, "find-hanging", "--broker-id", "1", "--partition", "0")
    assert (result.returncode, result.stdout, result.stderr) == (2, "", "diskless transactions find-hanging: --partition needs --topic\n")
    result = cli(bootstrap, "abort", "--topic", topic, "--partition", "0", *ids[:3], "40000", *ids[4:])
    assert (result.returncode, result.stderr) == (2, "diskless transactions abort: --producer-epoch must be between 0 and 32767\n")
    missing = broker.data_dir / "no-such.properties"
    result = cli(bootstrap, "abort", "--topic", topic, "--partition", "0", *ids, "--command-config", str(missing))
    assert (result.returncode, result.stderr) == (2, f"diskless transactions abort: cannot read --command-config {missing}: No such file or directory\n")
    committed.flush(1)


def test_cli_aborts_the_transaction_starting_at_an_offset(broker, create_topic) -> None:
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, partitions=1)
    ids = {name: tid(name) for name in ("committed", "first", "second")}
    committed = transactional_producer(bootstrap, ids["committed"])
    committed.begin_transaction()
    for i in range(2):
        committed.produce(topic, value=f"c-{i}".encode(), partition=0)
    committed.commit_transaction(DEADLINE_S)  # offsets 0-1, its marker 2
    first = transactional_producer(bootstrap, ids["first"])
    first.begin_transaction()
    for i in range(3):
        first.produce(topic, value=f"f-{i}".encode(), partition=0)
    first.flush(DEADLINE_S)  # offsets 3-5, open
    second = transactional_producer(bootstrap, ids["second"])
    second.begin_transaction()
    for i in range(2):
        second.produce(topic, value=f"s-{i}".encode(), partition=0)
    second.flush(DEADLINE_S)  # offsets 6-7, open

    described = asyncio.run(_describe(bootstrap, list(ids.values())))
    producers = asyncio.run(_producers(bootstrap, topic))
    expected = {  # producer id -> (epoch, last sequence, coordinator epoch, open transaction's first offset)
        described[ids["committed"]].producer_id: (0, 1, 1, -1),  # its commit marker's coordinator epoch: the slot's first holder's
        described[ids["first"]].producer_id: (0, 2, -1, 3),
        described[ids["second"]].producer_id: (0, 1, -1, 6),
    }
    assert {p.producer_id: (p.producer_epoch, p.last_sequence, p.coordinator_epoch, p.current_transaction_start_offset) for p in producers} == expected
    assert [p.producer_id for p in producers] == sorted(expected) and all(p.last_timestamp_ms > 0 for p in producers)
    assert end_offset(bootstrap, topic, "read_committed") == 3
    # Both open transactions are their coordinator's: neither hangs, however long ago they wrote.
    result = cli(bootstrap, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0")
    assert (result.returncode, result.stdout.split(), result.stderr) == (0, HANGING_HEADER, "")

    result = cli(bootstrap, "abort", "--topic", topic, "--partition", "0", "--start-offset", "4")
    assert (result.returncode, result.stdout, result.stderr) == (
        1, "", f"diskless transactions abort: could not find any open transaction starting at offset 4 on partition {topic}-0\n"
    )
    result = cli(bootstrap, "abort", "--topic", topic, "--partition", "0", "--start-offset", "3")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    # The first transaction ended by the marker at 8; the second still holds the last stable offset.
    assert (end_offset(bootstrap, topic, "read_uncommitted"), end_offset(bootstrap, topic, "read_committed")) == (9, 6)
    assert {p.producer_id: p.current_transaction_start_offset for p in asyncio.run(_producers(bootstrap, topic))} == {
        described[ids["committed"]].producer_id: -1, described[ids["first"]].producer_id: -1, described[ids["second"]].producer_id: 6,
    }
    second.commit_transaction(DEADLINE_S)  # its marker at 9
    got, end = read_all(bootstrap, topic, "read_committed", 4)
    assert (got, end) == (["c-0", "c-1", "s-0", "s-1"], 10)

    unknown = f"nope-{uuid.uuid4().hex[:8]}"
    result = cli(bootstrap, "abort", "--topic", unknown, "--partition", "0", "--start-offset", "3")
    assert (result.returncode, result.stdout, result.stderr) == (
        1, "", f"diskless transactions abort: UNKNOWN_TOPIC_OR_PARTITION (topic={unknown})\n"
    )
    result = cli(bootstrap, "abort", "--topic", topic, "--partition", "0", "--start-offset", "3", "--producer-id", "1")
    assert (result.returncode, result.stderr) == (
        2, "diskless transactions abort: give either --start-offset or all of --producer-id, --producer-epoch and --coordinator-epoch\n"
    )
    for producer in (committed, first, second):
        producer.flush(1)


def test_a_marker_from_an_older_coordinator_is_refused(broker, create_topic) -> None:
    """Kafka's TRANSACTION_COORDINATOR_FENCED: once a coordinator's marker ended a producer's
    transaction in a partition, a marker with an older coordinator epoch (a zombie coordinator's,
    arriving late) is refused there and ends nothing; DescribeProducers shows the epoch."""
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, partitions=1)
    transactional_id = tid("fenced")
    producer = transactional_producer(bootstrap, transactional_id)
    producer.begin_transaction()
    producer.produce(topic, value=b"one", partition=0)
    producer.commit_transaction(DEADLINE_S)  # offset 0, its marker 1
    [entry] = asyncio.run(_producers(bootstrap, topic))
    assert entry.coordinator_epoch >= 1, entry  # the coordinator slot's epoch, carried by the marker
    producer.begin_transaction()
    producer.produce(topic, value=b"two", partition=0)
    producer.flush(DEADLINE_S)  # offset 2, its transaction open

    zombie = cli(
        bootstrap, "abort", "--topic", topic, "--partition", "0", "--producer-id", str(entry.producer_id),
        "--producer-epoch", str(entry.producer_epoch), "--coordinator-epoch", str(entry.coordinator_epoch - 1),
    )  # fmt: skip
    assert (zombie.returncode, zombie.stdout) == (1, "")
    assert zombie.stderr.startswith("diskless transactions abort: TRANSACTION_COORDINATOR_FENCED"), zombie.stderr
    assert end_offset(bootstrap, topic, "read_committed") == 2  # still open: nothing ended it
    producer.commit_transaction(DEADLINE_S)
    got, end = read_all(bootstrap, topic, "read_committed", 2)
    assert (got, end) == (["one", "two"], 4)
