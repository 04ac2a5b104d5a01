"""DescribeConfigs of topics as Kafka answers it, through confluent-kafka's AdminClient and raw
requests, against a real `diskless serve` with broker-wide topic defaults; and a topic's
compression.type honoured on produce."""

from __future__ import annotations

import datetime
import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic, ResourceType
from kio.schema.describe_configs.v1 import request as describe_v1
from kio.schema.describe_configs.v4 import request as describe_v4
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_v12

from hot_tier.records import Compression, decode_batches

from .broker_process import BrokerProcess

DEADLINE_S = 20.0
LONG_MAX = str(2**63 - 1)
TOPIC = 2

# Every topic config Kafka 4.x describes, with the value a topic without overrides reports on a
# broker without topic defaults (Kafka's defaults; remote.storage.enable and local.retention.ms
# are Diskless's).
DEFAULTS = {
    "cleanup.policy": "delete",
    "compression.gzip.level": "-1",
    "compression.lz4.level": "9",
    "compression.type": "producer",
    "compression.zstd.level": "3",
    "delete.retention.ms": "86400000",
    "file.delete.delay.ms": "60000",
    "flush.messages": LONG_MAX,
    "flush.ms": LONG_MAX,
    "follower.replication.throttled.replicas": "",
    "index.interval.bytes": "4096",
    "leader.replication.throttled.replicas": "",
    "local.retention.bytes": "-2",
    "local.retention.ms": "0",
    "max.compaction.lag.ms": LONG_MAX,
    "max.message.bytes": "1048588",
    "message.timestamp.after.max.ms": "3600000",
    "message.timestamp.before.max.ms": LONG_MAX,
    "message.timestamp.type": "CreateTime",
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "min.insync.replicas": "1",
    "preallocate": "false",
    "remote.log.copy.disable": "false",
    "remote.log.delete.on.disable": "false",
    "remote.storage.enable": "true",
    "retention.bytes": "-1",
    "retention.ms": "604800000",
    "segment.bytes": "1073741824",
    "segment.index.bytes": "10485760",
    "segment.jitter.ms": "0",
    "segment.ms": "604800000",
    "unclean.leader.election.enable": "false",
}
BROKER_DEFAULTS = {"retention.ms": "3600000", "compression.type": "snappy", "min.insync.replicas": "2"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A `diskless serve` with broker-wide topic defaults (Kafka's static broker configs)."""
    flags = [arg for name, value in BROKER_DEFAULTS.items() for arg in ("--topic-default", f"{name}={value}")]
    process = BrokerProcess(tmp_path_factory.mktemp("describe") / "data", *flags).start()
    try:
        yield process
    finally:
        process.close()


def new_topic(bootstrap: str, configs: dict[str, str] | None = None) -> str:
    name = f"t-{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config=configs or {})], operation_timeout=10)[name].result(timeout=DEADLINE_S)
    return name


def describe(bootstrap: str, topic: str) -> dict[str, ConfigEntry]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, topic)
    return admin.describe_configs([resource], request_timeout=DEADLINE_S)[resource].result(timeout=DEADLINE_S)


def sources(entries: dict[str, ConfigEntry]) -> dict[str, tuple[str, int]]:
    return {name: (e.value, e.source) for name, e in entries.items()}


DEFAULT = ConfigSource.DEFAULT_CONFIG.value
STATIC = ConfigSource.STATIC_BROKER_CONFIG.value
TOPIC_SET = ConfigSource.DYNAMIC_TOPIC_CONFIG.value


def test_a_topic_without_overrides_reports_kafkas_defaults_and_the_brokers(broker) -> None:
    entries = describe(broker.bootstrap, new_topic(broker.bootstrap))
    expected = {name: (value, DEFAULT) for name, value in DEFAULTS.items()}
    expected |= {name: (value, STATIC) for name, value in BROKER_DEFAULTS.items()}
    assert sources(entries) == expected
    assert not any(e.is_read_only or e.is_sensitive for e in entries.values())
    assert {name for name, e in entries.items() if e.is_default} == set(DEFAULTS) - set(BROKER_DEFAULTS)


def test_overrides_win_over_broker_defaults_and_are_altered_incrementally(broker) -> None:
    overrides = {"retention.ms": "60000", "compression.type": "zstd", "max.message.bytes": "2048", "min.cleanable.dirty.ratio": "0.25"}
    topic = new_topic(broker.bootstrap, overrides)
    expected = {name: (value, DEFAULT) for name, value in DEFAULTS.items()}
    expected |= {name: (value, STATIC) for name, value in BROKER_DEFAULTS.items()}
    expected |= {name: (value, TOPIC_SET) for name, value in overrides.items()}
    assert sources(describe(broker.bootstrap, topic)) == expected

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("compression.type", "gzip", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
    ])  # fmt: skip
    admin.incremental_alter_configs([resource], request_timeout=DEADLINE_S)[resource].result(timeout=DEADLINE_S)
    expected |= {"compression.type": ("gzip", TOPIC_SET), "retention.ms": ("3600000", STATIC)}
    assert sources(describe(broker.bootstrap, topic)) == expected

    refused = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("compression.type", "brotli", incremental_operation=AlterConfigOpType.SET),
    ])  # fmt: skip
    with pytest.raises(Exception) as error:
        admin.incremental_alter_configs([refused], request_timeout=DEADLINE_S)[refused].result(timeout=DEADLINE_S)
    assert "compression.type" in str(error.value)
    assert describe(broker.bootstrap, topic)["compression.type"].value == "gzip"


def test_raw_describe_honours_keys_synonyms_types_and_documentation(broker, wire) -> None:
    topic = new_topic(broker.bootstrap, {"retention.ms": "60000"})
    client = wire(broker.bootstrap)
    keys = ("retention.ms", "segment.bytes", "min.cleanable.dirty.ratio", "compression.type", "no.such.config")
    request = describe_v4.DescribeConfigsRequest(
        resources=(describe_v4.DescribeConfigsResource(resource_type=TOPIC, resource_name=topic, configuration_keys=keys),),
        include_synonyms=True,
        include_documentation=True,
    )
    result = client.request(request).results[0]
    assert result.error_code == ErrorCode.none
    entries = {c.name: c for c in result.configs}
    assert set(entries) == set(keys) - {"no.such.config"}
    assert {name: (c.value, c.config_source, c.config_type) for name, c in entries.items()} == {
        "retention.ms": ("60000", 1, 5),
        "segment.bytes": ("1073741824", 5, 3),
        "min.cleanable.dirty.ratio": ("0.5", 5, 6),
        "compression.type": ("snappy", 4, 2),
    }
    assert {name: [(s.name, s.value, s.source) for s in c.synonyms] for name, c in entries.items()} == {
        "retention.ms": [("retention.ms", "60000", 1), ("log.retention.ms", "3600000", 4)],
        "segment.bytes": [("log.segment.bytes", "1073741824", 5)],
        "min.cleanable.dirty.ratio": [("log.cleaner.min.cleanable.ratio", "0.5", 5)],
        "compression.type": [("compression.type", "snappy", 4), ("compression.type", "producer", 5)],
    }
    assert all(c.documentation and not c.read_only and not c.is_sensitive for c in entries.values())

    # Without the flags: no synonyms, no documentation; no keys (empty or null): every config.
    for configuration_keys in ((), None):
        plain = describe_v4.DescribeConfigsRequest(
            resources=(describe_v4.DescribeConfigsResource(resource_type=TOPIC, resource_name=topic, configuration_keys=configuration_keys),),
        )
        configs = client.request(plain).results[0].configs
        assert {c.name for c in configs} == set(DEFAULTS)
        assert all(c.synonyms == () and c.documentation is None for c in configs)
    old = describe_v1.DescribeConfigsRequest(
        resources=(describe_v1.DescribeConfigsResource(resource_type=TOPIC, resource_name=topic, configuration_keys=("retention.ms",)),),
        include_synonyms=True,
    )
    (only,) = client.request(old).results[0].configs
    assert (only.name, only.value, only.config_source, len(only.synonyms)) == ("retention.ms", "60000", 1, 2)


def raw_fetch(client, topic: str, offset: int):
    part = fetch_v12.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)
    request = fetch_v12.FetchRequest(
        max_wait=datetime.timedelta(0), min_bytes=1, forgotten_topics_data=(),
        topics=(fetch_v12.FetchTopic(topic=topic, partitions=(part,)),),
    )  # fmt: skip
    return client.request(request).responses[0].partitions[0]


def test_compression_type_recompresses_what_producers_send(broker, wire) -> None:
    topic = new_topic(broker.bootstrap, {"compression.type": "zstd"})
    base_ms = int(time.time() * 1000)
    sent = [(f"key-{i}".encode(), f"value-{i}-".encode() * 40, [("n", str(i).encode())], base_ms + i) for i in range(20)]
    producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "lz4", "linger.ms": 50, "enable.idempotence": True})
    for key, value, headers, timestamp in sent:
        producer.produce(topic, key=key, value=value, headers=headers, timestamp=timestamp, partition=0)
    assert producer.flush(DEADLINE_S) == 0

    client = wire(broker.bootstrap)
    batches = []
    deadline = time.monotonic() + DEADLINE_S
    while sum(len(b.records) for b in batches) < len(sent):
        assert time.monotonic() < deadline, f"fetched {sum(len(b.records) for b in batches)} of {len(sent)} records"
        result = raw_fetch(client, topic, sum(len(b.records) for b in batches))
        assert result.error_code == ErrorCode.none
        batches += list(decode_batches(result.records))
    assert {b.header.codec for b in batches} == {Compression.ZSTD}
    assert all(b.header.has_producer_id and b.header.producer_epoch == 0 for b in batches)
    assert [b.header.base_sequence for b in batches] == [b.header.base_offset for b in batches]  # one producer, from 0
    got = [(r.offset, r.key, r.value, list(r.headers), r.timestamp) for b in batches for r in b.records]
    assert got == [(i, key, value, [(k, v) for k, v in headers], ts) for i, (key, value, headers, ts) in enumerate(sent)]
