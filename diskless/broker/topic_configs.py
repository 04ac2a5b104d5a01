"""Topic configs: Kafka's names, defaults, types and validation (sans-IO).

A topic stores only the configs set on it; everything else comes from the broker's defaults
(`--topic-default`, a `[topic_defaults]` table), else from Kafka's own. DescribeConfigs reports
every topic config Kafka 4.x reports (LogConfig's non-internal configs), each with its source
and synonyms as Kafka's ConfigHelper.createTopicConfigEntry builds them:

    synonyms  the topic's own value first (TOPIC_CONFIG, under the topic config's name), then
              the broker default under Kafka's broker name for it (e.g. log.retention.ms) at
              every level it is set, in ConfigHelper.configSynonyms' order: this broker's
              dynamic value (DYNAMIC_BROKER_CONFIG), the cluster-wide dynamic default
              (DYNAMIC_DEFAULT_BROKER_CONFIG), the static value the broker started with
              (STATIC_BROKER_CONFIG); then Kafka's built-in default of that broker config
              (DEFAULT_CONFIG) when it has one; configs without a broker synonym
              (remote.storage.enable, the throttled-replica lists) have none
    source    the first synonym's source, DEFAULT_CONFIG when there is none

The same broker-level synonyms make the entries of the log.* configs of a BROKER resource
(`broker_synonyms`, handlers/configs.py).

Diskless differs from Kafka on purpose in two defaults: remote.storage.enable is true and
local.retention.ms is 0 (segments leave the disk once they are in the bucket). Configs whose
behaviour the broker cannot offer refuse any other value than the one it honours
(remote.log.copy.disable=true, remote.log.delete.on.disable=true). cleanup.policy takes
delete, compact or both (compaction/: compacted topics keep their segments on local disk for
now, whatever remote.storage.enable says).
Configs accepted but not acted on yet: compression.*.level (recompression uses each codec's
default level), and those that have no meaning without replicas (min.insync.replicas,
unclean.leader.election.enable, *.replication.throttled.replicas, preallocate,
segment.jitter.ms).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import IntEnum

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


class ConfigType(IntEnum):
    """Kafka's DescribeConfigs config types (v3+)."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    LONG = 5
    DOUBLE = 6
    LIST = 7


class ConfigSource(IntEnum):
    """Kafka's DescribeConfigs config sources (the admin client calls 1 DYNAMIC_TOPIC_CONFIG)."""

    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    GROUP_CONFIG = 8


class InvalidConfig(Exception):
    def __init__(self, name: str, value: str | None, reason: str, message: str | None = None) -> None:
        super().__init__(message or f"invalid value {value!r} for configuration {name}: {reason}")
        self.name = name
        self.value = value
        self.reason = reason


class UnknownConfig(InvalidConfig):
    """A name that is no topic config. The message is Kafka's (LogConfig.validateNames), which
    admin clients show; `value` is the one given with it (None for a DELETE)."""

    def __init__(self, name: str, value: str | None = None) -> None:
        super().__init__(name, value, "unknown topic config name", f"Unknown topic config name: {name}")


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One topic config. `synonym` is Kafka's broker config for its default (the first of
    ServerTopicConfigSynonyms' list); `synonym_default` says whether Kafka's broker config has a
    built-in default (log.retention.ms has none: its default lives in log.retention.hours, a
    lower-priority synonym Kafka's DescribeConfigs does not report)."""

    name: str
    default: str
    type: ConfigType
    doc: str
    check: Callable[[str], str | None]  # returns a reason when the value is invalid
    synonym: str | None = None
    synonym_default: bool = True


def _int_at_least(low: int, high: int = INT_MAX) -> Callable[[str], str | None]:
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


_BOOLEAN = _one_of("true", "false")


def _only(honoured: str, reason: str) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        if value == honoured:
            return None
        return reason if value in ("true", "false") else "must be true or false"

    return check


def _cleanup_policy(value: str) -> str | None:
    """Kafka's ValidList.in("compact", "delete"): each item one of them, at least one."""
    policies = [p.strip() for p in value.split(",") if p.strip()]
    if not policies or any(p not in ("compact", "delete") for p in policies):
        return "must be a list of compact, delete"
    return None


def _gzip_level(value: str) -> str | None:
    reason = _int_at_least(-1, 9)(value)
    return reason or ("must be -1 (zlib's default) or between 1 and 9" if int(value) == 0 else None)


def _ratio(value: str) -> str | None:
    try:
        number = float(value)
    except ValueError:
        return "not a number"
    return None if 0.0 <= number <= 1.0 else "must be between 0 and 1"


def _throttled_replicas(value: str) -> str | None:
    """Kafka's ThrottledReplicaListValidator: empty, "*", or partition:broker pairs."""
    items = [i.strip() for i in value.split(",") if i.strip()]
    if items == ["*"] or not items:
        return None
    for item in items:
        partition, sep, broker = item.partition(":")
        if not (sep and partition.isdigit() and broker.isdigit()):
            return "must be empty, * or a list of partition:broker_id pairs"
    return None


COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

# Kafka 4.x's topic configs (LogConfig), sorted by name as Kafka's configNames() is. Defaults
# are Kafka's (LogConfig / ServerLogConfigs) except the two Diskless changes named above.
TOPIC_CONFIGS: Mapping[str, ConfigDef] = {
    d.name: d
    for d in (
        ConfigDef("cleanup.policy", "delete", ConfigType.LIST, "delete: segments go by retention.ms / retention.bytes; compact: the log keeps the last record of each key (its local copies are compacted, the bucket keeps them as written); or both.", _cleanup_policy, "log.cleanup.policy"),
        ConfigDef("compression.gzip.level", "-1", ConfigType.INT, "gzip level when compression.type is gzip (accepted; recompression uses zlib's default).", _gzip_level, "compression.gzip.level"),
        ConfigDef("compression.lz4.level", "9", ConfigType.INT, "lz4 level when compression.type is lz4 (accepted; recompression uses lz4's default).", _int_at_least(1, 17), "compression.lz4.level"),
        ConfigDef("compression.type", "producer", ConfigType.STRING, "Codec of the stored batches: producer keeps the producer's; uncompressed, gzip, snappy, lz4 or zstd recompresses batches that differ.", _one_of(*COMPRESSION_TYPES), "compression.type"),
        ConfigDef("compression.zstd.level", "3", ConfigType.INT, "zstd level when compression.type is zstd (accepted; recompression uses level 3).", _int_at_least(-131072, 22), "compression.zstd.level"),
        ConfigDef("delete.retention.ms", "86400000", ConfigType.LONG, "How long a tombstone (a record with a null value) of a compacted topic is kept once it is cleaned.", _long_at_least(0), "log.cleaner.delete.retention.ms"),
        ConfigDef("file.delete.delay.ms", "60000", ConfigType.LONG, "Wait before a deleted segment's files are removed from the file system.", _long_at_least(0), "log.segment.delete.delay.ms"),
        ConfigDef("flush.messages", str(LONG_MAX), ConfigType.LONG, "fsync the log after this many messages (default: leave it to the OS).", _long_at_least(1), "log.flush.interval.messages"),
        ConfigDef("flush.ms", str(LONG_MAX), ConfigType.LONG, "fsync the log after this long (default: leave it to the OS).", _long_at_least(0), "log.flush.interval.ms", synonym_default=False),
        ConfigDef("follower.replication.throttled.replicas", "", ConfigType.LIST, "Replicas throttled on the follower side (no effect: the bucket is the replica).", _throttled_replicas),
        ConfigDef("index.interval.bytes", "4096", ConfigType.INT, "Bytes of log between two entries of the sparse indexes.", _int_at_least(0), "log.index.interval.bytes"),
        ConfigDef("leader.replication.throttled.replicas", "", ConfigType.LIST, "Replicas throttled on the leader side (no effect: the bucket is the replica).", _throttled_replicas),
        ConfigDef("local.retention.bytes", "-2", ConfigType.LONG, "With tiering, local bytes kept per partition after upload (-2: retention.bytes).", _long_at_least(-2), "log.local.retention.bytes"),
        ConfigDef("local.retention.ms", "0", ConfigType.LONG, "With tiering, how long segments stay on local disk once in the bucket (0: drop at once; -2: retention.ms).", _long_at_least(-2), "log.local.retention.ms"),
        ConfigDef("max.compaction.lag.ms", str(LONG_MAX), ConfigType.LONG, "Longest a record of a compacted topic stays uncompacted.", _long_at_least(1), "log.cleaner.max.compaction.lag.ms"),
        ConfigDef("max.message.bytes", "1048588", ConfigType.INT, "Largest record batch the broker accepts for this topic (after recompression).", _int_at_least(0), "message.max.bytes"),
        ConfigDef("message.timestamp.after.max.ms", "3600000", ConfigType.LONG, "How far ahead of the broker's clock a CreateTime timestamp may be; produce refuses a record past it (INVALID_TIMESTAMP).", _long_at_least(0), "log.message.timestamp.after.max.ms"),
        ConfigDef("message.timestamp.before.max.ms", str(LONG_MAX), ConfigType.LONG, "How far behind the broker's clock a CreateTime timestamp may be; produce refuses a record past it (INVALID_TIMESTAMP).", _long_at_least(0), "log.message.timestamp.before.max.ms"),
        ConfigDef("message.timestamp.type", "CreateTime", ConfigType.STRING, "CreateTime keeps the producer's timestamps; LogAppendTime stamps batches on append.", _one_of("CreateTime", "LogAppendTime"), "log.message.timestamp.type"),
        ConfigDef("min.cleanable.dirty.ratio", "0.5", ConfigType.DOUBLE, "Share of a compacted log not yet cleaned that triggers a cleaning.", _ratio, "log.cleaner.min.cleanable.ratio"),
        ConfigDef("min.compaction.lag.ms", "0", ConfigType.LONG, "Shortest a record of a compacted topic stays uncompacted.", _long_at_least(0), "log.cleaner.min.compaction.lag.ms"),
        ConfigDef("min.insync.replicas", "1", ConfigType.INT, "Replicas that must acknowledge acks=all (no effect: durability is the bucket's).", _int_at_least(1), "min.insync.replicas"),
        ConfigDef("preallocate", "false", ConfigType.BOOLEAN, "Preallocate segment files (no effect: segments grow append-only).", _BOOLEAN, "log.preallocate"),
        ConfigDef("remote.log.copy.disable", "false", ConfigType.BOOLEAN, "Stop uploading segments of a tiered topic (only false is supported).", _only("false", "turning tiered uploads read-only is not supported")),
        ConfigDef("remote.log.delete.on.disable", "false", ConfigType.BOOLEAN, "Delete remote data when tiering is disabled (only false is supported).", _only("false", "deleting remote data on disable is not supported")),
        ConfigDef("remote.storage.enable", "true", ConfigType.BOOLEAN, "Upload rolled segments to the object store.", _BOOLEAN),
        ConfigDef("retention.bytes", "-1", ConfigType.LONG, "Delete the oldest segments while a partition is larger than this (-1: no limit).", _long_at_least(-1), "log.retention.bytes"),
        ConfigDef("retention.ms", "604800000", ConfigType.LONG, "Delete segments whose newest record is older than this (-1: keep forever).", _long_at_least(-1), "log.retention.ms", synonym_default=False),
        ConfigDef("segment.bytes", "1073741824", ConfigType.INT, "Roll a new segment once the active one reaches this size.", _int_at_least(14), "log.segment.bytes"),
        ConfigDef("segment.index.bytes", "10485760", ConfigType.INT, "Maximum size of a segment's offset index; a full index rolls the segment.", _int_at_least(8), "log.index.size.max.bytes"),
        ConfigDef("segment.jitter.ms", "0", ConfigType.LONG, "Random jitter subtracted from segment.ms (accepted; not applied).", _long_at_least(0), "log.roll.jitter.ms", synonym_default=False),
        ConfigDef("segment.ms", "604800000", ConfigType.LONG, "Roll a new segment after this long, even if it is not full.", _long_at_least(1), "log.roll.ms", synonym_default=False),
        ConfigDef("unclean.leader.election.enable", "false", ConfigType.BOOLEAN, "Elect an out-of-sync replica (no effect: every leader reads the bucket).", _BOOLEAN, "unclean.leader.election.enable"),
    )
}


def validate(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Check names and values; return them as strings. Raises InvalidConfig / UnknownConfig.
    Every name is checked before any value, as Kafka's LogConfig.validate (validateNames, then
    validateValues): an unknown name is what is answered, whatever the other values."""
    for name, value in configs.items():
        if name not in TOPIC_CONFIGS:
            raise UnknownConfig(name, value)
    checked: dict[str, str] = {}
    for name, value in configs.items():
        definition = TOPIC_CONFIGS[name]
        if value is None:
            raise InvalidConfig(name, value, "a value is required")
        reason = definition.check(value)
        if reason is not None:
            raise InvalidConfig(name, value, reason)
        checked[name] = value
    low, high = checked.get("min.compaction.lag.ms"), checked.get("max.compaction.lag.ms")
    if low is not None and high is not None and int(low) > int(high):  # Kafka's LogConfig.validateValues
        raise InvalidConfig("min.compaction.lag.ms", low, f"must not exceed max.compaction.lag.ms ({high})")
    return checked


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    name: str
    value: str
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One DescribeConfigs entry. Topic configs are never read-only or sensitive in Kafka."""

    name: str
    value: str
    source: ConfigSource
    type: ConfigType
    doc: str
    synonyms: tuple[ConfigSynonym, ...] = ()
    read_only: bool = False
    is_sensitive: bool = False

    @property
    def is_default(self) -> bool:
        return self.source is ConfigSource.DEFAULT_CONFIG


def effective(topic_configs: Mapping[str, str], broker_defaults: Mapping[str, str]) -> dict[str, str]:
    """Every topic config's value: the topic's own, else the broker's default, else Kafka's."""
    values = {name: d.default for name, d in TOPIC_CONFIGS.items()}
    values.update(broker_defaults)
    values.update(topic_configs)
    return values


# The levels a broker default of a topic config can be set at, highest priority first (Kafka's
# ConfigHelper.configSynonyms): this broker's dynamic configs, the cluster-wide dynamic default,
# the static configs the broker started with.
BROKER_LEVELS = (ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, ConfigSource.STATIC_BROKER_CONFIG)


def broker_synonyms(definition: ConfigDef, levels: Mapping[ConfigSource, Mapping[str, str]]) -> tuple[ConfigSynonym, ...]:
    """The broker-level synonyms of one topic config, highest priority first: its value at each
    of BROKER_LEVELS that sets it (`levels`: source -> values by topic config name), under
    Kafka's broker name for it, then that broker config's built-in default when it has one."""
    name, broker_name = definition.name, definition.synonym or definition.name
    found = [ConfigSynonym(broker_name, levels[s][name], s) for s in BROKER_LEVELS if name in levels.get(s, {})]
    if definition.synonym is not None and definition.synonym_default:
        found.append(ConfigSynonym(definition.synonym, definition.default, ConfigSource.DEFAULT_CONFIG))
    return tuple(found)


def synonyms(
    definition: ConfigDef, topic_configs: Mapping[str, str], broker_defaults: Mapping[str, str],
    default_levels: Mapping[ConfigSource, Mapping[str, str]] | None = None,
) -> tuple[ConfigSynonym, ...]:
    """Kafka's synonym list for one topic config, highest priority first. `default_levels` says
    at which levels the broker defaults are set (dynamic_broker_configs.topic_default_levels;
    `broker_defaults` are then their winners); without it, `broker_defaults` are all static."""
    name = definition.name
    own = (ConfigSynonym(name, topic_configs[name], ConfigSource.TOPIC_CONFIG),) if name in topic_configs else ()
    levels = default_levels if default_levels is not None else {ConfigSource.STATIC_BROKER_CONFIG: broker_defaults}
    return own + broker_synonyms(definition, levels)


def describe(
    topic_configs: Mapping[str, str], broker_defaults: Mapping[str, str], default_levels: Mapping[ConfigSource, Mapping[str, str]] | None = None
) -> list[ConfigEntry]:
    """Every topic config with its value, source and synonyms, in Kafka's (name) order."""
    entries = []
    for name, definition in TOPIC_CONFIGS.items():
        found = synonyms(definition, topic_configs, broker_defaults, default_levels)
        if found:
            value, source = found[0].value, found[0].source
        else:
            value, source = definition.default, ConfigSource.DEFAULT_CONFIG
        entries.append(ConfigEntry(name, value, source, definition.type, definition.doc, found))
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
            raise UnknownConfig(name, value)
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
