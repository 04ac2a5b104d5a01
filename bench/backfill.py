"""A backfill from the bucket beside the hot tail: does a consumer reading one topic's history
from the bucket slow the end-to-end latency of another topic's live records?

    python bench/backfill.py [--quick] [--bucket moto|file] [--history-mib N] [--rate R] [--window-s S]

One `diskless serve` on embedded defaults, its bucket moto's S3 server (in a subprocess) or a
local directory. A history topic of `--history-mib` (1 KiB records, 8 MiB segments that leave
the disk once uploaded: local.retention.ms=0) lives only in the bucket. Then, on a hot topic of
one partition, confluent-kafka produces `--rate` records/s (linger.ms=0, acks=all, each value
carrying its send time) and a consumer in the same process (fetch.wait.max.ms=10) takes each
record's latency from send to receipt, for `--window-s` seconds twice:

- alone: nothing else runs;
- backfill: kcat reads the history topic from offset 0 as fast as it can (again from the start
  when it is through), all of it from the bucket.

With `--fetch-quota-mib`, the broker holds fetches from the bucket to that rate
(remote.log.manager.fetch.max.bytes.per.second, KIP-956; Kafka's 11 one-second windows, so the
backfill first reads up to 10 s worth at once).

Target (issue M): the hot tail's p99 during the backfill within 2x of alone. The figures include
the clients' CPU: producer, both consumers, the broker and moto share this machine's cores. The
last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
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
from memory import local_log_bytes, produce, wait_until  # noqa: E402
from tests.integration.broker_process import BrokerProcess  # noqa: E402

MIB = 1024 * 1024
SEGMENT_BYTES = 8 * MIB
HISTORY_VALUE = b"h" * 1024
SENT_AT = struct.Struct(">q")
TARGET_RATIO = 2.0


class Backfill:
    """kcat reading `topic` from offset 0 to its end, again and again until `stop()`: a reader in
    C, so that the machine's cores go to the broker and not to a Python consumer's loop."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.rounds = 0
        self.started = time.monotonic()
        self._command = ["kcat", "-C", "-b", bootstrap, "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q"]
        self._stopped = threading.Event()
        self._process: subprocess.Popen | None = None
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.is_set():
            self._process = subprocess.Popen(self._command, stdout=subprocess.DEVNULL)
            if self._process.wait() == 0 and not self._stopped.is_set():
                self.rounds += 1

    def stop(self) -> None:
        self._stopped.set()
        if self._process is not None:
            self._process.kill()
        self._thread.join(30)


def hot_window(bootstrap: str, topic: str, rate: int, window_s: float) -> list[float]:
    """Latencies (ms) of the records produced at `rate` for `window_s` seconds."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"hot-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
        "fetch.wait.max.ms": 10, "auto.offset.reset": "latest",
    })  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, -1)])  # the end: only what is produced from now on
    consumer.consume(1, 1.0)  # the assignment takes effect
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    producer.list_topics(topic, timeout=10)
    latencies: list[float] = []
    total = int(rate * window_s)
    done = threading.Event()

    def receive() -> None:
        while len(latencies) < total and not done.is_set():
            message = consumer.poll(0.05)  # one at a time: consume(n) would hold records until n arrived
            if message is not None and message.error() is None:
                latencies.append((time.monotonic_ns() - SENT_AT.unpack_from(message.value())[0]) / 1e6)

    receiver = threading.Thread(target=receive)
    receiver.start()
    padding = b"p" * 92
    start = time.monotonic()
    for n in range(total):
        delay = start + n / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        producer.produce(topic, SENT_AT.pack(time.monotonic_ns()) + padding, partition=0)
        producer.poll(0)
    producer.flush(30)
    receiver.join(timeout=30)
    done.set()
    consumer.close()
    if len(latencies) != total:
        raise RuntimeError(f"received {len(latencies)} of {total} hot records")
    return latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="64 MiB of history and 5 s windows")
    parser.add_argument("--bucket", choices=("moto", "file"), default="moto")
    parser.add_argument("--history-mib", type=int, default=None, help="history size (default 256; 64 with --quick)")
    parser.add_argument("--rate", type=int, default=1000, help="hot records per second")
    parser.add_argument("--window-s", type=float, default=None, help="each measured window (default 15; 5 with --quick)")
    parser.add_argument("--fetch-quota-mib", type=float, default=None,
                        help="the broker's remote.log.manager.fetch.max.bytes.per.second, in MiB/s (default: none, Kafka's default)")
    args = parser.parse_args()
    if shutil.which("kcat") is None:
        sys.exit("bench/backfill.py: kcat is not installed (it reads the backfill; `make test` installs it)")
    history_mib = args.history_mib or (64 if args.quick else 256)
    window_s = args.window_s or (5.0 if args.quick else 15.0)
    history_records = history_mib * MIB // len(HISTORY_VALUE)

    work = Path(tempfile.mkdtemp(prefix="bench-backfill-"))
    bucket = Bucket(args.bucket, work)
    quota = [] if args.fetch_quota_mib is None else ["--remote-log-manager-fetch-max-bytes-per-second", str(int(args.fetch_quota_mib * MIB))]
    broker = BrokerProcess(work / "data", "--object-store", bucket.url("backfill"), *quota, env=bucket.env()).start()
    backfill: Backfill | None = None
    figures: dict[str, float] = {}
    try:
        history, hot = f"history-{uuid.uuid4().hex[:8]}", f"hot-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        futures = admin.create_topics([
            NewTopic(history, 1, 1, config={"segment.bytes": str(SEGMENT_BYTES), "local.retention.ms": "0"}), NewTopic(hot, 1, 1),
        ])  # fmt: skip
        for future in futures.values():
            future.result(30)
        started = time.perf_counter()
        produce(broker.bootstrap, history, history_records, value=HISTORY_VALUE, partitions=1)
        wait_until(lambda: local_log_bytes(broker.data_dir, history) <= SEGMENT_BYTES, "the history to leave the disk for the bucket")
        print(f"history: {history_mib} MiB in the bucket after {time.perf_counter() - started:.1f} s", flush=True)

        alone = hot_window(broker.bootstrap, hot, args.rate, window_s)
        backfill = Backfill(broker.bootstrap, history)
        time.sleep(1.0)  # the backfill is under way: its first fetches go out at once, a fixed lead is the measurement
        during = hot_window(broker.bootstrap, hot, args.rate, window_s)
        for name, latencies in (("alone", alone), ("backfill", during)):
            figures[f"{name}_p50_ms"] = round(percentile(latencies, 0.5), 2)
            figures[f"{name}_p99_ms"] = round(percentile(latencies, 0.99), 2)
            print(f"hot tail, {name:<8}: p50 {figures[f'{name}_p50_ms']:7.2f} ms  p99 {figures[f'{name}_p99_ms']:7.2f} ms", flush=True)
    finally:
        if backfill is not None:
            backfill.stop()
            figures["backfill_rounds"] = backfill.rounds
            figures["backfill_mib_s"] = round(backfill.rounds * history_mib / (time.monotonic() - backfill.started), 1)
        broker.stop()
        bucket.close()
        shutil.rmtree(work, ignore_errors=True)
    figures["p99_ratio"] = round(figures["backfill_p99_ms"] / figures["alone_p99_ms"], 2)
    figures["target_ratio"] = TARGET_RATIO
    figures["target_met"] = figures["p99_ratio"] <= TARGET_RATIO
    print(f"p99 during the backfill / alone: {figures['p99_ratio']}x (target <= {TARGET_RATIO}x)")
    setup = {"bucket": args.bucket, "history_mib": history_mib, "rate": args.rate, "window_s": window_s, "fetch_quota_mib": args.fetch_quota_mib}
    print(json.dumps({**setup, **figures}))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
