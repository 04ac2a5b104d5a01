"""aiokafka's transactional producer and read_committed consumer against a real broker:
committed and aborted transactions interleaved over several partitions, read back exactly."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

PARTITIONS = 3
DEADLINE_S = 30.0


async def read_all(bootstrap: str, topic: str, isolation: str, expected: int) -> dict[int, list[str]]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    got: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    try:
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)  # read_committed: the last stable offsets
        async with asyncio.timeout(DEADLINE_S):
            while sum(map(len, got.values())) < expected or any([await consumer.position(tp) < ends[tp] for tp in partitions]):
                for tp, messages in (await consumer.getmany(timeout_ms=200)).items():
                    got[tp.partition] += [m.value.decode() for m in messages]
    finally:
        await consumer.stop()
    return got


async def test_aiokafka_transactions(broker, create_topic) -> None:
    topic = create_topic(broker.bootstrap, partitions=PARTITIONS)
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"tx-{uuid.uuid4().hex[:8]}", enable_idempotence=True)
    await producer.start()
    committed: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    everything: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    try:
        for txn in range(6):
            await producer.begin_transaction()
            sends = []
            for i in range(20):
                value = f"{txn}-{i}"
                sends.append(await producer.send(topic, value.encode(), partition=i % PARTITIONS))
                everything[i % PARTITIONS].append(value)
                if txn % 2 == 0:
                    committed[i % PARTITIONS].append(value)
            await asyncio.gather(*sends)
            if txn % 2 == 0:
                await producer.commit_transaction()
            else:
                await producer.abort_transaction()
    finally:
        await producer.stop()
    assert await read_all(broker.bootstrap, topic, "read_committed", 60) == committed
    assert await read_all(broker.bootstrap, topic, "read_uncommitted", 120) == everything


async def read_with_our_client(bootstrap: str, topic: str, isolation: str, expected: int) -> dict[int, list[str]]:
    from diskless.client import Consumer
    from diskless.client import TopicPartition as OurTopicPartition

    got: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    async with Consumer(bootstrap_servers=bootstrap, isolation_level=isolation, auto_offset_reset="earliest") as consumer:
        partitions = [OurTopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        ends = await consumer.end_offsets(partitions)
        async with asyncio.timeout(DEADLINE_S):
            while sum(map(len, got.values())) < expected or any([await consumer.position(tp) < ends[tp] for tp in partitions]):
                for tp, records in (await consumer.getmany(timeout_ms=200)).items():
                    got[tp.partition] += [r.value.decode() for r in records]
    return got


async def test_our_client_reads_committed_transactions(broker, create_topic) -> None:
    """Transactions written by aiokafka, read by our asyncio client: read_committed skips the
    aborted ones and every control record, read_uncommitted only the control records."""
    topic = create_topic(broker.bootstrap, partitions=PARTITIONS)
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"tx-{uuid.uuid4().hex[:8]}", enable_idempotence=True)
    await producer.start()
    committed: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    everything: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    try:
        for txn in range(4):
            await producer.begin_transaction()
            for i in range(12):
                await (await producer.send(topic, f"{txn}-{i}".encode(), partition=i % PARTITIONS))
                everything[i % PARTITIONS].append(f"{txn}-{i}")
                if txn != 1:
                    committed[i % PARTITIONS].append(f"{txn}-{i}")
            await (producer.abort_transaction() if txn == 1 else producer.commit_transaction())
    finally:
        await producer.stop()
    assert await read_with_our_client(broker.bootstrap, topic, "read_committed", 36) == committed
    assert await read_with_our_client(broker.bootstrap, topic, "read_uncommitted", 48) == everything


async def test_our_client_produces_transactions(broker, create_topic) -> None:
    """Our asyncio Producer(transactional_id=...): committed and aborted transactions, offsets
    sent with one, a second producer with the same id fencing the first."""
    from diskless.client import Producer
    from diskless.client import TopicPartition as OurTopicPartition
    from diskless.client.errors import BrokerResponseError
    from diskless.client.partitioner import partition_for_key

    topic = create_topic(broker.bootstrap, partitions=PARTITIONS)
    source = create_topic(broker.bootstrap, partitions=1)
    transactional_id = f"tx-{uuid.uuid4().hex[:8]}"
    committed: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    everything: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    group = f"g-{uuid.uuid4().hex[:8]}"
    async with Producer(bootstrap_servers=broker.bootstrap, transactional_id=transactional_id, linger_ms=5) as producer:
        for txn in range(5):
            await producer.begin_transaction()
            for i in range(15):
                await producer.send(topic, f"{txn}-{i}".encode(), partition=i % PARTITIONS)
                everything[i % PARTITIONS].append(f"{txn}-{i}")
                if txn % 2 == 0:
                    committed[i % PARTITIONS].append(f"{txn}-{i}")
            if txn == 2:
                await producer.send_offsets_to_transaction({OurTopicPartition(source, 0): 7}, group)
            bulk = [f"{txn}-bulk-{i}".encode() for i in range(6)]  # the bulk path adds its partitions too
            await producer.send_many(topic, bulk, keys=[b"k%d" % i for i in range(6)])
            for i, value in enumerate(bulk):
                p = partition_for_key(b"k%d" % i, PARTITIONS)
                everything[p].append(value.decode())
                if txn % 2 == 0:
                    committed[p].append(value.decode())
            await (producer.commit_transaction() if txn % 2 == 0 else producer.abort_transaction())
        async with producer.transaction():
            pass  # nothing added: no request
        newer = Producer(bootstrap_servers=broker.bootstrap, transactional_id=transactional_id)
        await newer.start()
        try:
            await producer.begin_transaction()
            with pytest.raises(BrokerResponseError):
                await producer.send(topic, b"fenced", partition=0)
        finally:
            await newer.close()
    assert await read_with_our_client(broker.bootstrap, topic, "read_committed", 63) == committed
    assert await read_all(broker.bootstrap, topic, "read_uncommitted", 105) == everything
    from confluent_kafka import Consumer as ConfluentConsumer
    from confluent_kafka import TopicPartition as ConfluentTopicPartition

    checker = ConfluentConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        assert [tp.offset for tp in checker.committed([ConfluentTopicPartition(source, 0)], timeout=10)] == [7]
    finally:
        checker.close()
