"""Dynamic broker configs (diskless/broker/dynamic_broker_configs.py): which names may change at
run time, their validation, and the topic defaults the levels make."""

from __future__ import annotations

import pytest

from diskless.broker import dynamic_broker_configs as dynamic
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
    ("ops", "reason"),
    [
        ([("node.id", AlterOp.SET, "3")], "Cannot update these configs dynamically: node.id"),
        ([("log.retention.ms", AlterOp.SET, "-7")], "log.retention.ms"),
        ([("log.cleanup.policy", AlterOp.APPEND, "compact")], "APPEND"),
    ],
)
def test_refused_changes(ops, reason) -> None:
    with pytest.raises(InvalidConfig, match=reason.split(":")[0] if ":" in reason else None):
        dynamic.apply({}, ops, None)


def test_a_brokers_own_value_wins_over_the_cluster_default_over_the_static_one() -> None:
    static = {"retention.ms": "1", "segment.bytes": "2000"}
    defaults = dynamic.topic_defaults(static, {"log.retention.ms": "10", "log.segment.bytes": "3000"}, {"log.retention.ms": "100"})
    assert defaults == {"retention.ms": "100", "segment.bytes": "3000"}
