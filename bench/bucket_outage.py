"""Catching up after a bucket outage: how long the upload backlog takes to drain once an
unreachable bucket answers again.

    python bench/bucket_outage.py [--quick] [--rounds 3] [--outage-s 30] [--modes blackhole,refuse]

One moto S3 server (a subprocess of this script, speaking HTTP/1.1 keep-alive as S3 and MinIO
do, so the broker keeps pooled connections) sits behind a byte-level TCP proxy this script
controls (tests/integration/store_proxy.py), and one `diskless serve` uses the proxy's
address as its bucket's endpoint. A topic of `--partitions` partitions with small segments
(`--segment-bytes`) is written by a confluent-kafka producer (acks=1, so produce goes on
while the bucket is away; write-ahead objects on, the default) at `--rate-kib-s`.

Each round: produce with the bucket up for a few seconds, cut the proxy for `--outage-s`
while producing, then restore it and stop producing. The backlog is the rolled segments
waiting for the bucket (the broker's /metrics gauge kafka_server_brokertopicmetrics_
remotecopylagsegments, summed over the topic's partitions) and the appended bytes not yet in
a committed write-ahead object (diskless_wal_pending_bytes). Measured from the restore, read
every 100 ms: seconds until the segment backlog is zero (`drain_s`), and until the write-ahead
backlog is zero (`wal_drain_s`). Two ways to cut, alternating by round (`--modes`):

- blackhole: the proxy accepts connections and forwards nothing; connections open during the
  cut stay dead after it (the broker must give up on them and connect again);
- refuse: every connection is reset and new ones are reset at once (the port is closed).

Target (issue M): every round's `drain_s` <= 10. Also printed: how long after the cut the
broker logged its first WARNING naming the store (`warn_after_s`; target: a few seconds).
The last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.integration.broker_process import BrokerProcess, free_port  # noqa: E402
from tests.integration.store_proxy import StoreProxy  # noqa: E402

KIB = 1024
VALUE_BYTES = 1024
POLL_S = 0.1
TARGET_DRAIN_S = 10.0

_MOTO_CHILD = r"""
import sys
sys.path.insert(0, sys.argv[1])
from tests.integration.moto_s3 import MotoS3
s3 = MotoS3()
s3.start()
print(s3.port, s3.create_bucket(), flush=True)
sys.stdin.read()  # until the parent goes
"""


class Moto:
    def __init__(self, work: Path) -> None:
        # moto's own errors (its werkzeug logs a traceback when two PUTs of one key race, as a
        # retried PUT and the one it replaced may) go to a file of the work directory.
        with open(work / "moto.log", "wb") as errors:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _MOTO_CHILD, str(REPO)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors,
                text=True, cwd=REPO,
            )  # fmt: skip
        assert self.process.stdout is not None
        port, self.bucket = self.process.stdout.readline().split()
        self.port = int(port)

    def env(self) -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench-secret", "AWS_REGION": "us-east-1"}

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


class SteadyProducer:
    """`rate_kib_s` KiB/s of 1 KiB records, round-robin over the partitions, while `running`."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate_kib_s: int) -> None:
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5, "compression.type": "none",
            "enable.idempotence": False, "message.timeout.ms": 300_000,
        })  # fmt: skip
        self.topic = topic
        self.partitions = partitions
        self.interval_s = VALUE_BYTES / (rate_kib_s * KIB)
        self.running = threading.Event()
        self.acked = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="producer")
        self._thread.start()

    def _delivered(self, err, _msg) -> None:
        if err is None:
            self.acked += 1
        else:
            self.errors.append(str(err))

    def _run(self) -> None:
        n = 0
        next_at = time.perf_counter()
        while not self._stop.is_set():
            if not self.running.is_set():
                self.producer.poll(0.05)
                next_at = time.perf_counter()
                continue
            while (now := time.perf_counter()) < next_at:
                self.producer.poll(next_at - now)
            value = b"%012d-" % n
            value += b"v" * (VALUE_BYTES - len(value))
            try:
                self.producer.produce(self.topic, value, partition=n % self.partitions, on_delivery=self._delivered)
            except BufferError:
                self.producer.poll(0.05)
                continue
            n += 1
            next_at += self.interval_s

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.producer.flush(60)


def scrape(http_port: int, topic: str) -> tuple[int, int]:
    """(segments waiting for the bucket over the topic's partitions, write-ahead pending bytes)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    segments = 0
    pattern = re.compile(r'^kafka_server_brokertopicmetrics_remotecopylagsegments\{([^}]*)\} (\S+)$', re.M)
    for labels, value in pattern.findall(text):
        if f'topic="{topic}"' in labels:
            segments += int(float(value))
    wal = re.search(r"^diskless_wal_pending_bytes (\S+)$", text, re.M)
    return segments, int(float(wal.group(1))) if wal else 0


def first_warning_after(log_text: str, since_wall_s: float) -> float | None:
    """Seconds from `since_wall_s` to the first WARNING line of the broker's log about the
    object store after it (the log's own timestamps)."""
    for line in log_text.splitlines():
        if " WARNING " not in line or ("object store" not in line and "bucket" not in line):
            continue
        stamp = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)[,.](\d{3})", line)
        if stamp is None:
            continue
        at = time.mktime(time.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S")) + int(stamp.group(2)) / 1000
        if at >= since_wall_s:
            return at - since_wall_s
    return None


def run_round(number: int, mode: str, proxy: StoreProxy, broker: BrokerProcess, http_port: int, topic: str,
              producer: SteadyProducer, args: argparse.Namespace) -> dict[str, float | int | str | None]:  # fmt: skip
    settle_deadline = time.monotonic() + args.deadline_s
    while scrape(http_port, topic) != (0, 0) and time.monotonic() < settle_deadline:
        time.sleep(POLL_S)  # the previous round's backlog, if it outlived its deadline
    producer.running.set()
    time.sleep(args.warmup_s)  # a benchmark's steady phase: produce with the bucket up
    cut_wall = time.time()
    getattr(proxy, mode)()
    time.sleep(args.outage_s)  # the outage itself
    backlog_segments, backlog_wal = scrape(http_port, topic)
    producer.running.clear()
    proxy.restore()
    restored = time.monotonic()
    drain_s = wal_drain_s = None
    while time.monotonic() - restored < args.deadline_s:
        segments, wal = scrape(http_port, topic)
        elapsed = time.monotonic() - restored
        if drain_s is None and segments == 0:
            drain_s = elapsed
        if wal_drain_s is None and wal == 0:
            wal_drain_s = elapsed
        if drain_s is not None and wal_drain_s is not None:
            break
        time.sleep(POLL_S)
    warn_after_s = first_warning_after(broker.log_text(), cut_wall)
    figures = {
        "round": number, "mode": mode, "backlog_segments": backlog_segments, "backlog_wal_bytes": backlog_wal,
        "drain_s": None if drain_s is None else round(drain_s, 2),
        "wal_drain_s": None if wal_drain_s is None else round(wal_drain_s, 2),
        "warn_after_s": None if warn_after_s is None else round(warn_after_s, 2),
    }  # fmt: skip
    show = lambda v: f">{args.deadline_s:.0f}" if v is None else f"{v:6.2f}"  # noqa: E731
    print(f"round {number} {mode:<9}: backlog {backlog_segments:3d} segments, {backlog_wal / KIB / KIB:6.2f} MiB write-ahead;"
          f" drained in {show(figures['drain_s'])} s (write-ahead {show(figures['wal_drain_s'])} s);"
          f" first WARNING {show(figures['warn_after_s'])} s after the cut", flush=True)  # fmt: skip
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one round per mode, a 10 s outage (under a minute)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per mode (default 3; 1 with --quick)")
    parser.add_argument("--outage-s", type=float, default=None, help="how long the bucket is away (default 30; 10 with --quick)")
    parser.add_argument("--modes", default="blackhole,refuse", help="ways to cut, comma-separated: blackhole, refuse")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--segment-bytes", type=int, default=1024 * KIB, help="segment.bytes of the topic")
    parser.add_argument("--rate-kib-s", type=int, default=512, help="produce rate")
    parser.add_argument("--warmup-s", type=float, default=3.0, help="produce with the bucket up before each cut")
    parser.add_argument("--deadline-s", type=float, default=300.0, help="give up measuring a round's drain after this")
    parser.add_argument("--keep", action="store_true", help="keep the broker's data directory and log")
    args = parser.parse_args()
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.outage_s = args.outage_s or (10.0 if args.quick else 30.0)
    if args.quick:
        args.deadline_s = min(args.deadline_s, 60.0)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for mode in modes:
        if mode not in ("blackhole", "refuse"):
            parser.error(f"unknown mode {mode!r}")

    work = Path(tempfile.mkdtemp(prefix="bench-bucket-outage-"))
    moto = Moto(work)
    proxy = StoreProxy(moto.port)
    http_port = free_port()
    url = f"s3://{moto.bucket}/outage?endpoint_url={proxy.endpoint_url}&region=us-east-1"
    broker = BrokerProcess(work / "broker", "--object-store", url, "--http", f"127.0.0.1:{http_port}", env=moto.env()).start()
    rounds: list[dict[str, float | int | str | None]] = []
    producer = None
    try:
        topic = f"outage-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        configs = {"segment.bytes": str(args.segment_bytes)}
        for future in admin.create_topics([NewTopic(topic, args.partitions, 1, config=configs)], operation_timeout=30).values():
            future.result(timeout=30)
        print(f"{args.partitions} partitions, segment.bytes {args.segment_bytes}, {args.rate_kib_s} KiB/s acks=1; "
              f"outage {args.outage_s:.0f} s; broker {broker.bootstrap}, bucket via proxy {proxy.endpoint_url}", flush=True)  # fmt: skip
        producer = SteadyProducer(broker.bootstrap, topic, args.partitions, args.rate_kib_s)
        number = 0
        for _ in range(args.rounds):
            for mode in modes:
                number += 1
                rounds.append(run_round(number, mode, proxy, broker, http_port, topic, producer, args))
    finally:
        if producer is not None:
            producer.close()
        broker.close()
        proxy.close()
        moto.close()
        if args.keep:
            print(f"data directory, broker log and moto's log in {work}")
        else:
            import shutil

            shutil.rmtree(work, ignore_errors=True)

    drains = [r["drain_s"] if r["drain_s"] is not None else float("inf") for r in rounds]
    wal_drains = [r["wal_drain_s"] if r["wal_drain_s"] is not None else float("inf") for r in rounds]
    warns = [r["warn_after_s"] if r["warn_after_s"] is not None else float("inf") for r in rounds]
    summary: dict[str, object] = {
        "outage_s": args.outage_s,
        "partitions": args.partitions,
        "rounds": len(rounds),
        "drain_s_max": max(drains),
        "wal_drain_s_max": max(wal_drains),
        "warn_after_s_max": max(warns),
        "backlog_segments_min": min(int(r["backlog_segments"] or 0) for r in rounds),
        "target_drain_met": max(drains) <= TARGET_DRAIN_S,
        "producer_errors": len(producer.errors) if producer else 0,
    }
    for mode in modes:
        summary[f"drain_s_max_{mode}"] = max(d for d, r in zip(drains, rounds) if r["mode"] == mode)
    summary["drain_s"] = [r["drain_s"] for r in rounds]
    print(f"max drain {summary['drain_s_max']} s (target <= {TARGET_DRAIN_S:.0f}); max write-ahead drain "
          f"{summary['wal_drain_s_max']} s; first WARNING at most {summary['warn_after_s_max']} s after a cut")  # fmt: skip
    print(json.dumps(summary).replace("Infinity", "null"))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
