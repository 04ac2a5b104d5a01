"""Group configs: the GROUP resource of DescribeConfigs and IncrementalAlterConfigs (KIP-848).

Kafka 4.0's org.apache.kafka.coordinator.group.GroupConfig, for the configs of consumer
groups: a group stores only what was set on it; the rest comes from the broker's
group.consumer.* settings (`GroupConfig` in config.py). A value must lie within the broker's
min and max for it, and the heartbeat interval must stay below the session timeout, else
Kafka answers INVALID_CONFIG. Any group id may be described or altered, existing or not.

Pure: values in, values out; the shell keeps the stored overrides.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .config import GroupConfig

CONSUMER_SESSION_TIMEOUT_MS = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL_MS = "consumer.heartbeat.interval.ms"

_DOCS = {
    CONSUMER_SESSION_TIMEOUT_MS: "The timeout to detect client failures when using the consumer group protocol.",
    CONSUMER_HEARTBEAT_INTERVAL_MS: "The heartbeat interval given to the members of a consumer group.",
}

# IncrementalAlterConfigs operations (AlterConfigOp.OpType).
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


class InvalidGroupConfig(Exception):
    """A group config name or value Kafka refuses with INVALID_CONFIG."""

    def __init__(self, name: str, value: str | None, reason: str) -> None:
        super().__init__(f"invalid value {value!r} for group configuration {name}: {reason}" if value is not None else reason)
        self.name = name
        self.value = value
        self.reason = reason


@dataclass(frozen=True, slots=True)
class GroupConfigEntry:
    name: str
    value: str
    is_default: bool  # DEFAULT_CONFIG when true, GROUP_CONFIG (8) when set on the group
    doc: str


def names() -> tuple[str, ...]:
    return (CONSUMER_HEARTBEAT_INTERVAL_MS, CONSUMER_SESSION_TIMEOUT_MS)


def defaults(config: GroupConfig) -> dict[str, int]:
    return {
        CONSUMER_SESSION_TIMEOUT_MS: config.group_consumer_session_timeout_ms,
        CONSUMER_HEARTBEAT_INTERVAL_MS: config.group_consumer_heartbeat_interval_ms,
    }


def effective(config: GroupConfig, overrides: Mapping[str, str]) -> dict[str, int]:
    """Every group config's value for a group with `overrides` (already validated)."""
    values = defaults(config)
    for name, value in overrides.items():
        values[name] = int(value)
    return values


def describe(config: GroupConfig, overrides: Mapping[str, str]) -> list[GroupConfigEntry]:
    values = effective(config, overrides)
    return [GroupConfigEntry(name, str(values[name]), name not in overrides, _DOCS[name]) for name in names()]


def apply_incremental(
    config: GroupConfig, overrides: Mapping[str, str], ops: Iterable[tuple[str, int, str | None]]
) -> dict[str, str]:
    """The overrides after IncrementalAlterConfigs' (name, operation, value) ops; raises
    InvalidGroupConfig (INVALID_CONFIG) or ValueError (INVALID_REQUEST: APPEND/SUBTRACT on
    a config that is not a list)."""
    updated = dict(overrides)
    for name, op, value in ops:
        if name not in _DOCS:
            raise InvalidGroupConfig(name, value, f"Unknown group config name: {name}")
        if op == SET:
            updated[name] = _parse_int(name, value)
        elif op == DELETE:
            updated.pop(name, None)
        elif op in (APPEND, SUBTRACT):
            raise ValueError(f"Config value append/subtract is not supported for {name}: it is not a list")
        else:
            raise ValueError(f"unknown config operation {op}")
    validate(config, updated)
    return updated


def replace_all(config: GroupConfig, configs: Iterable[tuple[str, str | None]]) -> dict[str, str]:
    """The overrides after a legacy AlterConfigs, which replaces the whole set."""
    updated: dict[str, str] = {}
    for name, value in configs:
        if name not in _DOCS:
            raise InvalidGroupConfig(name, value, f"Unknown group config name: {name}")
        if value is not None:
            updated[name] = _parse_int(name, value)
    validate(config, updated)
    return updated


def validate(config: GroupConfig, overrides: Mapping[str, str]) -> None:
    values = effective(config, overrides)
    session_ms = values[CONSUMER_SESSION_TIMEOUT_MS]
    heartbeat_ms = values[CONSUMER_HEARTBEAT_INTERVAL_MS]
    _within(CONSUMER_SESSION_TIMEOUT_MS, session_ms, "group.consumer.min.session.timeout.ms", config.group_consumer_min_session_timeout_ms,
            "group.consumer.max.session.timeout.ms", config.group_consumer_max_session_timeout_ms)  # fmt: skip
    _within(CONSUMER_HEARTBEAT_INTERVAL_MS, heartbeat_ms, "group.consumer.min.heartbeat.interval.ms", config.group_consumer_min_heartbeat_interval_ms,
            "group.consumer.max.heartbeat.interval.ms", config.group_consumer_max_heartbeat_interval_ms)  # fmt: skip
    if heartbeat_ms >= session_ms:
        raise InvalidGroupConfig(
            CONSUMER_HEARTBEAT_INTERVAL_MS, str(heartbeat_ms), f"{CONSUMER_HEARTBEAT_INTERVAL_MS} must be less than {CONSUMER_SESSION_TIMEOUT_MS}"
        )


def _within(name: str, value: int, min_name: str, min_value: int, max_name: str, max_value: int) -> None:
    if value < min_value:
        raise InvalidGroupConfig(name, str(value), f"{name} must be greater than or equal to {min_name} ({min_value})")
    if value > max_value:
        raise InvalidGroupConfig(name, str(value), f"{name} must be less than or equal to {max_name} ({max_value})")


def _parse_int(name: str, value: str | None) -> str:
    try:
        number = int((value or "").strip())
    except ValueError:
        raise InvalidGroupConfig(name, value, "Expected value to be a 32-bit integer") from None
    if not -(2**31) <= number < 2**31:
        raise InvalidGroupConfig(name, value, "Expected value to be a 32-bit integer")
    if number < 1:
        raise InvalidGroupConfig(name, value, "Value must be at least 1")
    return str(number)
