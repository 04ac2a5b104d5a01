"""Dynamic broker configs: the log.* defaults of topic configs set at run time through the admin
APIs, for the whole cluster (the BROKER resource with an empty name) or for one broker (its node
id), read back through confluent-kafka's and kafka-python's AdminClient, applied to produce at
once, kept in the metadata store across a restart; static broker configs stay read-only."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, ResourceType

from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as alter_v1

from .broker_process import BrokerProcess

DEADLINE_S = 20


@pytest.fixture
def broker(tmp_path):
    process = BrokerProcess(tmp_path / "data").start()
    try:
        yield process
    finally:
        process.close()


def alter(admin: AdminClient, name: str, *entries: ConfigEntry) -> None:
    resource = ConfigResource(ResourceType.BROKER, name, incremental_configs=list(entries))
    admin.incremental_alter_configs([resource])[resource].result(timeout=DEADLINE_S)


def alter_cluster_default(client, name: str, value: str) -> ErrorCode:
    """librdkafka and kafka-python refuse a BROKER resource without a name: the cluster-wide
    default goes as a raw IncrementalAlterConfigs, as kafka-configs.sh --entity-default sends it."""
    config = alter_v1.AlterableConfig(name=name, config_operation=0, value=value)
    resource = alter_v1.AlterConfigsResource(resource_type=4, resource_name="", configs=(config,))
    (answer,) = client.request(alter_v1.IncrementalAlterConfigsRequest(resources=(resource,), validate_only=False)).responses
    return answer.error_code


def described(admin: AdminClient, resource_type: ResourceType, name: str) -> dict:
    resource = ConfigResource(resource_type, name)
    return admin.describe_configs([resource])[resource].result(timeout=DEADLINE_S)


def produce_error(bootstrap: str, topic: str, size: int) -> int | None:
    errors: list = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.max.bytes": 10_000_000})
    producer.produce(topic, b"x" * size, on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(DEADLINE_S) == 0
    return None if errors[0] is None else errors[0].code()


def test_dynamic_broker_configs_apply_at_once_and_survive_a_restart(broker, create_topic, wire) -> None:
    bootstrap = broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = create_topic(bootstrap, partitions=1)
    assert produce_error(bootstrap, topic, 5000) is None

    # The cluster-wide default: every topic without its own max.message.bytes follows it at once.
    assert alter_cluster_default(wire(bootstrap), "message.max.bytes", "3000") is ErrorCode.none
    assert produce_error(bootstrap, topic, 5000) == KafkaError.MSG_SIZE_TOO_LARGE
    entry = described(admin, ResourceType.TOPIC, topic)["max.message.bytes"]
    assert (entry.value, entry.source) == ("3000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)

    # This broker's own value wins over the cluster's.
    alter(admin, "1", ConfigEntry("message.max.bytes", "8000", incremental_operation=AlterConfigOpType.SET),
          ConfigEntry("log.retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET))  # fmt: skip
    assert produce_error(bootstrap, topic, 5000) is None
    mine = described(admin, ResourceType.BROKER, "1")
    assert (mine["message.max.bytes"].value, mine["message.max.bytes"].source) == ("8000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert mine["node.id"].value == "1" and mine["node.id"].is_read_only
    retention = described(admin, ResourceType.TOPIC, topic)["retention.ms"]
    assert (retention.value, retention.source) == ("3600000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)

    # Kept in the metadata store: a restarted broker applies them before serving.
    broker.restart()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert described(admin, ResourceType.TOPIC, topic)["max.message.bytes"].value == "8000"
    alter(admin, "1", ConfigEntry("message.max.bytes", None, incremental_operation=AlterConfigOpType.DELETE))
    assert produce_error(bootstrap, topic, 5000) == KafkaError.MSG_SIZE_TOO_LARGE  # the cluster's 3000 again

    # Only the dynamic ones can change; static configs and other brokers are refused.
    for name, entry, code in (
        ("1", ConfigEntry("node.id", "7", incremental_operation=AlterConfigOpType.SET), KafkaError.INVALID_CONFIG),
        ("1", ConfigEntry("log.retention.ms", "-5", incremental_operation=AlterConfigOpType.SET), KafkaError.INVALID_CONFIG),
    ):
        with pytest.raises(KafkaException) as refused:
            alter(admin, name, entry)
        assert refused.value.args[0].code() == code
    # librdkafka sends a broker's configs to that broker; asked of another, this one refuses.
    config = alter_v1.AlterableConfig(name="log.retention.ms", config_operation=0, value="1")
    resource = alter_v1.AlterConfigsResource(resource_type=4, resource_name="9", configs=(config,))
    (answer,) = wire(bootstrap).request(alter_v1.IncrementalAlterConfigsRequest(resources=(resource,), validate_only=False)).responses
    assert answer.error_code is ErrorCode.invalid_request


def test_dynamic_broker_configs_through_kafka_python(broker, create_topic) -> None:
    from kafka.admin import ConfigResource as KpConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        topic = create_topic(broker.bootstrap, partitions=1)
        resource = KpConfigResource(ConfigResourceType.BROKER, "1", configs={"log.retention.ms": "7200000"})
        assert admin.alter_configs([resource], incremental=True, raise_on_unknown=False) == {"broker": {"1": "OK"}}
        described = admin.describe_configs([KpConfigResource(ConfigResourceType.BROKER, "1")], config_filter="all")["broker"]["1"]
        assert (described["log.retention.ms"]["value"], described["log.retention.ms"]["config_source"]) == ("7200000", "DYNAMIC_BROKER_CONFIG")
        assert (described["log.segment.bytes"]["value"], described["log.segment.bytes"]["config_source"]) == ("1073741824", "DEFAULT_CONFIG")
        topics = admin.describe_configs([KpConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
        assert topics["topic"][topic]["retention.ms"]["value"] == "7200000"
    finally:
        admin.close()
