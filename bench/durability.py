"""The cost of durability: produce throughput and latency with write-ahead objects on and off,
and the PUT requests they send to the bucket, against moto's S3 server.

    python bench/durability.py [--quick] [--commit-interval-ms 5] [--partitions 1,32]

One moto S3 server (a subprocess of this script, so that its Python threads do not share a GIL
with the client's delivery callbacks) counts every PUT it receives (objects and multipart
parts). Two `diskless serve` brokers in turn use it as their bucket: one with write-ahead
objects on (`--wal-commit-interval-ms` as given), one with them off (`--wal-enable false`,
today's behaviour before issue I: acks=1 and acks=all both answered at the local append). Every
topic is tiered (the default), fresh, with N partitions, and written by confluent-kafka
(librdkafka), 512-byte values, no compression, librdkafka's default requests in flight
(`--in-flight` sets another: librdkafka sends one partition per ProduceRequest, so a producer
to many partitions limited to 5 in flight waits in line behind its own requests).

For each broker, each partition count and each acks setting measured (acks=1 and acks=all
with write-ahead objects; acks=1 without):

- throughput: records/s and MiB/s from the first produce() to flush() (linger.ms=5), every
  delivery a success;
- latency: a paced producer (linger.ms=0) at a steady rate, round-robin over the partitions;
  per record, the time from produce() to its delivery report; p50 and p99 in ms after a 10%
  warm-up;
- PUTs/s: the bucket's PUT requests divided by the elapsed time, during each phase.

Targets (issue I): acks=all p99 <= commit interval + 25 ms; acks=all throughput >= 70% of
acks=1's (both with write-ahead objects, same partitions); PUTs/s <= 1000 / commit interval
(plus the rare segment upload) whatever the number of partitions. The last line is one JSON
object with every figure and whether each target is met.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.integration.broker_process import BrokerProcess  # noqa: E402

MIB = 1024 * 1024
VALUE_BYTES = 512

# --- the bucket: moto in a subprocess that counts PUTs -------------------------------------------

_MOTO_CHILD = r"""
import sys, threading
sys.path.insert(0, sys.argv[1])
from moto.s3.models import S3Backend
from tests.integration.moto_s3 import MotoS3
puts, lock = [0], threading.Lock()
def counting(method):
    def counted(self, *args, **kwargs):
        with lock:
            puts[0] += 1
        return method(self, *args, **kwargs)
    return counted
S3Backend.put_object = counting(S3Backend.put_object)
S3Backend.upload_part = counting(S3Backend.upload_part)
s3 = MotoS3()
s3.start()
bucket = s3.create_bucket()
print(s3.port, bucket, flush=True)
for line in sys.stdin:  # one line asks for the count so far
    with lock:
        print(puts[0], flush=True)
"""


class CountingMoto:
    """moto's S3 server in a subprocess; `puts()` is how many PUTs it has received."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _MOTO_CHILD, str(REPO)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO
        )  # fmt: skip
        assert self.process.stdout is not None and self.process.stdin is not None
        port, self.bucket = self.process.stdout.readline().split()
        self.endpoint_url = f"http://127.0.0.1:{port}"

    def url(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{prefix}?endpoint_url={self.endpoint_url}&region=us-east-1"

    def env(self) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench-secret",
            "AWS_ENDPOINT_URL": self.endpoint_url, "AWS_REGION": "us-east-1",
        }  # fmt: skip

    def puts(self) -> int:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write("\n")
        self.process.stdin.flush()
        return int(self.process.stdout.readline())

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


# --- the client side ------------------------------------------------------------------------------


def create_topic(bootstrap: str, partitions: int) -> str:
    name = f"durability-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=30).values():
        future.result(timeout=30)
    return name


def value(n: int) -> bytes:
    head = b"%012d-" % n
    return head + b"x" * (VALUE_BYTES - len(head))


def in_flight_setting(in_flight: int | None) -> dict[str, int]:
    return {} if in_flight is None else {"max.in.flight.requests.per.connection": in_flight}


def throughput(bootstrap: str, topic: str, acks: str, records: int, in_flight: int | None = None) -> tuple[float, float]:
    """(records/s, seconds) for `records` produced as fast as librdkafka takes them."""
    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "batch.size": 256 * 1024,
        "queue.buffering.max.kbytes": 256 * 1024, "compression.type": "none", "enable.idempotence": False,
        **in_flight_setting(in_flight),
    })  # fmt: skip
    failures: list[str] = []

    def delivered(err, _msg) -> None:
        if err is not None:
            failures.append(str(err))

    payload = [value(n) for n in range(1024)]
    start = time.perf_counter()
    for n in range(records):
        while True:
            try:
                producer.produce(topic, payload[n % 1024], on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
        if n % 1000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0, "records left unsent"
    elapsed = time.perf_counter() - start
    assert not failures, failures[:3]
    return records / elapsed, elapsed


def latency(bootstrap: str, topic: str, partitions: int, acks: str, rate: int, seconds: float, in_flight: int | None = None) -> tuple[float, float, float]:
    """(p50 ms, p99 ms, seconds) of produce() to delivery report at `rate` records/s."""
    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0, "compression.type": "none",
        "enable.idempotence": False, **in_flight_setting(in_flight),
    })  # fmt: skip
    latencies_ms: list[float] = []
    failures: list[str] = []

    def delivered(err, sent: float) -> None:
        if err is not None:
            failures.append(str(err))
        else:
            latencies_ms.append((time.perf_counter() - sent) * 1000)

    count = int(rate * seconds)
    interval = 1 / rate
    start = time.perf_counter()
    for n in range(count):
        due = start + n * interval
        while (now := time.perf_counter()) < due:
            producer.poll(due - now)  # delivery reports are served while waiting for the next send
        sent = time.perf_counter()
        producer.produce(topic, value(n), partition=n % partitions, on_delivery=lambda err, _msg, s=sent: delivered(err, s))
    assert producer.flush(60) == 0, "records left unsent"
    elapsed = time.perf_counter() - start
    assert not failures, failures[:3]
    kept = sorted(latencies_ms[len(latencies_ms) // 10 :])
    p50 = statistics.median(kept)
    p99 = kept[min(len(kept) - 1, int(len(kept) * 0.99))]
    return p50, p99, elapsed


# --- the run ----------------------------------------------------------------------------------------


def measure(moto: CountingMoto, broker: BrokerProcess, label: str, partitions: int, acks: str, args: argparse.Namespace) -> dict[str, float]:
    topic = create_topic(broker.bootstrap, partitions)
    throughput(broker.bootstrap, topic, acks, args.warmup_records)
    puts_before = moto.puts()
    records_s, elapsed = throughput(broker.bootstrap, topic, acks, args.records, args.in_flight)
    flood_puts_s = (moto.puts() - puts_before) / elapsed
    puts_before = moto.puts()
    p50, p99, elapsed = latency(broker.bootstrap, topic, partitions, acks, args.rate, args.latency_s, args.in_flight)
    paced_puts_s = (moto.puts() - puts_before) / elapsed
    figures = {
        "records_s": round(records_s),
        "mib_s": round(records_s * VALUE_BYTES / MIB, 2),
        "p50_ms": round(p50, 2),
        "p99_ms": round(p99, 2),
        "puts_s_flood": round(flood_puts_s, 1),
        "puts_s_paced": round(paced_puts_s, 1),
    }
    print(
        f"{label:<14} {partitions:>3} partitions: {figures['records_s']:>8} rec/s {figures['mib_s']:>7} MiB/s   "
        f"p50 {p50:6.2f} ms  p99 {p99:6.2f} ms   PUTs/s {flood_puts_s:6.1f} flooding, {paced_puts_s:6.1f} at {args.rate} rec/s",
        flush=True,
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer records, shorter paced runs (under a minute)")
    parser.add_argument("--commit-interval-ms", type=int, default=5, help="--wal-commit-interval-ms of the broker")
    parser.add_argument("--partitions", default="1,32", help="partition counts to measure, comma-separated")
    parser.add_argument("--records", type=int, default=None, help="records of each throughput run (default 200000; 30000 with --quick)")
    parser.add_argument("--rate", type=int, default=None, help="records/s of the paced latency run (default 1000; 500 with --quick)")
    parser.add_argument("--latency-s", type=float, default=None, help="length of the paced run (default 10; 2 with --quick)")
    parser.add_argument("--in-flight", type=int, default=None,
                        help="max.in.flight.requests.per.connection of the producers (default: librdkafka's own, "
                             "1000000; 5 is the most an idempotent producer may have)")  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the brokers' data directories and logs")
    args = parser.parse_args()
    args.records = args.records or (30_000 if args.quick else 200_000)
    args.rate = args.rate or (500 if args.quick else 1000)
    args.latency_s = args.latency_s or (2.0 if args.quick else 10.0)
    args.warmup_records = min(5_000, args.records // 5)
    partition_counts = [int(p) for p in args.partitions.split(",")]
    interval = args.commit_interval_ms

    work = Path(tempfile.mkdtemp(prefix="bench-durability-"))
    moto = CountingMoto()
    results: dict[str, dict[str, float]] = {}
    try:
        modes = [
            ("wal", ["--wal-commit-interval-ms", str(interval)], [("acks1_wal", "1"), ("acksall_wal", "all")]),
            ("nowal", ["--wal-enable", "false"], [("acks1_nowal", "1")]),
        ]
        for name, flags, runs in modes:
            broker = BrokerProcess(
                work / name, "--object-store", moto.url(name), *flags, env=moto.env()
            ).start()  # fmt: skip
            try:
                for partitions in partition_counts:
                    for label, acks in runs:
                        results[f"{label}_p{partitions}"] = measure(moto, broker, label, partitions, acks, args)
            finally:
                broker.stop()
    finally:
        moto.close()
        if not args.keep:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"data directories and logs in {work}")

    p99_bound = interval + 25
    puts_bound = 1000 / interval
    acksall_p99 = max(results[f"acksall_wal_p{p}"]["p99_ms"] for p in partition_counts)
    ratio = min(results[f"acksall_wal_p{p}"]["records_s"] / results[f"acks1_wal_p{p}"]["records_s"] for p in partition_counts)
    ratio_nowal = min(results[f"acksall_wal_p{p}"]["records_s"] / results[f"acks1_nowal_p{p}"]["records_s"] for p in partition_counts)
    puts_max = max(max(r["puts_s_flood"], r["puts_s_paced"]) for k, r in results.items() if "_wal_" in k)
    summary = {
        "commit_interval_ms": interval,
        "value_bytes": VALUE_BYTES,
        "acksall_p99_ms": acksall_p99,
        "acksall_p99_bound_ms": p99_bound,
        "acksall_over_acks1_throughput": round(ratio, 3),
        "acksall_wal_over_acks1_nowal_throughput": round(ratio_nowal, 3),
        "puts_s_max": puts_max,
        "puts_s_bound": puts_bound,
        "target_p99_met": acksall_p99 <= p99_bound,
        "target_throughput_met": ratio >= 0.7,
        "target_puts_met": puts_max <= puts_bound,
    }
    print(
        f"acks=all p99 {acksall_p99} ms (bound {p99_bound}); acks=all / acks=1 throughput {ratio:.2f} (>= 0.70); "
        f"PUTs/s at most {puts_max} (bound {puts_bound:.0f})"
    )
    print(json.dumps({**summary, **{f"{k}_{m}": v for k, r in results.items() for m, v in r.items()}}))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
