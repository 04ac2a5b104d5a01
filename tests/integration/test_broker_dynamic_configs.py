"""Dynamic broker configs: the log.* defaults of topic configs set at run time through the admin
APIs, for the whole cluster (the BROKER resource with an empty name) or for one broker (its node
id), read back through confluent-kafka's and kafka-python's AdminClient, applied to produce at
once, kept in the metadata store across a restart; static broker configs stay read-only."""

from __future__ import annotations

import json
import socket
import time
import urllib.request
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, ResourceType

from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as alter_v1

from .broker_process import BrokerProcess, free_port

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

    # Only the dynamic ones can change; static configs and other brokers are refused, with Kafka
    # 4's INVALID_REQUEST for a broker resource (ConfigAdminManager.validateBrokerConfigChange).
    for name, entry, message in (
        ("1", ConfigEntry("node.id", "7", incremental_operation=AlterConfigOpType.SET), "Cannot update these configs dynamically: Set(node.id)"),
        ("1", ConfigEntry("log.retention.ms", "-5", incremental_operation=AlterConfigOpType.SET),
         "Invalid value -5 for configuration log.retention.ms: must be between -1 and 9223372036854775807"),
    ):  # fmt: skip
        with pytest.raises(KafkaException) as refused:
            alter(admin, name, entry)
        assert (refused.value.args[0].code(), refused.value.args[0].str()) == (KafkaError.INVALID_REQUEST, message)
    # librdkafka sends a broker's configs to that broker; asked of another, this one refuses.
    config = alter_v1.AlterableConfig(name="log.retention.ms", config_operation=0, value="1")
    resource = alter_v1.AlterConfigsResource(resource_type=4, resource_name="9", configs=(config,))
    (answer,) = wire(bootstrap).request(alter_v1.IncrementalAlterConfigsRequest(resources=(resource,), validate_only=False)).responses
    assert answer.error_code is ErrorCode.invalid_request


@pytest.fixture
def static_broker(tmp_path):
    """A broker started with static defaults of topic configs (`--topic-default`)."""
    process = BrokerProcess(tmp_path / "data", "--topic-default", "max.message.bytes=2000", "--topic-default", "retention.ms=7000").start()
    try:
        yield process
    finally:
        process.close()


def test_topic_synonyms_list_every_level_of_the_broker_default(static_broker, create_topic, wire) -> None:
    """Kafka's ConfigHelper.createTopicConfigEntry / configSynonyms: a topic config's synonyms are
    its own value, then its broker config at every level that sets it (this broker's dynamic
    value, the cluster-wide dynamic default, the static value), then Kafka's built-in default;
    the entry's value and source are the first one's."""
    from kafka.admin import ConfigResource as KpConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    bootstrap = static_broker.bootstrap
    topic = create_topic(bootstrap, partitions=1, configs={"max.message.bytes": "5000"})
    for name, value in (("message.max.bytes", "3000"), ("log.retention.ms", "8000"), ("log.segment.bytes", "1048576")):
        assert alter_cluster_default(wire(bootstrap), name, value) is ErrorCode.none
    admin = AdminClient({"bootstrap.servers": bootstrap})
    alter(admin, "1", ConfigEntry("message.max.bytes", "4000", incremental_operation=AlterConfigOpType.SET),
          ConfigEntry("log.retention.ms", "9000", incremental_operation=AlterConfigOpType.SET))  # fmt: skip

    expected = {
        "max.message.bytes": ("5000", "DYNAMIC_TOPIC_CONFIG", [
            ("max.message.bytes", "5000", "DYNAMIC_TOPIC_CONFIG"),
            ("message.max.bytes", "4000", "DYNAMIC_BROKER_CONFIG"),
            ("message.max.bytes", "3000", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
            ("message.max.bytes", "2000", "STATIC_BROKER_CONFIG"),
            ("message.max.bytes", "1048588", "DEFAULT_CONFIG"),
        ]),
        "retention.ms": ("9000", "DYNAMIC_BROKER_CONFIG", [  # log.retention.ms has no built-in default
            ("log.retention.ms", "9000", "DYNAMIC_BROKER_CONFIG"),
            ("log.retention.ms", "8000", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
            ("log.retention.ms", "7000", "STATIC_BROKER_CONFIG"),
        ]),
        "segment.bytes": ("1048576", "DYNAMIC_DEFAULT_BROKER_CONFIG", [
            ("log.segment.bytes", "1048576", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
            ("log.segment.bytes", "1073741824", "DEFAULT_CONFIG"),
        ]),
    }  # fmt: skip
    # kafka-python hands back the synonym list as the broker sent it.
    python_admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        described_topic = python_admin.describe_configs(
            [KpConfigResource(ConfigResourceType.TOPIC, topic)], include_synonyms=True, config_filter="all"
        )["topic"][topic]
        broker_1 = python_admin.describe_configs(
            [KpConfigResource(ConfigResourceType.BROKER, "1")], include_synonyms=True, config_filter="all"
        )["broker"]["1"]
    finally:
        python_admin.close()
    got = {
        name: (described_topic[name]["value"], described_topic[name]["config_source"],
               [(s["name"], s["value"], s["source"]) for s in described_topic[name]["synonyms"]])
        for name in expected
    }  # fmt: skip
    assert got == expected
    # The broker resource lists the same levels under the broker config's name.
    assert [(s["name"], s["value"], s["source"]) for s in broker_1["message.max.bytes"]["synonyms"]] == expected["max.message.bytes"][2][1:]

    # librdkafka always asks for synonyms (include_synonyms=true) and confluent-kafka keeps them in a
    # dict by name, the last of each name winning: the lowest level each name is set at.
    entries = described(admin, ResourceType.TOPIC, topic)
    seen = {
        name: (entries[name].value, entries[name].source, {s.name: (s.value, s.source) for s in entries[name].synonyms.values()})
        for name in expected
    }
    assert seen == {
        "max.message.bytes": ("5000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value, {
            "max.message.bytes": ("5000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value),
            "message.max.bytes": ("1048588", ConfigSource.DEFAULT_CONFIG.value),
        }),
        "retention.ms": ("9000", ConfigSource.DYNAMIC_BROKER_CONFIG.value, {
            "log.retention.ms": ("7000", ConfigSource.STATIC_BROKER_CONFIG.value),
        }),
        "segment.bytes": ("1048576", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value, {
            "log.segment.bytes": ("1073741824", ConfigSource.DEFAULT_CONFIG.value),
        }),
    }  # fmt: skip


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


# --- the broker's own dynamic settings: max.connections(.per.ip), log.cleaner.* --------------------

OTHER_ADDRESS = "127.0.0.2"  # raw connections come from here: its count starts at 0 whatever the admin client holds


def set_broker(admin: AdminClient, **values: str | None) -> None:
    """SET (or DELETE, for None) configs of broker 1 through confluent-kafka's AdminClient."""
    entries = [
        ConfigEntry(name.replace("_", "."), value, incremental_operation=AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE)
        for name, value in values.items()
    ]
    alter(admin, "1", *entries)


def connection_admitted(port: int) -> socket.socket | None:
    """A connection from OTHER_ADDRESS that the broker answers (ApiVersions v0), or None when it
    closes it at once (max.connections.per.ip)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(OTHER_ADDRESS, 0))
    header = (18).to_bytes(2, "big") + (0).to_bytes(2, "big") + (7).to_bytes(4, "big") + (-1).to_bytes(2, "big", signed=True)
    try:
        sock.sendall(len(header).to_bytes(4, "big") + header)
        size = sock.recv(4)
    except (ConnectionResetError, BrokenPipeError):
        size = b""
    if len(size) < 4:
        sock.close()
        return None
    remaining = int.from_bytes(size, "big")
    while remaining:
        remaining -= len(sock.recv(remaining))
    return sock


@pytest.fixture
def http_broker(tmp_path):
    http = f"127.0.0.1:{free_port()}"
    process = BrokerProcess(tmp_path / "data", "--http", http, "--log-cleaner-backoff-ms", "600000",
                            "--log-retention-check-interval-ms", "100").start()  # fmt: skip
    process.http = http  # type: ignore[attr-defined]
    try:
        yield process
    finally:
        process.close()


def test_connection_limits_message_size_and_cleaner_settings_apply_at_once(http_broker) -> None:
    broker = http_broker
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = f"t-{uuid.uuid4().hex[:12]}"
    from confluent_kafka.admin import NewTopic

    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=DEADLINE_S)
    entry = described(admin, ResourceType.BROKER, "1")["max.connections.per.ip"]
    assert (entry.value, entry.source, entry.is_read_only) == ("2147483647", ConfigSource.DEFAULT_CONFIG.value, False)

    # max.connections.per.ip: the fourth connection from one address is closed at once.
    set_broker(admin, max_connections_per_ip="3")
    entry = described(admin, ResourceType.BROKER, "1")["max.connections.per.ip"]
    assert (entry.value, entry.source) == ("3", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    admitted = [connection_admitted(broker.port) for _ in range(3)]
    assert all(admitted)
    assert connection_admitted(broker.port) is None
    admitted.pop().close()  # one fewer open: one more may come
    deadline = time.monotonic() + DEADLINE_S
    while (again := connection_admitted(broker.port)) is None:  # the broker sees the close a moment later
        assert time.monotonic() < deadline, "a connection closed made room for another"
    admitted.append(again)
    assert connection_admitted(broker.port) is None
    # Deleted: Kafka's default again, and the fourth connection is served.
    set_broker(admin, max_connections_per_ip=None)
    entry = described(admin, ResourceType.BROKER, "1")["max.connections.per.ip"]
    assert (entry.value, entry.source) == ("2147483647", ConfigSource.DEFAULT_CONFIG.value)
    admitted.append(connection_admitted(broker.port))
    assert all(admitted) and len(admitted) == 4
    for sock in admitted:
        sock.close()

    # message.max.bytes on this broker: a larger batch is refused with MESSAGE_TOO_LARGE, until deleted.
    set_broker(admin, message_max_bytes="2000")
    assert produce_error(broker.bootstrap, topic, 5000) == KafkaError.MSG_SIZE_TOO_LARGE
    set_broker(admin, message_max_bytes=None)
    entry = described(admin, ResourceType.BROKER, "1")["message.max.bytes"]
    assert (entry.value, entry.source) == ("1048588", ConfigSource.DEFAULT_CONFIG.value)
    assert produce_error(broker.bootstrap, topic, 5000) is None

    # log.cleaner.backoff.ms: the cleaner, asleep for 600 s, wakes at once and cleans a compacted topic.
    compacted = f"c-{uuid.uuid4().hex[:12]}"
    configs = {"cleanup.policy": "compact", "segment.bytes": "4096", "segment.ms": "300", "min.cleanable.dirty.ratio": "0.01"}
    admin.create_topics([NewTopic(compacted, 1, 1, config=configs)])[compacted].result(timeout=DEADLINE_S)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for round_ in range(5):
        for k in range(50):
            producer.produce(compacted, key=b"k%02d" % k, value=b"v%d" % round_ + b"x" * 40, partition=0)
    assert producer.flush(DEADLINE_S) == 0

    def compaction() -> dict:
        with urllib.request.urlopen(f"http://{broker.http}/v1/topics/{compacted}", timeout=10) as response:
            return json.loads(response.read())["partitions"][0]["compaction"]

    def rolled() -> bool:  # every record in a rolled segment: all cleanable
        with urllib.request.urlopen(f"http://{broker.http}/v1/topics/{compacted}", timeout=10) as response:
            partition = json.loads(response.read())["partitions"][0]
        return partition["active_base_offset"] == partition["log_end_offset"] == 250

    deadline = time.monotonic() + DEADLINE_S
    while not rolled():
        assert time.monotonic() < deadline, "the compacted topic's segments rolled"
        time.sleep(0.1)  # polling the broker's state with a deadline
    assert compaction()["last_cleaned_ms"] is None  # the cleaner sleeps out its 600 s backoff
    set_broker(admin, log_cleaner_backoff_ms="100", log_cleaner_threads="2")
    mine = described(admin, ResourceType.BROKER, "1")
    assert {n: (mine[n].value, mine[n].source) for n in ("log.cleaner.backoff.ms", "log.cleaner.threads")} == {
        "log.cleaner.backoff.ms": ("100", ConfigSource.DYNAMIC_BROKER_CONFIG.value),
        "log.cleaner.threads": ("2", ConfigSource.DYNAMIC_BROKER_CONFIG.value),
    }
    deadline = time.monotonic() + DEADLINE_S
    while compaction()["last_cleaned_ms"] is None:
        assert time.monotonic() < deadline, "the cleaner woke up and cleaned"
        time.sleep(0.1)  # polling the broker's state with a deadline
    assert compaction()["dirty_ratio"] == 0.0

    # Read-only in Kafka, read-only here: INVALID_REQUEST naming them; Kafka's own checks of values.
    for entry, message in (
        (ConfigEntry("num.partitions", "4", incremental_operation=AlterConfigOpType.SET), "Cannot update these configs dynamically: Set(num.partitions)"),
        (ConfigEntry("auto.create.topics.enable", "false", incremental_operation=AlterConfigOpType.SET),
         "Cannot update these configs dynamically: Set(auto.create.topics.enable)"),
        (ConfigEntry("log.cleaner.threads", "5", incremental_operation=AlterConfigOpType.SET),
         "Log cleaner threads cannot be increased to more than double the current value 2"),
        (ConfigEntry("max.connections", "-3", incremental_operation=AlterConfigOpType.SET),
         "Invalid value -3 for configuration max.connections: Value must be at least 0"),
    ):  # fmt: skip
        with pytest.raises(KafkaException) as refused:
            alter(admin, "1", entry)
        assert (refused.value.args[0].code(), refused.value.args[0].str()) == (KafkaError.INVALID_REQUEST, message)
