"""Incremental fetch sessions (KIP-227): what a consumer of many quiet partitions costs the
broker with and without one.

    python bench/fetch_sessions.py [--quick] [--partitions 200] [--seconds 10] [--rounds N]

One `diskless serve` on its defaults. A topic of `--partitions` partitions, each with one
record, read to its end first; then a kafka-python consumer assigned every partition polls
for `--seconds` with nothing new to read (fetch.max.wait 100 ms, so about ten Fetch requests a
second), once with `enable_incremental_fetch_sessions` and once without, alternating which
goes first over `--rounds` rounds (best round of each kept: the machine is shared). Reported
per Fetch request: broker CPU µs (user + system of its process, /proc/PID/stat) and response
bytes (the broker's diskless_network_responsebytes). Without a session every
request names every partition and every answer lists them all; with one, requests name
nothing and answers are empty. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kafka import KafkaConsumer, TopicPartition  # noqa: E402

from broker import Server  # noqa: E402 (bench/broker.py: its /proc CPU reading)
from tests.integration.broker_process import BrokerProcess, free_port  # noqa: E402


def fetch_counters(http: str) -> tuple[float, float]:
    """(Fetch requests, Fetch response bytes) so far, from the broker's metrics."""
    requests = response_bytes = 0.0
    with urllib.request.urlopen(f"http://{http}/metrics", timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith('kafka_network_requestmetrics_requests_total{request="Fetch"'):
                requests += float(line.rsplit(" ", 1)[1])
            elif line.startswith('diskless_network_responsebytes_sum{request="Fetch"'):
                response_bytes += float(line.rsplit(" ", 1)[1])
    return requests, response_bytes


def quiet_polling(bootstrap: str, http: str, server: Server, topic: str, partitions: int, seconds: float, sessions: bool) -> tuple[float, float, int]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, fetch_max_wait_ms=100,
                             enable_incremental_fetch_sessions=sessions)  # fmt: skip
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        consumer.seek_to_beginning()
        seen = 0
        deadline = time.monotonic() + 60
        while seen < partitions:  # every partition's one record read: from here on nothing is new
            assert time.monotonic() < deadline, "the records did not arrive"
            seen += sum(len(r) for r in consumer.poll(timeout_ms=200).values())
        requests, response_bytes = fetch_counters(http)
        cpu = server.cpu_seconds()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            assert not consumer.poll(timeout_ms=200)
        cpu = server.cpu_seconds() - cpu
        after_requests, after_bytes = fetch_counters(http)
    finally:
        consumer.close()
    fetches = after_requests - requests
    return cpu * 1e6 / fetches, (after_bytes - response_bytes) / fetches, int(fetches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="5 s per side, 2 rounds")
    parser.add_argument("--partitions", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    seconds = 5.0 if args.quick else args.seconds
    rounds = args.rounds or (2 if args.quick else 3)
    with tempfile.TemporaryDirectory() as work:
        http = f"127.0.0.1:{free_port()}"
        broker = BrokerProcess(Path(work) / "data", "--http", http).start()
        try:
            server = Server("diskless", broker.process, broker.port)
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            topic = "quiet"
            admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(30)
            producer = Producer({"bootstrap.servers": broker.bootstrap})
            for p in range(args.partitions):
                producer.produce(topic, value=b"x", partition=p)
            assert producer.flush(30) == 0
            best: dict[bool, tuple[float, float, int]] = {}
            for round_ in range(rounds):
                for sessions in ((True, False) if round_ % 2 == 0 else (False, True)):
                    figures = quiet_polling(broker.bootstrap, http, server, topic, args.partitions, seconds, sessions)
                    print(f"round {round_ + 1}, {'with' if sessions else 'without'} a session: {figures[0]:.0f} µs broker CPU "
                          f"and {figures[1]:.0f} response bytes per Fetch ({figures[2]} fetches)", flush=True)
                    if sessions not in best or figures[0] < best[sessions][0]:
                        best[sessions] = figures
        finally:
            broker.close()
    result = {
        "partitions": args.partitions,
        "cpu_us_per_fetch_with_session": round(best[True][0], 1),
        "cpu_us_per_fetch_without": round(best[False][0], 1),
        "cpu_ratio": round(best[True][0] / best[False][0], 3),
        "response_bytes_with_session": round(best[True][1]),
        "response_bytes_without": round(best[False][1]),
    }
    for key, value in result.items():
        print(f"{key:>32}  {value}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
