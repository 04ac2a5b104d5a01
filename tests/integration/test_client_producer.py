"""The producer against every broker: codecs, keys, headers, acks, flush and close, errors."""

from __future__ import annotations

import asyncio

import pytest

from diskless.client import Admin, ClientClosedError, Consumer, KafkaTimeoutError, Producer, TopicPartition
from diskless.client.errors import MessageSizeTooLargeError, TransactionAbortableError
from diskless.client.partitioner import partition_for_key

from .test_client_brokers import RunningBroker, kafka_broker, make_topic, new_name  # noqa: F401

PARTITIONS = 3


async def consume_all(bootstrap: str, topic: str, count: int, partitions: int = PARTITIONS, **settings) -> list:
    """Exactly `count` records of `topic` from the beginning, sorted by (partition, offset)."""
    got = []
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", **settings) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        while len(got) < count:
            batches = await consumer.getmany(timeout_ms=10000)
            assert batches, f"no more records after {len(got)} of {count}"
            for records in batches.values():
                got += records
        extra = await consumer.getmany(timeout_ms=200)
        assert extra == {}, "more records than were produced"
    return sorted(got, key=lambda r: (r.partition, r.offset))


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
async def test_every_codec_round_trips_keys_values_headers_timestamps(kafka_broker: RunningBroker, compression: str) -> None:
    topic = await make_topic(kafka_broker.bootstrap, PARTITIONS)
    sent = {}
    async with Producer(kafka_broker.bootstrap, compression_type=compression, linger_ms=5) as producer:
        deliveries = []
        for i in range(300):
            key = b"key-%d" % (i % 17)
            headers = [("n", b"%d" % i), ("empty", None)] if i % 3 else []
            value = (b"value-%d-" % i) * (i % 7) if i % 11 else None
            timestamp = 1_700_000_000_000 + i
            deliveries.append((await producer.send(topic, value, key=key, timestamp_ms=timestamp, headers=headers), (key, value, tuple(headers), timestamp)))
        for delivery, record in deliveries:
            meta = await delivery
            assert meta.topic == topic and meta.timestamp == record[3]
            assert meta.partition == partition_for_key(record[0], PARTITIONS)
            sent[(meta.partition, meta.offset)] = record
    got = await consume_all(kafka_broker.bootstrap, topic, len(sent))
    assert {(r.partition, r.offset): (r.key, r.value, r.headers, r.timestamp) for r in got} == sent
    for partition in range(PARTITIONS):
        offsets = [r.offset for r in got if r.partition == partition]
        assert offsets == list(range(len(offsets)))


@pytest.mark.parametrize("acks", [0, 1, "all"])
async def test_acks_levels_deliver_every_record(kafka_broker: RunningBroker, acks) -> None:
    topic = await make_topic(kafka_broker.bootstrap, 1)
    async with Producer(kafka_broker.bootstrap, acks=acks) as producer:
        deliveries = [await producer.send(topic, b"%d" % i) for i in range(50)]
        await producer.flush()
        offsets = [(await d).offset for d in deliveries]
    assert offsets == ([-1] * 50 if acks == 0 else list(range(50)))
    got = await consume_all(kafka_broker.bootstrap, topic, 50, partitions=1)
    assert [r.value for r in got] == [b"%d" % i for i in range(50)]


async def test_explicit_partitions_and_keyless_records(kafka_broker: RunningBroker) -> None:
    topic = await make_topic(kafka_broker.bootstrap, PARTITIONS)
    async with Producer(kafka_broker.bootstrap) as producer:
        meta = await producer.send_and_wait(topic, b"x", partition=2)
        assert (meta.partition, meta.offset) == (2, 0)
        with pytest.raises(ValueError):
            await producer.send(topic, b"x", partition=PARTITIONS)
        keyless = [await producer.send(topic, b"%d" % i) for i in range(100)]
        await producer.flush()
        partitions = {(await d).partition for d in keyless}
        assert partitions <= set(range(PARTITIONS))
        assert await producer.partitions_for(topic) == [0, 1, 2]


async def test_flush_sends_records_that_would_linger(kafka_broker: RunningBroker) -> None:
    topic = await make_topic(kafka_broker.bootstrap, 1)
    async with Producer(kafka_broker.bootstrap, linger_ms=60000, delivery_timeout_ms=120000) as producer:
        delivery = await producer.send(topic, b"lingering")
        assert not delivery.done()
        await asyncio.wait_for(producer.flush(), 20)
        assert delivery.done() and delivery.result().offset == 0


async def test_close_drains_pending_records(kafka_broker: RunningBroker) -> None:
    topic = await make_topic(kafka_broker.bootstrap, 2)
    producer = Producer(kafka_broker.bootstrap, linger_ms=60000, delivery_timeout_ms=120000)
    await producer.start()
    deliveries = [await producer.send(topic, b"%d" % i, partition=i % 2) for i in range(40)]
    await asyncio.wait_for(producer.close(), 20)
    assert sorted([(await d).offset for d in deliveries]) == sorted(list(range(20)) * 2)
    with pytest.raises(ClientClosedError):
        await producer.send(topic, b"late")
    with pytest.raises(ClientClosedError):
        await producer.flush()


async def test_a_send_waiting_for_metadata_while_close_completes_fails(kafka_broker: RunningBroker) -> None:
    """close() runs while a send() waits for its topic's metadata: the send must raise
    ClientClosedError, not add its record after close() has failed the queued ones (its
    delivery would then never resolve)."""
    producer = Producer(kafka_broker.bootstrap)
    await producer.start()
    topic = await make_topic(kafka_broker.bootstrap, 1)  # after start: not in the producer's metadata yet
    cluster = producer._cluster
    assert topic not in cluster.metadata.topics
    real_wait_for_topic = cluster.wait_for_topic
    entered, gate = asyncio.Event(), asyncio.Event()

    async def wait_for_topic(name: str, timeout_ms: int) -> int:
        count = await real_wait_for_topic(name, timeout_ms)
        entered.set()
        await gate.wait()
        return count

    cluster.wait_for_topic = wait_for_topic
    sending = asyncio.ensure_future(producer.send(topic, b"late"))
    await asyncio.wait_for(entered.wait(), 20)
    await asyncio.wait_for(producer.close(), 20)
    gate.set()
    with pytest.raises(ClientClosedError):
        delivery = await asyncio.wait_for(sending, 20)
        await asyncio.wait_for(delivery, 5)


async def test_a_record_larger_than_max_request_size_is_refused(kafka_broker: RunningBroker) -> None:
    topic = await make_topic(kafka_broker.bootstrap, 1)
    async with Producer(kafka_broker.bootstrap, max_request_size=10000) as producer:
        with pytest.raises(MessageSizeTooLargeError):
            await producer.send(topic, b"x" * 20000)
        assert (await producer.send_and_wait(topic, b"x" * 5000)).offset == 0


async def test_an_unknown_topic_fails_after_max_block_ms(tmp_path) -> None:
    """With auto.create.topics.enable=false (Tansu 0.6.0 cannot turn it off), a send to a
    topic that does not exist waits max_block_ms for its metadata, then fails."""
    from tests.integration.broker_process import BrokerProcess

    broker = BrokerProcess(tmp_path / "data", "--auto-create-topics", "false").start()
    try:
        async with Producer(broker.bootstrap, max_block_ms=500) as producer:
            with pytest.raises(KafkaTimeoutError) as info:
                await producer.send(new_name("missing"), b"x")
            assert info.value.timeout_ms == 500
    finally:
        broker.close()


async def test_many_concurrent_senders_keep_per_partition_order(kafka_broker: RunningBroker) -> None:
    topic = await make_topic(kafka_broker.bootstrap, 1)
    async with Producer(kafka_broker.bootstrap, batch_size=2000, linger_ms=1) as producer:

        async def sender(task: int) -> list:
            return [await producer.send(topic, b"%d-%d" % (task, i)) for i in range(200)]

        per_task = await asyncio.gather(*(sender(t) for t in range(5)))
        await producer.flush()
        for deliveries in per_task:
            offsets = [(await d).offset for d in deliveries]
            assert offsets == sorted(offsets)
    got = await consume_all(kafka_broker.bootstrap, topic, 1000, partitions=1)
    for task in range(5):
        values = [r.value for r in got if r.value.startswith(b"%d-" % task)]
        assert values == [b"%d-%d" % (task, i) for i in range(200)]


def test_a_producer_creates_topics_where_the_broker_allows_it(tmp_path) -> None:
    """With auto.create.topics.enable on the broker, the first send creates the topic, as with
    the Java producer; the consumer finds the record there."""
    from tests.integration.broker_process import BrokerProcess

    broker = BrokerProcess(tmp_path / "data", "--auto-create-topics", "true", "--num-partitions", "2").start()
    try:
        topic = new_name("auto")

        async def scenario() -> tuple[int, int]:
            async with Producer(broker.bootstrap) as producer:
                metadata = await producer.send_and_wait(topic, b"first", partition=1)
            async with Admin(broker.bootstrap) as admin:
                partitions = len((await admin.describe_topics(topic))[topic].partitions)
            return metadata.offset, partitions

        offset, partitions = asyncio.run(scenario())
        assert (offset, partitions) == (0, 2)
    finally:
        broker.close()


async def test_a_rejected_record_leaves_the_producer_as_it_was(kafka_broker: RunningBroker) -> None:
    # Issue O item 2: one str value used to break every later send and close().
    topic = await make_topic(kafka_broker.bootstrap, 1)
    producer = Producer(kafka_broker.bootstrap, linger_ms=5)
    await producer.start()
    assert (await producer.send_and_wait(topic, b"first", partition=0)).offset == 0
    with pytest.raises(TypeError, match="value must be bytes or None, not str"):
        await producer.send(topic, "text", partition=0)
    with pytest.raises(TypeError, match="key must be bytes or None, not int"):
        await producer.send(topic, b"v", key=7, partition=0)
    with pytest.raises(TypeError, match="header's key must be str"):
        await producer.send(topic, b"v", partition=0, headers=[(b"h", b"x")])
    assert (await producer.send_and_wait(topic, b"second", partition=0)).offset == 1
    delivery = await producer.send(topic, bytearray(b"third"), partition=0, headers=[("h", b"x")])
    await asyncio.wait_for(producer.stop(), 20)
    assert (await delivery).offset == 2
    got = await consume_all(kafka_broker.bootstrap, topic, 3, partitions=1)
    assert [(r.offset, r.key, r.value, r.headers) for r in got] == [
        (0, None, b"first", ()),
        (1, None, b"second", ()),
        (2, None, b"third", (("h", b"x"),)),
    ]


async def test_serializers_and_deserializers_as_in_aiokafka(kafka_broker: RunningBroker) -> None:
    import json

    topic = await make_topic(kafka_broker.bootstrap, 1)
    producer = Producer(
        kafka_broker.bootstrap,
        key_serializer=lambda k: None if k is None else k.encode(),
        value_serializer=lambda v: json.dumps(v).encode(),
    )
    await producer.start()
    try:
        await producer.send_and_wait(topic, {"n": 1}, key="a", partition=0)
        await producer.send_and_wait(topic, [2], partition=0)
    finally:
        await producer.stop()
    consumer = Consumer(
        bootstrap_servers=kafka_broker.bootstrap,
        auto_offset_reset="earliest",
        key_deserializer=lambda k: None if k is None else k.decode(),
        value_deserializer=json.loads,
    )
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, 0)])
        got = []
        while len(got) < 2:
            batches = await consumer.getmany(timeout_ms=10000)
            assert batches, f"no more records after {len(got)}"
            for records in batches.values():
                got += records
    finally:
        await consumer.stop()
    assert [(r.offset, r.key, r.value) for r in got] == [(0, "a", {"n": 1}), (1, None, [2])]


async def test_a_transaction_with_a_failed_batch_cannot_commit_and_recovers_after_abort(kafka_broker: RunningBroker) -> None:
    """As Java's abortable error: a batch the broker refuses for good (MESSAGE_TOO_LARGE here)
    makes commit raise; abort works, and the next transaction (same transactional id, a new
    epoch) commits and is read committed."""
    if kafka_broker.kind == "tansu":
        pytest.skip("transactions against our broker only")
    small = await make_topic(kafka_broker.bootstrap, 1, {"max.message.bytes": "2000"})
    topic = await make_topic(kafka_broker.bootstrap, 1)
    async with Producer(kafka_broker.bootstrap, transactional_id=new_name("tx")) as producer:
        await producer.begin_transaction()
        kept = await producer.send(topic, b"aborted")
        refused = await producer.send(small, b"x" * 5000)
        with pytest.raises(TransactionAbortableError) as info:
            await producer.commit_transaction()
        assert isinstance(info.value.error, MessageSizeTooLargeError)
        with pytest.raises(MessageSizeTooLargeError):
            await refused
        await kept
        with pytest.raises(TransactionAbortableError):
            await producer.send(topic, b"refused too")
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send(topic, b"committed")
    got = await consume_all(kafka_broker.bootstrap, topic, 1, partitions=1, isolation_level="read_committed")
    assert [r.value for r in got] == [b"committed"]


async def test_consume_transform_produce_commits_offsets_with_the_consumers_generation(kafka_broker: RunningBroker) -> None:
    """KIP-447: offsets go to the group's coordinator with the consumer's group_metadata();
    they are committed with the transaction, and a stale generation is refused (the
    transaction must then be aborted)."""
    if kafka_broker.kind == "tansu":
        pytest.skip("transactions against our broker only")
    from dataclasses import replace

    from diskless.client.errors import IllegalGenerationError

    source = await make_topic(kafka_broker.bootstrap, 1)
    sink = await make_topic(kafka_broker.bootstrap, 1)
    group = new_name("g")
    async with Producer(kafka_broker.bootstrap) as plain:
        for i in range(3):
            await (await plain.send(source, b"v%d" % i, partition=0))
    async with (
        Consumer(source, bootstrap_servers=kafka_broker.bootstrap, group_id=group, auto_offset_reset="earliest",
                 enable_auto_commit=False, isolation_level="read_committed") as consumer,
        Producer(kafka_broker.bootstrap, transactional_id=new_name("tx")) as producer,
    ):  # fmt: skip
        got = []
        while len(got) < 3:
            for records in (await consumer.getmany(timeout_ms=10000)).values():
                got += records
        meta = consumer.group_metadata()
        assert meta.group_id == group and meta.generation_id >= 1 and meta.member_id
        async with producer.transaction():
            for record in got:
                await producer.send(sink, record.value.upper(), partition=0)
            await producer.send_offsets_to_transaction({TopicPartition(source, 0): got[-1].offset + 1}, meta)
        assert await consumer.committed(TopicPartition(source, 0)) == 3
        await producer.begin_transaction()
        await producer.send(sink, b"stale", partition=0)
        with pytest.raises(IllegalGenerationError):
            stale = replace(meta, generation_id=meta.generation_id + 1)
            await producer.send_offsets_to_transaction({TopicPartition(source, 0): 99}, stale)
        with pytest.raises(TransactionAbortableError):
            await producer.commit_transaction()
        await producer.abort_transaction()
        assert await consumer.committed(TopicPartition(source, 0)) == 3
    got = await consume_all(kafka_broker.bootstrap, sink, 3, partitions=1, isolation_level="read_committed")
    assert [r.value for r in got] == [b"V0", b"V1", b"V2"]


async def test_close_during_start_stops_the_started_producer(kafka_broker: RunningBroker) -> None:
    """close() while start() is connecting waits for it, then stops what it started: the
    sender's task ends and the producer refuses records."""
    producer = Producer(kafka_broker.bootstrap, enable_idempotence=True)
    starting = asyncio.create_task(producer.start())
    await asyncio.sleep(0)  # start() is under way: connecting
    assert not starting.done()
    await producer.close()
    await starting
    assert producer._sender is not None and producer._sender._task is not None and producer._sender._task.done()
    with pytest.raises(ClientClosedError):
        await producer.send("anything", b"v")
