"""Consumer group members and their assignments, in `/v1/groups` and in the web console (a real
headless Chromium): a classic group of two confluent-kafka consumers and a KIP-848 consumer
group of one, checked against what each client says it was assigned."""

from __future__ import annotations

import json
import os
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from .broker_process import BrokerProcess, free_port

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
DEADLINE_S = 30.0
COMMITTED = 3

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed (make system-deps)")


def get_json(http: str, path: str) -> dict:
    with urllib.request.urlopen(f"http://{http}{path}", timeout=10) as response:
        return json.load(response)


def wait_for(condition, what: str):
    deadline = time.monotonic() + DEADLINE_S
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)  # polling the broker's state with a deadline: nothing to wait on instead
    return value


def assigned(consumers: dict[str, Consumer], count: int) -> dict[str, set[tuple[str, int]]]:
    """Each consumer's assignment, by client id, once they hold `count` partitions between them."""

    def settled():
        for consumer in consumers.values():
            consumer.poll(0.1)
        found = {cid: {(tp.topic, tp.partition) for tp in c.assignment()} for cid, c in consumers.items()}
        return found if sum(map(len, found.values())) == count and all(found.values()) else None

    return wait_for(settled, "every consumer to get partitions")


def test_members_and_assignments(tmp_path, create_topic) -> None:
    from playwright.sync_api import sync_playwright

    http_port = free_port()
    http = f"127.0.0.1:{http_port}"
    broker = BrokerProcess(tmp_path / "data", "--group-initial-rebalance-delay-ms", "0", "--http", http).start()
    consumers: dict[str, Consumer] = {}
    try:
        topic = create_topic(broker.bootstrap, partitions=2)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        for i in range(10):
            producer.produce(topic, value=b"v%d" % i, partition=i % 2)
        assert producer.flush(DEADLINE_S) == 0
        classic, modern = f"g-{uuid.uuid4().hex[:12]}", f"g-{uuid.uuid4().hex[:12]}"
        for client_id, group, protocol in (("c-one", classic, "classic"), ("c-two", classic, "classic"), ("c-new", modern, "consumer")):
            config = {"bootstrap.servers": broker.bootstrap, "group.id": group, "client.id": client_id, "group.protocol": protocol,
                      "enable.auto.commit": False, "auto.offset.reset": "earliest"}  # fmt: skip
            if protocol == "classic":
                config["session.timeout.ms"] = 30000
            consumers[client_id] = Consumer(config)
            consumers[client_id].subscribe([topic])
        expected = assigned(consumers, 4)  # the classic group's 2 partitions and the consumer group's 2
        consumers["c-one"].commit(offsets=[TopicPartition(topic, p, COMMITTED) for _, p in expected["c-one"]], asynchronous=False)

        def described():
            groups = {g["group_id"]: g for g in get_json(http, "/v1/groups")["groups"]}
            if {classic, modern} <= set(groups) and all(
                {m["client_id"] for m in groups[g]["members"]} == ids for g, ids in ((classic, {"c-one", "c-two"}), (modern, {"c-new"}))
            ):
                return groups
            return None

        groups = wait_for(described, "both groups with their members in /v1/groups")
        assert (groups[classic]["state"], groups[classic]["type"]) == ("Stable", "classic")
        assert (groups[modern]["state"], groups[modern]["type"]) == ("Stable", "consumer")
        members = {m["client_id"]: m for g in (classic, modern) for m in groups[g]["members"]}
        for client_id, partitions in expected.items():
            assert {(a["topic"], a["partition"]) for a in members[client_id]["assignment"]} == partitions
            assert members[client_id]["client_host"].lstrip("/") == "127.0.0.1"
        owners = {(p["topic"], p["partition"]): p for p in groups[classic]["partitions"]}
        assert set(owners) == expected["c-one"] | expected["c-two"]
        for client_id in ("c-one", "c-two"):
            for tp in expected[client_id]:
                assert owners[tp]["member_id"] == members[client_id]["member_id"]
                assert owners[tp]["committed_offset"] == (COMMITTED if client_id == "c-one" else None)

        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            try:
                page = chromium.new_page(viewport={"width": 1400, "height": 900})
                page.goto(f"http://{http}/?refresh=0")
                page.wait_for_selector("body[data-loaded]", timeout=DEADLINE_S * 1000)
                rows = page.eval_on_selector_all(
                    "#members tbody tr[data-member]",
                    """rows => rows.map(r => Object.fromEntries([...r.querySelectorAll('td[data-field]')].map(
                         td => [td.dataset.field, td.dataset.value !== undefined ? td.dataset.value : td.textContent])))""",
                )
                shown = {row["client_id"]: row for row in rows}
                assert set(shown) == {"c-one", "c-two", "c-new"}
                for client_id, partitions in expected.items():
                    row = shown[client_id]
                    assert row["member_id"] == members[client_id]["member_id"]
                    assert set(row["assignment"].split(",")) == {f"{t}-{p}" for t, p in partitions}
                state_cells = page.eval_on_selector_all(
                    "#members tbody td[data-field=state]", "cells => cells.map(c => c.textContent).filter(Boolean)"
                )
                assert sorted(state_cells) == ["Stable (classic)", "Stable (consumer)"]
                artifacts = Path(os.environ.get("DISKLESS_TEST_ARTIFACTS", tmp_path))
                artifacts.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(artifacts / "console-members.png"), full_page=True)
            finally:
                chromium.close()
    finally:
        for consumer in consumers.values():
            consumer.close()
        broker.close()
