"""Dynamic broker configs (diskless/broker/dynamic_broker_configs.py): which names may change at
run time, their validation, and the topic defaults the levels make."""

from __future__ import annotations

import pytest

from diskless.broker import dynamic_broker_configs as dynamic
from diskless.broker.compaction.config import CleanerConfig
from diskless.broker.topic_configs import AlterOp, InvalidConfig


def test_the_log_synonyms_of_topic_configs_are_dynamic() -> None:
    assert dynamic.DYNAMIC["log.retention.ms"] == "retention.ms"
    assert dynamic.DYNAMIC["message.max.bytes"] == "max.message.bytes"
    assert "node.id" not in dynamic.DYNAMIC


def test_incremental_and_legacy_changes() -> None:
    current = {"log.retention.ms": "1000"}
    assert dynamic.apply(current, [("log.segment.bytes", AlterOp.SET, "1048576"), ("log.retention.ms", AlterOp.DELETE, None)], None) == {
        "log.segment.bytes": "1048576"
    }
    assert dynamic.apply(current, None, [("message.max.bytes", "2000")]) == {"message.max.bytes": "2000"}


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ([("node.id", AlterOp.SET, "3")], "Cannot update these configs dynamically: Set(node.id)"),
        ([("num.partitions", AlterOp.SET, "3"), ("auto.create.topics.enable", AlterOp.SET, "false"), ("max.connections", AlterOp.SET, "5")],
         "Cannot update these configs dynamically: Set(auto.create.topics.enable, num.partitions)"),
        ([("log.cleaner.enable", AlterOp.SET, "false")], "Cannot update these configs dynamically: Set(log.cleaner.enable)"),
        ([("log.retention.ms", AlterOp.SET, "-7")], "Invalid value -7 for configuration log.retention.ms: must be between -1 and 9223372036854775807"),
        ([("max.connections", AlterOp.SET, "-1")], "Invalid value -1 for configuration max.connections: Value must be at least 0"),
        ([("max.connections", AlterOp.SET, "many")], "Invalid value many for configuration max.connections: Not a number of type INT"),
        ([("max.connections.per.ip", AlterOp.SET, "2147483648")], "Invalid value 2147483648 for configuration max.connections.per.ip: Not a number of type INT"),
        ([("max.connections.per.ip", AlterOp.SET, "0")],
         "max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides property is set."),
        ([("log.cleaner.threads", AlterOp.SET, "0")], "Log cleaner threads should be at least 1"),
        ([("log.cleaner.threads", AlterOp.SET, "3")], "Log cleaner threads cannot be increased to more than double the current value 1"),
        ([("log.cleaner.backoff.ms", AlterOp.SET, "-1")], "Invalid value -1 for configuration log.cleaner.backoff.ms: Value must be at least 0"),
        ([("log.cleaner.io.max.bytes.per.second", AlterOp.SET, "0")],
         "invalid value 0.0 for log.cleaner.io.max.bytes.per.second: must be positive"),
    ],
)  # fmt: skip
def test_refused_changes_are_kafkas_invalid_request(ops, message) -> None:
    with pytest.raises(dynamic.BrokerConfigRefused) as refused:
        dynamic.apply({}, ops, None, running={"log.cleaner.threads": "1"})
    assert str(refused.value) == message
    assert isinstance(refused.value, ValueError)  # the handler's INVALID_REQUEST


def test_an_operation_that_does_not_apply_is_invalid_config() -> None:
    with pytest.raises(InvalidConfig, match="APPEND"):
        dynamic.apply({}, [("log.cleanup.policy", AlterOp.APPEND, "compact")], None)


def test_the_brokers_own_settings() -> None:
    ops = [("max.connections.per.ip", AlterOp.SET, "3"), ("log.cleaner.threads", AlterOp.SET, "2"), ("log.cleaner.backoff.ms", AlterOp.SET, "50")]
    assert dynamic.apply({}, ops, None, running={"log.cleaner.threads": "1"}) == {
        "max.connections.per.ip": "3", "log.cleaner.threads": "2", "log.cleaner.backoff.ms": "50",
    }  # fmt: skip
    static = {"max.connections": "100", "max.connections.per.ip": "2147483647"}
    values = dynamic.broker_values(static, {"max.connections.per.ip": "10", "log.cleaner.threads": "2"}, {"max.connections.per.ip": "3"})
    assert values == {
        "max.connections": "100", "max.connections.per.ip": "3", "max.connections.per.ip.overrides": "",
        "max.connection.creation.rate": "2147483647", "log.cleaner.threads": "2", "log.cleaner.dedupe.buffer.size": "134217728",
        "log.cleaner.io.max.bytes.per.second": "1.7976931348623157E308", "log.cleaner.backoff.ms": "15000",
        "remote.log.manager.fetch.max.bytes.per.second": "9223372036854775807",
    }  # fmt: skip
    cleaner = dynamic.cleaner_config(CleanerConfig(backoff_ms=100), {**values, "log.cleaner.io.max.bytes.per.second": "1048576.0"})
    assert cleaner == CleanerConfig(threads=2, backoff_ms=15000, io_max_bytes_per_second=1048576.0)
    with pytest.raises(dynamic.BrokerConfigRefused, match="Value must be at least 1"):  # KIP-956's bound
        dynamic.apply({}, [("remote.log.manager.fetch.max.bytes.per.second", AlterOp.SET, "0")], None)
    # Their names are not topic defaults: no topic config follows them.
    assert dynamic.topic_defaults({}, {"max.connections": "5"}, {"log.cleaner.threads": "2"}) == {}


def test_a_brokers_own_value_wins_over_the_cluster_default_over_the_static_one() -> None:
    static = {"retention.ms": "1", "segment.bytes": "2000"}
    defaults = dynamic.topic_defaults(static, {"log.retention.ms": "10", "log.segment.bytes": "3000"}, {"log.retention.ms": "100"})
    assert defaults == {"retention.ms": "100", "segment.bytes": "3000"}
