"""Topic configs: Kafka's names and defaults, validation, precedence, DescribeConfigs sources and
IncrementalAlterConfigs operations."""

from __future__ import annotations

import pytest

from diskless.broker.topic_configs import (
    LONG_MAX,
    TOPIC_CONFIGS,
    AlterOp,
    ConfigSource,
    ConfigType,
    InvalidConfig,
    UnknownConfig,
    apply_incremental,
    describe,
    effective,
    validate,
)

# Every topic config Kafka 4.x's DescribeConfigs returns (LogConfig.nonInternalConfigNames), with
# Kafka's defaults, except two Diskless changes: remote.storage.enable is true (Kafka: false) and
# local.retention.ms is 0 (Kafka: -2 = retention.ms), since Diskless drops local copies once
# they are in the bucket.
KAFKA_DEFAULTS = {
    "cleanup.policy": "delete",
    "compression.gzip.level": "-1",
    "compression.lz4.level": "9",
    "compression.type": "producer",
    "compression.zstd.level": "3",
    "delete.retention.ms": "86400000",
    "file.delete.delay.ms": "60000",
    "flush.messages": str(LONG_MAX),
    "flush.ms": str(LONG_MAX),
    "follower.replication.throttled.replicas": "",
    "index.interval.bytes": "4096",
    "leader.replication.throttled.replicas": "",
    "local.retention.bytes": "-2",
    "max.compaction.lag.ms": str(LONG_MAX),
    "max.message.bytes": "1048588",
    "message.timestamp.after.max.ms": "3600000",
    "message.timestamp.before.max.ms": str(LONG_MAX),
    "message.timestamp.type": "CreateTime",
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "min.insync.replicas": "1",
    "preallocate": "false",
    "remote.log.copy.disable": "false",
    "remote.log.delete.on.disable": "false",
    "retention.bytes": "-1",
    "retention.ms": "604800000",
    "segment.bytes": "1073741824",
    "segment.index.bytes": "10485760",
    "segment.jitter.ms": "0",
    "segment.ms": "604800000",
    "unclean.leader.election.enable": "false",
}
DISKLESS_DEFAULTS = {"remote.storage.enable": "true", "local.retention.ms": "0"}


def test_every_kafka_topic_config_is_known_with_kafkas_default_and_valid() -> None:
    defaults = {name: d.default for name, d in TOPIC_CONFIGS.items()}
    assert defaults == KAFKA_DEFAULTS | DISKLESS_DEFAULTS
    assert list(TOPIC_CONFIGS) == sorted(TOPIC_CONFIGS)  # Kafka's configNames() order
    assert validate(defaults) == defaults


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("segment.bytes", "13"),
        ("segment.bytes", str(2**31)),
        ("segment.bytes", "1.5"),
        ("segment.bytes", ""),
        ("segment.ms", "0"),
        ("retention.ms", "-2"),
        ("retention.bytes", "-2"),
        ("retention.ms", str(2**63)),
        ("local.retention.ms", "-3"),
        ("remote.storage.enable", "yes"),
        ("cleanup.policy", "compacted"),
        ("cleanup.policy", "delete,none"),
        ("cleanup.policy", ""),
        ("max.message.bytes", "-1"),
        ("message.timestamp.type", "createtime"),
        ("flush.messages", "0"),
        ("compression.type", "none"),
        ("compression.type", "ZSTD"),
        ("compression.gzip.level", "0"),
        ("compression.gzip.level", "10"),
        ("compression.lz4.level", "18"),
        ("compression.zstd.level", "23"),
        ("compression.zstd.level", "-131073"),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("min.cleanable.dirty.ratio", "half"),
        ("min.insync.replicas", "0"),
        ("max.compaction.lag.ms", "0"),
        ("message.timestamp.after.max.ms", "-1"),
        ("segment.jitter.ms", "-1"),
        ("preallocate", "1"),
        ("unclean.leader.election.enable", "no"),
        ("leader.replication.throttled.replicas", "0:a"),
        ("follower.replication.throttled.replicas", "1"),
        ("remote.log.copy.disable", "true"),  # read-only tiering is not supported
        ("remote.log.delete.on.disable", "true"),
        ("remote.log.copy.disable", "maybe"),
    ],
)
def test_invalid_values_are_refused_with_their_name(name: str, value: str) -> None:
    with pytest.raises(InvalidConfig) as refused:
        validate({name: value})
    assert (refused.value.name, refused.value.value) == (name, value)
    assert not isinstance(refused.value, UnknownConfig)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("segment.bytes", "14"),
        ("retention.ms", "-1"),
        ("retention.bytes", str(LONG_MAX)),
        ("local.retention.bytes", "-2"),
        ("cleanup.policy", "delete"),
        ("cleanup.policy", "compact"),
        ("cleanup.policy", "compact,delete"),
        ("cleanup.policy", "delete, compact"),
        ("message.timestamp.type", "LogAppendTime"),
        ("remote.storage.enable", "false"),
        ("max.message.bytes", "0"),
        *((("compression.type", codec) for codec in ("uncompressed", "gzip", "snappy", "lz4", "zstd", "producer"))),
        ("compression.gzip.level", "-1"),
        ("compression.gzip.level", "9"),
        ("compression.lz4.level", "1"),
        ("compression.zstd.level", "-131072"),
        ("compression.zstd.level", "22"),
        ("min.cleanable.dirty.ratio", "0"),
        ("min.cleanable.dirty.ratio", "1.0"),
        ("leader.replication.throttled.replicas", "*"),
        ("follower.replication.throttled.replicas", "0:1,1:1"),
        ("min.insync.replicas", "2"),
        ("preallocate", "true"),
    ],
)
def test_edge_values_are_accepted(name: str, value: str) -> None:
    assert validate({name: value}) == {name: value}


def test_unknown_names_and_missing_values_are_refused() -> None:
    with pytest.raises(UnknownConfig) as unknown:
        validate({"retention.hours": "1"})
    assert unknown.value.name == "retention.hours"
    with pytest.raises(InvalidConfig) as missing:
        validate({"retention.ms": None})
    assert missing.value.reason == "a value is required"


def test_an_unknown_name_is_refused_in_kafkas_words_with_its_value() -> None:
    """LogConfig.validateNames: every name is checked before any value, so an unknown name is
    what is answered, "Unknown topic config name: NAME" (admin clients show the message)."""
    for configs in ({"bogus.config": "1"}, {"retention.ms": "soon", "bogus.config": "1"}, {"bogus.config": "1", "segment.bytes": "1"}):
        with pytest.raises(UnknownConfig) as unknown:
            validate(configs)
        assert (str(unknown.value), unknown.value.name, unknown.value.value) == ("Unknown topic config name: bogus.config", "bogus.config", "1")
    for ops in ([("bogus.config", AlterOp.SET, "1")], [("segment.bytes", AlterOp.SET, "tiny"), ("bogus.config", AlterOp.SET, "1")]):
        with pytest.raises(UnknownConfig) as unknown:
            apply_incremental({}, ops)
        assert (str(unknown.value), unknown.value.value) == ("Unknown topic config name: bogus.config", "1")


def test_min_compaction_lag_must_not_exceed_max() -> None:
    with pytest.raises(InvalidConfig) as refused:
        validate({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
    assert refused.value.name == "min.compaction.lag.ms"
    assert validate({"min.compaction.lag.ms": "5", "max.compaction.lag.ms": "5"})


def test_effective_prefers_topic_then_broker_then_kafka() -> None:
    values = effective({"retention.ms": "1000"}, {"retention.ms": "2000", "segment.bytes": "4096"})
    assert (values["retention.ms"], values["segment.bytes"], values["max.message.bytes"]) == ("1000", "4096", "1048588")
    assert set(values) == set(TOPIC_CONFIGS)


def test_describe_reports_every_config_with_its_source_and_type() -> None:
    entries = {e.name: e for e in describe({"retention.ms": "1000"}, {"segment.bytes": "4096"})}
    assert list(entries) == list(TOPIC_CONFIGS)
    assert (entries["retention.ms"].value, entries["retention.ms"].source, entries["retention.ms"].is_default) == ("1000", ConfigSource.TOPIC_CONFIG, False)
    assert (entries["segment.bytes"].value, entries["segment.bytes"].source) == ("4096", ConfigSource.STATIC_BROKER_CONFIG)
    assert (entries["cleanup.policy"].source, entries["cleanup.policy"].is_default, entries["cleanup.policy"].type) == (ConfigSource.DEFAULT_CONFIG, True, ConfigType.LIST)
    assert entries["retention.ms"].type is ConfigType.LONG and entries["segment.bytes"].type is ConfigType.INT
    assert entries["min.cleanable.dirty.ratio"].type is ConfigType.DOUBLE
    assert (entries["compression.type"].value, entries["compression.type"].type) == ("producer", ConfigType.STRING)
    assert (entries["preallocate"].type, entries["leader.replication.throttled.replicas"].type) == (ConfigType.BOOLEAN, ConfigType.LIST)
    assert all(e.doc for e in entries.values())
    assert not any(e.read_only or e.is_sensitive for e in entries.values())  # as Kafka reports topic configs
    untouched = {name: e.value for name, e in entries.items() if name not in ("retention.ms", "segment.bytes")}
    assert untouched == {name: d.default for name, d in TOPIC_CONFIGS.items() if name not in ("retention.ms", "segment.bytes")}


def test_describe_synonyms_are_kafkas() -> None:
    """ConfigHelper.createTopicConfigEntry: the topic's value, then the broker's default under
    Kafka's broker name, then that broker config's built-in default when it has one."""
    topic = {"retention.ms": "1000", "max.message.bytes": "2048", "remote.storage.enable": "false"}
    broker = {"retention.ms": "2000", "segment.bytes": "4096", "local.retention.ms": "-2"}
    entries = {e.name: e for e in describe(topic, broker)}

    def synonyms(name: str) -> list[tuple[str, str, ConfigSource]]:
        return [(s.name, s.value, s.source) for s in entries[name].synonyms]

    assert synonyms("retention.ms") == [
        ("retention.ms", "1000", ConfigSource.TOPIC_CONFIG),
        ("log.retention.ms", "2000", ConfigSource.STATIC_BROKER_CONFIG),
    ]  # log.retention.ms has no built-in default in Kafka (log.retention.hours has)
    assert synonyms("max.message.bytes") == [
        ("max.message.bytes", "2048", ConfigSource.TOPIC_CONFIG),
        ("message.max.bytes", "1048588", ConfigSource.DEFAULT_CONFIG),
    ]
    assert synonyms("segment.bytes") == [
        ("log.segment.bytes", "4096", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.segment.bytes", "1073741824", ConfigSource.DEFAULT_CONFIG),
    ]
    assert synonyms("local.retention.ms") == [
        ("log.local.retention.ms", "-2", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.local.retention.ms", "0", ConfigSource.DEFAULT_CONFIG),
    ]
    assert synonyms("compression.type") == [("compression.type", "producer", ConfigSource.DEFAULT_CONFIG)]
    assert synonyms("segment.ms") == [] and entries["segment.ms"].source is ConfigSource.DEFAULT_CONFIG
    assert synonyms("remote.storage.enable") == [("remote.storage.enable", "false", ConfigSource.TOPIC_CONFIG)]
    assert synonyms("leader.replication.throttled.replicas") == []
    assert entries["leader.replication.throttled.replicas"].source is ConfigSource.DEFAULT_CONFIG
    # Configs with no broker synonym in Kafka still show a Diskless broker default as static.
    static = {e.name: e for e in describe({}, {"remote.storage.enable": "false"})}["remote.storage.enable"]
    assert (static.value, static.source, [(s.name, s.source) for s in static.synonyms]) == (
        "false", ConfigSource.STATIC_BROKER_CONFIG, [("remote.storage.enable", ConfigSource.STATIC_BROKER_CONFIG)]
    )


def test_incremental_set_and_delete() -> None:
    current = {"retention.ms": "1000", "segment.bytes": "4096"}
    updated = apply_incremental(current, [("retention.ms", AlterOp.SET, "2000"), ("segment.bytes", AlterOp.DELETE, None), ("flush.ms", AlterOp.DELETE, None)])
    assert updated == {"retention.ms": "2000"}
    assert current == {"retention.ms": "1000", "segment.bytes": "4096"}  # not modified in place


def test_incremental_result_is_validated_as_a_whole() -> None:
    with pytest.raises(InvalidConfig) as refused:
        apply_incremental({}, [("retention.ms", AlterOp.SET, "2000"), ("segment.bytes", AlterOp.SET, "tiny")])
    assert refused.value.name == "segment.bytes"
    with pytest.raises(InvalidConfig):
        apply_incremental({}, [("retention.ms", AlterOp.SET, None)])
    with pytest.raises(UnknownConfig):
        apply_incremental({}, [("no.such", AlterOp.DELETE, None)])


def test_compression_type_is_set_and_deleted_incrementally() -> None:
    updated = apply_incremental({}, [("compression.type", AlterOp.SET, "zstd")])
    assert updated == {"compression.type": "zstd"}
    assert effective(updated, {"compression.type": "lz4"})["compression.type"] == "zstd"
    assert effective(apply_incremental(updated, [("compression.type", AlterOp.DELETE, None)]), {"compression.type": "lz4"})["compression.type"] == "lz4"
    with pytest.raises(InvalidConfig):
        apply_incremental({}, [("compression.type", AlterOp.SET, "brotli")])


def test_append_and_subtract_apply_to_list_configs_only() -> None:
    assert apply_incremental({}, [("cleanup.policy", AlterOp.APPEND, "delete")]) == {"cleanup.policy": "delete"}
    assert apply_incremental({"cleanup.policy": "delete"}, [("cleanup.policy", AlterOp.APPEND, "compact")]) == {"cleanup.policy": "delete,compact"}
    with pytest.raises(InvalidConfig):
        apply_incremental({}, [("cleanup.policy", AlterOp.APPEND, "shred")])
    with pytest.raises(InvalidConfig):  # nothing left
        apply_incremental({}, [("cleanup.policy", AlterOp.SUBTRACT, "delete")])
    for op in (AlterOp.APPEND, AlterOp.SUBTRACT):
        with pytest.raises(InvalidConfig) as refused:
            apply_incremental({}, [("retention.ms", op, "5")])
        assert "list configs only" in refused.value.reason
