"""acks=all means durable in the bucket: a broker killed with SIGKILL at random moments, its
data directory deleted each time, restarted on an empty disk with the same bucket and
metadata, loses no acknowledged record.

The account, at the end, from a consumer reading each partition from offset 0 to its high
watermark: acknowledged and missing (must be 0), acknowledged at another offset than the one
acknowledged (0), duplicates of a value (0: the producer is idempotent), values never sent (0).
Against moto's S3 server and against the local-directory store.
"""

from __future__ import annotations

import random
import shutil
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from .broker_process import BrokerProcess
from .test_tiering_reads import DEADLINE_S, BucketView, create_topic, moto, open_bucket  # noqa: F401

PARTITIONS = 2
KILLS = 5


class AckingProducer(threading.Thread):
    """An idempotent acks=all producer writing "<n>" values until stopped; records every ack."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.topic = topic
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 2,
            "message.timeout.ms": 120_000, "retry.backoff.ms": 50, "reconnect.backoff.max.ms": 200,
        })  # fmt: skip
        self.sent = 0
        self.acked: dict[bytes, tuple[int, int]] = {}  # value -> (partition, offset)
        self.errors: list[str] = []
        self.stopping = threading.Event()
        self.lock = threading.Lock()

    def _delivered(self, err: KafkaError | None, msg) -> None:
        with self.lock:
            if err is not None:
                self.errors.append(str(err))
            else:
                self.acked[msg.value()] = (msg.partition(), msg.offset())

    def acks(self) -> int:
        with self.lock:
            return len(self.acked)

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.producer.produce(self.topic, b"%d" % self.sent, partition=self.sent % PARTITIONS, on_delivery=self._delivered)
                self.sent += 1
            except BufferError:
                self.producer.poll(0.05)
                continue
            if self.sent % 50 == 0:
                self.producer.poll(0.005)  # a steady stream, not a flood: the kills land mid-stream
        assert self.producer.flush(DEADLINE_S * 4) == 0


def read_all(bootstrap: str, topic: str) -> dict[int, list[tuple[int, bytes]]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=DEADLINE_S)[1] for p in range(PARTITIONS)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + DEADLINE_S * 2
        while any((got[p][-1][0] + 1 if got[p] else 0) < ends[p] for p in got):
            assert time.monotonic() < deadline, {p: (len(got[p]), ends[p]) for p in got}
            msg = consumer.poll(0.1)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got[msg.partition()].append((msg.offset(), msg.value()))
        return got
    finally:
        consumer.close()


@pytest.fixture(params=["file", "s3"])
def bucket(request, tmp_path) -> BucketView:
    moto_server = request.getfixturevalue("moto") if request.param == "s3" else None
    view = open_bucket(request.param, moto_server, tmp_path / "bucket")
    yield view
    view.close()


@pytest.mark.slow
def test_sigkill_and_a_deleted_disk_lose_no_acknowledged_record(bucket, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    metadata = f"sqlite:///{(tmp_path / 'metadata' / 'metadata.db').resolve()}"
    (tmp_path / "metadata").mkdir()
    broker = BrokerProcess(
        data_dir, "--object-store", bucket.url, "--metadata", metadata, "--log-retention-check-interval-ms", "200",
        # A deleted disk is a new directory: it waits for the old session to expire, kept short here.
        "--broker-session-timeout-ms", "1500", "--broker-heartbeat-interval-ms", "200", env=bucket.env
    ).start()
    try:
        # Small segments: history moves into the bucket as segments while the tail lives in
        # write-ahead objects, so both paths are exercised by the kills.
        topic = create_topic(broker.bootstrap, PARTITIONS, {"segment.bytes": "65536"})
        producer = AckingProducer(broker.bootstrap, topic)
        producer.start()
        rng = random.Random(7)
        for _ in range(KILLS):
            target = producer.acks() + rng.randrange(500, 3000)
            deadline = time.monotonic() + DEADLINE_S * 2
            while producer.acks() < target:
                assert time.monotonic() < deadline, (producer.acks(), target, producer.errors[-3:])
                time.sleep(0.01)  # polling a counter another thread moves; nothing to wait on
            broker.kill()
            shutil.rmtree(data_dir)
            broker.start()
        producer.stopping.set()
        producer.join(DEADLINE_S * 5)
        assert not producer.is_alive()
        assert producer.errors == []

        got = read_all(broker.bootstrap, topic)
        seen: dict[bytes, list[tuple[int, int]]] = {}
        for partition, records in got.items():
            assert [offset for offset, _ in records] == list(range(len(records)))  # no gaps, from 0
            for offset, value in records:
                seen.setdefault(value, []).append((partition, offset))
        missing = [v for v in producer.acked if v not in seen]
        moved = [v for v, at in producer.acked.items() if v in seen and seen[v] != [at]]
        duplicates = [v for v, at in seen.items() if len(at) > 1]
        garbage = [v for v in seen if not (v.isdigit() and int(v) < producer.sent)]
        assert (len(missing), len(moved), len(duplicates), len(garbage)) == (0, 0, 0, 0), (missing[:5], moved[:5], duplicates[:5], garbage[:5])
        assert len(producer.acked) >= KILLS * 500
        assert "rebuilt" in broker.log_text()  # the tail came back from write-ahead objects
    finally:
        broker.close()
