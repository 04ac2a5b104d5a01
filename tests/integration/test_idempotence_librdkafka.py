"""librdkafka's idempotent producer through connections cut in the middle of produce requests.

The broker advertises a TCP proxy (tcp_proxy.py) as its listener, so every connection the
producer opens goes through it. The proxy cuts some produce requests after part of their
bytes (the broker never handles them) and drops the responses of others (the broker appended
them, the producer does not know): librdkafka retries both with the same producer id and
sequences. Consuming back must show every value exactly once, in per-partition order.
"""

from __future__ import annotations

import time
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from .broker_process import BrokerProcess
from .conftest import NO_REBALANCE_DELAY
from .tcp_proxy import CutRequest, CutResponse, TcpProxy

PRODUCE = 0
PARTITIONS = 3
COUNT = 3000
DEADLINE_S = 60.0


@pytest.fixture
def proxied_broker(tmp_path):
    """(broker, proxy): a broker whose advertised listener is a cutting proxy in front of it."""
    proxy = TcpProxy()
    broker = BrokerProcess(tmp_path / "data", *NO_REBALANCE_DELAY, "--advertised-listener", proxy.address)
    proxy.upstream_port = broker.port
    proxy.start()
    broker.start()
    try:
        yield broker, proxy
    finally:
        proxy.close()
        broker.close()


def cutting_plan(api_key: int, seen: int) -> CutRequest | CutResponse | None:
    """Every 6th produce request loses its tail, every 6th (shifted by 3) its response."""
    if api_key != PRODUCE or seen == 0:
        return None
    if seen % 6 == 1:
        return CutRequest(after_bytes=30 + 37 * (seen % 11))
    if seen % 6 == 4:
        return CutResponse()
    return None


@pytest.mark.parametrize("restart", [False, True], ids=["cuts", "cuts-and-broker-kill"])
def test_idempotent_producer_survives_cut_connections(proxied_broker, create_topic, restart: bool) -> None:
    """With `restart`, the broker is also killed (SIGKILL) and started again while produce
    requests are in flight: its producer state comes back from the log and still dedups."""
    broker, proxy = proxied_broker
    topic = create_topic(proxy.address, partitions=PARTITIONS)
    proxy.set_plan(cutting_plan)
    producer = Producer(
        {
            "bootstrap.servers": proxy.address,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            "batch.num.messages": 25,  # many small produce requests, several in flight
            "max.in.flight.requests.per.connection": 5,
            "retry.backoff.ms": 20,
            "reconnect.backoff.ms": 10,
            "reconnect.backoff.max.ms": 100,
            "message.timeout.ms": 120_000,
        }
    )
    failures: list[str] = []
    delivered: dict[int, list[int]] = defaultdict(list)  # partition -> values, in delivery order

    def on_delivery(err, msg) -> None:
        if err is not None:
            failures.append(str(err))
        else:
            delivered[msg.partition()].append(int(msg.value()))

    for i in range(COUNT):
        producer.produce(topic, value=str(i).encode(), partition=i % PARTITIONS, on_delivery=on_delivery)
        producer.poll(0)
        if restart and i == COUNT // 2:
            deadline = time.monotonic() + DEADLINE_S
            while sum(map(len, delivered.values())) < COUNT // 4:
                assert time.monotonic() < deadline, "deliveries stalled before the kill"
                producer.poll(0.01)
            broker.kill()
            broker.start()
    assert producer.flush(DEADLINE_S) == 0
    assert failures == []
    assert proxy.cuts("request") >= 5, proxy.cuts("request")
    assert proxy.cuts("response") >= 5, proxy.cuts("response")

    proxy.set_plan(lambda api_key, seen: None)
    expected = {p: [i for i in range(COUNT) if i % PARTITIONS == p] for p in range(PARTITIONS)}
    assert {p: sorted(v) for p, v in delivered.items()} == expected
    assert consume_all(proxy.address, topic) == expected


def consume_all(bootstrap: str, topic: str) -> dict[int, list[int]]:
    """Every value of every partition, in offset order, read until each partition's end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        values: dict[int, list[int]] = defaultdict(list)
        offsets: dict[int, list[int]] = defaultdict(list)
        at_end: set[int] = set()
        deadline = time.monotonic() + DEADLINE_S
        while len(at_end) < PARTITIONS:
            assert time.monotonic() < deadline, f"consumed {sum(map(len, values.values()))} of {COUNT}"
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                at_end.add(msg.partition())
                continue
            at_end.discard(msg.partition())
            values[msg.partition()].append(int(msg.value()))
            offsets[msg.partition()].append(msg.offset())
        for p in range(PARTITIONS):
            assert offsets[p] == list(range(len(offsets[p]))), f"partition {p}: offsets not contiguous from 0"
        return dict(values)
    finally:
        consumer.close()
