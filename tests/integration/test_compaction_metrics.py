"""What operators see of the log cleaner (issue Q): on a real broker, a topic written with every
key several times into small rolled segments, then made compacted, is cleaned in one pass;
GET /metrics then holds exact figures (one cleaning, every record read, the duplicates
removed, bytes read and written equal to the partition's local bytes before and after, the
offset map's fill against a known dedupe buffer) and `diskless topics describe --http` a
compaction line for the partition with its dirty ratio and last cleaning time."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from prometheus_client.parser import text_string_to_metric_families

from diskless.broker.compaction.policy import ENTRY_BYTES

from .broker_process import BrokerProcess, free_port

DEADLINE_S = 60.0
KEYS = 200
ROUNDS = 5
MAP_CAPACITY = 400  # keys the cleaner's offset map holds: the dedupe buffer below, one thread
DEDUPE_BUFFER_BYTES = MAP_CAPACITY * ENTRY_BYTES


@pytest.fixture
def broker(tmp_path):
    http_port = free_port()
    process = BrokerProcess(
        tmp_path / "data", "--http", f"127.0.0.1:{http_port}", "--log-cleaner-backoff-ms", "100",
        "--log-retention-check-interval-ms", "100", "--log-cleaner-dedupe-buffer-size", str(DEDUPE_BUFFER_BYTES),
    ).start()  # fmt: skip
    process.http = f"127.0.0.1:{http_port}"  # type: ignore[attr-defined]
    try:
        yield process
    finally:
        process.close()


def wait_until(condition, what: str):
    deadline = time.monotonic() + DEADLINE_S
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {DEADLINE_S}s: {what}")
        time.sleep(0.1)  # polling the broker's state with a deadline


def scrape(http: str) -> dict[tuple[str, frozenset], float]:
    with urllib.request.urlopen(f"http://{http}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def partition_state(http: str, topic: str) -> dict:
    with urllib.request.urlopen(f"http://{http}/v1/topics/{topic}", timeout=10) as response:
        (partition,) = json.loads(response.read())["partitions"]
    return partition


def produce_rounds(bootstrap: str, topic: str) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    failures: list = []
    for round_ in range(ROUNDS):
        for k in range(KEYS):
            producer.produce(topic, key=b"key-%03d" % k, value=b"value-%d" % round_ + b"x" * 60, partition=0,
                             on_delivery=lambda err, msg: err and failures.append(err))  # fmt: skip
        producer.flush(DEADLINE_S)
    assert producer.flush(DEADLINE_S) == 0 and not failures
    return ROUNDS * KEYS


def test_a_cleaning_is_counted_exactly_and_described(broker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = f"c-{uuid.uuid4().hex[:12]}"
    # Written while the topic is not compacted: no pass can start before every record is in.
    # Not tiered: its rolled segments stay local, where the cleaner works.
    configs = {"cleanup.policy": "delete", "remote.storage.enable": "false", "segment.bytes": "16384", "segment.ms": "300", "min.cleanable.dirty.ratio": "0.01"}
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(timeout=20)
    written = produce_rounds(broker.bootstrap, topic)
    # Every record in rolled segments (segment.ms rolls the last one): one pass covers them all.
    before = wait_until(
        lambda: (p := partition_state(broker.http, topic))["active_base_offset"] == p["log_end_offset"] == written and p,
        "the active segment rolled",
    )
    assert "compaction" not in before
    samples = scrape(broker.http)
    assert samples.get(("diskless_log_cleaner_cleanings_total", frozenset({("topic", topic)}))) is None

    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])  # fmt: skip
    admin.incremental_alter_configs([resource])[resource].result(timeout=20)

    by_topic = frozenset({("topic", topic)})
    samples = wait_until(
        lambda: (s := scrape(broker.http)).get(("diskless_log_cleaner_cleanings_total", by_topic)) == 1 and s, "a cleaning counted"
    )
    after = partition_state(broker.http, topic)
    counted = {name: samples[(f"diskless_log_cleaner_{name}_total", by_topic)]
               for name in ("cleanings", "read_records", "removed_records", "dropped_tombstones", "read_bytes", "written_bytes")}  # fmt: skip
    assert counted == {
        "cleanings": 1, "read_records": written, "removed_records": written - KEYS, "dropped_tombstones": 0,
        "read_bytes": before["local_bytes"], "written_bytes": after["local_bytes"],
    }  # fmt: skip
    assert after["local_bytes"] < before["local_bytes"]
    assert samples[("kafka_log_logcleaner_cleaner_recopy_percent", frozenset())] == int(100 * after["local_bytes"] / before["local_bytes"])
    assert samples[("kafka_log_logcleaner_max_buffer_utilization_percent", frozenset())] == 100 * KEYS // MAP_CAPACITY
    assert samples[("kafka_log_logcleaner_max_clean_time_secs", frozenset())] == 0  # a few hundred KB: well under a second
    logs_dir = str(broker.data_dir / "logs")
    assert samples[("kafka_log_logcleanermanager_uncleanable_partitions_count", frozenset({("logDirectory", logs_dir)}))] == 0
    assert 0 <= samples[("kafka_log_logcleanermanager_time_since_last_run_ms", frozenset())] < DEADLINE_S * 1000

    # Rounds after the cleaning find the partition clean: dirty ratio 0, nothing more to do.
    partition = frozenset({("topic", topic), ("partition", "0")})
    samples = wait_until(
        lambda: (s := scrape(broker.http)).get(("diskless_log_cleaner_dirty_ratio", partition)) == 0.0 and s, "the dirty ratio back to 0"
    )
    assert samples[("kafka_log_logcleanermanager_max_dirty_percent", frozenset())] == 0
    assert samples[("diskless_log_cleaner_cleanings_total", by_topic)] == 1
    compaction = partition_state(broker.http, topic)["compaction"]
    assert compaction["dirty_ratio"] == 0.0 and compaction["first_dirty_offset"] == written and compaction["cleanable_bytes"] == 0
    cleaned_at = compaction["last_cleaned_ms"]
    assert abs(cleaned_at - time.time() * 1000) < DEADLINE_S * 1000

    described = subprocess.run(
        [sys.executable, "-m", "diskless.cli.main", "topics", "describe", topic, "-b", broker.bootstrap, "--http", broker.http],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert described.returncode == 0, described.stderr
    lines = described.stdout.splitlines()
    header = lines.index("compaction:")
    assert lines[header + 1].split() == ["partition", "dirty", "ratio", "first", "dirty", "dirty", "bytes", "last", "cleaned"]
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(cleaned_at // 1000)) + f".{cleaned_at % 1000:03d}Z"
    assert lines[header + 2].split() == ["0", "0.00", str(written), "0", stamp]
