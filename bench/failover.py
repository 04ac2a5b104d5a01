"""Failover of a three-broker cluster: how long produce to a partition stalls when its leader
is killed (SIGKILL) or stopped (SIGTERM, controlled shutdown), and produce/consume throughput
of three brokers beside one, with the same clients.

    python bench/failover.py [--quick] [--kills 10] [--broker-session-timeout-ms 3000]
                             [--broker-heartbeat-interval-ms 500] [--bucket moto|file]

The cluster: a throwaway PostgreSQL server (tests/integration/postgres_server.py, durable as in
production), one bucket (moto's S3 server in a subprocess, so its threads share no GIL with
the client; or `--bucket file`, a local directory all brokers share) and three `diskless
serve --node-id N` processes on 127.0.0.1.

Failover. A topic of three partitions (one per broker); a steady confluent-kafka producer
(acks=all, enable.idempotence=true, default retries, linger.ms=0) sends one 100-byte record to
partition 0 every 5 ms. Each round signals the broker leading partition 0 and measures the
stall: the longest time a record waited for its acknowledgement, counted from the signal for
records produced before it (every record stuck behind the dead leader waits until the new
leader answers, so this is the time until produce succeeds again). The killed broker is then
restarted with its data directory and the next round kills the new leader. For each round the
broker logs tell where the time went: when the controller gave the partition away, and when
the new leader had opened it (rebuilt from the bucket); the rest is the client finding it.

Targets (issue J): SIGKILL max <= broker.session.timeout.ms + 1 s; SIGTERM max < 1 s; no
produce error surfaces.

Throughput: a fresh cluster of 1 and of 3 brokers; a topic of 6 partitions; one producer
(acks=all, idempotent, linger.ms=5) sends `--records` 512-byte records as fast as it can,
then one consumer reads them all from the beginning. MiB/s of each, and 3-broker/1-broker.
Beside them, the CPU each side spent per MiB: the brokers' (all of them, from /proc) and the
client process's (librdkafka's threads included). On a machine with fewer cores than busy
processes the MiB/s ratio also measures the client: librdkafka's producer spends two to four
times the CPU per MiB with three brokers as with one (its broker threads wake far more often),
and that CPU is taken from the brokers. The brokers' CPU ratio is the cost of the cluster path.

The last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.integration.broker_process import BrokerProcess  # noqa: E402
from tests.integration.postgres_server import PostgresServer  # noqa: E402

MIB = 1024 * 1024
PRODUCE_EVERY_S = 0.005
DEADLINE_S = 60

# --- the bucket ------------------------------------------------------------------------------------

_MOTO_CHILD = r"""
import sys
sys.path.insert(0, sys.argv[1])
from tests.integration.moto_s3 import MotoS3
s3 = MotoS3()
s3.start()
print(s3.port, s3.create_bucket(), flush=True)
sys.stdin.read()  # until the parent goes
"""


class Bucket:
    """moto's S3 server in a subprocess, or a local directory."""

    def __init__(self, kind: str, work: Path) -> None:
        self.kind = kind
        self.process: subprocess.Popen | None = None
        if kind == "moto":
            self.process = subprocess.Popen(
                [sys.executable, "-c", _MOTO_CHILD, str(REPO)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO
            )  # fmt: skip
            assert self.process.stdout is not None
            port, self.bucket = self.process.stdout.readline().split()
            self.endpoint_url = f"http://127.0.0.1:{port}"
        else:
            self.root = work / "bucket"
            self.root.mkdir()

    def url(self, prefix: str) -> str:
        if self.kind == "moto":
            return f"s3://{self.bucket}/{prefix}?endpoint_url={self.endpoint_url}&region=us-east-1"
        return f"file://{self.root / prefix}"

    def env(self) -> dict[str, str]:
        if self.kind != "moto":
            return {}
        return {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench-secret", "AWS_REGION": "us-east-1"}

    def close(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()


# --- the cluster -----------------------------------------------------------------------------------


class Cluster:
    def __init__(self, work: Path, name: str, size: int, metadata_url: str, bucket: Bucket, args: argparse.Namespace) -> None:
        self.brokers = {
            node: BrokerProcess(
                work / f"{name}-broker-{node}", "--node-id", str(node), "--metadata", metadata_url,
                "--object-store", bucket.url(name),
                "--broker-session-timeout-ms", str(args.broker_session_timeout_ms),
                "--broker-heartbeat-interval-ms", str(args.broker_heartbeat_interval_ms),
                env=bucket.env(),
            )  # fmt: skip
            for node in range(1, size + 1)
        }

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def start(self) -> Cluster:
        for broker in self.brokers.values():
            broker.start()
        self.wait_formed()
        return self

    def wait_formed(self) -> None:
        """Every running broker lists every broker (their heartbeats reached the store)."""
        for broker in self.brokers.values():
            wait_until(lambda: len(admin(broker.bootstrap).list_topics(timeout=10).brokers) == len(self.brokers),
                       f"{broker.bootstrap} to see the whole cluster")  # fmt: skip

    def close(self) -> None:
        for broker in self.brokers.values():
            broker.close()


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def wait_until(condition, what: str, deadline_s: float = DEADLINE_S):
    deadline = time.monotonic() + deadline_s
    while not (result := condition()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {deadline_s}s waiting for {what}")
        time.sleep(0.02)
    return result


def create_topic(bootstrap: str, partitions: int) -> str:
    name = f"failover-{uuid.uuid4().hex[:10]}"
    client = admin(bootstrap)  # kept: the futures need their client alive
    for future in client.create_topics([NewTopic(name, partitions, 1)], operation_timeout=30).values():
        future.result(timeout=30)
    wait_until(lambda: all(p.leader >= 0 for p in admin(bootstrap).list_topics(name, timeout=10).topics[name].partitions.values()),
               f"every partition of {name} to have a leader")  # fmt: skip
    return name


def partition_leader(bootstrap: str, topic: str, partition: int) -> int:
    return admin(bootstrap).list_topics(topic, timeout=10).topics[topic].partitions[partition].leader


def controller_id(bootstrap: str) -> int:
    client = admin(bootstrap)
    return client.describe_cluster().result(timeout=10).controller.id


# --- the steady producer -----------------------------------------------------------------------------


@dataclass
class Record:
    produced: float  # monotonic
    delivered: float | None = None
    error: str | None = None


@dataclass
class SteadyProducer:
    """One record to `partition` every 5 ms, from a thread that also serves delivery reports."""

    bootstrap: str
    topic: str
    partition: int = 0
    records: list[Record] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> SteadyProducer:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        producer = Producer({
            "bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 0,
            "compression.type": "none",
        })  # fmt: skip
        payload = b"x" * 100
        next_at = time.monotonic()
        while not self._stop.is_set():
            record = Record(time.monotonic())
            self.records.append(record)

            def delivered(err, _msg, record=record) -> None:
                record.delivered = time.monotonic()
                if err is not None:
                    record.error = str(err)

            producer.produce(self.topic, payload, partition=self.partition, on_delivery=delivered)
            next_at += PRODUCE_EVERY_S
            while (left := next_at - time.monotonic()) > 0:
                producer.poll(left)
            producer.poll(0)
        producer.flush(DEADLINE_S)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(DEADLINE_S + 5)

    def errors(self) -> list[str]:
        return [r.error for r in self.records if r.error is not None]

    def steady(self, since: float, count: int = 20) -> bool:
        """`count` records produced after `since` acknowledged."""
        return sum(1 for r in list(self.records) if r.produced >= since and r.delivered is not None and r.error is None) >= count

    def stall_s(self, signalled: float) -> float:
        """The longest wait for an acknowledgement counted from `signalled` (records produced
        before it count from it), over the records acknowledged after it."""
        return max(
            (r.delivered - max(r.produced, signalled) for r in list(self.records) if r.delivered is not None and r.delivered >= signalled),
            default=0.0,
        )  # fmt: skip

    def latency_p50_ms(self, since: float, until: float) -> float:
        lat = [r.delivered - r.produced for r in list(self.records) if since <= r.produced < until and r.delivered is not None]
        return statistics.median(lat) * 1000 if lat else 0.0


# --- where the time went, from the brokers' logs ---------------------------------------------------

_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def log_times(text: str, pattern: str) -> list[float]:
    """Wall-clock times (epoch seconds) of the log lines that contain `pattern`."""
    times = []
    for line in text.splitlines():
        m = _STAMP.match(line)
        if m and pattern in line:
            times.append(datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp())
    return times


def first_after(times: list[float], after: float) -> float | None:
    return min((t for t in times if t >= after), default=None)


def breakdown(cluster: Cluster, killed: int, new_leader: int, signalled_wall: float) -> dict[str, float | None]:
    """Seconds from the signal until a controller handed the partition out, and until the new
    leader had opened it."""
    moved = [first_after(log_times(b.log_text(), "controller: "), signalled_wall)
             for node, b in cluster.brokers.items() if node != killed]  # fmt: skip
    moved_at = min((t for t in moved if t is not None), default=None)
    opened_at = first_after(log_times(cluster.brokers[new_leader].log_text(), "leading "), signalled_wall)
    return {
        "moved_s": None if moved_at is None else round(moved_at - signalled_wall, 3),
        "opened_s": None if opened_at is None else round(opened_at - signalled_wall, 3),
    }


def failover_rounds(cluster: Cluster, topic: str, producer: SteadyProducer, how: signal.Signals, rounds: int) -> list[dict]:
    results = []
    for round_ in range(rounds):
        wait_until(lambda: producer.steady(time.monotonic() - 0.2, 10), "the producer to be steady")
        victim = partition_leader(cluster.bootstrap, topic, 0)
        was_controller = controller_id(cluster.bootstrap) == victim
        broker = cluster.brokers[victim]
        assert broker.process is not None
        signalled_wall, signalled = time.time(), time.monotonic()
        broker.process.send_signal(how)
        # The stall is over once records produced after the signal flow again.
        wait_until(lambda: producer.steady(signalled, 20), f"produce to succeed after {how.name} of broker {victim}")
        stall_s = producer.stall_s(signalled)
        broker.process.wait(DEADLINE_S)
        broker.process = None
        new_leader = partition_leader(",".join(b.bootstrap for n, b in cluster.brokers.items() if n != victim), topic, 0)
        row = {"round": round_ + 1, "killed": victim, "was_controller": was_controller, "new_leader": new_leader,
               "stall_s": round(stall_s, 3), **breakdown(cluster, victim, new_leader, signalled_wall)}  # fmt: skip
        print(f"  {how.name} {json.dumps(row)}", flush=True)
        results.append(row)
        broker.start()
        cluster.wait_formed()
    return results


def summary(rows: list[dict]) -> dict[str, float]:
    stalls = [r["stall_s"] for r in rows]
    out = {"p50_s": round(statistics.median(stalls), 3), "max_s": round(max(stalls), 3)}
    for key in ("moved_s", "opened_s"):
        known = [r[key] for r in rows if r[key] is not None]
        if known:
            out[f"{key[:-2]}_p50_s"] = round(statistics.median(known), 3)
    return out


# --- throughput ------------------------------------------------------------------------------------


def produce_all(bootstrap: str, topic: str, records: int, value_bytes: int) -> float:
    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
        "batch.size": 256 * 1024, "queue.buffering.max.kbytes": 256 * 1024, "compression.type": "none",
    })  # fmt: skip
    failures: list[str] = []

    def delivered(err, _msg) -> None:
        if err is not None:
            failures.append(str(err))

    payload = b"v" * value_bytes
    start = time.perf_counter()
    for n in range(records):
        while True:
            try:
                producer.produce(topic, payload, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
        if n % 1000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError("records left unsent")
    elapsed = time.perf_counter() - start
    if failures:
        raise RuntimeError(f"produce failed: {failures[:3]}")
    return records * value_bytes / MIB / elapsed


def consume_all(bootstrap: str, topic: str, partitions: int, records: int, value_bytes: int) -> float:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100,
        # librdkafka stops fetching a partition for fetch.queue.backoff.ms (1 s by default) once
        # its local queue is full; three brokers fill it faster than this Python loop empties
        # it, and the pauses (not the brokers) made three brokers read at a third of one's rate.
        "fetch.queue.backoff.ms": 10,
    })  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    start = time.perf_counter()
    deadline = time.monotonic() + 120
    while seen < records:
        if time.monotonic() > deadline:
            raise TimeoutError(f"consumed {seen} of {records} records")
        for message in consumer.consume(1000, 1.0):
            if message.error() is None:
                seen += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    return seen * value_bytes / MIB / elapsed


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def throughput(work: Path, pg: PostgresServer, bucket: Bucket, size: int, args: argparse.Namespace) -> dict[str, float]:
    name = f"tp{size}-{uuid.uuid4().hex[:6]}"
    cluster = Cluster(work, name, size, pg.create_database("bench"), bucket, args).start()
    figures: dict[str, float] = {}
    try:
        topic = create_topic(cluster.bootstrap, 6)
        produce_all(cluster.bootstrap, topic, args.records // 10, 512)  # warm-up
        pids = [broker.process.pid for broker in cluster.brokers.values() if broker.process is not None]
        records = {"produce": args.records, "consume": args.records + args.records // 10}
        for phase, run in (
            ("produce", lambda: produce_all(cluster.bootstrap, topic, records["produce"], 512)),
            ("consume", lambda: consume_all(cluster.bootstrap, topic, 6, records["consume"], 512)),
        ):
            brokers_before, client_before = sum(map(process_cpu_s, pids)), time.process_time()
            figures[f"{phase}_mib_s"] = round(run(), 2)
            mib = records[phase] * 512 / MIB
            figures[f"{phase}_broker_cpu_ms_per_mib"] = round((sum(map(process_cpu_s, pids)) - brokers_before) * 1000 / mib, 1)
            figures[f"{phase}_client_cpu_ms_per_mib"] = round((time.process_time() - client_before) * 1000 / mib, 1)
    finally:
        cluster.close()
    print(f"  {size} broker(s): produce {figures['produce_mib_s']:.1f} MiB/s, consume {figures['consume_mib_s']:.1f} MiB/s; "
          f"CPU per MiB produced: brokers {figures['produce_broker_cpu_ms_per_mib']} ms, client {figures['produce_client_cpu_ms_per_mib']} ms; "
          f"consumed: brokers {figures['consume_broker_cpu_ms_per_mib']} ms, client {figures['consume_client_cpu_ms_per_mib']} ms", flush=True)  # fmt: skip
    return figures


# --- the run ---------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds of each, fewer records (about a minute)")
    parser.add_argument("--kills", type=int, default=10, help="rounds of SIGKILL and of SIGTERM each")
    parser.add_argument("--records", type=int, default=200_000, help="records of the throughput runs")
    parser.add_argument("--broker-session-timeout-ms", type=int, default=3000)
    parser.add_argument("--broker-heartbeat-interval-ms", type=int, default=500)
    parser.add_argument("--bucket", choices=("moto", "file"), default="moto")
    parser.add_argument("--only", choices=("failover", "throughput"), help="run one part only")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="work in DIR and keep the brokers' logs there")
    args = parser.parse_args()
    if args.quick:
        args.kills, args.records = 3, 40_000

    results: dict = {"broker_session_timeout_ms": args.broker_session_timeout_ms,
                     "broker_heartbeat_interval_ms": args.broker_heartbeat_interval_ms, "bucket": args.bucket}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="diskless-failover-") as tmp:
        work = Path(tmp) if args.keep is None else args.keep
        work.mkdir(parents=True, exist_ok=True)
        pg = PostgresServer(durable=True).start()
        bucket = Bucket(args.bucket, work)
        try:
            if args.only in (None, "failover"):
                cluster = Cluster(work, "failover", 3, pg.create_database("bench"), bucket, args).start()
                try:
                    topic = create_topic(cluster.bootstrap, 3)
                    producer = SteadyProducer(cluster.bootstrap, topic).start()
                    try:
                        wait_until(lambda: producer.steady(0.0, 200), "the first records")
                        t = time.monotonic()
                        wait_until(lambda: producer.steady(t, 200), "a baseline")
                        results["steady_produce_p50_ms"] = round(producer.latency_p50_ms(t, time.monotonic()), 1)
                        for how in (signal.SIGKILL, signal.SIGTERM):
                            rows = failover_rounds(cluster, topic, producer, how, args.kills)
                            results[how.name.lower()] = {**summary(rows), "rounds": len(rows)}
                    finally:
                        producer.stop()
                    results["produce_errors"] = len(producer.errors())
                finally:
                    cluster.close()
                target_s = args.broker_session_timeout_ms / 1000 + 1
                results["sigkill_target_met"] = results["sigkill"]["max_s"] <= target_s
                results["sigterm_target_met"] = results["sigterm"]["max_s"] < 1.0
            if args.only in (None, "throughput"):
                one = throughput(work, pg, bucket, 1, args)
                three = throughput(work, pg, bucket, 3, args)
                results["throughput"] = {
                    "one_broker": one, "three_brokers": three,
                    "produce_ratio": round(three["produce_mib_s"] / one["produce_mib_s"], 2),
                    "consume_ratio": round(three["consume_mib_s"] / one["consume_mib_s"], 2),
                    # What the cluster path costs the brokers, whatever the machine's cores: their
                    # CPU per MiB, three brokers over one (1.0: nothing).
                    "produce_broker_cpu_ratio": round(three["produce_broker_cpu_ms_per_mib"] / one["produce_broker_cpu_ms_per_mib"], 2),
                    "consume_broker_cpu_ratio": round(three["consume_broker_cpu_ms_per_mib"] / one["consume_broker_cpu_ms_per_mib"], 2),
                }  # fmt: skip
        finally:
            bucket.close()
            pg.close()
    print(json.dumps(results))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
