"""What an operator sees of the transaction coordinator, against a real `diskless serve` and
confluent-kafka transactional producers: its gauges and counters on /metrics and the
transactions it coordinates on GET /v1/transactions, after one transaction committed, one
aborted, one timed out and one held open.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
import uuid

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from diskless.client import Admin

from .broker_process import BrokerProcess, free_port

DEADLINE_S = 30.0
TIMEOUT_MS = 2000  # the silent producer's transaction.timeout.ms


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
