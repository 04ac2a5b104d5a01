"""The log cleaner's settings (broker) and a compacted topic's configs (per topic), parsed once.

Names and defaults are Kafka's (CleanerConfig, LogConfig):

    log.cleaner.enable                     true
    log.cleaner.threads                    1       partitions cleaned at the same time
    log.cleaner.dedupe.buffer.size         134217728  bytes of key -> offset map, over all threads
    log.cleaner.io.max.bytes.per.second    1.7976931348623157E308 (no limit): read + written
    log.cleaner.backoff.ms                 15000   sleep when there was nothing to clean

Kafka gives each thread dedupe.buffer.size / threads and fills a map to 90% of it
(log.cleaner.io.buffer.load.factor); an entry of its SkimpyOffsetMap takes 24 bytes (a 16-byte
MD5 of the key and an 8-byte offset). `CleanerConfig.map_entries` does the same arithmetic, so
a setting means the same number of keys per pass as on Kafka.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

DOUBLE_MAX = 1.7976931348623157e308
MAP_ENTRY_BYTES = 24  # Kafka's SkimpyOffsetMap: MD5 of the key (16 bytes) + offset (8 bytes)
MAP_LOAD_FACTOR = 0.9  # log.cleaner.io.buffer.load.factor
LONG_MAX = 2**63 - 1


class InvalidCleanerConfig(ValueError):
    def __init__(self, name: str, value: object, reason: str) -> None:
        super().__init__(f"invalid value {value!r} for {name}: {reason}")
        self.name = name
        self.value = value
        self.reason = reason


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The broker's log.cleaner.* settings."""

    enable: bool = True  # log.cleaner.enable
    threads: int = 1  # log.cleaner.threads
    dedupe_buffer_size: int = 128 * 2**20  # log.cleaner.dedupe.buffer.size (bytes)
    io_max_bytes_per_second: float = DOUBLE_MAX  # log.cleaner.io.max.bytes.per.second
    backoff_ms: int = 15000  # log.cleaner.backoff.ms

    def __post_init__(self) -> None:
        if self.threads < 0:
            raise InvalidCleanerConfig("log.cleaner.threads", self.threads, "must be at least 0")
        if self.dedupe_buffer_size < MAP_ENTRY_BYTES * max(1, self.threads):
            raise InvalidCleanerConfig("log.cleaner.dedupe.buffer.size", self.dedupe_buffer_size, "too small for one key per thread")
        if not self.io_max_bytes_per_second > 0:
            raise InvalidCleanerConfig("log.cleaner.io.max.bytes.per.second", self.io_max_bytes_per_second, "must be positive")
        if self.backoff_ms < 0:
            raise InvalidCleanerConfig("log.cleaner.backoff.ms", self.backoff_ms, "must be at least 0")

    @property
    def map_entries(self) -> int:
        """Keys one cleaning pass may hold (per thread), as Kafka sizes its offset map."""
        per_thread = self.dedupe_buffer_size // max(1, self.threads)
        return max(1, int(per_thread * MAP_LOAD_FACTOR) // MAP_ENTRY_BYTES)

    def broker_configs(self) -> dict[str, str]:
        """The values DescribeConfigs reports for the broker, as Kafka prints them."""
        return {
            "log.cleaner.enable": str(self.enable).lower(),
            "log.cleaner.threads": str(self.threads),
            "log.cleaner.dedupe.buffer.size": str(self.dedupe_buffer_size),
            "log.cleaner.io.max.bytes.per.second": _java_double(self.io_max_bytes_per_second),
            "log.cleaner.backoff.ms": str(self.backoff_ms),
        }


def _java_double(value: float) -> str:
    """Java's Double.toString for the values people set (1.7976931348623157E308, 1048576.0)."""
    if value == DOUBLE_MAX:
        return "1.7976931348623157E308"
    text = repr(float(value))
    if "e" in text:
        mantissa, exponent = text.split("e")
        return f"{mantissa if '.' in mantissa else mantissa + '.0'}E{int(exponent)}"
    return text


@dataclass(frozen=True, slots=True)
class CompactionRules:
    """A compacted topic's configs the cleaner reads (cleanup.policy has compact)."""

    delete: bool  # cleanup.policy also has delete: retention applies as well
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms
    max_compaction_lag_ms: int = LONG_MAX  # max.compaction.lag.ms
    delete_retention_ms: int = 86400000  # delete.retention.ms
    file_delete_delay_ms: int = 60000  # file.delete.delay.ms: replaced bucket segments' objects wait this long

    @classmethod
    def from_configs(cls, configs: Mapping[str, str]) -> CompactionRules | None:
        """None for a topic that is not compacted."""
        policies = {p.strip() for p in configs.get("cleanup.policy", "delete").split(",")}
        if "compact" not in policies:
            return None
        return cls(
            delete="delete" in policies,
            min_cleanable_dirty_ratio=float(configs.get("min.cleanable.dirty.ratio", "0.5")),
            min_compaction_lag_ms=int(configs.get("min.compaction.lag.ms", "0")),
            max_compaction_lag_ms=int(configs.get("max.compaction.lag.ms", str(LONG_MAX))),
            delete_retention_ms=int(configs.get("delete.retention.ms", "86400000")),
            file_delete_delay_ms=int(configs.get("file.delete.delay.ms", "60000")),
        )
