"""Per-topic settings of the local log: Kafka's topic configs, snake case, units in names.

Defaults and allowed ranges are Kafka's (LogConfig / TopicConfig). Parsed once, by the broker
from CreateTopics / IncrementalAlterConfigs; the log reads the fields, never the raw strings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from .errors import InvalidConfig

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1073741824  # segment.bytes: roll when the active segment would pass this
    segment_ms: int = 604800000  # segment.ms: roll a non-empty segment this old
    segment_index_bytes: int = 10485760  # segment.index.bytes: max size of each index; full -> roll
    index_interval_bytes: int = 4096  # index.interval.bytes: bytes of log between index entries
    retention_ms: int = 604800000  # retention.ms: -1 = unlimited
    retention_bytes: int = -1  # retention.bytes: -1 = unlimited
    flush_messages: int = INT64_MAX  # flush.messages: fsync after this many unflushed records
    flush_ms: int = INT64_MAX  # flush.ms: fsync when the last one is this old
    file_delete_delay_ms: int = 60000  # file.delete.delay.ms: kept for compatibility, see Log

    def __post_init__(self) -> None:
        for name, low, high in _RANGES:
            value = getattr(self, name)
            if type(value) is not int:
                raise InvalidConfig(_KAFKA_NAMES[name], value, "must be an integer")
            if not low <= value <= high:
                raise InvalidConfig(_KAFKA_NAMES[name], value, f"must be in [{low}, {high}]")

    @classmethod
    def from_topic_configs(cls, configs: Mapping[str, str], base: LogConfig | None = None) -> LogConfig:
        """Read Kafka's dotted names ("segment.bytes", "retention.ms", ...) over `base`'s values.

        Unknown keys (other packages' configs such as cleanup.policy) are ignored; a known key
        whose value is not an integer raises InvalidConfig.
        """
        values = {f.name: getattr(base or cls(), f.name) for f in fields(cls)}
        for name, kafka_name in _KAFKA_NAMES.items():
            raw = configs.get(kafka_name)
            if raw is None:
                continue
            try:
                values[name] = int(str(raw).strip())
            except ValueError:
                raise InvalidConfig(kafka_name, raw, "must be an integer") from None
        return cls(**values)

    def to_topic_configs(self) -> dict[str, str]:
        """The inverse of from_topic_configs, for DescribeConfigs."""
        return {kafka_name: str(getattr(self, name)) for name, kafka_name in _KAFKA_NAMES.items()}


_KAFKA_NAMES = {
    "segment_bytes": "segment.bytes",
    "segment_ms": "segment.ms",
    "segment_index_bytes": "segment.index.bytes",
    "index_interval_bytes": "index.interval.bytes",
    "retention_ms": "retention.ms",
    "retention_bytes": "retention.bytes",
    "flush_messages": "flush.messages",
    "flush_ms": "flush.ms",
    "file_delete_delay_ms": "file.delete.delay.ms",
}

# Kafka's validators. segment.bytes stays an int32 so every position fits an index entry.
_RANGES = (
    ("segment_bytes", 14, INT32_MAX),
    ("segment_ms", 1, INT64_MAX),
    ("segment_index_bytes", 4, INT32_MAX),
    ("index_interval_bytes", 0, INT32_MAX),
    ("retention_ms", -1, INT64_MAX),
    ("retention_bytes", -(2**63), INT64_MAX),
    ("flush_messages", 1, INT64_MAX),
    ("flush_ms", 0, INT64_MAX),
    ("file_delete_delay_ms", 0, INT64_MAX),
)
