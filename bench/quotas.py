"""Client quotas (KIP-13, KIP-124, KIP-599): what enforcing them costs the broker per request,
and how closely a client held to a byte rate keeps to it.

    python bench/quotas.py [--quick] [--rounds N] [--requests N] [--quota-bytes-s 1000000] [--seconds 10]

One `diskless serve` on 127.0.0.1 on its defaults (SQLite metadata, the bucket a local
directory), but with `--quota-window-num 2 --quota-window-size-seconds 1`: Kafka measures a
client's rate over quota.window.num x quota.window.size.seconds (11 x 1 s by default), so a
client's first burst, before it is throttled, lasts about two seconds instead of eleven.
Quotas are set with AlterClientQuotas (api key 49) over a raw connection, on `client-id`
entities.

- cost: broker CPU µs per Produce request when each request carries one 100 B record
  (confluent-kafka, linger.ms=0, batch.num.messages=1, acks=1, one partition; `--requests`
  records, 20,000 or 5,000 with --quick), (a) with no quota configured at all and (b) with a
  quota on the producer's client id that never binds: producer_byte_rate 1e15 and
  request_percentage 1e9. The latter makes the broker time each step of every request's
  handling (a clock read per step; it runs for clients with a request_percentage quota),
  so (b) pays for charging the byte rate and for that timing. Both sides on the same broker,
  the quota set before and removed after each (b), their order alternating over `--rounds`
  rounds; the best round of each is kept (the machine is shared; the best round is the least
  disturbed). Broker CPU is user + system time of its process from /proc/PID/stat, in 10 ms
  ticks, from the first produce() after a warm-up record to flush() returning.
- accuracy: client id "limited" under producer_byte_rate and consumer_byte_rate of
  `--quota-bytes-s` (Q, 1,000,000 B/s). A producer (1 KiB values, linger.ms 5, acks=1,
  batch.size 64 KiB, at most about half a second of Q queued in librdkafka so the final
  flush is short) produces to a 1-partition topic as fast as it can for `--seconds` (10 s,
  5 s with --quick); its rate is the value bytes acknowledged (delivery reports) per second in
  the second half of the run, reported as a ratio to Q. Then a consumer (max.partition.fetch.bytes
  and fetch.max.bytes 64 KiB) reads a topic filled beforehand by an unlimited producer, from
  offset 0, for as long; its rate is the value bytes per second that arrived in the second half.
  A throttled client's rate swings with a period of the span the rate is measured over
  (quota.window.num x quota.window.size.seconds, 2 s here: nearly two seconds' worth of Q in
  one second, little in the next), so the second half is shortened at its start to whole
  periods (the last 4 s of 10, the last 2 s of 5): over part of a period the figure would
  say where in the swing the run ended, not the rate. Small requests keep one request's bytes a small part of a period's, so the ratio does
  not depend on where request boundaries fall either. The broker charges whole
  Produce requests (framing, batch and record headers) and the record batches of Fetch
  responses, not values alone: with 1 KiB values about 1% more than their bytes, so a ratio near 0.99 is the
  quota held exactly. For each client also the number
  of throttle_cb events librdkafka reported (one per response with a throttle time, and one
  when it falls back to 0) and the longest throttle time. Every delivery report must be a
  success.

Targets: cost ratio (with quota / without) near 1.0; accuracy ratios near 1.0. Broker and
clients share this machine's two cores. The last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kio.schema.alter_client_quotas.v1 import request as alter_v1  # noqa: E402
from kio.schema.errors import ErrorCode  # noqa: E402

from broker import Server, make_value  # noqa: E402 (bench/broker.py: its /proc CPU reading)
from tests.integration.broker_process import BrokerProcess  # noqa: E402
from tests.integration.conftest import WireClient  # noqa: E402

QUOTA_WINDOW_NUM = 2
QUOTA_WINDOW_SIZE_S = 1
SHORT_WINDOWS = ("--quota-window-num", str(QUOTA_WINDOW_NUM), "--quota-window-size-seconds", str(QUOTA_WINDOW_SIZE_S))
# A throttled client's rate swings with this period: it is let through until its rate over
# the windows reaches Q, held back, and let through again when the oldest window is dropped.
QUOTA_PERIOD_S = QUOTA_WINDOW_NUM * QUOTA_WINDOW_SIZE_S
NEVER_BINDS = {"producer_byte_rate": 1e15, "request_percentage": 1e9}
COST_CLIENT_ID = "cost"
LIMITED_CLIENT_ID = "limited"
VALUE_BYTES = 1024
SMALL_REQUEST_BYTES = 65536
DEADLINE_S = 120.0


def set_quota(bootstrap: str, client_id: str, values: dict[str, float], remove: bool = False) -> None:
    """AlterClientQuotas on the entity (client-id=`client_id`): set `values`, or remove their keys."""
    body = alter_v1.AlterClientQuotasRequest(
        entries=(
            alter_v1.EntryData(
                entity=(alter_v1.EntityData(entity_type="client-id", entity_name=client_id),),
                ops=tuple(alter_v1.OpData(key=key, value=value, remove=remove) for key, value in values.items()),
            ),
        ),
        validate_only=False,
    )
    client = WireClient(bootstrap, client_id="bench-admin")
    try:
        response = client.request(body)
    finally:
        client.close()
    assert [(entry.error_code, entry.error_message) for entry in response.entries] == [(ErrorCode.none, None)], response


def create_topic(bootstrap: str) -> str:
    """A fresh topic of one partition, once its leader is known (the first produce must not
    wait for it). Its admin client logs errors only: librdkafka's notice, when it is destroyed,
    of events it never served must not come after the JSON line."""
    name = f"bench-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=30)
    deadline = time.monotonic() + 30
    while not admin.list_topics(name, timeout=10).topics[name].partitions:
        assert time.monotonic() < deadline, f"topic {name} has no metadata"
        time.sleep(0.05)  # polling metadata with a deadline: nothing to wait on instead
    return name


# --- cost ---------------------------------------------------------------------------------------


def produce_one_per_request(server: Server, topic: str, count: int) -> float:
    """Broker CPU seconds for `count` Produce requests of one record each, as COST_CLIENT_ID."""
    delivered = [0, 0]  # ok, failed

    def on_delivery(err, _msg) -> None:
        delivered[err is not None] += 1

    producer = Producer({
        "bootstrap.servers": server.bootstrap, "client.id": COST_CLIENT_ID, "acks": "1", "linger.ms": 0, "batch.num.messages": 1,
        "queue.buffering.max.messages": 1_000_000, "on_delivery": on_delivery,
    })  # fmt: skip
    value = make_value(100)
    producer.produce(topic, value=value, partition=0)  # connection, ApiVersions, metadata: outside the count
    assert producer.flush(30) == 0
    send, poll = producer.produce, producer.poll
    cpu = server.cpu_seconds()
    for _ in range(count):
        while True:
            try:
                send(topic, value=value, partition=0)
                break
            except BufferError:
                poll(0.001)
    assert producer.flush(DEADLINE_S) == 0
    cpu = server.cpu_seconds() - cpu
    assert delivered == [count + 1, 0], f"{delivered[0]} delivered, {delivered[1]} failed of {count + 1}"
    return cpu


def measure_cost(server: Server, requests: int, rounds: int) -> tuple[float, float]:
    """Best (no quota, never-binding quota) broker CPU µs per one-record Produce request."""
    best = {"none": float("inf"), "quota": float("inf")}
    for r in range(rounds):
        for side in ("none", "quota") if r % 2 == 0 else ("quota", "none"):
            topic = create_topic(server.bootstrap)
            if side == "quota":
                set_quota(server.bootstrap, COST_CLIENT_ID, NEVER_BINDS)
            try:
                cpu_s = produce_one_per_request(server, topic, requests)
            finally:
                if side == "quota":
                    set_quota(server.bootstrap, COST_CLIENT_ID, NEVER_BINDS, remove=True)
            us = cpu_s / requests * 1e6
            print(f"round {r + 1}, {'with quota' if side == 'quota' else 'no quota':>10}: {us:.1f} µs broker CPU / request", flush=True)
            best[side] = min(best[side], us)
    return best["none"], best["quota"]


# --- accuracy -----------------------------------------------------------------------------------


def second_half_rate(arrivals: list[float], start: float, seconds: float) -> float:
    """Value bytes per second that arrived in the second half of [start, start + seconds),
    trimmed at its start to whole quota periods (see QUOTA_PERIOD_S)."""
    end = start + seconds
    span = max(1, int(seconds / 2 // QUOTA_PERIOD_S)) * QUOTA_PERIOD_S
    return sum(1 for t in arrivals if end - span <= t < end) * VALUE_BYTES / span


def produce_limited(bootstrap: str, topic: str, seconds: float, quota_bytes_s: int) -> tuple[float, list[int]]:
    """(value B/s acknowledged in the second half, throttle times reported, ms) producing as
    LIMITED_CLIENT_ID as fast as librdkafka takes records, for `seconds`."""
    acked: list[float] = []
    errors: list[str] = []
    throttles: list[int] = []

    def on_delivery(err, _msg) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked.append(time.monotonic())

    producer = Producer({
        "bootstrap.servers": bootstrap, "client.id": LIMITED_CLIENT_ID, "acks": "1", "linger.ms": 5, "batch.size": SMALL_REQUEST_BYTES,
        "queue.buffering.max.kbytes": max(64, quota_bytes_s // 2048), "on_delivery": on_delivery,
        "throttle_cb": lambda event: throttles.append(round(event.throttle_time * 1000)),  # it reports seconds
    })  # fmt: skip
    value = make_value(VALUE_BYTES)
    producer.produce(topic, value=value, partition=0)  # connection and metadata, outside the clock
    assert producer.flush(30) == 0
    acked.clear()
    start = time.monotonic()
    end = start + seconds
    sent = 0
    while time.monotonic() < end:
        try:
            producer.produce(topic, value=value, partition=0)
            sent += 1
            if sent % 100 == 0:
                producer.poll(0)
        except BufferError:
            producer.poll(0.002)
    assert producer.flush(DEADLINE_S) == 0
    assert errors == [], errors[:5]
    assert len(acked) == sent, f"{len(acked)} acknowledged of {sent}"
    return second_half_rate(acked, start, seconds), throttles


def fill(bootstrap: str, topic: str, count: int) -> None:
    """`count` records of VALUE_BYTES into partition 0, as an unlimited client."""
    errors: list[str] = []
    producer = Producer({
        "bootstrap.servers": bootstrap, "client.id": "filler", "acks": "1", "linger.ms": 5, "batch.size": SMALL_REQUEST_BYTES,
        "on_delivery": lambda err, _msg: errors.append(str(err)) if err is not None else None,
    })  # fmt: skip
    value = make_value(VALUE_BYTES)
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value=value, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(DEADLINE_S) == 0
    assert errors == [], errors[:5]


def consume_limited(bootstrap: str, topic: str, seconds: float, available: int) -> tuple[float, list[int]]:
    """(value B/s that arrived in the second half, throttle times reported, ms) reading `topic`
    from offset 0 as LIMITED_CLIENT_ID for `seconds`."""
    throttles: list[int] = []
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "client.id": LIMITED_CLIENT_ID, "group.id": f"bench-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
        "max.partition.fetch.bytes": SMALL_REQUEST_BYTES, "fetch.max.bytes": SMALL_REQUEST_BYTES, "message.max.bytes": SMALL_REQUEST_BYTES,
        "throttle_cb": lambda event: throttles.append(round(event.throttle_time * 1000)),  # it reports seconds
    })  # fmt: skip
    arrivals: list[float] = []
    try:
        consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)  # connection and metadata, outside the clock
        start = time.monotonic()
        end = start + seconds
        consumer.assign([TopicPartition(topic, 0, 0)])
        while (now := time.monotonic()) < end:
            messages = consumer.consume(1000, min(0.05, end - now))
            now = time.monotonic()
            for message in messages:
                assert message.error() is None, message.error()
                arrivals.append(now)
    finally:
        consumer.close()
    assert len(arrivals) < available, f"the consumer read all {available} records: fill more"
    return second_half_rate(arrivals, start, seconds), throttles


# --- the run ------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer requests, shorter runs, in under a minute")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of the cost figures (default 2 with --quick, else 3)")
    parser.add_argument("--requests", type=int, default=None, help="one-record Produce requests per cost measurement (default 20,000; 5,000 with --quick)")
    parser.add_argument("--quota-bytes-s", type=int, default=1_000_000, help="producer_byte_rate and consumer_byte_rate of the limited client")
    parser.add_argument("--seconds", type=float, default=None, help="length of each accuracy run (default 10; 5 with --quick)")
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.quick else 3)
    requests = args.requests or (5_000 if args.quick else 20_000)
    seconds = args.seconds or (5.0 if args.quick else 10.0)
    quota = args.quota_bytes_s
    # Enough for the whole run at Q, the first burst (about two windows' worth) and a margin.
    fill_count = int(quota * (1.5 * seconds + 4)) // VALUE_BYTES

    with tempfile.TemporaryDirectory(prefix="bench-quotas-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data", *SHORT_WINDOWS).start()
        try:
            server = Server("diskless", broker.process, broker.port)
            cost_none_us, cost_quota_us = measure_cost(server, requests, rounds)

            set_quota(broker.bootstrap, LIMITED_CLIENT_ID, {"producer_byte_rate": float(quota), "consumer_byte_rate": float(quota)})
            producer_rate, producer_throttles = produce_limited(broker.bootstrap, create_topic(server.bootstrap), seconds, quota)
            topic = create_topic(server.bootstrap)
            fill(broker.bootstrap, topic, fill_count)
            consumer_rate, consumer_throttles = consume_limited(broker.bootstrap, topic, seconds, fill_count)
        finally:
            broker.close()

    figures = {
        "requests": requests,
        "rounds": rounds,
        "cpu_us_per_request_no_quota": round(cost_none_us, 2),
        "cpu_us_per_request_with_quota": round(cost_quota_us, 2),
        "cpu_with_quota_ratio": round(cost_quota_us / cost_none_us, 3),
        "quota_bytes_s": quota,
        "seconds": seconds,
        "measured_seconds": max(1, int(seconds / 2 // QUOTA_PERIOD_S)) * QUOTA_PERIOD_S,
        "producer_bytes_s": round(producer_rate),
        "producer_rate_ratio": round(producer_rate / quota, 3),
        "producer_throttle_events": len(producer_throttles),
        "producer_throttle_max_ms": max(producer_throttles, default=0),
        "consumer_bytes_s": round(consumer_rate),
        "consumer_rate_ratio": round(consumer_rate / quota, 3),
        "consumer_throttle_events": len(consumer_throttles),
        "consumer_throttle_max_ms": max(consumer_throttles, default=0),
    }
    for name, figure in figures.items():
        print(f"{name:>32}  {figure}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
