"""Records cross between our client and confluent-kafka (librdkafka) exactly, with every codec:
keys, values, headers, timestamps, partitions (Java's murmur2 = librdkafka's murmur2_random)
and offsets."""

from __future__ import annotations

import asyncio
import functools
import time

import pytest
from confluent_kafka import Consumer as CkConsumer
from confluent_kafka import Producer as CkProducer
from confluent_kafka import TopicPartition as CkTopicPartition

from diskless.client import Consumer, Producer, TopicPartition
from diskless.client.partitioner import partition_for_key

from .test_client_brokers import RunningBroker, kafka_broker, make_topic  # noqa: F401

PARTITIONS = 3
COUNT = 150
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def records() -> list[tuple[bytes, bytes | None, tuple[tuple[str, bytes], ...], int]]:
    out = []
    for i in range(COUNT):
        key = b"user-%d" % (i % 23)
        value = None if i % 50 == 49 else b"payload-%d-" % i + b"x" * (i % 40)
        headers = (("trace", b"%d" % i),) if i % 2 else ()
        out.append((key, value, headers, 1_650_000_000_000 + i * 7))
    return out


def consume_with_librdkafka(bootstrap: str, topic: str, count: int) -> dict:
    consumer = CkConsumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([CkTopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = {}
    deadline = time.monotonic() + 30
    try:
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None or message.error() is not None:
                continue
            headers = tuple((k, v) for k, v in (message.headers() or []))
            got[(message.partition(), message.offset())] = (message.key(), message.value(), headers, message.timestamp()[1])
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("codec", CODECS)
async def test_our_records_are_read_exactly_by_librdkafka(kafka_broker: RunningBroker, codec: str) -> None:
    topic = await make_topic(kafka_broker.bootstrap, PARTITIONS)
    sent = {}
    async with Producer(kafka_broker.bootstrap, compression_type=codec) as producer:
        deliveries = [(await producer.send(topic, v, key=k, headers=h, timestamp_ms=ts), (k, v, h, ts)) for k, v, h, ts in records()]
        for delivery, record in deliveries:
            meta = await delivery
            sent[(meta.partition, meta.offset)] = record
    got = await asyncio.to_thread(consume_with_librdkafka, kafka_broker.bootstrap, topic, COUNT)
    assert got == sent


@pytest.mark.parametrize("codec", CODECS)
async def test_librdkafka_records_are_read_exactly_by_us(kafka_broker: RunningBroker, codec: str) -> None:
    topic = await make_topic(kafka_broker.bootstrap, PARTITIONS)
    sent: dict = {}

    def produce() -> None:
        producer = CkProducer({
            "bootstrap.servers": kafka_broker.bootstrap,
            "compression.type": codec,
            "partitioner": "murmur2_random",
            "linger.ms": 5,
        })  # fmt: skip

        def delivered(record, error, message) -> None:
            assert error is None, error
            assert (message.key(), message.value(), message.timestamp()[1]) == (record[0], record[1], record[3])
            sent[(message.partition(), message.offset())] = record  # delivery reports carry no headers

        for record in records():
            key, value, headers, timestamp = record
            producer.produce(topic, value, key, headers=list(headers), timestamp=timestamp,
                             on_delivery=functools.partial(delivered, record))  # fmt: skip
        assert producer.flush(30) == 0

    await asyncio.to_thread(produce)
    assert len(sent) == COUNT
    for (partition, _offset), (key, *_rest) in sent.items():
        assert partition == partition_for_key(key, PARTITIONS), "librdkafka's murmur2_random and ours disagree"
    got = {}
    async with Consumer(bootstrap_servers=kafka_broker.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 30
        while len(got) < COUNT:
            assert time.monotonic() < deadline, f"{len(got)} of {COUNT}"
            for batch in (await consumer.getmany(timeout_ms=1000)).values():
                for r in batch:
                    got[(r.partition, r.offset)] = (r.key, r.value, r.headers, r.timestamp)
    assert got == sent
