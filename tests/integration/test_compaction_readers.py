"""Readers across a cleaned log's offset gaps: after compaction, aiokafka, kafka-python and
kcat read from the earliest offset exactly what librdkafka reads (each live key once, at the
offset it was acknowledged at); ListOffsets by timestamp answers the first remaining record at
or after it; DeleteRecords to an offset the cleaner removed moves the log start offset there,
and reads start at the first record above it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid

from aiokafka import AIOKafkaConsumer, TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, TopicPartition as KpTopicPartition

from .test_compaction_cleaner import cleaner_broker, compacted_read, compacted_topic, produce_rounds, wait_until  # noqa: F401 (fixture)

DEADLINE_S = 30.0


def read_with_timestamps(bootstrap: str, topic: str, last_offset: int) -> list[tuple[int, bytes, bytes | None, int]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[int, bytes, bytes | None, int]] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while (not got or got[-1][0] < last_offset) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is None, message.error()
                got.append((message.offset(), message.key(), message.value(), message.timestamp()[1]))
    finally:
        consumer.close()
    return got


async def aiokafka_read(bootstrap: str, topic: str, last_offset: int) -> list[tuple[int, bytes, bytes | None]]:
    tp = AioTopicPartition(topic, 0)
    async with AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False) as consumer:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got: list[tuple[int, bytes, bytes | None]] = []
        deadline = time.monotonic() + DEADLINE_S
        while (not got or got[-1][0] < last_offset) and time.monotonic() < deadline:
            for message in (await consumer.getmany(tp, timeout_ms=500)).get(tp, []):
                got.append((message.offset, message.key, message.value))
        return got


def kafka_python_read(bootstrap: str, topic: str, last_offset: int) -> list[tuple[int, bytes, bytes | None]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tp = KpTopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got: list[tuple[int, bytes, bytes | None]] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while (not got or got[-1][0] < last_offset) and time.monotonic() < deadline:
            for messages in consumer.poll(timeout_ms=500).values():
                got += [(m.offset, m.key, m.value) for m in messages]
    finally:
        consumer.close()
    return got


def kcat_read(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    out = subprocess.run(
        ["kcat", "-C", "-b", bootstrap, "-t", topic, "-p", "0", "-o", "beginning", "-e", "-J", "-q"], check=True, timeout=DEADLINE_S, capture_output=True
    ).stdout
    return [(m["offset"], m["key"].encode(), None if m["payload"] is None else m["payload"].encode()) for m in map(json.loads, out.decode().splitlines())]


def test_every_client_reads_across_the_gaps_and_offsets_answer_for_them(cleaner_broker) -> None:
    bootstrap = cleaner_broker.bootstrap
    topic = compacted_topic(bootstrap)
    last = produce_rounds(bootstrap, topic, rounds=3)
    compacted = wait_until(lambda: compacted_read(bootstrap, topic, last), "each key once, at its last offset")
    offsets = [offset for offset, _, _ in compacted]
    assert offsets[0] > 0 and len(offsets) < offsets[-1] + 1  # gaps, one before the first record
    with_timestamps = read_with_timestamps(bootstrap, topic, offsets[-1])
    assert [(o, k, v) for o, k, v, _ in with_timestamps] == compacted
    assert asyncio.run(aiokafka_read(bootstrap, topic, offsets[-1])) == compacted
    assert kafka_python_read(bootstrap, topic, offsets[-1]) == compacted
    assert kcat_read(bootstrap, topic) == compacted

    # ListOffsets by timestamp: the first remaining record at or after it.
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": f"p-{uuid.uuid4().hex[:8]}"})
    try:
        for timestamp in (0, with_timestamps[len(with_timestamps) // 2][3], with_timestamps[-1][3]):
            expected = min(o for o, _, _, ts in with_timestamps if ts >= timestamp)
            (found,) = probe.offsets_for_times([TopicPartition(topic, 0, timestamp)], timeout=DEADLINE_S)
            assert found.offset == expected, timestamp
        # DeleteRecords to an offset the cleaner removed: the log starts exactly there.
        removed = next(o for o in range(offsets[0], offsets[-1]) if o not in set(offsets))
        admin = AdminClient({"bootstrap.servers": bootstrap})
        (deleted,) = admin.delete_records([TopicPartition(topic, 0, removed)]).values()
        assert deleted.result(DEADLINE_S).low_watermark == removed
        assert probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=DEADLINE_S, cached=False)[0] == removed
    finally:
        probe.close()
    assert kcat_read(bootstrap, topic) == [r for r in compacted if r[0] > removed]
