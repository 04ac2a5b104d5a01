"""deploy/grafana/diskless.json is built on what GET /metrics really exposes: every metric name
its queries use appears in a scrape of a real broker after produce, tiering, consume and commit
(so a renamed metric cannot leave a panel silently empty)."""

from __future__ import annotations

import json
import re
import time
import urllib.request
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer
from prometheus_client.parser import text_string_to_metric_families

from .broker_process import BrokerProcess, free_port

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "diskless.json"
METRIC = re.compile(r"\b(?:kafka|diskless|process|python)_[a-z0-9_]+\b")
DEADLINE_S = 30.0
RECORDS = 30


def queries(dashboard: dict) -> list[str]:
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return exprs


def scraped_names(http: str) -> set[str]:
    """Every sample name of a scrape (counters with _total, histograms with _bucket, ...)."""
    with urllib.request.urlopen(f"http://{http}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}


def test_every_metric_the_dashboard_queries_is_exposed(tmp_path, create_topic) -> None:
    http_port = free_port()
    broker = BrokerProcess(tmp_path / "data", "--http", f"127.0.0.1:{http_port}").start()
    try:
        topic = create_topic(broker.bootstrap, partitions=1, configs={"segment.bytes": "1024"})
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
        for i in range(RECORDS):
            producer.produce(topic, value=b"%03d" % i + b"x" * 100)
            assert producer.flush(DEADLINE_S) == 0
        group = f"g-{uuid.uuid4().hex[:12]}"
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                             "enable.auto.commit": False})  # fmt: skip
        try:
            consumer.subscribe([topic])
            consumed, deadline = 0, time.monotonic() + DEADLINE_S
            while consumed < RECORDS:
                assert time.monotonic() < deadline, f"consumed {consumed} of {RECORDS}"
                message = consumer.poll(0.2)
                consumed += message is not None and message.error() is None
            consumer.commit(asynchronous=False)
        finally:
            consumer.close()

        exprs = queries(json.loads(DASHBOARD.read_text()))
        wanted = {name for expr in exprs for name in METRIC.findall(expr)}
        assert all(METRIC.search(expr) for expr in exprs), "a query without a metric of ours"
        deadline = time.monotonic() + DEADLINE_S
        while True:  # uploads and the group's lag appear on the broker's own schedule
            missing = wanted - scraped_names(f"127.0.0.1:{http_port}")
            if not missing:
                break
            assert time.monotonic() < deadline, f"the dashboard queries metrics /metrics does not expose: {sorted(missing)}"
            time.sleep(0.2)  # polling the scrape with a deadline: nothing to wait on instead
    finally:
        broker.close()
    assert len(wanted) >= 30
