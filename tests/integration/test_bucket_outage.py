"""The bucket turns into a black hole while segments roll, then comes back.

A real broker whose S3 bucket (moto's server over HTTP) is reached through a byte proxy
(store_proxy.py). The proxy is cut as a black hole: it accepts connections and forwards
nothing, and connections opened during the cut stay dead after it. While it lasts, records
keep being produced (acks=1, answered at the local append) and segments roll.

What must hold:
- within seconds of the cut the broker logs one WARNING naming the store and the request that
  got no answer (once: no line per retry), and after the restore one line saying it answers;
- once the proxy forwards again, every rolled segment is uploaded (the bucket's catalogue of
  each partition is contiguous from offset 0 up to the active segment), within a deadline;
- every acknowledged record is in the bucket, read straight from its segment objects, at its
  acknowledged offset with its key and value; the bucket holds nothing else.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from cold_tier.layout import commits_prefix, parse_catalogue
from hot_tier.records import decode_batches

from .broker_process import BrokerProcess, free_port
from .moto_s3 import MotoS3
from .store_proxy import StoreProxy

PARTITIONS = 3
SEGMENT_BYTES = 4096
RECORDS_PER_PHASE = 120  # per partition; about 20 KB a partition: several segments each
WARNING_BOUND_S = 15.0  # read timeout (5 s) plus scheduling slack on a loaded machine
DRAIN_DEADLINE_S = 45.0
DEADLINE_S = 60.0


def wait_until(condition: Callable[[], Any], what: str, deadline_s: float = DEADLINE_S) -> Any:
    deadline = time.monotonic() + deadline_s
    while not (result := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {deadline_s}s waiting for {what}")
        time.sleep(0.05)  # the broker moves on its own: poll its effect with a deadline
    return result


@pytest.fixture
def proxied_bucket() -> Iterator[tuple[MotoS3, str, StoreProxy]]:
    moto = MotoS3()
    moto.start()
    proxy = StoreProxy(moto.port)
    try:
        yield moto, moto.create_bucket(), proxy
    finally:
        proxy.close()
        moto.stop()


class Acks:
    """Delivery reports of one producer: (partition, offset) -> (key, value)."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 2, "message.timeout.ms": 120_000})
        self.acked: dict[tuple[int, int], tuple[bytes, bytes]] = {}
        self.errors: list[str] = []

    def produce(self, topic: str, phase: str) -> None:
        for i in range(RECORDS_PER_PHASE):
            for partition in range(PARTITIONS):
                key, value = f"{phase}-{partition}-{i}".encode(), f"{phase}:{partition}:{i}:".encode() + b"v" * 90
                self.producer.produce(topic, value, key, partition=partition,
                                      on_delivery=lambda err, msg, kv=(key, value): self._report(err, msg, kv))  # fmt: skip
            if i % 10 == 9:
                assert self.producer.flush(DEADLINE_S) == 0  # small batches: segments roll as records come

    def _report(self, err: Any, msg: Any, kv: tuple[bytes, bytes]) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked[(msg.partition(), msg.offset())] = kv


def topic_state(http_port: int, topic: str) -> dict[int, dict[str, Any]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v1/topics/{topic}", timeout=10) as response:
        return {p["partition"]: p for p in json.load(response)["partitions"]}


def all_uploaded(http_port: int, topic: str) -> dict[int, dict[str, Any]] | None:
    """The partitions' state once every rolled segment is in the bucket and every record is
    durable; None before."""
    state = topic_state(http_port, topic)
    done = all(
        p["upload_lag_segments"] == 0 and p["remote_end_offset"] == p["active_base_offset"] > 0 and p["high_watermark"] == p["log_end_offset"]
        for p in state.values()
    )  # fmt: skip
    return state if done else None


def bucket_records(moto: MotoS3, bucket: str, prefix: str, topic: str, partition: int) -> tuple[list[tuple[int, int]], dict[int, tuple[bytes, bytes]]]:
    """Straight from the bucket: the partition's committed segments as (base, next) offsets,
    and every record in their .log objects by offset."""
    client = moto.client()
    listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix + commits_prefix(topic, partition))
    catalogue = parse_catalogue(entry["Key"][len(prefix) :] for entry in listed.get("Contents", ()))
    records: dict[int, tuple[bytes, bytes]] = {}
    for segment in catalogue:
        data = client.get_object(Bucket=bucket, Key=prefix + segment.log_key)["Body"].read()
        for batch in decode_batches(data):
            for record in batch.records:
                assert record.offset not in records, f"offset {record.offset} twice in the bucket"
                records[record.offset] = (record.key, record.value)
    return [(s.base_offset, s.last_offset + 1) for s in catalogue], records


def test_blackholed_bucket_is_noticed_within_seconds_and_every_segment_uploads_once_it_answers(proxied_bucket, tmp_path) -> None:
    moto, bucket, proxy = proxied_bucket
    prefix = "outage/"
    http_port = free_port()
    url = f"s3://{bucket}/outage?endpoint_url={proxy.endpoint_url}&region=us-east-1"
    env = {k: v for k, v in moto.env().items() if k != "AWS_ENDPOINT_URL"}
    broker = BrokerProcess(tmp_path / "data", "--object-store", url, "--http", f"127.0.0.1:{http_port}", env=env).start()
    try:
        topic = f"outage-{uuid.uuid4().hex[:10]}"
        configs = {"segment.bytes": str(SEGMENT_BYTES), "local.retention.ms": "0"}
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept: its futures need it alive
        admin.create_topics([NewTopic(topic, PARTITIONS, 1, config=configs)], operation_timeout=10)[topic].result(DEADLINE_S)
        acks = Acks(broker.bootstrap)
        acks.produce(topic, "before")
        wait_until(lambda: all_uploaded(http_port, topic), "the first segments to be uploaded")

        proxy.blackhole()
        cut = time.monotonic()
        log_at_cut = len(broker.log_text())
        acks.produce(topic, "during")
        warning = re.compile(
            rf"^\S+ \S+ WARNING cold_tier\.s3: object store s3://{bucket}/{prefix} at {re.escape(proxy.endpoint_url)} does not answer: "
            r"(put|head|list|get|delete|put_file|delete_many) of '[^']+' failed: (ReadTimeoutError: Read timeout on endpoint URL: \"[^\"]+\"|no answer within [\d.]+ s); "
            r"retrying, and probing until it answers$",
            re.M,
        )  # fmt: skip
        found = wait_until(lambda: warning.search(broker.log_text(), log_at_cut), "the WARNING about the store", WARNING_BOUND_S)
        assert time.monotonic() - cut < WARNING_BOUND_S
        # Segments rolled during the cut and wait for the bucket.
        lagging = wait_until(lambda: sum(p["upload_lag_segments"] for p in topic_state(http_port, topic).values()), "segments waiting")
        assert lagging >= PARTITIONS, lagging
        during_cut = broker.log_text()[log_at_cut:]
        assert len(re.findall(r" WARNING cold_tier\.s3: ", during_cut)) == 1, during_cut  # once, not a line per retry

        proxy.restore()
        restored_at = len(broker.log_text())
        acks.produce(topic, "after")  # rolls past every record produced during the cut
        assert acks.producer.flush(DEADLINE_S) == 0
        assert acks.errors == []
        state = wait_until(lambda: all_uploaded(http_port, topic), "every rolled segment to be uploaded", DRAIN_DEADLINE_S)
        back = re.compile(rf" INFO cold_tier\.s3: object store s3://{bucket}/{prefix} at {re.escape(proxy.endpoint_url)} answers again after [\d.]+ s \(\d+ request\(s\) failed\)$", re.M)
        assert back.search(broker.log_text(), restored_at), broker.log_text()[restored_at:]
        assert found.start() < restored_at
    finally:
        broker.close()

    assert len(acks.acked) == 3 * RECORDS_PER_PHASE * PARTITIONS
    for partition in range(PARTITIONS):
        segments, records = bucket_records(moto, bucket, prefix, topic, partition)
        remote_end = state[partition]["remote_end_offset"]
        # Contiguous from 0 to the active segment: every rolled segment is in the bucket.
        assert [base for base, _ in segments] == [0] + [end for _, end in segments[:-1]]
        assert segments[-1][1] == remote_end
        assert len(segments) >= 3, segments  # several rolled, some during the cut
        acked = {offset: kv for (p, offset), kv in acks.acked.items() if p == partition}
        # Exactly the acknowledged records below the bucket's end, each at its offset.
        assert records == {offset: kv for offset, kv in acked.items() if offset < remote_end}
        # Every record produced before the restore is among them.
        assert all(offset < remote_end for offset, (key, _) in acked.items() if not key.startswith(b"after-"))
        assert sorted(acked) == list(range(len(acked)))
