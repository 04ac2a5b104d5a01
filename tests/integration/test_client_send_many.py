"""`Producer.send_many`, the bulk path of `diskless produce`, against every broker: every record
delivered once, in order, to the partitions `send()` would pick; a rejected batch of records
leaves the producer as it was."""

from __future__ import annotations

import pytest

from diskless.client import Producer
from diskless.client.errors import MessageSizeTooLargeError
from diskless.client.partitioner import partition_for_key

from .test_client_brokers import RunningBroker, kafka_broker, make_topic  # noqa: F401
from .test_client_producer import PARTITIONS, consume_all


async def test_send_many_delivers_every_record_in_order(kafka_broker: RunningBroker) -> None:
    topic = await make_topic(kafka_broker.bootstrap, PARTITIONS)
    keyless = [b"line-%d" % i for i in range(5000)]
    keys = [b"k%d" % (i % 13) for i in range(3000)]
    keyed = [b"keyed-%d" % i for i in range(3000)]
    async with Producer(kafka_broker.bootstrap, batch_size=4096, linger_ms=5) as producer:
        first = await producer.send_many(topic, keyless)
        second = await producer.send_many(topic, keyed, keys)
        pinned = await producer.send_many(topic, [b"pinned-%d" % i for i in range(100)], partition=1, timestamp_ms=1_700_000_000_000)
        assert len(first) > 1  # one future per batch, not per record
        for delivery in first + second + pinned:
            await delivery
        assert (await pinned[-1]).partition == 1 and (await pinned[-1]).timestamp == 1_700_000_000_000
    got = await consume_all(kafka_broker.bootstrap, topic, 8100)
    by_partition: dict[int, list[bytes]] = {}
    for record in got:
        by_partition.setdefault(record.partition, []).append(record.value)
        if record.value.startswith(b"keyed-"):
            assert record.partition == partition_for_key(record.key, PARTITIONS)
    values = [v for p in sorted(by_partition) for v in by_partition[p]]
    assert sorted(values) == sorted(keyless + keyed + [b"pinned-%d" % i for i in range(100)])
    for records in by_partition.values():  # per partition, in the order given
        lines = [int(v.split(b"-")[1]) for v in records if v.startswith(b"line-")]
        assert lines == sorted(lines)
        keyed_order = [int(v.split(b"-")[1]) for v in records if v.startswith(b"keyed-")]
        assert keyed_order == sorted(keyed_order)


async def test_a_rejected_record_in_send_many_adds_none(kafka_broker: RunningBroker) -> None:
    topic = await make_topic(kafka_broker.bootstrap, PARTITIONS)
    async with Producer(kafka_broker.bootstrap, max_request_size=10_000) as producer:
        with pytest.raises(TypeError):
            await producer.send_many(topic, [b"ok", "text", b"ok"])
        with pytest.raises(ValueError):
            await producer.send_many(topic, [b"ok"], partition=PARTITIONS)
        with pytest.raises(MessageSizeTooLargeError):
            await producer.send_many(topic, [b"ok", b"x" * 20_000])
        assert producer._accumulator is not None and producer._accumulator.buffered_bytes == 0
        [delivery] = await producer.send_many(topic, [b"a", b"b"], partition=0)
        assert (await delivery).offset == 1
