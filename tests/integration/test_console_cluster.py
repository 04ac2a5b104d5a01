"""The console and /metrics of a cluster: three brokers in two racks on one PostgreSQL and one
bucket (moto's S3 server). Any broker's console lists every broker with its rack, the
controller and the partitions each leads, exactly as the metadata store and the brokers' own
Metadata answers say; each broker's /metrics counts the leaderships the store gives it."""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections import Counter

import pytest
from confluent_kafka.admin import AdminClient
from prometheus_client.parser import text_string_to_metric_families

from .broker_process import BrokerProcess, free_port
from .moto_s3 import MotoS3
from .test_console_browser import CHROMIUM, CHROMIUM_ARGS, cells

DEADLINE_S = 60.0
RACKS = {1: "rack-a", 2: "rack-b", 3: "rack-a"}
PARTITIONS = 6


def get(http: str, path: str) -> bytes:
    with urllib.request.urlopen(f"http://{http}{path}", timeout=10) as response:
        return response.read()


def wait_until(condition, what: str):
    deadline = time.monotonic() + DEADLINE_S
    while not (result := condition()):
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.1)  # the cluster forms on its own heartbeats; poll its effect
    return result


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=DEADLINE_S)
    return {p.id: p.leader for p in md.topics[topic].partitions.values()}


@pytest.fixture
def brokers(tmp_path, postgres_database):
    moto = MotoS3()
    moto.start()
    started: dict[int, BrokerProcess] = {}
    try:
        bucket_url = moto.url(moto.create_bucket(), prefix="cluster")
        for node, rack in RACKS.items():
            http_port = free_port()
            broker = BrokerProcess(
                tmp_path / f"broker-{node}", "--node-id", str(node), "--metadata", postgres_database, "--object-store", bucket_url,
                "--broker-rack", rack, "--http", f"127.0.0.1:{http_port}",
                "--broker-session-timeout-ms", "2000", "--broker-heartbeat-interval-ms", "200", env=moto.env(),
            )  # fmt: skip
            broker.http = f"127.0.0.1:{http_port}"  # type: ignore[attr-defined]
            started[node] = broker.start()
        yield started
    finally:
        for broker in started.values():
            broker.close()
        moto.stop()


def test_every_broker_of_the_cluster_with_its_rack_and_leaderships(brokers, create_topic) -> None:
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    topic = create_topic(bootstrap, partitions=PARTITIONS)
    def led():
        found = leaders(bootstrap, topic)
        return found if len(found) == PARTITIONS and all(node >= 1 for node in found.values()) else None

    by_partition = wait_until(led, "every partition to have a leader")

    # Broker 2's route: the whole cluster, the leaders the clients are told.
    def settled():
        cluster = json.loads(get(brokers[2].http, "/v1/brokers"))
        led = {(l["topic"], l["partition"]): b["node_id"] for b in cluster["brokers"] for l in b["leaderships"] if l["topic"] == topic}
        return cluster if led == {(topic, p): n for p, n in by_partition.items()} and all(b["alive"] for b in cluster["brokers"]) else None

    cluster = wait_until(settled, "broker 2 to show every broker alive and the topic's leaders")
    assert cluster["node_id"] == 2 and cluster["controller_id"] in RACKS and cluster["partitions_without_leader"] == 0
    assert [(b["node_id"], b["host"], b["port"], b["rack"]) for b in cluster["brokers"]] == [
        (node, "127.0.0.1", int(broker.bootstrap.split(":")[1]), RACKS[node]) for node, broker in brokers.items()
    ]
    assert [b["node_id"] for b in cluster["brokers"] if b["controller"]] == [cluster["controller_id"]]
    per_broker = Counter(by_partition.values())

    # Each broker's /metrics counts what the store says it leads (all topics, this one included).
    for node, broker in brokers.items():
        def leader_count(broker=broker):
            text = get(broker.http, "/metrics").decode()
            return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}.get("kafka_server_replicamanager_leadercount")

        (me,) = [b for b in cluster["brokers"] if b["node_id"] == node]
        assert sum(1 for l in me["leaderships"] if l["topic"] == topic) == per_broker[node]
        wait_until(lambda: leader_count() == len(me["leaderships"]), f"broker {node}'s leader count")

    if not os.path.exists(CHROMIUM):
        pytest.skip("Debian's chromium is not installed (make system-deps)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = chromium.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"http://{brokers[2].http}/?refresh=0")
            page.wait_for_selector("body[data-loaded]", timeout=DEADLINE_S * 1000)
            assert page.text_content("#summary-brokers") == "3"
            for b in cluster["brokers"]:
                roles = [r for r, on in (("controller", b["controller"]), ("this broker", b["node_id"] == 2)) if on]
                assert cells(page.locator(f"#brokers tr[data-broker='{b['node_id']}']")) == {
                    "node_id": str(b["node_id"]), "address": f"127.0.0.1:{b['port']}", "rack": RACKS[b["node_id"]], "state": "alive",
                    "role": ", ".join(roles) or "-", "leaderships": str(len(b["leaderships"])),
                    "leads": ",".join(sorted(f"{l['topic']}-{l['partition']}" for l in b["leaderships"])),
                }  # fmt: skip
        finally:
            chromium.close()
