"""CreateTopics, CreatePartitions and DeleteTopics answered as Kafka 4 answers them: a topic
named more than once in one request (ControllerApis), names that collide in metric names
('.' against '_', ReplicationControlManager.validateNewTopicNames), and config names that are
no topic config (LogConfig.validateNames), in AlterConfigs and IncrementalAlterConfigs too.

Exact codes and messages through the wire client; confluent-kafka where it shows the user's
view. A topic given twice goes through the wire only: librdkafka files each answer under the
first request entry of its name and leaves the slot of the copy empty, and confluent-kafka's
Python binding crashes on that empty slot (against Apache Kafka as much as here).

Every test runs on both metadata backends (SQLite in the data dir, PostgreSQL)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from kio.schema.alter_configs.v2 import request as alter_v2
from kio.schema.create_partitions.v3 import request as create_partitions_v3
from kio.schema.create_topics.v7 import request as create_topics_v7
from kio.schema.delete_topics.v5 import request as delete_topics_v5
from kio.schema.delete_topics.v6 import request as delete_topics_v6
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as incremental_v1
from kio.schema.metadata.v12 import request as metadata_v12

from .conftest import ON_EVERY_METADATA_BACKEND

pytestmark = ON_EVERY_METADATA_BACKEND

DEADLINE_S = 20.0
TIMEOUT = timedelta(seconds=10)
CONFIG_TOPIC = 2  # Kafka's ConfigResource.Type.TOPIC on the wire

DUPLICATE_NAME = "Duplicate topic name."
DUPLICATE_ID = "Duplicate topic id."


def admin_for(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def refusal(future) -> tuple[int, str]:
    """The error code and message a confluent-kafka admin future fails with."""
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=DEADLINE_S)
    return raised.value.args[0].code(), raised.value.args[0].str()


def partition_counts(admin: AdminClient, *names: str) -> dict[str, int]:
    """Each topic's partition count, 0 for one that does not exist."""
    listed = admin.list_topics(timeout=DEADLINE_S).topics
    return {name: len(listed[name].partitions) if name in listed else 0 for name in names}


def fresh(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def topic_ids(client, *names: str) -> dict[str, uuid.UUID]:
    request = metadata_v12.MetadataRequest(
        topics=tuple(metadata_v12.MetadataRequestTopic(topic_id=None, name=n) for n in names), allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )  # fmt: skip
    return {t.name: t.topic_id for t in client.request(request).topics if t.error_code is ErrorCode.none}


def create_topics(client, *topics: tuple[str, int], validate_only: bool = False) -> list[tuple]:
    """CreateTopics v7 of (name, partitions) each: (name, error, message, partitions) answered."""
    request = create_topics_v7.CreateTopicsRequest(
        topics=tuple(
            create_topics_v7.CreatableTopic(name=n, num_partitions=p, replication_factor=1, assignments=(), configs=()) for n, p in topics
        ),
        timeout=TIMEOUT, validate_only=validate_only,
    )  # fmt: skip
    return [(t.name, t.error_code, t.error_message, t.num_partitions) for t in client.request(request).topics]


# --- a topic named more than once ---------------------------------------------------------


def test_create_topics_answers_a_repeated_name_once_and_creates_the_others(shared_broker, wire) -> None:
    """Each repeated name is answered once, INVALID_REQUEST, after the others (Kafka's order)
    and is not created, however many copies; the request's other topics are created."""
    admin = admin_for(shared_broker.bootstrap)
    client = wire(shared_broker.bootstrap)
    dupy, thrice, fine = fresh("dupy"), fresh("thrice"), fresh("fine")
    assert create_topics(client, (dupy, 1), (thrice, 2), (dupy, 1), (fine, 2), (thrice, 2), (thrice, 3)) == [
        (fine, ErrorCode.none, None, 2),
        (dupy, ErrorCode.invalid_request, DUPLICATE_NAME, -1),
        (thrice, ErrorCode.invalid_request, DUPLICATE_NAME, -1),
    ]
    assert partition_counts(admin, dupy, thrice, fine) == {dupy: 0, thrice: 0, fine: 2}

    other = fresh("fine")
    assert create_topics(client, (other, 1), (dupy, 1), (dupy, 1), validate_only=True) == [
        (other, ErrorCode.none, None, 1),
        (dupy, ErrorCode.invalid_request, DUPLICATE_NAME, -1),
    ]
    assert partition_counts(admin, dupy, other) == {dupy: 0, other: 0}


def test_create_partitions_answers_a_repeated_name_once_and_grows_the_others(shared_broker, create_topic, wire) -> None:
    """A topic named twice keeps its partitions and is answered once, INVALID_REQUEST, before
    the others (Kafka's order); the request's other topics grow."""
    admin = admin_for(shared_broker.bootstrap)
    fine, orders = create_topic(shared_broker.bootstrap, partitions=1), create_topic(shared_broker.bootstrap, partitions=1)

    def grow(*counts: tuple[str, int], validate_only: bool = False) -> list[tuple]:
        request = create_partitions_v3.CreatePartitionsRequest(
            topics=tuple(create_partitions_v3.CreatePartitionsTopic(name=n, count=c, assignments=None) for n, c in counts),
            timeout=TIMEOUT, validate_only=validate_only,
        )  # fmt: skip
        return [(r.name, r.error_code, r.error_message) for r in wire(shared_broker.bootstrap).request(request).results]

    assert grow((fine, 3), (orders, 7), (orders, 8), validate_only=True) == [
        (orders, ErrorCode.invalid_request, DUPLICATE_NAME), (fine, ErrorCode.none, None),
    ]  # fmt: skip
    assert partition_counts(admin, fine, orders) == {fine: 1, orders: 1}
    assert grow((fine, 9), (orders, 7), (orders, 8)) == [(orders, ErrorCode.invalid_request, DUPLICATE_NAME), (fine, ErrorCode.none, None)]
    assert partition_counts(admin, fine, orders) == {fine: 9, orders: 1}


def test_delete_topics_refuses_repeated_names_and_ids(shared_broker, create_topic, wire) -> None:
    """DeleteTopics v6 as Kafka's ControllerApis.deleteTopics: a topic named by both its name and
    its id, or by neither, a name or an id given twice, and a name whose id is given too are
    each answered once with INVALID_REQUEST, and none of them is deleted; the others are. The
    refusals come first (Kafka shuffles its answers; these are in its order before that)."""
    admin = admin_for(shared_broker.bootstrap)
    client = wire(shared_broker.bootstrap)
    twice_by_name, twice_by_id, aliased, both, by_name, by_id = (create_topic(shared_broker.bootstrap, partitions=1) for _ in range(6))
    ids = topic_ids(client, twice_by_name, twice_by_id, aliased, both, by_name, by_id)

    def state(topic_name: str | None, topic_id: uuid.UUID | None) -> delete_topics_v6.DeleteTopicState:
        return delete_topics_v6.DeleteTopicState(name=topic_name, topic_id=topic_id)

    request = delete_topics_v6.DeleteTopicsRequest(
        topics=(
            state(twice_by_name, None), state(None, ids[twice_by_id]), state(aliased, None), state(both, ids[both]),
            state(by_name, None), state(None, ids[aliased]), state(None, None), state(twice_by_name, None),
            state(None, ids[by_id]), state(None, ids[twice_by_id]),
        ),
        timeout=TIMEOUT,
    )  # fmt: skip
    answered = [(r.name, r.topic_id, r.error_code, r.error_message) for r in client.request(request).responses]
    refused = ErrorCode.invalid_request
    assert answered == [
        (both, ids[both], refused, "You may not specify both topic name and topic id."),
        (None, None, refused, "Neither topic name nor id were specified."),
        (twice_by_name, None, refused, DUPLICATE_NAME),
        (None, ids[twice_by_id], refused, DUPLICATE_ID),
        (aliased, ids[aliased], refused, "The provided topic name maps to an ID that was already supplied."),
        (by_name, ids[by_name], ErrorCode.none, None),
        (by_id, ids[by_id], ErrorCode.none, None),
    ]
    assert partition_counts(admin, twice_by_name, twice_by_id, aliased, both, by_name, by_id) == {
        twice_by_name: 1, twice_by_id: 1, aliased: 1, both: 1, by_name: 0, by_id: 0,
    }  # fmt: skip

    # Before v6, by name only.
    request = delete_topics_v5.DeleteTopicsRequest(topic_names=(twice_by_name, aliased, twice_by_name), timeout=TIMEOUT)
    answered = [(r.name, r.error_code, r.error_message) for r in client.request(request).responses]
    assert answered == [(twice_by_name, refused, DUPLICATE_NAME), (aliased, ErrorCode.none, None)]
    assert partition_counts(admin, twice_by_name, aliased) == {twice_by_name: 1, aliased: 0}


# --- names that collide in metric names ----------------------------------------------------


def test_a_name_colliding_with_an_existing_topic_is_refused(shared_broker, wire) -> None:
    """'.' and '_' are one character in Kafka's metric names: CreateTopics refuses a name that
    differs from an existing topic's only there, INVALID_TOPIC_EXCEPTION with Kafka's message,
    validate_only as well; auto-creation on Metadata does not create it and answers
    UNKNOWN_TOPIC_OR_PARTITION, as Kafka 4's broker does (its CreateTopics to the controller
    fails). The same name again is still TOPIC_ALREADY_EXISTS; once the topic is deleted, the
    other name may be created."""
    admin = admin_for(shared_broker.bootstrap)
    client = wire(shared_broker.bootstrap)
    base = uuid.uuid4().hex[:10]
    dotted, underscored, mixed = f"c{base}.orders.eu", f"c{base}_orders_eu", f"c{base}_orders.eu"
    admin.create_topics([NewTopic(dotted, 1)])[dotted].result(timeout=DEADLINE_S)

    for clash in (underscored, mixed):
        message = f"Topic '{clash}' collides with existing topic: {dotted}"
        for validate_only in (True, False):
            futures = admin.create_topics([NewTopic(clash, 2)], validate_only=validate_only, request_timeout=DEADLINE_S)
            assert refusal(futures[clash]) == (KafkaError.TOPIC_EXCEPTION, message), (clash, validate_only)
            assert create_topics(client, (clash, 2), validate_only=validate_only) == [
                (clash, ErrorCode.invalid_topic_exception, message, -1)
            ], (clash, validate_only)
    futures = admin.create_topics([NewTopic(dotted, 1)], request_timeout=DEADLINE_S)
    assert refusal(futures[dotted])[0] == KafkaError.TOPIC_ALREADY_EXISTS

    request = metadata_v12.MetadataRequest(
        topics=(metadata_v12.MetadataRequestTopic(topic_id=None, name=underscored),), allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )  # fmt: skip
    [answered] = client.request(request).topics
    assert (answered.name, answered.error_code, answered.partitions) == (underscored, ErrorCode.unknown_topic_or_partition, ())
    assert partition_counts(admin, dotted, underscored, mixed) == {dotted: 1, underscored: 0, mixed: 0}

    admin.delete_topics([dotted], operation_timeout=DEADLINE_S)[dotted].result(timeout=DEADLINE_S)
    assert create_topics(client, (underscored, 1)) == [(underscored, ErrorCode.none, None, 1)]
    assert create_topics(client, (dotted, 1)) == [
        (dotted, ErrorCode.invalid_topic_exception, f"Topic '{dotted}' collides with existing topic: {underscored}", -1)
    ]


# --- config names that are no topic config --------------------------------------------------


def test_an_unknown_config_name_is_named_as_kafka_does(shared_broker, create_topic, wire) -> None:
    """CreateTopics, IncrementalAlterConfigs and AlterConfigs answer a name that is no topic
    config with INVALID_CONFIG "Unknown topic config name: NAME", whatever its value and the
    other configs' values (Kafka checks every name before any value), and change nothing."""
    admin = admin_for(shared_broker.bootstrap)
    client = wire(shared_broker.bootstrap)
    unknown = (KafkaError.INVALID_CONFIG, "Unknown topic config name: bogus.config")
    new = fresh()
    for configs in ({"bogus.config": "1"}, {"retention.ms": "soon", "bogus.config": "1"}):
        for validate_only in (True, False):
            futures = admin.create_topics([NewTopic(new, 1, config=configs)], validate_only=validate_only, request_timeout=DEADLINE_S)
            assert refusal(futures[new]) == unknown, (configs, validate_only)
    assert partition_counts(admin, new) == {new: 0}

    topic = create_topic(shared_broker.bootstrap, partitions=1, configs={"retention.ms": "3600000"})
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("bogus.config", "1", incremental_operation=AlterConfigOpType.SET),
    ])  # fmt: skip
    assert refusal(admin.incremental_alter_configs([resource])[resource]) == unknown

    request = incremental_v1.IncrementalAlterConfigsRequest(
        resources=(incremental_v1.AlterConfigsResource(resource_type=CONFIG_TOPIC, resource_name=topic, configs=(
            incremental_v1.AlterableConfig(name="bogus.config", config_operation=AlterConfigOpType.SET.value, value="1"),
        )),),
        validate_only=False,
    )  # fmt: skip
    answered = [(r.resource_name, r.error_code, r.error_message) for r in client.request(request).responses]
    assert answered == [(topic, ErrorCode.invalid_config, "Unknown topic config name: bogus.config")]
    request = alter_v2.AlterConfigsRequest(
        resources=(alter_v2.AlterConfigsResource(resource_type=CONFIG_TOPIC, resource_name=topic, configs=(
            alter_v2.AlterableConfig(name="segment.bytes", value="tiny"), alter_v2.AlterableConfig(name="bogus.config", value="1"),
        )),),
        validate_only=False,
    )  # fmt: skip
    answered = [(r.resource_name, r.error_code, r.error_message) for r in client.request(request).responses]
    assert answered == [(topic, ErrorCode.invalid_config, "Unknown topic config name: bogus.config")]

    described = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)], request_timeout=DEADLINE_S)
    [configs] = [f.result(timeout=DEADLINE_S) for f in described.values()]
    assert configs["retention.ms"].value == "3600000"
