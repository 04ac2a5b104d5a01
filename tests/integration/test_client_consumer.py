"""The consumer with assign() against every broker: positions, seeks, resets, commits, pausing."""

from __future__ import annotations

import asyncio
import time

import pytest

from diskless.client import Admin, ClientClosedError, Consumer, Producer, TopicPartition
from diskless.client.errors import IllegalStateError, NoOffsetForPartitionError, RecordDeserializationError

from .test_client_brokers import RunningBroker, kafka_broker, make_topic, new_name  # noqa: F401

DEADLINE_S = 20.0


async def produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0, timestamps: list[int] | None = None) -> None:
    # Each record in its own batch: Tansu 0.6.0 answers ListOffsets "latest" with the last
    # batch's base offset + 1, which is the true end only for one-record batches.
    async with Producer(bootstrap) as producer:
        for i, value in enumerate(values):
            await producer.send_and_wait(topic, value, partition=partition, timestamp_ms=None if timestamps is None else timestamps[i])


async def take(consumer: Consumer, count: int) -> list:
    got = []
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < count:
        assert time.monotonic() < deadline, f"only {len(got)} of {count} records"
        for records in (await consumer.getmany(timeout_ms=1000, max_records=count - len(got))).values():
            got += records
    return got


async def test_seek_position_beginning_and_end(kafka_broker: RunningBroker) -> None:
    topic = await make_topic(kafka_broker.bootstrap, 1)
    tp = TopicPartition(topic, 0)
    await produce(kafka_broker.bootstrap, topic, [b"%d" % i for i in range(10)])
    async with Consumer(bootstrap_servers=kafka_broker.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        assert consumer.assignment() == {tp}
        assert await consumer.position(tp) == 0
        assert [r.value for r in await take(consumer, 3)] == [b"0", b"1", b"2"]
        assert await consumer.position(tp) == 3
        consumer.seek(tp, 7)
        assert [r.offset for r in await take(consumer, 3)] == [7, 8, 9]
        await consumer.seek_to_beginning(tp)
        assert await consumer.position(tp) == 0
        assert (await take(consumer, 1))[0].offset == 0
        await consumer.seek_to_end(tp)
        assert await consumer.position(tp) == 10
        assert await consumer.getmany(timeout_ms=200) == {}
        assert await consumer.beginning_offsets([tp]) == {tp: 0}
        assert await consumer.end_offsets([tp]) == {tp: 10}
        assert consumer.highwater(tp) == 10
        with pytest.raises(IllegalStateError):
            consumer.seek(TopicPartition(topic, 5), 0)


async def test_latest_reset_reads_only_new_records(kafka_broker: RunningBroker) -> None:
    topic = await make_topic(kafka_broker.bootstrap, 1)
    tp = TopicPartition(topic, 0)
    await produce(kafka_broker.bootstrap, topic, [b"old-%d" % i for i in range(5)])
    async with Consumer(bootstrap_servers=kafka_broker.bootstrap, auto_offset_reset="latest") as consumer:
        consumer.assign([tp])
        assert await consumer.position(tp) == 5
        await produce(kafka_broker.bootstrap, topic, [b"new-0", b"new-1"])
        assert [r.value for r in await take(consumer, 2)] == [b"new-0", b"new-1"]


async def test_no_reset_without_committed_offsets_raises(kafka_broker: RunningBroker) -> None:
    topic = await make_topic(kafka_broker.bootstrap, 1)
    tp = TopicPartition(topic, 0)
    async with Consumer(bootstrap_servers=kafka_broker.bootstrap, auto_offset_reset="none") as consumer:
        consumer.assign([tp])
        with pytest.raises(NoOffsetForPartitionError) as info:
            for _ in range(20):
                await consumer.getmany(timeout_ms=500)
        assert info.value.partitions == [tp]
        consumer.seek(tp, 0)  # the application decides: reading works again
        await produce(kafka_broker.bootstrap, topic, [b"a"])
        assert [r.value for r in await take(consumer, 1)] == [b"a"]


async def test_offsets_for_times(kafka_broker: RunningBroker) -> None:
    if kafka_broker.kind == "tansu":
        pytest.skip("Tansu 0.6.0 answers ListOffsets by timestamp with the earliest offset and the current time")
    topic = await make_topic(kafka_broker.bootstrap, 1)
    tp = TopicPartition(topic, 0)
    await produce(kafka_broker.bootstrap, topic, [b"a", b"b", b"c"], timestamps=[1000, 2000, 3000])
    async with Consumer(bootstrap_servers=kafka_broker.bootstrap) as consumer:
        found = await consumer.offsets_for_times({tp: 1500})
        assert found[tp] is not None and (found[tp].offset, found[tp].timestamp) == (1, 2000)
        assert (await consumer.offsets_for_times({tp: 3000}))[tp].offset == 2
        assert (await consumer.offsets_for_times({tp: 5000}))[tp] is None


async def test_async_for_and_max_records(kafka_broker: RunningBroker) -> None:
    topic = await make_topic(kafka_broker.bootstrap, 2)
    async with Producer(kafka_broker.bootstrap) as producer:
        for i in range(40):
            await producer.send(topic, b"%d" % i, partition=i % 2)
        await producer.flush()
    async with Consumer(bootstrap_servers=kafka_broker.bootstrap, auto_offset_reset="earliest", max_poll_records=7) as consumer:
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        batch = await consumer.getmany(timeout_ms=5000, max_records=5)
        assert 0 < sum(len(r) for r in batch.values()) <= 5
        seen = [r for records in batch.values() for r in records]
        async for record in consumer:
            seen.append(record)
            if len(seen) == 40:
                break
        for partition in (0, 1):
            assert [int(r.value) for r in seen if r.partition == partition] == list(range(partition, 40, 2))


async def test_pause_and_resume(kafka_broker: RunningBroker) -> None:
    topic = await make_topic(kafka_broker.bootstrap, 2)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    await produce(kafka_broker.bootstrap, topic, [b"p0"], partition=0)
    await produce(kafka_broker.bootstrap, topic, [b"p1"], partition=1)
    async with Consumer(bootstrap_servers=kafka_broker.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp0, tp1])
        consumer.pause(tp0)
        assert consumer.paused() == {tp0}
        assert [r.value for r in await take(consumer, 1)] == [b"p1"]
        assert await consumer.getmany(timeout_ms=300) == {}
        consumer.resume(tp0)
        assert [r.value for r in await take(consumer, 1)] == [b"p0"]


async def test_an_out_of_range_position_resets(kafka_broker: RunningBroker) -> None:
    topic = await make_topic(kafka_broker.bootstrap, 1)
    tp = TopicPartition(topic, 0)
    await produce(kafka_broker.bootstrap, topic, [b"a", b"b"])
    async with Consumer(bootstrap_servers=kafka_broker.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 1000)
        if kafka_broker.kind == "tansu":
            pytest.skip("Tansu 0.6.0 answers a fetch beyond the log end with no records, not OFFSET_OUT_OF_RANGE")
        assert [r.value for r in await take(consumer, 2)] == [b"a", b"b"]


async def test_commit_and_resume_in_a_simple_group(kafka_broker: RunningBroker) -> None:
    topic = await make_topic(kafka_broker.bootstrap, 1)
    tp = TopicPartition(topic, 0)
    group = new_name("g")
    await produce(kafka_broker.bootstrap, topic, [b"%d" % i for i in range(6)])
    settings = dict(bootstrap_servers=kafka_broker.bootstrap, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False)
    async with Consumer(**settings) as consumer:
        consumer.assign([tp])
        assert await consumer.committed(tp) is None
        assert len(await take(consumer, 4)) == 4
        await consumer.commit()
        assert await consumer.committed(tp) == 4
        await consumer.commit({tp: 3})
        assert await consumer.committed(tp) == 3
    async with Consumer(**settings) as consumer:
        consumer.assign([tp])
        assert [r.offset for r in await take(consumer, 3)] == [3, 4, 5]
    async with Admin(kafka_broker.bootstrap) as admin:
        assert (await admin.list_group_offsets(group))[tp].offset == 3


async def test_auto_commit_stores_what_was_consumed(kafka_broker: RunningBroker) -> None:
    topic = await make_topic(kafka_broker.bootstrap, 1)
    tp = TopicPartition(topic, 0)
    group = new_name("g")
    await produce(kafka_broker.bootstrap, topic, [b"%d" % i for i in range(5)])
    async with Consumer(bootstrap_servers=kafka_broker.bootstrap, group_id=group, auto_offset_reset="earliest",
                        auto_commit_interval_ms=100) as consumer:  # fmt: skip
        consumer.assign([tp])
        assert len(await take(consumer, 5)) == 5
        deadline = time.monotonic() + DEADLINE_S
        while await consumer.committed(tp) != 5:
            assert time.monotonic() < deadline, "auto-commit never stored offset 5"
            await asyncio.sleep(0.05)


async def test_iteration_commits_only_yielded_records_on_close(kafka_broker: RunningBroker) -> None:
    topic = await make_topic(kafka_broker.bootstrap, 1)
    tp = TopicPartition(topic, 0)
    group = new_name("g")
    async with Producer(kafka_broker.bootstrap) as producer:
        for i in range(20):
            await producer.send(topic, b"%d" % i)
    async with Consumer(bootstrap_servers=kafka_broker.bootstrap, group_id=group, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        count = 0
        async for _record in consumer:
            count += 1
            if count == 3:
                break
        assert await consumer.position(tp) == 3
    async with Consumer(bootstrap_servers=kafka_broker.bootstrap, group_id=group) as consumer:
        assert await consumer.committed(tp) == 3


async def test_delete_records_moves_the_log_start(kafka_broker: RunningBroker) -> None:
    if kafka_broker.kind == "tansu":
        pytest.skip("Tansu 0.6.0 closes the connection on DeleteRecords")
    topic = await make_topic(kafka_broker.bootstrap, 1)
    tp = TopicPartition(topic, 0)
    await produce(kafka_broker.bootstrap, topic, [b"%d" % i for i in range(5)])
    async with Admin(kafka_broker.bootstrap) as admin:
        assert await admin.delete_records(topic, {0: 3}) == {0: 3}
    async with Consumer(bootstrap_servers=kafka_broker.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        assert [r.value for r in await take(consumer, 2)] == [b"3", b"4"]


async def test_a_closed_consumer_fails_fast(kafka_broker: RunningBroker) -> None:
    consumer = Consumer(bootstrap_servers=kafka_broker.bootstrap)
    with pytest.raises(IllegalStateError):
        await consumer.getmany()
    await consumer.start()
    await consumer.close()
    with pytest.raises(ClientClosedError):
        await consumer.getmany()
    with pytest.raises(ClientClosedError):
        consumer.assign([TopicPartition("x", 0)])
    with pytest.raises(IllegalStateError):
        Consumer(bootstrap_servers=kafka_broker.bootstrap).subscribe(["x"])


async def test_a_value_the_deserializer_rejects_stops_the_partition_at_that_record(kafka_broker: RunningBroker) -> None:
    """As Java's RecordDeserializationException: the records before the bad one are returned,
    the error names the bad one, and the position stays there until the application seeks."""
    topic = await make_topic(kafka_broker.bootstrap, 1)
    tp = TopicPartition(topic, 0)
    await produce(kafka_broker.bootstrap, topic, [b"0", b"bad", b"2"])
    async with Consumer(bootstrap_servers=kafka_broker.bootstrap, auto_offset_reset="earliest", value_deserializer=int) as consumer:
        consumer.assign([tp])
        got = []
        deadline = time.monotonic() + DEADLINE_S
        while True:
            assert time.monotonic() < deadline, f"no error after {len(got)} records"
            try:
                batches = await consumer.getmany(timeout_ms=1000, max_records=10)
            except RecordDeserializationError as exc:
                error = exc
                break
            for records in batches.values():
                got += records
        assert [(r.offset, r.value) for r in got] == [(0, 0)]
        assert (error.topic, error.partition, error.offset, error.part) == (topic, 0, 1, "value")
        assert isinstance(error.__cause__, ValueError)
        assert await consumer.position(tp) == 1
        with pytest.raises(RecordDeserializationError):
            await take(consumer, 1)  # not seeking past it: the same record fails again
        assert await consumer.position(tp) == 1
        consumer.seek(tp, 2)
        assert [(r.offset, r.value) for r in await take(consumer, 1)] == [(2, 2)]

