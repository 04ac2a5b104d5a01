"""The admin client against every broker: topics, partitions, configs, offsets, errors."""

from __future__ import annotations

import pytest

from diskless.client import Admin, ClientClosedError, NewTopic, Producer
from diskless.client.errors import (
    InvalidPartitionsError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    UnsupportedByBroker,
)

from .test_client_brokers import RunningBroker, kafka_broker, new_name  # noqa: F401


async def test_create_describe_list_and_delete_topics(kafka_broker: RunningBroker) -> None:
    name, other = new_name(), new_name()
    async with Admin(kafka_broker.bootstrap) as admin:
        await admin.create_topics(name, 3)
        await admin.create_topics([NewTopic(other, 2)])
        with pytest.raises(TopicAlreadyExistsError) as info:
            await admin.create_topics(name, 3)
        assert info.value.context == {"topic": name}
        names = await admin.list_topics()
        assert {name, other} <= set(names) and names == sorted(names)
        described = await admin.describe_topics([name, other])
        assert [p.partition for p in described[name].partitions] == [0, 1, 2]
        assert len(described[other].partitions) == 2
        assert described[name].topic_id is not None and described[name].topic_id != described[other].topic_id
        brokers = {b.node_id for b in (await admin.describe_cluster()).brokers}
        assert all(p.leader in brokers for p in described[name].partitions)
        await admin.delete_topics([name, other])
        assert not {name, other} & set(await admin.list_topics())
        with pytest.raises(UnknownTopicOrPartitionError):
            await admin.describe_topics(name)
        with pytest.raises(UnknownTopicOrPartitionError):
            await admin.delete_topics(name)


async def test_invalid_partition_counts_are_refused(kafka_broker: RunningBroker) -> None:
    if kafka_broker.kind == "tansu":
        pytest.skip("Tansu 0.6.0 accepts a topic with 0 partitions")
    async with Admin(kafka_broker.bootstrap) as admin:
        with pytest.raises(InvalidPartitionsError):
            await admin.create_topics(new_name(), 0)


async def test_configs_are_described_and_altered_incrementally(kafka_broker: RunningBroker) -> None:
    if kafka_broker.kind == "tansu":
        pytest.skip("Tansu 0.6.0 answers DescribeConfigs with no configs")
    name = new_name()
    async with Admin(kafka_broker.bootstrap) as admin:
        await admin.create_topics(name, 1, {"retention.ms": "3600000", "segment.bytes": "1048576"})
        configs = await admin.describe_configs(name)
        assert configs["retention.ms"].value == "3600000" and not configs["retention.ms"].is_default
        assert configs["segment.bytes"].value == "1048576"
        await admin.alter_configs(name, {"retention.ms": "600000", "segment.bytes": None})
        changed = await admin.describe_configs(name, ["retention.ms", "segment.bytes"])
        assert set(changed) == {"retention.ms", "segment.bytes"}
        assert changed["retention.ms"].value == "600000"
        assert changed["segment.bytes"].is_default  # back to the broker's default
        assert (await admin.describe_configs(name))["retention.ms"].value == "600000"


async def test_create_partitions_grows_a_topic(kafka_broker: RunningBroker) -> None:
    name = new_name()
    async with Admin(kafka_broker.bootstrap) as admin:
        await admin.create_topics(name, 1)
        if kafka_broker.kind == "tansu":
            with pytest.raises(UnsupportedByBroker):  # Tansu 0.6.0 lacks CreatePartitions
                await admin.create_partitions(name, 3)
            return
        await admin.create_partitions(name, 3)
        assert len((await admin.describe_topics(name))[name].partitions) == 3
        with pytest.raises(InvalidPartitionsError):
            await admin.create_partitions(name, 2)
        assert set(await admin.list_offsets(name, "latest")) == {0, 1, 2}


async def test_list_offsets_earliest_and_latest(kafka_broker: RunningBroker) -> None:
    name = new_name()
    async with Admin(kafka_broker.bootstrap) as admin:
        await admin.create_topics(name, 2)
        async with Producer(kafka_broker.bootstrap) as producer:
            for i in range(3):
                await producer.send_and_wait(name, b"%d" % i, partition=1, timestamp_ms=1000 * (i + 1))
        earliest = await admin.list_offsets(name, "earliest")
        latest = await admin.list_offsets(name, "latest")
        assert {p: o.offset for p, o in earliest.items()} == {0: 0, 1: 0}
        assert {p: o.offset for p, o in latest.items()} == {0: 0, 1: 3}
        assert set(await admin.list_offsets(name, "latest", partitions=[1])) == {1}
        with pytest.raises(UnknownTopicOrPartitionError):
            await admin.list_offsets(new_name(), "latest")


async def test_a_closed_admin_fails_fast(kafka_broker: RunningBroker) -> None:
    admin = Admin(kafka_broker.bootstrap)
    await admin.start()
    await admin.close()
    with pytest.raises(ClientClosedError):
        await admin.list_topics()
