"""The topic configs a partition's leader applies above its local log, parsed once per change."""

from __future__ import annotations

from dataclasses import dataclass, replace

from hot_tier import LogConfig

from ..compaction.config import CompactionRules


@dataclass(frozen=True, slots=True)
class PartitionRules:
    """The topic configs the broker applies to a partition above its local log."""

    max_message_bytes: int
    log_append_time: bool
    tiered: bool  # remote.storage.enable
    retention: tuple[int, int]  # retention.ms, retention.bytes
    local_retention: tuple[int, int]  # local.retention.ms, local.retention.bytes (-2 resolved)
    compression_type: str = "producer"  # compression.type: a codec name, or keep the producer's
    # cleanup.policy has compact: records need keys and the cleaner runs (compaction/). Tiered,
    # its segments are uploaded as written and their local copies kept, where the cleaner
    # compacts them once they are in the bucket, whose copies the cleaned ones then replace
    # (compaction/bucket.py); `compact` alone retains everything.
    compaction: CompactionRules | None = None
    # message.timestamp.before.max.ms / after.max.ms: CreateTime timestamps refused past them (timestamps.py).
    timestamp_bounds: tuple[int, int] = (2**63 - 1, 2**63 - 1)

    @classmethod
    def from_configs(cls, configs: dict[str, str]) -> PartitionRules:
        compaction = CompactionRules.from_configs(configs)
        compact_only = compaction is not None and not compaction.delete  # Kafka: no retention then
        retention = (-1, -1) if compact_only else (int(configs["retention.ms"]), int(configs["retention.bytes"]))
        local_ms, local_bytes = int(configs["local.retention.ms"]), int(configs["local.retention.bytes"])
        if compaction is not None:
            local_ms = local_bytes = -1  # the cleaner works on the local copies
        return cls(
            max_message_bytes=int(configs["max.message.bytes"]),
            log_append_time=configs["message.timestamp.type"] == "LogAppendTime",
            tiered=configs["remote.storage.enable"] == "true",
            retention=retention,
            local_retention=(retention[0] if local_ms == -2 else local_ms, retention[1] if local_bytes == -2 else local_bytes),
            compression_type=configs.get("compression.type", "producer"),
            compaction=compaction,
            timestamp_bounds=(int(configs["message.timestamp.before.max.ms"]), int(configs["message.timestamp.after.max.ms"])),
        )

    def log_config(self, configs: dict[str, str]) -> LogConfig:
        """The local log's config: for tiered topics, tiering decides what leaves the disk."""
        config = LogConfig.from_topic_configs(configs)
        compact_only = self.compaction is not None and not self.compaction.delete  # Kafka: no retention then
        return replace(config, retention_ms=-1, retention_bytes=-1) if self.tiered or compact_only else config
