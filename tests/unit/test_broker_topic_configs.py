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

# Kafka's defaults for the configs the broker knows (LogConfig / ServerLogConfigs), except
# local.retention.ms: Kafka's is -2 (= retention.ms); Diskless drops local copies once they are
# in the bucket.
KAFKA_DEFAULTS = {
    "segment.bytes": "1073741824",
    "segment.ms": "604800000",
    "segment.index.bytes": "10485760",
    "retention.ms": "604800000",
    "retention.bytes": "-1",
    "local.retention.bytes": "-2",
    "cleanup.policy": "delete",
    "max.message.bytes": "1048588",
    "message.timestamp.type": "CreateTime",
    "index.interval.bytes": "4096",
    "flush.messages": str(LONG_MAX),
    "flush.ms": str(LONG_MAX),
}


def test_defaults_are_kafkas_and_valid() -> None:
    defaults = {name: d.default for name, d in TOPIC_CONFIGS.items()}
    assert {name: defaults[name] for name in KAFKA_DEFAULTS} == KAFKA_DEFAULTS
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
        ("cleanup.policy", "compact"),
        ("cleanup.policy", "delete,compact"),
        ("cleanup.policy", ""),
        ("max.message.bytes", "-1"),
        ("message.timestamp.type", "createtime"),
        ("flush.messages", "0"),
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
        ("message.timestamp.type", "LogAppendTime"),
        ("remote.storage.enable", "false"),
        ("max.message.bytes", "0"),
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
    assert all(e.doc for e in entries.values())


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


def test_append_and_subtract_apply_to_list_configs_only() -> None:
    assert apply_incremental({}, [("cleanup.policy", AlterOp.APPEND, "delete")]) == {"cleanup.policy": "delete"}
    with pytest.raises(InvalidConfig):  # compaction is not supported, even appended
        apply_incremental({}, [("cleanup.policy", AlterOp.APPEND, "compact")])
    with pytest.raises(InvalidConfig):  # nothing left
        apply_incremental({}, [("cleanup.policy", AlterOp.SUBTRACT, "delete")])
    for op in (AlterOp.APPEND, AlterOp.SUBTRACT):
        with pytest.raises(InvalidConfig) as refused:
            apply_incremental({}, [("retention.ms", op, "5")])
        assert "list configs only" in refused.value.reason
