"""The web console in a real headless Chromium (Debian's `chromium`, driven by Playwright): after
a produce to a tiered topic, its uploads and a group's commit, the page shows exactly the
broker's own figures (its JSON routes, the bucket's listing, the write-ahead batches the
metadata store records, the brokers it registers), and refreshes by itself."""

from __future__ import annotations

import json
import os
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from cold_tier.layout import parse_commit_key

from .broker_process import BrokerProcess, free_port

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]  # fmt: skip
DEADLINE_S = 30.0
RECORDS = 30
COMMITTED = 17
RACK = "rack-a"

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed (make system-deps)")


@pytest.fixture(scope="module")
def http_broker(tmp_path_factory):
    data = tmp_path_factory.mktemp("console") / "data"
    http_port = free_port()
    process = BrokerProcess(data, "--log-retention-check-interval-ms", "500", "--http", f"127.0.0.1:{http_port}",
                           "--broker-rack", RACK).start()  # fmt: skip
    process.http = f"127.0.0.1:{http_port}"  # type: ignore[attr-defined]
    try:
        yield process
    finally:
        process.close()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


def get_json(http: str, path: str) -> dict:
    with urllib.request.urlopen(f"http://{http}{path}", timeout=10) as response:
        return json.load(response)


def wait_for(condition, what: str, deadline_s: float = DEADLINE_S):
    deadline = time.monotonic() + deadline_s
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)  # uploads run on the broker's own schedule; poll their effect


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for value in values:
        producer.produce(topic, value=value, partition=0)
        assert producer.flush(DEADLINE_S) == 0  # one batch each: small segments that roll


def commit(bootstrap: str, topic: str, group: str, offset: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def cells(row) -> dict[str, str]:
    """data-field -> data-value (or the text) of a table row's cells."""
    return row.evaluate(
        "r => Object.fromEntries([...r.querySelectorAll('td[data-field]')].map(c => [c.dataset.field, c.dataset.value ?? c.textContent]))"
    )


def test_console_shows_both_tiers_and_group_lag(http_broker, create_topic, browser, tmp_path_factory) -> None:
    topic = create_topic(http_broker.bootstrap, partitions=2, configs={"segment.bytes": "1024", "local.retention.ms": "0"})
    group = f"g-{uuid.uuid4().hex[:12]}"
    produce(http_broker.bootstrap, topic, [f"v-{i:03d}-".encode() + b"x" * 100 for i in range(RECORDS)])

    def tiered():
        p0 = get_json(http_broker.http, f"/v1/topics/{topic}")["partitions"][0]
        return p0 if p0["upload_lag_segments"] == 0 and p0["remote_segments"] and p0["local_segments"] == 1 else None

    wait_for(tiered, "the rolled segments to reach the bucket and leave the disk")

    def released():  # write-ahead batches inside uploaded segments are released after the upload
        p0 = get_json(http_broker.http, f"/v1/topics/{topic}")["partitions"][0]
        return p0["wal_start_offset"] == p0["remote_end_offset"]

    wait_for(released, "the write-ahead batches below the bucket's end to be released")
    commit(http_broker.bootstrap, topic, group, COMMITTED)
    state = get_json(http_broker.http, f"/v1/topics/{topic}")
    p0, p1 = state["partitions"]
    commits = http_broker.data_dir / "bucket" / topic / "0" / "commits"
    in_bucket = sorted((parse_commit_key(f"{topic}/0/commits/{p.name}") for p in commits.glob("*.commit")), key=lambda s: s.base_offset)
    remote_end = in_bucket[-1].last_offset + 1
    assert (p0["remote_segments"], p0["remote_bytes"], p0["remote_end_offset"]) == (len(in_bucket), sum(s.size_bytes for s in in_bucket), remote_end)
    # One record per produce, acks=all: the active segment's batches are exactly the durable
    # batches still in write-ahead objects.
    assert (p0["wal_start_offset"], p0["wal_end_offset"], p0["wal_batches"]) == (remote_end, RECORDS, RECORDS - remote_end)
    assert p0["wal_bytes"] == p0["local_bytes"] and 1 <= p0["wal_objects"] <= p0["wal_batches"]
    cluster = get_json(http_broker.http, "/v1/brokers")
    (me,) = cluster["brokers"]
    assert (me["node_id"], cluster["controller_id"], me["rack"], me["alive"]) == (1, 1, RACK, True)
    assert {"topic": topic, "partition": 1, "leader_epoch": 1} in me["leaderships"]

    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        page.goto(f"http://{http_broker.http}/?refresh=300#topic={topic}")
        page.wait_for_selector("body[data-loaded]", timeout=DEADLINE_S * 1000)
        assert page.title() == "Diskless console"

        # The summary: this broker has this one topic.
        assert page.text_content("#summary-brokers") == "1"
        assert page.text_content("#summary-topics") == "1"
        assert page.text_content("#summary-partitions") == "2"
        assert page.text_content("#summary-upload-lag") == "0 segments, 0 B"
        assert page.text_content("#summary-groups") == "1"

        # The cluster: this broker, its rack, its roles and every partition it leads.
        broker_row = page.locator("#brokers tr[data-broker='1']")
        assert cells(broker_row) == {
            "node_id": "1", "address": http_broker.bootstrap, "rack": RACK, "state": "alive", "role": "controller, this broker",
            "leaderships": str(len(me["leaderships"])),
            "leads": ",".join(sorted(f"{l['topic']}-{l['partition']}" for l in me["leaderships"])),
        }  # fmt: skip
        assert f"{topic}: 0, 1" in broker_row.locator("[data-field=leads]").text_content()

        # The topic's row: totals over its partitions, exactly the broker's figures.
        row = page.locator(f"#topics tr.topic[data-topic='{topic}']")
        assert cells(row) == {
            "topic": topic, "partitions": "2", "messages": str(RECORDS),
            "local_segments": str(p0["local_segments"] + p1["local_segments"]),
            "local_bytes": str(p0["local_bytes"] + p1["local_bytes"]),
            "remote_segments": str(len(in_bucket)), "remote_bytes": str(p0["remote_bytes"]),
            "upload_lag_segments": "0", "upload_lag_bytes": "0",
        }  # fmt: skip

        # Opened from the URL: configs and one row per partition with both tiers.
        detail = page.locator(f"tr[data-detail='{topic}']")
        assert detail.locator("[data-field=configs]").text_content() == "local.retention.ms=0  segment.bytes=1024"
        row0 = detail.locator("tr[data-partition='0']")
        expected0 = {
            "partition": "0", "log_start_offset": "0", "local_log_start_offset": str(remote_end), "remote_end_offset": str(remote_end),
            "high_watermark": str(RECORDS), "log_end_offset": str(RECORDS), "local_segments": "1", "local_bytes": str(p0["local_bytes"]),
            "remote_segments": str(len(in_bucket)), "remote_bytes": str(p0["remote_bytes"]),
            "upload_lag_segments": "0", "upload_lag_bytes": "0", "wal_objects": str(p0["wal_objects"]), "wal_bytes": str(p0["wal_bytes"]),
        }  # fmt: skip
        assert {k: v for k, v in cells(row0).items() if k != "bar"} == expected0
        # The bar: offsets [0, remote_end) only in the bucket, [remote_end, 30) only on disk.
        bar = row0.locator("[data-field=bar] span")
        assert bar.evaluate_all("ss => ss.map(s => [s.className, Number(s.dataset.from), Number(s.dataset.to)])") == [
            ["bucket", 0, remote_end], ["local", remote_end, RECORDS]
        ]
        # Under it, durability: [remote_end, 30) in write-ahead objects, nothing above the high watermark.
        strip = row0.locator("[data-field=walbar] span[class]")
        assert strip.evaluate_all("ss => ss.map(s => [s.className, Number(s.dataset.from), Number(s.dataset.to)])") == [
            ["wal", remote_end, RECORDS]
        ]
        row1 = detail.locator("tr[data-partition='1']")
        assert cells(row1)["high_watermark"] == "0" and cells(row1)["remote_segments"] == "0"
        assert row1.locator("[data-field=bar] span").count() == 0

        # The group: committed COMMITTED of RECORDS, lag RECORDS - COMMITTED.
        group_row = page.locator(f"#groups tr[data-group='{group}']")
        assert cells(group_row) == {
            "group": group, "topic": topic, "partition": "0", "committed_offset": str(COMMITTED),
            "high_watermark": str(RECORDS), "lag": str(RECORDS - COMMITTED),
        }  # fmt: skip

        artifacts = Path(os.environ.get("DISKLESS_TEST_ARTIFACTS", tmp_path_factory.mktemp("artifacts")))
        artifacts.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(artifacts / "console.png"), full_page=True)

        # Live refresh: more records show up without a reload.
        produce(http_broker.bootstrap, topic, [b"late"] * 5)
        page.wait_for_function(
            f"() => document.querySelector(\"tr[data-detail='{topic}'] tr[data-partition='0'] td[data-field=high_watermark]\")"
            f"?.dataset.value === '{RECORDS + 5}'",
            timeout=DEADLINE_S * 1000,
        )
        assert cells(page.locator(f"#groups tr[data-group='{group}']"))["lag"] == str(RECORDS + 5 - COMMITTED)

        # Closing the topic by its link hides its partitions.
        row.locator("a").click()
        page.wait_for_function(f"() => !document.querySelector(\"tr[data-detail='{topic}']\")", timeout=DEADLINE_S * 1000)
    finally:
        page.close()


def test_console_shows_names_as_text(http_broker, create_topic, browser) -> None:
    """A group id is any string: it is shown as text, never run as HTML."""
    topic = create_topic(http_broker.bootstrap, partitions=1)
    produce(http_broker.bootstrap, topic, [b"a"])
    group = "<img src=x onerror=\"document.title='owned'\">"
    commit(http_broker.bootstrap, topic, group, 1)
    page = browser.new_page()
    try:
        page.goto(f"http://{http_broker.http}/ui?refresh=0")
        page.wait_for_selector("body[data-loaded]", timeout=DEADLINE_S * 1000)
        assert page.locator("#groups img").count() == 0
        rows = page.locator("#groups tr[data-topic]").evaluate_all("rs => rs.map(r => r.dataset.group)")
        assert group in rows
        assert page.title() == "Diskless console"
    finally:
        page.close()
