"""The broker's memory: resident set size idle, under a produce flood, and under a backfill from
the bucket.

    python bench/memory.py [--quick] [--records N] [--bucket moto|file]

One `diskless serve` on embedded defaults, its bucket moto's S3 server (in a subprocess, so
its memory is not the broker's) or a local directory. A sampler reads the broker's VmRSS from
/proc every 20 ms. Phases:

- idle: 3 s after start-up, nothing connected;
- flood: confluent-kafka produces `--records` 100-byte records (acks=1, linger.ms=5) to a topic
  of 3 partitions with 4 MiB segments, which roll, upload and leave the disk at once
  (local.retention.ms=0); peak RSS while producing, and once every segment is uploaded;
- backfill: one consumer reads the topic from offset 0, all but each active segment served
  from the bucket; peak RSS while reading.

Target (issue M): idle <= 60 MiB, and bounded under load and backfill (the peaks are
reported; the bound is what they stay under, not a function of the records written). The last
line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from failover import Bucket  # noqa: E402 (moto in a subprocess, or a directory: bench/failover.py's)
from tests.integration.broker_process import BrokerProcess  # noqa: E402

MIB = 1024 * 1024
SAMPLE_S = 0.02
TARGET_IDLE_MIB = 60

def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


class Sampler:
    """The highest VmRSS seen since the last `reset()`, sampled every SAMPLE_S."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.peak = max(self.peak, rss_mib(self.pid))

    def reset(self) -> None:
        self.peak = rss_mib(self.pid)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def wait_until(condition, what: str, deadline_s: float = 120.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {deadline_s:.0f} s waiting for {what}")
        time.sleep(0.1)


def produce(bootstrap: str, topic: str, records: int, value: bytes = b"v" * 100, partitions: int = 3) -> None:
    """`records` copies of `value`, round-robin over `partitions` (acks=1, linger.ms=5), as fast as they go."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5, "compression.type": "none"})
    for n in range(records):
        while True:
            try:
                producer.produce(topic, value, partition=n % partitions)
                break
            except BufferError:
                producer.poll(0.01)
        if n % 1000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError("records left unsent")


def consume(bootstrap: str, topic: str, records: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"mem-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    seen = 0
    deadline = time.monotonic() + 300
    while seen < records:
        if time.monotonic() > deadline:
            raise TimeoutError(f"consumed {seen} of {records}")
        seen += sum(1 for m in consumer.consume(1000, 1.0) if m.error() is None)
    consumer.close()


def local_log_bytes(data_dir: Path, topic: str) -> int:
    return sum(f.stat().st_size for f in data_dir.glob(f"logs/{topic}-*/*.log"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="500,000 records instead of 2,000,000")
    parser.add_argument("--records", type=int, default=None)
    parser.add_argument("--bucket", choices=("moto", "file"), default="moto")
    args = parser.parse_args()
    records = args.records or (500_000 if args.quick else 2_000_000)

    work = Path(tempfile.mkdtemp(prefix="bench-memory-"))
    bucket = Bucket(args.bucket, work)
    broker = BrokerProcess(work / "data", "--object-store", bucket.url("memory"), env=bucket.env()).start()
    sampler = Sampler(broker.process.pid)
    figures: dict[str, float] = {}
    try:
        time.sleep(3)  # idle means after start-up's work has settled: a fixed wait is the measurement
        figures["idle_mib"] = round(rss_mib(broker.process.pid), 1)
        print(f"idle: {figures['idle_mib']} MiB", flush=True)

        topic = f"mem-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        configs = {"segment.bytes": str(4 * MIB), "local.retention.ms": "0"}
        admin.create_topics([NewTopic(topic, 3, 1, config=configs)])[topic].result(30)
        sampler.reset()
        started = time.perf_counter()
        produce(broker.bootstrap, topic, records)
        figures["flood_peak_mib"] = round(sampler.peak, 1)
        figures["flood_s"] = round(time.perf_counter() - started, 1)
        wait_until(lambda: local_log_bytes(broker.data_dir, topic) < 3 * 4 * MIB, "rolled segments to upload and leave the disk")
        figures["after_upload_mib"] = round(rss_mib(broker.process.pid), 1)
        print(f"flood of {records:,} records: peak {figures['flood_peak_mib']} MiB in {figures['flood_s']} s; "
              f"{figures['after_upload_mib']} MiB once uploaded", flush=True)  # fmt: skip

        sampler.reset()
        started = time.perf_counter()
        consume(broker.bootstrap, topic, records)
        figures["backfill_peak_mib"] = round(sampler.peak, 1)
        figures["backfill_s"] = round(time.perf_counter() - started, 1)
        print(f"backfill of {records:,} records from the bucket: peak {figures['backfill_peak_mib']} MiB in {figures['backfill_s']} s", flush=True)
    finally:
        sampler.stop()
        broker.stop()
        bucket.close()
        shutil.rmtree(work, ignore_errors=True)
    figures["records"] = records
    figures["target_idle_mib"] = TARGET_IDLE_MIB
    figures["target_idle_met"] = figures["idle_mib"] <= TARGET_IDLE_MIB
    print(json.dumps(figures))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
