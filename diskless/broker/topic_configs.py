"""Topic configs: Kafka's names, defaults, types and validation (sans-IO).

A topic stores only the configs set on it; everything else comes from the broker's defaults.
DescribeConfigs reports each config with its source, as Kafka does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import IntEnum

LONG_MAX = 2**63 - 1


class ConfigType(IntEnum):
    """Kafka's DescribeConfigs config types (v3+)."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    LONG = 5
    LIST = 7


class ConfigSource(IntEnum):
    """Kafka's DescribeConfigs config sources."""

    TOPIC_CONFIG = 1
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class InvalidConfig(Exception):
    def __init__(self, name: str, value: str | None, reason: str) -> None:
        super().__init__(f"invalid value {value!r} for configuration {name}: {reason}")
        self.name = name
        self.value = value
        self.reason = reason


class UnknownConfig(InvalidConfig):
    def __init__(self, name: str) -> None:
        super().__init__(name, None, "unknown topic configuration")


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    default: str
    type: ConfigType
    doc: str
    check: Callable[[str], str | None]  # returns a reason when the value is invalid


def _int_at_least(low: int, high: int = 2**31 - 1) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        try:
            number = int(value)
        except ValueError:
            return "not an integer"
        if not low <= number <= high:
            return f"must be between {low} and {high}"
        return None

    return check


def _long_at_least(low: int) -> Callable[[str], str | None]:
    return _int_at_least(low, LONG_MAX)


def _one_of(*allowed: str) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        return None if value in allowed else f"must be one of {', '.join(allowed)}"

    return check


def _cleanup_policy(value: str) -> str | None:
    policies = {p.strip() for p in value.split(",") if p.strip()}
    if policies == {"delete"}:
        return None
    if "compact" in policies:
        return "log compaction is not supported; use cleanup.policy=delete"
    return "must be delete"


TOPIC_CONFIGS: Mapping[str, ConfigDef] = {
    d.name: d
    for d in (
        ConfigDef("segment.bytes", "1073741824", ConfigType.INT, "Roll a new segment once the active one reaches this size.", _int_at_least(14)),
        ConfigDef("segment.ms", "604800000", ConfigType.LONG, "Roll a new segment after this long, even if it is not full.", _long_at_least(1)),
        ConfigDef("segment.index.bytes", "10485760", ConfigType.INT, "Maximum size of a segment's offset index; a full index rolls the segment.", _int_at_least(8)),
        ConfigDef("retention.ms", "604800000", ConfigType.LONG, "Delete segments whose newest record is older than this (-1: keep forever).", _long_at_least(-1)),
        ConfigDef("retention.bytes", "-1", ConfigType.LONG, "Delete the oldest segments while a partition is larger than this (-1: no limit).", _long_at_least(-1)),
        ConfigDef("local.retention.ms", "0", ConfigType.LONG, "With tiering, how long segments stay on local disk once in the bucket (0: drop at once; -2: retention.ms).", _long_at_least(-2)),
        ConfigDef("local.retention.bytes", "-2", ConfigType.LONG, "With tiering, local bytes kept per partition after upload (-2: retention.bytes).", _long_at_least(-2)),
        ConfigDef("remote.storage.enable", "true", ConfigType.BOOLEAN, "Upload rolled segments to the object store.", _one_of("true", "false")),
        ConfigDef("cleanup.policy", "delete", ConfigType.LIST, "Only 'delete' (time and size retention) is supported.", _cleanup_policy),
        ConfigDef("max.message.bytes", "1048588", ConfigType.INT, "Largest record batch the broker accepts for this topic.", _int_at_least(0)),
        ConfigDef("message.timestamp.type", "CreateTime", ConfigType.STRING, "CreateTime keeps the producer's timestamps; LogAppendTime stamps batches on append.", _one_of("CreateTime", "LogAppendTime")),
        ConfigDef("index.interval.bytes", "4096", ConfigType.INT, "Bytes of log between two entries of the sparse indexes.", _int_at_least(0)),
        ConfigDef("flush.messages", str(LONG_MAX), ConfigType.LONG, "fsync the log after this many messages (default: leave it to the OS).", _long_at_least(1)),
        ConfigDef("flush.ms", str(LONG_MAX), ConfigType.LONG, "fsync the log after this long (default: leave it to the OS).", _long_at_least(0)),
    )
}


def validate(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Check names and values; return them as strings. Raises InvalidConfig / UnknownConfig."""
    checked: dict[str, str] = {}
    for name, value in configs.items():
        definition = TOPIC_CONFIGS.get(name)
        if definition is None:
            raise UnknownConfig(name)
        if value is None:
            raise InvalidConfig(name, value, "a value is required")
        reason = definition.check(value)
        if reason is not None:
            raise InvalidConfig(name, value, reason)
        checked[name] = value
    return checked


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str
    source: ConfigSource
    type: ConfigType
    doc: str

    @property
    def is_default(self) -> bool:
        return self.source is ConfigSource.DEFAULT_CONFIG


def effective(topic_configs: Mapping[str, str], broker_defaults: Mapping[str, str]) -> dict[str, str]:
    """Every topic config's value: the topic's own, else the broker's default, else Kafka's."""
    values = {name: d.default for name, d in TOPIC_CONFIGS.items()}
    values.update(broker_defaults)
    values.update(topic_configs)
    return values


def describe(topic_configs: Mapping[str, str], broker_defaults: Mapping[str, str]) -> list[ConfigEntry]:
    entries = []
    for name, definition in TOPIC_CONFIGS.items():
        if name in topic_configs:
            value, source = topic_configs[name], ConfigSource.TOPIC_CONFIG
        elif name in broker_defaults:
            value, source = broker_defaults[name], ConfigSource.STATIC_BROKER_CONFIG
        else:
            value, source = definition.default, ConfigSource.DEFAULT_CONFIG
        entries.append(ConfigEntry(name, value, source, definition.type, definition.doc))
    return entries


class AlterOp(IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


def apply_incremental(current: Mapping[str, str], ops: list[tuple[str, AlterOp, str | None]]) -> dict[str, str]:
    """IncrementalAlterConfigs on a topic's own configs; returns the new set, validated."""
    updated = dict(current)
    for name, op, value in ops:
        definition = TOPIC_CONFIGS.get(name)
        if definition is None:
            raise UnknownConfig(name)
        if op is AlterOp.SET:
            updated[name] = value if value is not None else ""
        elif op is AlterOp.DELETE:
            updated.pop(name, None)
        elif definition.type is not ConfigType.LIST:
            raise InvalidConfig(name, value, f"{op.name} applies to list configs only")
        else:
            items = [i for i in updated.get(name, definition.default).split(",") if i]
            delta = [i for i in (value or "").split(",") if i]
            if op is AlterOp.APPEND:
                items += [i for i in delta if i not in items]
            else:
                items = [i for i in items if i not in delta]
            updated[name] = ",".join(items)
    return validate(updated)
