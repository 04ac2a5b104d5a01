"""Group rebalances: how long a consumer group of 1, 10 and 50 members takes to settle after one
more member joins, and how long the members already there stop consuming meanwhile, with the
classic protocol (eager `range`, and `cooperative-sticky`) and KIP-848's (`group_protocol=
"consumer"`, the broker's `uniform` assignor).

    python bench/groups.py [--quick] [--sizes 1,10,50] [--trials 3] [--heartbeat-interval-ms 1000]
                           [--protocols eager,cooperative,consumer]

One `diskless serve` on 127.0.0.1 (group.initial.rebalance.delay.ms 0; the KIP-848 heartbeat
interval `--heartbeat-interval-ms`, session 10 s). Each scenario: a topic of 2 * (N + 1)
partitions; a producer (our asyncio client) sends `--rate` records/s (2000), one to every
partition per tick (at most 100 a second each);
N members of one group (our asyncio client, all in this process and event loop, each with the
same heartbeat interval for the classic protocol) are started at random points of one interval
(so that their heartbeats are not in step) and left to settle; then, at a random point of their
heartbeat cycle, member N + 1 starts. Measured from its start():

  settle_ms   until every member holds a disjoint share of the partitions, together covering
              all of them, no two shares differing by more than one, the newcomer's included
              (and, for the classic protocol, every member past its SyncGroup)
  pause_ms    the longest time any of the N earlier members went without receiving records,
              from that start to 100 ms after settling (its noise floor, `steady_pause_ms`,
              is the same measure over an equal window just before the join)

Figures are the median over `--trials` (the max is printed beside it). Everything, brokers and
51 clients, shares this machine's two cores, so the times include the clients' own CPU.

Target (issue R): with the new protocol, settle_ms < 1 heartbeat interval + 100 ms for 50
members, and pause_ms < 100 ms. The last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from diskless.client import Admin, Consumer, Producer  # noqa: E402
from tests.integration.broker_process import BrokerProcess  # noqa: E402

PROTOCOLS = {
    "eager": {"partition_assignment_strategy": "range"},
    "cooperative": {"partition_assignment_strategy": "cooperative-sticky"},
    "consumer": {"group_protocol": "consumer"},
}
MIN_TICK_S = 0.01
SETTLE_DEADLINE_S = 120.0


@dataclass
class Member:
    consumer: Consumer
    arrivals: list[float] = field(default_factory=list)
    task: asyncio.Task[None] | None = None

    async def read(self) -> None:
        while True:
            records = await self.consumer.getmany(timeout_ms=100)
            if records:
                self.arrivals.append(time.monotonic())


def longest_gap(arrivals: list[float], start: float, end: float) -> float:
    """The longest stretch of [start, end] without an arrival."""
    points = [start, *(t for t in arrivals if start < t < end), end]
    return max(b - a for a, b in zip(points, points[1:]))


def settled(members: list[Member], partitions: int, protocol: str) -> bool:
    held = [m.consumer.assignment() for m in members]
    sizes = [len(h) for h in held]
    if sum(sizes) != partitions or len(set().union(*held)) != partitions or max(sizes) - min(sizes) > 1:
        return False
    if protocol != "consumer":
        return all(m.consumer._group is not None and m.consumer._group.state == "stable" for m in members)
    return True


async def wait_settled(members: list[Member], partitions: int, protocol: str) -> float:
    deadline = time.monotonic() + SETTLE_DEADLINE_S
    while not settled(members, partitions, protocol):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{protocol} group of {len(members)} did not settle in {SETTLE_DEADLINE_S}s")
        await asyncio.sleep(0.002)
    return time.monotonic()


async def scenario(bootstrap: str, protocol: str, size: int, heartbeat_ms: int, rate: int) -> dict[str, float]:
    partitions = 2 * (size + 1)
    tick_s = max(MIN_TICK_S, partitions / rate)  # one record per partition per tick
    topic, group = f"bench-{uuid.uuid4().hex[:10]}", f"bench-{uuid.uuid4().hex[:10]}"
    async with Admin(bootstrap) as admin:
        await admin.create_topics(topic, partitions)
    stop = asyncio.Event()

    async def produce() -> None:
        async with Producer(bootstrap, acks=1, linger_ms=2) as producer:
            while not stop.is_set():
                for p in range(partitions):
                    await producer.send(topic, b"x" * 100, partition=p)  # enqueues; the batch goes at linger_ms
                await asyncio.sleep(tick_s)

    settings = {
        "group_id": group, "auto_offset_reset": "latest", "heartbeat_interval_ms": heartbeat_ms,
        "session_timeout_ms": max(10 * heartbeat_ms, 6000), "max_poll_interval_ms": 30000, **PROTOCOLS[protocol],
    }  # fmt: skip

    def new_member(i: int) -> Member:
        return Member(Consumer(topic, bootstrap_servers=bootstrap, client_id=f"m{i}", **settings))

    producer_task = asyncio.create_task(produce())
    members = [new_member(i) for i in range(size)]
    try:

        async def start(m: Member) -> None:
            # Members start at random points of one interval, so their heartbeats are not in step.
            await asyncio.sleep(random.uniform(0, heartbeat_ms / 1000))
            await m.consumer.start()
            m.task = asyncio.create_task(m.read())

        await asyncio.gather(*(start(m) for m in members))
        await wait_settled(members, partitions, protocol)
        # Steady consumption before the join, which lands at a random point of the members'
        # heartbeat cycle (a join just before their heartbeat would be answered at once).
        await asyncio.sleep(2 * heartbeat_ms / 1000 + random.uniform(0, heartbeat_ms / 1000))
        newcomer = new_member(size)
        joined_at = time.monotonic()
        await newcomer.consumer.start()
        newcomer.task = asyncio.create_task(newcomer.read())
        settled_at = await wait_settled([*members, newcomer], partitions, protocol)
        await asyncio.sleep(0.1)
        window = settled_at + 0.1 - joined_at
        pause = max(longest_gap(m.arrivals, joined_at, settled_at + 0.1) for m in members)
        steady = max(longest_gap(m.arrivals, joined_at - window, joined_at) for m in members)
        members.append(newcomer)
        return {"settle_ms": (settled_at - joined_at) * 1000, "pause_ms": pause * 1000, "steady_pause_ms": steady * 1000}
    finally:
        stop.set()
        await producer_task
        for m in members:
            if m.task is not None:
                m.task.cancel()
        await asyncio.gather(*(m.task for m in members if m.task is not None), return_exceptions=True)
        await asyncio.gather(*(m.consumer.close() for m in members), return_exceptions=True)


async def run(bootstrap: str, sizes: list[int], protocols: list[str], trials: int, heartbeat_ms: int, rate: int) -> dict[str, float]:
    figures: dict[str, float] = {"heartbeat_interval_ms": heartbeat_ms, "target_settle_ms": heartbeat_ms + 100, "records_per_s": rate}
    print(f"{'protocol':<12} {'members':>7} {'settle ms (max)':>18} {'pause ms (max)':>18} {'steady pause ms':>16}")
    for size in sizes:
        for protocol in protocols:
            results = [await scenario(bootstrap, protocol, size, heartbeat_ms, rate) for _ in range(trials)]
            row = {k: statistics.median(r[k] for r in results) for k in results[0]}
            worst = {k: max(r[k] for r in results) for k in results[0]}
            print(
                f"{protocol:<12} {size:>7} {row['settle_ms']:>9.0f} ({worst['settle_ms']:>6.0f}) "
                f"{row['pause_ms']:>9.0f} ({worst['pause_ms']:>6.0f}) {row['steady_pause_ms']:>16.0f}",
                flush=True,
            )
            for key, value in row.items():
                figures[f"{protocol}_{size}_{key}"] = round(value, 1)
            figures[f"{protocol}_{size}_settle_ms_max"] = round(worst["settle_ms"], 1)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one trial of each, in under a minute")
    parser.add_argument("--sizes", default="1,10,50", help="group sizes before the join")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=1000)
    parser.add_argument("--rate", type=int, default=2000, help="records/s produced, spread over the partitions (at most 100/s each)")
    parser.add_argument("--protocols", default=",".join(PROTOCOLS), help="of eager, cooperative, consumer")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    trials = 1 if args.quick else args.trials
    logging.basicConfig(level=logging.WARNING)
    hb = str(args.heartbeat_interval_ms)
    with tempfile.TemporaryDirectory(prefix="bench-groups-") as tmp:
        broker = BrokerProcess(
            Path(tmp) / "data", "--group-initial-rebalance-delay-ms", "0",
            "--group-consumer-heartbeat-interval-ms", hb, "--group-consumer-min-heartbeat-interval-ms", hb,
            "--group-consumer-session-timeout-ms", "10000", "--group-consumer-min-session-timeout-ms", "10000",
        ).start()  # fmt: skip
        try:
            figures = asyncio.run(run(broker.bootstrap, sizes, args.protocols.split(","), trials, args.heartbeat_interval_ms, args.rate))
        finally:
            broker.close()
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
