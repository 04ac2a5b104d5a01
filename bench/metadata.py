"""Metadata store operations per second and p99 latency, SQLite beside PostgreSQL.

    python bench/metadata.py [--quick] [--postgres URL] [--ops N] [--concurrency N]

Two operations, each as the broker issues them:

- commit_offsets: an OffsetCommit of one partition (one `commit_offsets` call), from
  `--concurrency` consumer groups at once, each committing one offset after another.
- catalogue_append: a rolled segment entering the bucket's catalogue, `add_remote_segment`
  then `commit_remote_segment` (two transactions, both fenced on the leader epoch), from
  `--concurrency` partition leaders at once, each appending one segment after another.

Each backend runs on a fresh database: a SQLite file in a temporary directory (WAL mode,
synchronous=FULL: every commit is fsynced), and PostgreSQL either at `--postgres URL` or on
a throwaway server of its own on 127.0.0.1 with PostgreSQL's durable defaults (fsync and
synchronous_commit on), started like the tests' server (`initdb` + `pg_ctl`, as the postgres
user when run as root). ops/s is operations over wall time; p99 is over every operation's own
latency. The issue's target: PostgreSQL's commit_offsets p99 within 2x of SQLite's. The last
line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from metadata import CommittedOffset, MetadataStore, RemoteSegment, open_metadata_store, sqlite_url  # noqa: E402


def p99_ms(latencies_s: list[float]) -> float:
    ordered = sorted(latencies_s)
    return 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


async def commit_offsets(store: MetadataStore, concurrency: int, ops: int) -> tuple[float, float]:
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    await store.create_topic(topic, concurrency, {})
    latencies: list[float] = []

    async def committer(group: int) -> None:
        for i in range(ops):
            started = time.perf_counter()
            await store.commit_offsets(f"group-{group}", [CommittedOffset(topic, group, i, 0, "", i)])
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(committer(g) for g in range(concurrency)))
    return concurrency * ops / (time.perf_counter() - started), p99_ms(latencies)


async def catalogue_append(store: MetadataStore, concurrency: int, ops: int) -> tuple[float, float]:
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    await store.create_topic(topic, concurrency, {})
    latencies: list[float] = []

    async def leader(partition: int) -> None:
        for i in range(ops):
            base = 1000 * i
            key = f"{topic}/{partition}/{base:020d}-{uuid.uuid4().hex[:8]}"
            segment = RemoteSegment(topic, partition, base, base + 999, base, base + 999, 1 << 20, 0, key)
            started = time.perf_counter()
            await store.add_remote_segment(segment)
            await store.commit_remote_segment(topic, partition, base, key, leader_epoch=0)
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(leader(p) for p in range(concurrency)))
    return concurrency * ops / (time.perf_counter() - started), p99_ms(latencies)


async def measure(url: str, concurrency: int, ops: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    async with await open_metadata_store(url) as store:
        for name, op in (("commit_offsets", commit_offsets), ("catalogue_append", catalogue_append)):
            await op(store, concurrency, max(ops // 10, 5))  # warm-up: connections, statement caches
            ops_s, p99 = await op(store, concurrency, ops)
            figures[f"{name}_ops_s"] = round(ops_s, 1)
            figures[f"{name}_p99_ms"] = round(p99, 2)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer operations: under a minute")
    parser.add_argument("--postgres", metavar="URL", help="an empty PostgreSQL database to use instead of a throwaway server")
    parser.add_argument("--ops", type=int, help="operations per task (default 500, --quick 100)")
    parser.add_argument("--concurrency", type=int, default=4, help="tasks at once (default 4)")
    args = parser.parse_args()
    ops = args.ops or (100 if args.quick else 500)

    server = None
    postgres_url = args.postgres
    if postgres_url is None:
        from tests.integration.postgres_server import PostgresServer

        server = PostgresServer(durable=True).start()
        postgres_url = server.create_database("bench")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            results = {
                "sqlite": asyncio.run(measure(sqlite_url(Path(tmp) / "metadata.db"), args.concurrency, ops)),
                "postgresql": asyncio.run(measure(postgres_url, args.concurrency, ops)),
            }
    finally:
        if server is not None:
            server.close()

    summary: dict[str, float] = {"concurrency": args.concurrency, "ops_per_task": ops}
    for backend, figures in results.items():
        for name, value in figures.items():
            print(f"{backend:<11} {name:<24} {value:>10}")
            summary[f"{backend}_{name}"] = value
    for name in ("commit_offsets", "catalogue_append"):
        summary[f"{name}_p99_ratio"] = round(
            results["postgresql"][f"{name}_p99_ms"] / max(results["sqlite"][f"{name}_p99_ms"], 1e-6), 2
        )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
