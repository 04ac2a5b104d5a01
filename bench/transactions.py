"""Transactions: produce throughput in transactions of 100 and of 10,000 records against
idempotent non-transactional produce, commit latency, and a read_committed consumer's
throughput against read_uncommitted.

    python bench/transactions.py [--quick] [--records N] [--value-bytes 100] [--partitions 3] [--producers 1]

One `diskless serve` on 127.0.0.1 on its defaults (SQLite metadata, the bucket a local
directory, write-ahead objects every `wal.commit.interval.ms` = 5 ms). librdkafka
(confluent-kafka) produces `--records` records of `--value-bytes` to a topic of
`--partitions` partitions, round robin, linger.ms 5:

  idempotent_rec_s     enable.idempotence, acks=all, no transaction (flush at the end)
  txn100_rec_s         transactions of 100 records, each begin..commit_transaction
  txn10000_rec_s       transactions of 10,000 records
  commit_p50_ms/p99    commit_transaction's wall time in the transactions of 100 (it flushes
                       the transaction's last records, then EndTxn: markers durable in the bucket)
  read_committed_rec_s / read_uncommitted_rec_s   one consumer reading the transactions-of-100
                       topic from the start to its end

With `--producers N`, N producers run at once on both sides (each transactional one with its
own transactional id), sharing the records: the broker's throughput for N applications, where
the default measures one producer waiting out each commit in turn.

Targets (issue P): txn100 >= 0.6 and txn10000 >= 0.9 of idempotent; commit p99 <= 2 x the
write-ahead commit interval + 25 ms; read_committed >= 0.9 of read_uncommitted. Broker and
client share this machine's two cores. The last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.integration.broker_process import BrokerProcess  # noqa: E402

WAL_COMMIT_INTERVAL_MS = 5
DEADLINE_S = 300.0


def create_topic(bootstrap: str, partitions: int) -> str:
    name = f"bench-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result is in
    admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=10)[name].result(30)
    return name


def produce(producer: Producer, topic: str, count: int, partitions: int, value: bytes, start: int) -> None:
    for i in range(start, start + count):
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)


def in_parallel(producers: int, work: Callable[[int, threading.Barrier, threading.Event], list[float]]) -> tuple[float, list[float]]:
    """Run work(i) for each producer in its own thread (librdkafka releases the GIL while it
    waits), once each is warmed up; the seconds from the common start to the last one's end,
    and every figure they returned."""
    ready, start = threading.Barrier(producers + 1), threading.Event()
    results: list[list[float]] = [[] for _ in range(producers)]
    ends = [0.0] * producers

    def run(i: int) -> None:
        results[i] = work(i, ready, start)
        ends[i] = time.perf_counter()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(producers)]
    for thread in threads:
        thread.start()
    ready.wait()
    started = time.perf_counter()
    start.set()
    for thread in threads:
        thread.join()
    return max(ends) - started, [figure for figures in results for figure in figures]


def idempotent(bootstrap: str, records: int, partitions: int, value: bytes, producers: int) -> float:
    topic = create_topic(bootstrap, partitions)
    share = records // producers

    def work(i: int, ready: threading.Barrier, start: threading.Event) -> list[float]:
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5})
        producer.produce(topic, value, partition=0)  # warm up: metadata, producer id, connections
        assert producer.flush(DEADLINE_S) == 0
        ready.wait()
        start.wait()
        produce(producer, topic, share, partitions, value, i * share)
        assert producer.flush(DEADLINE_S) == 0
        return []

    elapsed, _ = in_parallel(producers, work)
    return share * producers / elapsed


def transactional(bootstrap: str, records: int, size: int, partitions: int, value: bytes, producers: int) -> tuple[float, list[float], str]:
    topic = create_topic(bootstrap, partitions)
    share = records // producers

    def work(i: int, ready: threading.Barrier, start: threading.Event) -> list[float]:
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{uuid.uuid4().hex[:8]}", "linger.ms": 5})
        producer.init_transactions(30)
        producer.begin_transaction()  # warm up: metadata, connections (not counted)
        producer.produce(topic, value, partition=0)
        producer.commit_transaction(DEADLINE_S)
        ready.wait()
        start.wait()
        commits_ms = []
        for first in range(0, share, size):
            producer.begin_transaction()
            produce(producer, topic, min(size, share - first), partitions, value, i * share + first)
            before = time.perf_counter()
            producer.commit_transaction(DEADLINE_S)
            commits_ms.append((time.perf_counter() - before) * 1000)
        return commits_ms

    elapsed, commits_ms = in_parallel(producers, work)
    return share * producers / elapsed, commits_ms, topic


def consume(bootstrap: str, topic: str, partitions: int, isolation: str, records: int) -> float:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}", "isolation.level": isolation,
        "enable.auto.commit": False, "fetch.max.bytes": 52428800,
    })  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = 0
    started = time.perf_counter()
    deadline = time.monotonic() + DEADLINE_S
    while got < records and time.monotonic() < deadline:
        for message in consumer.consume(10_000, 1.0):
            if message.error() is None:
                got += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    assert got == records, f"{isolation}: {got} of {records}"
    return records / elapsed


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer records, in under a minute")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--producers", type=int, default=1, help="concurrent producers, each its own transactional id (both sides)")
    args = parser.parse_args()
    records = (30_000 if args.quick else args.records) // args.producers * args.producers
    value = b"v" * args.value_bytes
    with tempfile.TemporaryDirectory(prefix="bench-txn-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data").start()
        try:
            bootstrap = broker.bootstrap
            idempotent_rec_s = idempotent(bootstrap, records, args.partitions, value, args.producers)
            txn100_rec_s, commits_ms, topic100 = transactional(bootstrap, records, 100, args.partitions, value, args.producers)
            txn10000_rec_s, _, _ = transactional(bootstrap, records, 10_000, args.partitions, value, args.producers)
            read_uncommitted_rec_s = consume(bootstrap, topic100, args.partitions, "read_uncommitted", records + args.producers)  # and each producer's warm-up record
            read_committed_rec_s = consume(bootstrap, topic100, args.partitions, "read_committed", records + args.producers)  # and each producer's warm-up record
        finally:
            broker.close()
    figures = {
        "records": records,
        "producers": args.producers,
        "idempotent_rec_s": round(idempotent_rec_s),
        "txn100_rec_s": round(txn100_rec_s),
        "txn10000_rec_s": round(txn10000_rec_s),
        "txn100_ratio": round(txn100_rec_s / idempotent_rec_s, 3),
        "txn10000_ratio": round(txn10000_rec_s / idempotent_rec_s, 3),
        "commits": len(commits_ms),
        "commit_p50_ms": round(statistics.median(commits_ms), 2),
        "commit_p99_ms": round(percentile(commits_ms, 0.99), 2),
        "commit_p99_target_ms": 2 * WAL_COMMIT_INTERVAL_MS + 25,
        "read_committed_rec_s": round(read_committed_rec_s),
        "read_uncommitted_rec_s": round(read_uncommitted_rec_s),
        "read_committed_ratio": round(read_committed_rec_s / read_uncommitted_rec_s, 3),
    }
    for name, figure in figures.items():
        print(f"{name:>24}  {figure}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
