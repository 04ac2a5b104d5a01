"""Admin APIs through confluent-kafka's AdminClient, LogAppendTime, retention and a clean restart.

Every test runs on both metadata backends (SQLite in the data dir, PostgreSQL)."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AioTopicPartition
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient
from confluent_kafka import Consumer, ElectionType, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka import TopicCollection
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from kio.schema.alter_configs.v2 import request as alter_v2
from kio.schema.create_partitions.v3 import request as create_partitions_v3
from kio.schema.create_topics.v7 import request as create_topics_v7
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as incremental_v1

from diskless.broker.errors import InvalidReplicaAssignment
from diskless.broker.handlers.topics import validate_manual_assignments
from hot_tier.records import Record, encode_batch

from .conftest import ON_EVERY_METADATA_BACKEND
from .test_broker_wire import produce as wire_produce
from .test_broker_wire import produce_result as wire_result

pytestmark = ON_EVERY_METADATA_BACKEND

DEADLINE_S = 20.0


def admin_for(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def error_code(future) -> int:
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=DEADLINE_S)
    return raised.value.args[0].code()


def refusal(future) -> tuple[int, str]:
    """The error code and message a confluent-kafka admin future fails with."""
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=DEADLINE_S)
    return raised.value.args[0].code(), raised.value.args[0].str()


def describe(admin: AdminClient, topic: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    return admin.describe_configs([resource], request_timeout=DEADLINE_S)[resource].result(timeout=DEADLINE_S)


def topics(admin: AdminClient) -> dict:
    return admin.list_topics(timeout=DEADLINE_S).topics


def produce_values(bootstrap: str, topic: str, values: list[bytes], *, partition: int = 0, timestamp: int = 0, per_batch: bool = True) -> list[tuple[int, int]]:
    """(partition, offset) of each value; one batch per record unless `per_batch` is false."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0 if per_batch else 50})
    reports: list[tuple[int, int]] = []

    def on_delivery(err, msg):
        assert err is None, err
        reports.append((msg.partition(), msg.offset()))

    for value in values:
        producer.produce(topic, value=value, partition=partition, timestamp=timestamp, on_delivery=on_delivery)
        if per_batch:
            assert producer.flush(DEADLINE_S) == 0
    assert producer.flush(DEADLINE_S) == 0
    return reports


def consume_all(bootstrap: str, topic: str, partitions: int = 1) -> dict[int, list]:
    """Every record from each partition's log start to its high watermark, as Message objects."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "admin-test", "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        ends = {}
        starts = []
        for p in range(partitions):
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=DEADLINE_S)
            ends[p] = high
            starts.append(TopicPartition(topic, p, low))
        c.assign(starts)
        got: dict[int, list] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + DEADLINE_S
        while any((got[p][-1].offset() + 1 if got[p] else starts[p].offset) < ends[p] for p in got):
            assert time.monotonic() < deadline
            msg = c.poll(0.1)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got[msg.partition()].append(msg)
        return got
    finally:
        c.close()


def wait_for(condition, what: str, deadline_s: float = DEADLINE_S):
    deadline = time.monotonic() + deadline_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)  # retention runs on the broker's own timer; poll its effect


def segment_files(broker, topic: str, partition: int = 0) -> list[Path]:
    return sorted((broker.data_dir / "logs" / f"{topic}-{partition}").glob("*.log"))


# --- CreateTopics, DescribeConfigs, IncrementalAlterConfigs ------------------------------------------


def test_creating_an_existing_tiered_topic_again_keeps_its_records(shared_broker, create_topic) -> None:
    """TOPIC_ALREADY_EXISTS, and nothing else: the records whose only copy is in the bucket are
    all still read (the bucket used to be swept of the name's objects before the store said
    the name was taken)."""
    topic = create_topic(shared_broker.bootstrap, partitions=1, configs={"segment.bytes": "1024"})
    values = [f"kept-{i:03d}-".encode() + b"x" * 100 for i in range(40)]
    produce_values(shared_broker.bootstrap, topic, values)
    wait_for(lambda: len(segment_files(shared_broker, topic)) == 1, "every rolled segment uploaded and gone from the disk")
    admin = admin_for(shared_broker.bootstrap)
    for validate_only in (True, False):
        assert refusal(admin.create_topics([NewTopic(topic, 1, 1)], validate_only=validate_only)[topic]) == (
            KafkaError.TOPIC_ALREADY_EXISTS, f"topic {topic!r} already exists"
        )
    assert [m.value() for m in consume_all(shared_broker.bootstrap, topic)[0]] == values


def test_create_topics_with_configs_and_validate_only(shared_broker, topic_name) -> None:
    admin = admin_for(shared_broker.bootstrap)
    configs = {"retention.ms": "3600000", "max.message.bytes": "2048", "message.timestamp.type": "LogAppendTime"}

    # validate_only: checked, answered, not created.
    futures = admin.create_topics([NewTopic(topic_name, 2, 1, config=configs)], validate_only=True)
    futures[topic_name].result(timeout=DEADLINE_S)
    assert topic_name not in topics(admin)
    bad = {
        "bad-value": (NewTopic(topic_name, 2, 1, config={"retention.ms": "soon"}), KafkaError.INVALID_CONFIG),
        "unknown-config": (NewTopic(topic_name, 2, 1, config={"no.such.config": "1"}), KafkaError.INVALID_CONFIG),
        "cleanup-policy": (NewTopic(topic_name, 2, 1, config={"cleanup.policy": "compact,shred"}), KafkaError.INVALID_CONFIG),
        "replication": (NewTopic(topic_name, 2, 3), KafkaError.INVALID_REPLICATION_FACTOR),
        "partitions": (NewTopic(topic_name, 0, 1), KafkaError.INVALID_PARTITIONS),
        "name": (NewTopic("bad/name", 1, 1), KafkaError.TOPIC_EXCEPTION),
    }
    for case, (new_topic, expected) in bad.items():
        for validate_only in (True, False):
            futures = admin.create_topics([new_topic], validate_only=validate_only)
            assert error_code(futures[new_topic.topic]) == expected, (case, validate_only)
    assert topic_name not in topics(admin)

    admin.create_topics([NewTopic(topic_name, 2, 1, config=configs)])[topic_name].result(timeout=DEADLINE_S)
    assert sorted(topics(admin)[topic_name].partitions) == [0, 1]
    described = describe(admin, topic_name)
    for name, value in configs.items():
        assert (described[name].value, described[name].source) == (value, ConfigSource.DYNAMIC_TOPIC_CONFIG.value), name
    assert (described["segment.bytes"].value, described["segment.bytes"].source) == ("1073741824", ConfigSource.DEFAULT_CONFIG.value)
    assert described["cleanup.policy"].value == "delete"
    # Again: it exists now, with or without validate_only.
    for validate_only in (True, False):
        futures = admin.create_topics([NewTopic(topic_name, 2, 1)], validate_only=validate_only)
        assert error_code(futures[topic_name]) == KafkaError.TOPIC_ALREADY_EXISTS


def test_incremental_alter_configs_changes_what_the_broker_enforces(shared_broker, create_topic) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=1, configs={"retention.ms": "3600000"})
    admin = admin_for(shared_broker.bootstrap)

    def alter(*entries: ConfigEntry, validate_only: bool = False):
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=list(entries))
        return admin.incremental_alter_configs([resource], validate_only=validate_only, request_timeout=DEADLINE_S)[resource]

    set_small = ConfigEntry("max.message.bytes", "1000", incremental_operation=AlterConfigOpType.SET)
    delete_retention = ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)
    alter(set_small, delete_retention, validate_only=True).result(timeout=DEADLINE_S)
    assert describe(admin, topic)["retention.ms"].value == "3600000"
    assert describe(admin, topic)["max.message.bytes"].value == "1048588"

    alter(set_small, delete_retention).result(timeout=DEADLINE_S)
    described = describe(admin, topic)
    assert (described["max.message.bytes"].value, described["max.message.bytes"].source) == ("1000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert (described["retention.ms"].value, described["retention.ms"].source) == ("604800000", ConfigSource.DEFAULT_CONFIG.value)

    # An invalid change is refused whole: nothing of it applies.
    bad = alter(ConfigEntry("retention.bytes", "1", incremental_operation=AlterConfigOpType.SET),
                ConfigEntry("segment.bytes", "tiny", incremental_operation=AlterConfigOpType.SET))  # fmt: skip
    assert error_code(bad) == KafkaError.INVALID_CONFIG
    assert describe(admin, topic)["retention.bytes"].value == "-1"
    unknown = ConfigResource(ResourceType.TOPIC, "no-such-topic-" + topic, incremental_configs=[set_small])
    futures = admin.incremental_alter_configs([unknown], request_timeout=DEADLINE_S)
    assert error_code(futures[unknown]) == KafkaError.UNKNOWN_TOPIC_OR_PART

    # The new max.message.bytes is enforced by produce at once.
    errors = []
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap, "acks": "all"})
    producer.produce(topic, value=b"z" * 2000, partition=0, on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(DEADLINE_S) == 0
    assert [e.code() for e in errors] == [KafkaError.MSG_SIZE_TOO_LARGE]


# Config resource types on the wire (Kafka's ConfigResource.Type; confluent-kafka's ResourceType
# is the ACL one, whose GROUP is 3).
CONFIG_TOPIC, CONFIG_GROUP = 2, 32


def incremental_resource(name: str, *configs: tuple[str, AlterConfigOpType, str | None], resource_type: int = CONFIG_TOPIC) -> incremental_v1.AlterConfigsResource:
    """One resource of a hand-made IncrementalAlterConfigs request: (name, operation, value) each."""
    return incremental_v1.AlterConfigsResource(
        resource_type=resource_type, resource_name=name,
        configs=tuple(incremental_v1.AlterableConfig(name=n, config_operation=op.value, value=v) for n, op, v in configs),
    )  # fmt: skip


def legacy_resource(name: str, *configs: tuple[str, str | None], resource_type: int = CONFIG_TOPIC) -> alter_v2.AlterConfigsResource:
    """One resource of a hand-made legacy AlterConfigs request: (name, value) each."""
    return alter_v2.AlterConfigsResource(
        resource_type=resource_type, resource_name=name,
        configs=tuple(alter_v2.AlterableConfig(name=n, value=v) for n, v in configs),
    )  # fmt: skip


def test_a_config_named_twice_refuses_its_resource_alone(shared_broker, create_topic, wire) -> None:
    """IncrementalAlterConfigs and the legacy AlterConfigs: a resource that names a config twice
    is refused with INVALID_REQUEST and nothing of it applies; the request's other resources are
    altered (Kafka's ConfigAdminManager.preprocess). On the wire: librdkafka refuses to send a
    name twice ("Duplicate ConfigEntry found"), kafka-python takes a dict."""
    twice = create_topic(shared_broker.bootstrap, partitions=1, configs={"retention.ms": "3600000"})
    once = create_topic(shared_broker.bootstrap, partitions=1, configs={"retention.ms": "3600000"})
    admin = admin_for(shared_broker.bootstrap)
    client = wire(shared_broker.bootstrap)

    def configs_of(*names: str) -> list[tuple[str, ...]]:
        return [tuple(describe(admin, t)[n].value for n in names) for t in (twice, once)]

    incremental, legacy = incremental_resource, legacy_resource
    SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE
    request = incremental_v1.IncrementalAlterConfigsRequest(
        resources=(
            incremental(twice, ("max.message.bytes", SET, "2000"), ("retention.ms", SET, "1000"), ("retention.ms", DELETE, None)),
            incremental(once, ("retention.ms", SET, "2000")),
        ),
        validate_only=False,
    )
    answered = client.request(request).responses
    assert [(r.resource_name, r.error_code, r.error_message) for r in answered] == [
        (twice, ErrorCode.invalid_request, "Error due to duplicate config keys"), (once, ErrorCode.none, None),
    ]
    assert configs_of("retention.ms", "max.message.bytes") == [("3600000", "1048588"), ("2000", "1048588")]

    request = alter_v2.AlterConfigsRequest(
        resources=(legacy(twice, ("max.message.bytes", "2000"), ("max.message.bytes", "3000")), legacy(once, ("max.message.bytes", "4000"))),
        validate_only=False,
    )
    answered = client.request(request).responses
    assert [(r.resource_name, r.error_code, r.error_message) for r in answered] == [
        (twice, ErrorCode.invalid_request, "Error due to duplicate config keys"), (once, ErrorCode.none, None),
    ]
    # The refused resource keeps its configs (a legacy change would have reset retention.ms).
    assert configs_of("retention.ms", "max.message.bytes") == [("3600000", "1048588"), ("604800000", "4000")]


def test_legacy_alter_configs_refuses_null_values(shared_broker, create_topic) -> None:
    """The legacy AlterConfigs (kafka-python's KafkaAdminClient, incremental=False) with a null
    value: that resource is refused with INVALID_REQUEST naming them and changes nothing; the
    request's other resources are altered (Kafka's ConfigAdminManager.preprocess)."""
    with_nulls = create_topic(shared_broker.bootstrap, partitions=1, configs={"retention.ms": "3600000"})
    other = create_topic(shared_broker.bootstrap, partitions=1)
    admin = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
    try:
        refused = KpConfigResource(ConfigResourceType.TOPIC, with_nulls, configs={"max.message.bytes": "2000", "retention.ms": None, "segment.ms": None})
        altered = KpConfigResource(ConfigResourceType.TOPIC, other, configs={"max.message.bytes": "3000"})
        assert admin.alter_configs([refused, altered], incremental=False, raise_on_unknown=False) == {
            "topic": {
                with_nulls: "[Error 42] InvalidRequestError: Null value not supported for : retention.ms, segment.ms",
                other: "OK",
            }
        }
    finally:
        admin.close()
    confluent = admin_for(shared_broker.bootstrap)
    described = describe(confluent, with_nulls)
    assert [(described[n].value, described[n].source) for n in ("retention.ms", "max.message.bytes", "segment.ms")] == [
        ("3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value),
        ("1048588", ConfigSource.DEFAULT_CONFIG.value),
        ("604800000", ConfigSource.DEFAULT_CONFIG.value),
    ]
    assert describe(confluent, other)["max.message.bytes"].value == "3000"


def test_incremental_alter_configs_refuses_null_values_but_for_delete(shared_broker, create_topic, wire) -> None:
    """IncrementalAlterConfigs: SET, APPEND and SUBTRACT with a null value refuse their resource
    with INVALID_REQUEST naming them, and nothing of it applies; DELETE needs no value (Kafka's
    ConfigAdminManager.preprocess)."""
    with_nulls = create_topic(shared_broker.bootstrap, partitions=1, configs={"retention.ms": "3600000"})
    deleted = create_topic(shared_broker.bootstrap, partitions=1, configs={"retention.ms": "3600000"})
    admin = admin_for(shared_broker.bootstrap)
    SET, DELETE, APPEND, SUBTRACT = (AlterConfigOpType.SET, AlterConfigOpType.DELETE, AlterConfigOpType.APPEND,
                                     AlterConfigOpType.SUBTRACT)  # fmt: skip
    request = incremental_v1.IncrementalAlterConfigsRequest(
        resources=(
            incremental_resource(
                with_nulls, ("max.message.bytes", SET, None), ("retention.ms", DELETE, None), ("cleanup.policy", APPEND, None),
                ("follower.replication.throttled.replicas", SUBTRACT, None), ("segment.ms", SET, "3600000"),
            ),
            incremental_resource(deleted, ("retention.ms", DELETE, None)),
        ),
        validate_only=False,
    )  # fmt: skip
    answered = wire(shared_broker.bootstrap).request(request).responses
    assert [(r.resource_name, r.error_code, r.error_message) for r in answered] == [
        (with_nulls, ErrorCode.invalid_request,
         "Null value not supported for : max.message.bytes, cleanup.policy, follower.replication.throttled.replicas"),
        (deleted, ErrorCode.none, None),
    ]  # fmt: skip
    described = describe(admin, with_nulls)
    assert [(described[n].value, described[n].source) for n in ("max.message.bytes", "retention.ms", "cleanup.policy", "segment.ms")] == [
        ("1048588", ConfigSource.DEFAULT_CONFIG.value),
        ("3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value),
        ("delete", ConfigSource.DEFAULT_CONFIG.value),
        ("604800000", ConfigSource.DEFAULT_CONFIG.value),
    ]
    described = describe(admin, deleted)["retention.ms"]
    assert (described.value, described.source) == ("604800000", ConfigSource.DEFAULT_CONFIG.value)


def test_a_resource_named_twice_refuses_every_copy(shared_broker, create_topic, wire) -> None:
    """IncrementalAlterConfigs and the legacy AlterConfigs: a resource (type and name) given
    twice in one request answers INVALID_REQUEST for each copy and neither applies; the other
    resources, a group of the topic's name too, are altered (Kafka's ConfigAdminManager.preprocess;
    DescribeConfigs has no such check). librdkafka refuses to send a resource twice."""
    twice = create_topic(shared_broker.bootstrap, partitions=1, configs={"retention.ms": "3600000"})
    once = create_topic(shared_broker.bootstrap, partitions=1)
    admin = admin_for(shared_broker.bootstrap)
    client = wire(shared_broker.bootstrap)
    refused = (ErrorCode.invalid_request, "Each resource must appear at most once.")
    SET, TOPIC, GROUP = AlterConfigOpType.SET, CONFIG_TOPIC, CONFIG_GROUP

    def group_session_timeout() -> str:
        resource = ConfigResource(ResourceType.GROUP, twice)
        configs = admin.describe_configs([resource], request_timeout=DEADLINE_S)[resource].result(timeout=DEADLINE_S)
        return configs["consumer.session.timeout.ms"].value

    request = incremental_v1.IncrementalAlterConfigsRequest(
        resources=(
            incremental_resource(twice, ("max.message.bytes", SET, "2000")),
            incremental_resource(once, ("max.message.bytes", SET, "3000")),
            incremental_resource(twice, ("retention.ms", SET, "1000")),
            incremental_resource(twice, ("consumer.session.timeout.ms", SET, "50000"), resource_type=CONFIG_GROUP),
        ),
        validate_only=False,
    )  # fmt: skip
    answered = client.request(request).responses
    assert [(r.resource_type, r.resource_name, r.error_code, r.error_message) for r in answered] == [
        (TOPIC, twice, *refused), (TOPIC, once, ErrorCode.none, None), (TOPIC, twice, *refused), (GROUP, twice, ErrorCode.none, None),
    ]
    assert [describe(admin, twice)[n].value for n in ("max.message.bytes", "retention.ms")] == ["1048588", "3600000"]
    assert describe(admin, once)["max.message.bytes"].value == "3000"
    assert group_session_timeout() == "50000"

    request = alter_v2.AlterConfigsRequest(
        resources=(
            legacy_resource(twice, ("max.message.bytes", "4000")),
            legacy_resource(twice, ("max.message.bytes", "4000")),
            legacy_resource(once, ("max.message.bytes", "5000")),
            legacy_resource(twice, ("consumer.session.timeout.ms", "55000"), resource_type=CONFIG_GROUP),
        ),
        validate_only=False,
    )
    answered = client.request(request).responses
    assert [(r.resource_type, r.resource_name, r.error_code, r.error_message) for r in answered] == [
        (TOPIC, twice, *refused), (TOPIC, twice, *refused), (TOPIC, once, ErrorCode.none, None), (GROUP, twice, ErrorCode.none, None),
    ]
    # A legacy change of `twice` would have reset its retention.ms.
    assert [describe(admin, twice)[n].value for n in ("max.message.bytes", "retention.ms")] == ["1048588", "3600000"]
    assert describe(admin, once)["max.message.bytes"].value == "5000"
    assert group_session_timeout() == "55000"


def test_describe_configs_of_the_broker_and_of_unknown_topics(shared_broker) -> None:
    admin = admin_for(shared_broker.bootstrap)
    resource = ConfigResource(ResourceType.BROKER, "1")
    described = admin.describe_configs([resource], request_timeout=DEADLINE_S)[resource].result(timeout=DEADLINE_S)
    assert described["node.id"].value == "1"
    assert described["log.retention.check.interval.ms"].value == "500"
    missing = ConfigResource(ResourceType.TOPIC, "no-such-topic-at-all")
    assert error_code(admin.describe_configs([missing], request_timeout=DEADLINE_S)[missing]) == KafkaError.UNKNOWN_TOPIC_OR_PART


# --- CreatePartitions, DeleteTopics, DescribeCluster ---------------------------------------------------


def test_create_partitions_then_delete_topic_and_recreate(shared_broker, create_topic) -> None:
    admin = admin_for(shared_broker.bootstrap)
    topic = create_topic(shared_broker.bootstrap, partitions=1)
    assert produce_values(shared_broker.bootstrap, topic, [b"a", b"b"]) == [(0, 0), (0, 1)]

    futures = admin.create_partitions([NewPartitions(topic, 3)], validate_only=True)
    futures[topic].result(timeout=DEADLINE_S)
    assert len(topics(admin)[topic].partitions) == 1
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(timeout=DEADLINE_S)
    assert sorted(topics(admin)[topic].partitions) == [0, 1, 2]
    assert produce_values(shared_broker.bootstrap, topic, [b"c"], partition=2) == [(2, 0)]
    for count in (3, 2):
        assert error_code(admin.create_partitions([NewPartitions(topic, count)])[topic]) == KafkaError.INVALID_PARTITIONS
    missing = "no-such-topic-" + topic
    assert error_code(admin.create_partitions([NewPartitions(missing, 2)])[missing]) == KafkaError.UNKNOWN_TOPIC_OR_PART

    admin.delete_topics([topic], operation_timeout=DEADLINE_S)[topic].result(timeout=DEADLINE_S)
    assert topic not in topics(admin)
    assert error_code(admin.delete_topics([topic])[topic]) == KafkaError.UNKNOWN_TOPIC_OR_PART
    # A topic of the same name is a new, empty topic: nothing of the old one shows through.
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=DEADLINE_S)
    c = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": "admin-test"})
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=DEADLINE_S) == (0, 0)
    finally:
        c.close()
    assert produce_values(shared_broker.bootstrap, topic, [b"new"]) == [(0, 0)]


def test_create_partitions_needs_one_assignment_per_new_partition(shared_broker, create_topic, wire) -> None:
    """Assignments, when given (an empty list too, but not null), name one partition each: any
    other number refuses the topic with INVALID_REPLICA_ASSIGNMENT, validate_only as well (Kafka's
    ReplicationControlManager.createPartitions)."""
    admin = admin_for(shared_broker.bootstrap)
    topic = create_topic(shared_broker.bootstrap, partitions=1)
    cases = {
        (3, ((1,),)): "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified.",
        (2, ((1,), (1,))): "Attempted to add 1 additional partition(s), but only 2 assignment(s) were specified.",
    }
    for (count, assignment), message in cases.items():
        for validate_only in (True, False):
            new_partitions = NewPartitions(topic, count, replica_assignment=[list(a) for a in assignment])
            futures = admin.create_partitions([new_partitions], validate_only=validate_only, request_timeout=DEADLINE_S)
            assert refusal(futures[topic]) == (KafkaError.INVALID_REPLICA_ASSIGNMENT, message), (count, validate_only)
    client = wire(shared_broker.bootstrap)
    for validate_only in (True, False):
        request = create_partitions_v3.CreatePartitionsRequest(
            topics=(create_partitions_v3.CreatePartitionsTopic(name=topic, count=2, assignments=()),), timeout=timedelta(seconds=10),
            validate_only=validate_only,
        )  # fmt: skip
        answered = client.request(request).results
        assert [(r.name, r.error_code, r.error_message) for r in answered] == [
            (topic, ErrorCode.invalid_replica_assignment, "Attempted to add 1 additional partition(s), but only 0 assignment(s) were specified."),
        ], validate_only
    assert len(topics(admin)[topic].partitions) == 1

    # One per new partition: added.
    admin.create_partitions([NewPartitions(topic, 3, replica_assignment=[[1], [1]])])[topic].result(timeout=DEADLINE_S)
    assert sorted(topics(admin)[topic].partitions) == [0, 1, 2]


def test_create_partitions_naming_an_unregistered_broker(shared_broker, create_topic, wire) -> None:
    """An assignment naming a broker id that is not registered refuses the topic with
    INVALID_REPLICA_ASSIGNMENT, validate_only as well; Kafka's ReplicationControlManager looks at
    each assignment's ids in ascending order, so the lowest unknown one is named."""
    admin = admin_for(shared_broker.bootstrap)
    topic = create_topic(shared_broker.bootstrap, partitions=1)
    unregistered = "The manual partition assignment includes broker {}, but no such broker is registered."
    for validate_only in (True, False):
        for count, assignment in ((2, [[12]]), (3, [[1], [12]])):
            futures = admin.create_partitions([NewPartitions(topic, count, replica_assignment=assignment)], validate_only=validate_only,
                                              request_timeout=DEADLINE_S)  # fmt: skip
            assert refusal(futures[topic]) == (KafkaError.INVALID_REPLICA_ASSIGNMENT, unregistered.format(12)), (assignment, validate_only)
        request = create_partitions_v3.CreatePartitionsRequest(
            topics=(create_partitions_v3.CreatePartitionsTopic(
                name=topic, count=2, assignments=(create_partitions_v3.CreatePartitionsAssignment(broker_ids=(1, 13, 12)),),
            ),),
            timeout=timedelta(seconds=10), validate_only=validate_only,
        )  # fmt: skip
        answered = wire(shared_broker.bootstrap).request(request).results
        assert [(r.name, r.error_code, r.error_message) for r in answered] == [
            (topic, ErrorCode.invalid_replica_assignment, unregistered.format(12)),
        ], validate_only
    assert len(topics(admin)[topic].partitions) == 1


EMPTY = "The manual partition assignment includes an empty replica list."
REPEATED = "The manual partition assignment includes the broker {} more than once."
UNREGISTERED = "The manual partition assignment includes broker {}, but no such broker is registered."
# Kafka's ReplicationControlManager.validateManualPartitionAssignment, assignment after assignment:
# an empty list first; then the ids in ascending order, each refused if not registered, else if it
# repeats (so the lowest offending id is named, and an unregistered one given twice is unregistered).
BAD_ASSIGNMENTS = {
    ((),): EMPTY,
    ((1,), ()): EMPTY,
    ((), (12,)): EMPTY,
    ((1, 1),): REPEATED.format(1),
    ((1,), (1, 1)): REPEATED.format(1),
    ((1, 12, 1),): REPEATED.format(1),
    ((12, 12),): UNREGISTERED.format(12),
    ((1,), (1, 13, 12)): UNREGISTERED.format(12),
    ((1, 1), (12,)): REPEATED.format(1),
}


def test_create_partitions_refuses_empty_and_repeated_replicas(shared_broker, create_topic, wire) -> None:
    """CreatePartitions checks each assignment as Kafka's ReplicationControlManager does and
    answers INVALID_REPLICA_ASSIGNMENT with its message, validate_only as well."""
    admin = admin_for(shared_broker.bootstrap)
    topic = create_topic(shared_broker.bootstrap, partitions=1)
    client = wire(shared_broker.bootstrap)
    for validate_only in (True, False):
        for assignments, message in BAD_ASSIGNMENTS.items():
            request = create_partitions_v3.CreatePartitionsRequest(
                topics=(create_partitions_v3.CreatePartitionsTopic(
                    name=topic, count=1 + len(assignments),
                    assignments=tuple(create_partitions_v3.CreatePartitionsAssignment(broker_ids=a) for a in assignments),
                ),),
                timeout=timedelta(seconds=10), validate_only=validate_only,
            )  # fmt: skip
            answered = client.request(request).results
            assert [(r.name, r.error_code, r.error_message) for r in answered] == [
                (topic, ErrorCode.invalid_replica_assignment, message),
            ], (assignments, validate_only)
        futures = admin.create_partitions([NewPartitions(topic, 2, replica_assignment=[[1, 1]])], validate_only=validate_only,
                                          request_timeout=DEADLINE_S)  # fmt: skip
        assert refusal(futures[topic]) == (KafkaError.INVALID_REPLICA_ASSIGNMENT, REPEATED.format(1)), validate_only
    assert len(topics(admin)[topic].partitions) == 1
    admin.create_partitions([NewPartitions(topic, 2, replica_assignment=[[1]])])[topic].result(timeout=DEADLINE_S)
    assert sorted(topics(admin)[topic].partitions) == [0, 1]


def test_create_topics_checks_manual_assignments_as_kafka(shared_broker, topic_name, wire) -> None:
    """CreateTopics with manual assignments: the same checks and messages as CreatePartitions
    (an unregistered broker too), INVALID_REPLICA_ASSIGNMENT, validate_only as well; nothing
    is created. An assignment naming only this broker still makes the topic."""
    admin = admin_for(shared_broker.bootstrap)
    client = wire(shared_broker.bootstrap)

    def create(assignments: tuple[tuple[int, ...], ...], validate_only: bool) -> list[tuple]:
        request = create_topics_v7.CreateTopicsRequest(
            topics=(create_topics_v7.CreatableTopic(
                name=topic_name, num_partitions=-1, replication_factor=-1, configs=(),
                assignments=tuple(
                    create_topics_v7.CreatableReplicaAssignment(partition_index=i, broker_ids=a) for i, a in enumerate(assignments)
                ),
            ),),
            timeout=timedelta(seconds=10), validate_only=validate_only,
        )  # fmt: skip
        answered = client.request(request).topics
        return [(t.name, t.error_code, t.error_message, t.num_partitions) for t in answered]

    for validate_only in (True, False):
        for assignments, message in {**BAD_ASSIGNMENTS, ((12,),): UNREGISTERED.format(12)}.items():
            assert create(assignments, validate_only) == [
                (topic_name, ErrorCode.invalid_replica_assignment, message, -1),
            ], (assignments, validate_only)
        # confluent-kafka asks for the partition count too; on the wire it sends -1, as Kafka wants.
        new_topic = NewTopic(topic_name, 2, replica_assignment=[[1], [12]])
        futures = admin.create_topics([new_topic], validate_only=validate_only, request_timeout=DEADLINE_S)
        assert refusal(futures[topic_name]) == (KafkaError.INVALID_REPLICA_ASSIGNMENT, UNREGISTERED.format(12)), validate_only
    assert topic_name not in topics(admin)

    assert create(((1,), (1,)), True) == [(topic_name, ErrorCode.none, None, 2)]
    assert topic_name not in topics(admin)
    assert create(((1,), (1,)), False) == [(topic_name, ErrorCode.none, None, 2)]
    assert sorted(topics(admin)[topic_name].partitions) == [0, 1]


def test_create_topics_checks_the_partition_indexes_of_manual_assignments_as_kafka(shared_broker, topic_name, wire) -> None:
    """Kafka's createTopic: num_partitions and replication_factor must be -1 beside assignments
    (INVALID_REQUEST, the replication factor named first); an index given twice is refused at
    that assignment, before its replicas are checked; the indexes must be 0 .. n - 1 in any
    order, checked once every assignment passed (INVALID_REPLICA_ASSIGNMENT)."""
    admin = admin_for(shared_broker.bootstrap)
    client = wire(shared_broker.bootstrap)

    def create(assignments: dict[int, tuple[int, ...]] | list[tuple[int, tuple[int, ...]]], num_partitions: int = -1, replication_factor: int = -1) -> tuple:
        pairs = list(assignments.items()) if isinstance(assignments, dict) else assignments
        request = create_topics_v7.CreateTopicsRequest(
            topics=(create_topics_v7.CreatableTopic(
                name=topic_name, num_partitions=num_partitions, replication_factor=replication_factor, configs=(),
                assignments=tuple(create_topics_v7.CreatableReplicaAssignment(partition_index=i, broker_ids=a) for i, a in pairs),
            ),),
            timeout=timedelta(seconds=10), validate_only=True,
        )  # fmt: skip
        [answered] = client.request(request).topics
        return answered.error_code, answered.error_message, answered.num_partitions

    both = "A manual partition assignment was specified, but {} was not set to -1."
    assert create({0: (1,)}, num_partitions=1, replication_factor=1) == (ErrorCode.invalid_request, both.format("replication factor"), -1)
    assert create({0: (1,)}, num_partitions=1) == (ErrorCode.invalid_request, both.format("numPartitions"), -1)
    twice = "Found multiple manual partition assignments for partition 0"
    assert create([(0, (1,)), (0, (1,))]) == (ErrorCode.invalid_replica_assignment, twice, -1)
    assert create([(0, (1,)), (0, ())]) == (ErrorCode.invalid_replica_assignment, twice, -1)  # before its replicas
    assert create([(0, ()), (0, (1,))]) == (ErrorCode.invalid_replica_assignment, EMPTY, -1)
    gap = "partitions should be a consecutive 0-based integer sequence"
    for indexes in ({0: (1,), 2: (1,)}, {1: (1,)}, {-1: (1,), 0: (1,)}):
        assert create(indexes) == (ErrorCode.invalid_replica_assignment, gap, -1), indexes
    assert create({0: (1,), 2: (12,)}) == (ErrorCode.invalid_replica_assignment, UNREGISTERED.format(12), -1)  # replicas first
    assert create({2: (1,), 0: (1,), 1: (1,)}) == (ErrorCode.none, None, 3)  # any order
    assert topic_name not in topics(admin)


def test_manual_assignments_keep_one_replica_count(metadata_backend) -> None:
    """The replica count check comes last, and needs two registered brokers to be reached (on
    one, a second id is unregistered or repeated): the checks themselves, without a broker.
    CreatePartitions holds every assignment to the existing partitions' count (1 here);
    CreateTopics holds each to the one before it."""

    def refused(assignments: list[list[int]], replication_factor: int | None) -> str:
        with pytest.raises(InvalidReplicaAssignment) as raised:
            validate_manual_assignments("t", assignments, {1, 2}, replication_factor)
        return str(raised.value)

    mismatch = ("The manual partition assignment includes a partition with {} replica(s), but this is not consistent with previous "
                "partitions, which have {} replica(s).")  # fmt: skip
    assert refused([[1, 2]], 1) == mismatch.format(2, 1)
    assert refused([[2], [2, 1]], 1) == mismatch.format(2, 1)
    assert refused([[2, 1], [1]], None) == mismatch.format(1, 2)
    assert refused([[1], [2], [1, 2]], None) == mismatch.format(2, 1)
    # Before it: an empty list, an unregistered id, a repeated one.
    assert refused([[1, 2, 3]], 1) == UNREGISTERED.format(3)
    assert refused([[1, 2, 2]], 1) == REPEATED.format(2)
    assert refused([[1, 2], []], None) == EMPTY
    # What Kafka accepts (this broker then refuses any replica but its own).
    validate_manual_assignments("t", [[2, 1], [1, 2]], {1, 2}, None)
    validate_manual_assignments("t", [[2], [1]], {1, 2}, 1)


def test_describe_cluster(shared_broker) -> None:
    admin = admin_for(shared_broker.bootstrap)
    cluster = admin.describe_cluster(request_timeout=DEADLINE_S).result(timeout=DEADLINE_S)
    metadata = admin.list_topics(timeout=DEADLINE_S)
    assert cluster.cluster_id and cluster.cluster_id == metadata.cluster_id
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(1, "127.0.0.1", shared_broker.port)]
    assert cluster.controller.id == 1
    # The cluster id is the one kept in meta.properties.
    assert f"cluster.id={cluster.cluster_id}" in (shared_broker.data_dir / "meta.properties").read_text()


def test_authorized_operations_without_an_authorizer_are_all_of_kafkas(shared_broker, create_topic) -> None:
    """Kafka without an authorizer lists every operation a resource type has: 7 for the cluster,
    8 for a topic, 5 for a group (Kafka 4), through confluent-kafka and kafka-python alike."""
    topic = create_topic(shared_broker.bootstrap, partitions=1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    consumer.close()
    cluster_ops = {"ALTER", "ALTER_CONFIGS", "CLUSTER_ACTION", "CREATE", "DESCRIBE", "DESCRIBE_CONFIGS", "IDEMPOTENT_WRITE"}
    topic_ops = {"ALTER", "ALTER_CONFIGS", "CREATE", "DELETE", "DESCRIBE", "DESCRIBE_CONFIGS", "READ", "WRITE"}
    group_ops = {"DELETE", "DESCRIBE", "READ", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}

    admin = admin_for(shared_broker.bootstrap)
    described = admin.describe_cluster(include_authorized_operations=True, request_timeout=DEADLINE_S).result(timeout=DEADLINE_S)
    assert {op.name for op in described.authorized_operations} == cluster_ops
    described = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[topic].result(timeout=DEADLINE_S)
    assert {op.name for op in described.authorized_operations} == topic_ops
    described = admin.describe_consumer_groups([group], include_authorized_operations=True)[group].result(timeout=DEADLINE_S)
    assert {op.name for op in described.authorized_operations} == group_ops
    # Not asked for: none listed.
    assert admin.describe_cluster(request_timeout=DEADLINE_S).result(timeout=DEADLINE_S).authorized_operations is None

    kp = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
    try:
        assert set(kp.describe_cluster()["authorized_operations"]) == cluster_ops
        [kp_topic] = kp.describe_topics([topic])
        assert set(kp_topic["authorized_operations"]) == topic_ops
    finally:
        kp.close()


def test_elect_leaders_on_one_broker_finds_nothing_to_elect(shared_broker, create_topic) -> None:
    """kafka-leader-election.sh's calls: every partition is led by the one broker, so each named
    one is ELECTION_NOT_NEEDED (both kinds), an unknown one UNKNOWN_TOPIC_OR_PARTITION, and a
    call for every partition answers for none (Kafka leaves the not-needed ones out)."""
    topic = create_topic(shared_broker.bootstrap, partitions=2)
    admin = admin_for(shared_broker.bootstrap)
    asked = [TopicPartition(topic, 0), TopicPartition(topic, 1), TopicPartition(topic, 5), TopicPartition("no-such-topic", 0)]
    for kind in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
        results = admin.elect_leaders(kind, asked).result(timeout=DEADLINE_S)
        codes = {(tp.topic, tp.partition): (None if err is None else err.code()) for tp, err in results.items()}
        assert codes == {
            (topic, 0): KafkaError.ELECTION_NOT_NEEDED, (topic, 1): KafkaError.ELECTION_NOT_NEEDED,
            (topic, 5): KafkaError.UNKNOWN_TOPIC_OR_PART, ("no-such-topic", 0): KafkaError.UNKNOWN_TOPIC_OR_PART,
        }, kind  # fmt: skip
    assert admin.elect_leaders(ElectionType.PREFERRED, None).result(timeout=DEADLINE_S) == {}
    assert produce_values(shared_broker.bootstrap, topic, [b"still led"]) == [(0, 0)]


# --- LogAppendTime -------------------------------------------------------------------------------


def test_log_append_time_topic_carries_broker_timestamps(shared_broker, create_topic, wire) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=1, configs={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    # One batch of three records (a client may split records into batches as it likes; the
    # raw request makes it exactly one), then one record from confluent-kafka.
    three = encode_batch([Record(i, 1_000, None, value, ()) for i, value in enumerate((b"a", b"b", b"c"))])
    assert wire_result(wire(shared_broker.bootstrap).request(wire_produce(topic, three))).error_code == ErrorCode.none
    produce_values(shared_broker.bootstrap, topic, [b"d"], timestamp=2_000)
    after = int(time.time() * 1000)
    (records,) = consume_all(shared_broker.bootstrap, topic).values()
    assert [m.value() for m in records] == [b"a", b"b", b"c", b"d"]
    for m in records:
        ts_type, ts = m.timestamp()
        assert ts_type == 2  # TIMESTAMP_LOG_APPEND_TIME
        assert before <= ts <= after
    # Records of one batch share its append time.
    assert len({m.timestamp()[1] for m in records[:3]}) == 1

    async def with_aiokafka():
        async with AIOKafkaConsumer(bootstrap_servers=shared_broker.bootstrap, enable_auto_commit=False) as c:
            tp = AioTopicPartition(topic, 0)
            c.assign([tp])
            c.seek(tp, 0)
            return [await asyncio.wait_for(c.getone(), DEADLINE_S) for _ in range(4)]

    seen = asyncio.run(with_aiokafka())
    assert [(m.timestamp_type, m.timestamp) for m in seen] == [(1, m.timestamp()[1]) for m in records]


# --- retention ---------------------------------------------------------------------------------

SEGMENT_BYTES = 1024
# retention.* applies to the whole log, with tiering (the default) and without.
REMOTE_STORAGE = [pytest.param("false", id="local"), pytest.param("true", id="tiered")]


def segment_bases(batch_sizes: list[int], segment_bytes: int = SEGMENT_BYTES) -> list[int]:
    """Base offsets of the segments one-record batches of these sizes fill: Kafka rolls before an
    append that would take a non-empty segment past segment.bytes."""
    bases, size = [0], 0
    for offset, batch_bytes in enumerate(batch_sizes):
        if size and size + batch_bytes > segment_bytes:
            bases.append(offset)
            size = 0
        size += batch_bytes
    return bases


def batch_bytes(value: bytes) -> int:
    """Size of a one-record batch without key or headers, as librdkafka and the broker store it."""
    return len(encode_batch([Record(0, int(time.time() * 1000), None, value)]))


def wait_for_log_start(bootstrap: str, topic: str, expected: int) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "admin-test"})
    try:
        wait_for(lambda: c.get_watermark_offsets(TopicPartition(topic, 0), timeout=DEADLINE_S)[0] == expected, f"log start offset {expected}")
    finally:
        c.close()


def check_log_from(broker, topic: str, log_start: int, values: list[bytes], bases: list[int], tiered: bool) -> None:
    got = consume_all(broker.bootstrap, topic)[0]
    assert [(m.offset(), m.value()) for m in got] == list(enumerate(values))[log_start:]
    # Below the log start offset is out of range.
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "admin-test", "auto.offset.reset": "error"})
    try:
        c.assign([TopicPartition(topic, 0, log_start - 1)])
        deadline = time.monotonic() + DEADLINE_S
        while (msg := c.poll(0.1)) is None:
            assert time.monotonic() < deadline
        assert msg.error() is not None and msg.error().code() == KafkaError._AUTO_OFFSET_RESET
    finally:
        c.close()
    if not tiered:
        # Without tiering the local log is the whole log: exactly the kept segments remain.
        assert [int(f.stem) for f in segment_files(broker, topic)] == [b for b in bases if b >= log_start]


@pytest.mark.parametrize("remote_storage", REMOTE_STORAGE)
def test_retention_bytes_deletes_old_segments_and_moves_log_start(shared_broker, create_topic, remote_storage: str) -> None:
    retention_bytes = 2048
    topic = create_topic(shared_broker.bootstrap, partitions=1, configs={
        "segment.bytes": str(SEGMENT_BYTES), "retention.bytes": str(retention_bytes), "remote.storage.enable": remote_storage,
    })  # fmt: skip
    values = [f"record-{i:03d}-".encode() + b"x" * 100 for i in range(60)]
    produce_values(shared_broker.bootstrap, topic, values)  # one batch each
    sizes = [batch_bytes(v) for v in values]
    bases = segment_bases(sizes)
    # Kafka's rule: the oldest segment goes while the rest still hold >= retention.bytes.
    remaining, log_start = sum(sizes), 0
    for base, next_base in zip(bases, bases[1:]):
        segment = sum(sizes[base:next_base])
        if remaining - segment < retention_bytes:
            break
        remaining, log_start = remaining - segment, next_base
    assert log_start > 0
    wait_for_log_start(shared_broker.bootstrap, topic, log_start)
    check_log_from(shared_broker, topic, log_start, values, bases, remote_storage == "true")


@pytest.mark.parametrize("remote_storage", REMOTE_STORAGE)
def test_retention_ms_deletes_segments_older_than_it(shared_broker, create_topic, remote_storage: str) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=1, configs={
        "segment.bytes": str(SEGMENT_BYTES), "retention.ms": "600000", "remote.storage.enable": remote_storage,
    })  # fmt: skip
    old = [f"old-{i:03d}-".encode() + b"x" * 100 for i in range(30)]
    produce_values(shared_broker.bootstrap, topic, old, timestamp=int(time.time() * 1000) - 3_600_000)
    fresh = [f"fresh-{i}".encode() for i in range(3)]
    produce_values(shared_broker.bootstrap, topic, fresh)
    bases = segment_bases([batch_bytes(v) for v in old + fresh])
    # Every segment whose newest record is an hour old goes: the log starts with the segment
    # holding the first fresh record (offset 30).
    log_start = max(b for b in bases if b <= len(old))
    assert log_start > 0
    wait_for_log_start(shared_broker.bootstrap, topic, log_start)
    check_log_from(shared_broker, topic, log_start, old + fresh, bases, remote_storage == "true")


# --- clean restart -----------------------------------------------------------------------------


@pytest.mark.parametrize("remote_storage", REMOTE_STORAGE)
def test_data_configs_and_offsets_survive_a_clean_restart(broker, create_topic, remote_storage: str) -> None:
    topic = create_topic(broker.bootstrap, partitions=3, configs={"segment.bytes": "2048", "retention.ms": "86400000", "remote.storage.enable": remote_storage})
    written = {p: [f"p{p}-{i}-".encode() + b"y" * 50 for i in range(40)] for p in range(3)}
    for p, values in written.items():
        produce_values(broker.bootstrap, topic, values[:20], partition=p)
        produce_values(broker.bootstrap, topic, values[20:], partition=p, per_batch=False)
    if remote_storage == "false":
        assert len(segment_files(broker, topic)) > 1  # several segments, so the restart reopens rolled ones
    before = {p: [(m.offset(), m.value(), m.timestamp()) for m in ms] for p, ms in consume_all(broker.bootstrap, topic, 3).items()}
    assert {p: [v for _, v, _ in rs] for p, rs in before.items()} == written

    assert broker.stop() == 0  # SIGTERM: a clean shutdown
    broker.start()

    after = {p: [(m.offset(), m.value(), m.timestamp()) for m in ms] for p, ms in consume_all(broker.bootstrap, topic, 3).items()}
    assert after == before
    assert describe(admin_for(broker.bootstrap), topic)["segment.bytes"].value == "2048"
    # Appends continue from the old log end.
    assert produce_values(broker.bootstrap, topic, [b"after"], partition=1) == [(1, 40)]


def test_a_partition_retention_emptied_opens_again_after_a_clean_restart(broker, create_topic) -> None:
    """Tiered, every record past retention.ms: once a restart has rolled the active segment and
    it was uploaded, retention took it from the bucket and the log is empty at [5, 5). After
    another restart the partition is served from there, not left offline (its high watermark
    was rebuilt at 0, below the log)."""
    topic = create_topic(broker.bootstrap, partitions=1, configs={"retention.ms": "600000"})
    # From 1970: segment.ms (7 days) counts from the segment's first timestamp, so the reopened
    # log rolls the segment, which is uploaded, then retention takes it.
    produce_values(broker.bootstrap, topic, [f"old-{i}".encode() for i in range(5)], timestamp=1000)
    assert broker.stop() == 0
    broker.start()
    wait_for_log_start(broker.bootstrap, topic, 5)
    assert broker.stop() == 0
    broker.start()
    assert produce_values(broker.bootstrap, topic, [b"after"]) == [(0, 5)]
    assert [(m.offset(), m.value()) for m in consume_all(broker.bootstrap, topic)[0]] == [(5, b"after")]
    wait_for_log_start(broker.bootstrap, topic, 5)
    assert "cannot be opened" not in broker.log_text()
