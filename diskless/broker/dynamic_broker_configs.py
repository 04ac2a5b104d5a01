"""Dynamic broker configs: the broker configs Kafka lets change at run time, set with
IncrementalAlterConfigs or AlterConfigs on a BROKER resource. Sans-IO. Two families:

- the broker-wide defaults of topic configs (Kafka's DynamicLogConfig: every `log.*` synonym of
  a topic config, e.g. log.retention.ms for retention.ms, message.max.bytes for
  max.message.bytes), applied through the topic defaults;
- the broker's own settings this broker has and Kafka reconfigures without a restart
  (`BROKER_DYNAMIC`): max.connections, max.connections.per.ip, max.connections.per.ip.overrides
  and max.connection.creation.rate (Kafka's DynamicConnectionQuota), log.cleaner.threads,
  .dedupe.buffer.size, .io.max.bytes.per.second and .backoff.ms (LogCleaner.ReconfigurableConfigs),
  and remote.log.manager.fetch.max.bytes.per.second (KIP-956), applied by the broker to its
  listeners, its cleaner and its fetch quota (`broker_values` gives their effective values).

num.partitions, auto.create.topics.enable, log.cleaner.enable, node.id and every other broker
config are read-only in Kafka, as here.

Two levels, as in Kafka: the cluster-wide default (the resource with an empty name) and one
broker's own (the resource named by its node id), which wins. Both are kept in the metadata store
by broker config name (resource type "broker"); a topic's effective config is then its own
value, else this broker's dynamic value, else the cluster-wide dynamic default, else the static
default the broker was started with (`--topic-default`), else Kafka's built-in default.

Refusals are Kafka 4's (ConfigAdminManager.validateBrokerConfigChange turns every validation
failure of a broker resource into INVALID_REQUEST, KAFKA-13609): a name that is not dynamic,
"Cannot update these configs dynamically: Set(node.id)"; a bad value, the reason. They raise
BrokerConfigRefused, a ValueError, which the handler answers with INVALID_REQUEST. Values of
topic-config synonyms are checked by the topic config's own rules (topic_configs.validate).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace as replaced

from . import topic_configs
from .compaction.config import DOUBLE_MAX, CleanerConfig, InvalidCleanerConfig
from .connection_limits import InvalidPerIpOverrides, parse_per_ip_overrides
from .topic_configs import AlterOp, ConfigSource, ConfigType, InvalidConfig

INT32_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1


class BrokerConfigRefused(ValueError):
    """A change of a BROKER resource Kafka refuses with INVALID_REQUEST; `names` are the configs at fault."""

    def __init__(self, names: list[str], message: str) -> None:
        super().__init__(message)
        self.names = names


@dataclass(frozen=True, slots=True)
class BrokerConfigDef:
    """A dynamic broker config that is not a topic default: Kafka's type, default and bounds."""

    name: str
    type: ConfigType
    default: str
    low: float  # the least value Kafka's ConfigDef accepts (Range.atLeast)
    doc: str

    def parse(self, value: str) -> int | float | str:
        """The value as Kafka's ConfigDef parses it; BrokerConfigRefused with Kafka's reason."""
        if self.type is ConfigType.STRING:  # max.connections.per.ip.overrides, the only one
            try:
                parse_per_ip_overrides(value)
            except InvalidPerIpOverrides as exc:
                raise BrokerConfigRefused([self.name], f"Invalid value {value} for configuration {self.name}: {exc.reason}") from None
            return value
        try:
            number: int | float = float(value) if self.type is ConfigType.DOUBLE else int(value.strip())
        except ValueError:
            kind = {ConfigType.INT: "int", ConfigType.LONG: "long", ConfigType.DOUBLE: "double"}[self.type]
            raise BrokerConfigRefused([self.name], f"Invalid value {value} for configuration {self.name}: Not a number of type {kind.upper()}") from None
        high = INT32_MAX if self.type is ConfigType.INT else LONG_MAX if self.type is ConfigType.LONG else DOUBLE_MAX
        if number > high:
            raise BrokerConfigRefused([self.name], f"Invalid value {value} for configuration {self.name}: Not a number of type {self.type.name}")
        if number < self.low:
            low = int(self.low) if self.type is not ConfigType.DOUBLE else self.low
            raise BrokerConfigRefused([self.name], f"Invalid value {value} for configuration {self.name}: Value must be at least {low}")
        return number


BROKER_DYNAMIC: Mapping[str, BrokerConfigDef] = {
    d.name: d
    for d in (
        BrokerConfigDef("max.connections", ConfigType.INT, str(INT32_MAX), 0,
                        "Connections the broker accepts at once; at the limit it stops accepting until one closes."),
        BrokerConfigDef("max.connections.per.ip", ConfigType.INT, str(INT32_MAX), 0,
                        "Connections accepted from one address; more are closed at once."),
        BrokerConfigDef("max.connections.per.ip.overrides", ConfigType.STRING, "", 0,
                        "Per-address limits that replace max.connections.per.ip: hostName:100,127.0.0.1:200"),
        BrokerConfigDef("max.connection.creation.rate", ConfigType.INT, str(INT32_MAX), 0,
                        "Connections the broker accepts per second, across listeners; the acceptor delays connections over it."),
        BrokerConfigDef("log.cleaner.threads", ConfigType.INT, "1", 0, "Partitions the log cleaner cleans at the same time."),
        BrokerConfigDef("log.cleaner.dedupe.buffer.size", ConfigType.LONG, str(128 * 2**20), 0,
                        "Bytes of the cleaner's key -> offset map, shared by its threads."),
        BrokerConfigDef("log.cleaner.io.max.bytes.per.second", ConfigType.DOUBLE, "1.7976931348623157E308", float("-inf"),
                        "Bytes per second the cleaner reads and writes, at most."),
        BrokerConfigDef("log.cleaner.backoff.ms", ConfigType.LONG, "15000", 0, "How long the cleaner sleeps when nothing needs cleaning."),
        BrokerConfigDef("remote.log.manager.fetch.max.bytes.per.second", ConfigType.LONG, str(LONG_MAX), 1,
                        "Bytes per second all fetches may read from the bucket; past it a fetch reads no history until the rate falls."),
    )
}  # fmt: skip

BROKER_RESOURCE = "broker"  # the metadata store's resource type of dynamic broker configs
CLUSTER_DEFAULT = ""  # the resource name of the cluster-wide default

# broker config name -> the topic config it is the default of
DYNAMIC: Mapping[str, str] = {d.synonym: d.name for d in topic_configs.TOPIC_CONFIGS.values() if d.synonym is not None}


def apply(
    current: Mapping[str, str], ops: list[tuple[str, int, str | None]] | None, replace: list[tuple[str, str | None]] | None,
    running: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The new dynamic configs of one BROKER resource (broker names -> values): incremental
    SET/DELETE `ops`, or the legacy AlterConfigs' `replace` (the whole set). `running` holds
    the values the broker runs with now (`broker_values`), for the checks Kafka makes against
    them. Raises BrokerConfigRefused (INVALID_REQUEST), or InvalidConfig for an operation that
    does not apply (INVALID_CONFIG, as Kafka's prepareIncrementalConfigs)."""
    if replace is not None:
        updated = {name: value for name, value in replace if value is not None}
    else:
        updated = dict(current)
        for name, op, value in ops or []:
            if AlterOp(op) is AlterOp.SET:
                updated[name] = value if value is not None else ""
            elif AlterOp(op) is AlterOp.DELETE:
                updated.pop(name, None)
            else:
                raise InvalidConfig(name, value, f"{AlterOp(op).name} does not apply to broker configs")
    not_dynamic = sorted(name for name in updated if name not in DYNAMIC and name not in BROKER_DYNAMIC)
    if not_dynamic:
        raise BrokerConfigRefused(not_dynamic, f"Cannot update these configs dynamically: Set({', '.join(not_dynamic)})")
    try:
        topic_configs.validate({DYNAMIC[name]: value for name, value in updated.items() if name in DYNAMIC})
    except InvalidConfig as exc:  # named by the topic config: said of the broker config that was set
        name = next((n for n in sorted(updated) if DYNAMIC.get(n) == exc.name), exc.name)
        raise BrokerConfigRefused([name], f"Invalid value {updated.get(name, exc.value)} for configuration {name}: {exc.reason}") from None
    values = {name: BROKER_DYNAMIC[name].parse(value) for name, value in updated.items() if name in BROKER_DYNAMIC}
    _check_connections(values, current, running or {})
    _check_cleaner(values, running or {})
    return updated


def _check_connections(values: Mapping[str, int | float | str], current: Mapping[str, str], running: Mapping[str, str]) -> None:
    """Kafka's KafkaConfig check, on the values the change leads to: max.connections.per.ip may
    be zero only with overrides (the resource's new ones; if it has none, the running ones,
    unless this change deleted them)."""
    name = "max.connections.per.ip.overrides"
    overrides = values[name] if name in values else "" if name in current else running.get(name, "")
    if values.get("max.connections.per.ip") == 0 and not parse_per_ip_overrides(str(overrides)):
        raise BrokerConfigRefused(
            ["max.connections.per.ip"], "max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides property is set."
        )


def _check_cleaner(values: Mapping[str, int | float], running: Mapping[str, str]) -> None:
    """Kafka's LogCleaner.validateReconfiguration: at least one thread, at most double and at
    least half the running count; and the settings together as CleanerConfig checks them."""
    threads = values.get("log.cleaner.threads")
    current = int(running.get("log.cleaner.threads", "1"))
    if threads is not None:
        if threads < 1:
            raise BrokerConfigRefused(["log.cleaner.threads"], "Log cleaner threads should be at least 1")
        if threads < current // 2:
            raise BrokerConfigRefused(["log.cleaner.threads"], f"Log cleaner threads cannot be reduced to less than half the current value {current}")
        if threads > current * 2:
            raise BrokerConfigRefused(["log.cleaner.threads"], f"Log cleaner threads cannot be increased to more than double the current value {current}")
    try:
        cleaner_config(CleanerConfig(), {**running, **{name: str(value) for name, value in values.items()}})
    except InvalidCleanerConfig as exc:
        raise BrokerConfigRefused([exc.name], str(exc)) from None


def broker_values(static: Mapping[str, str], cluster_default: Mapping[str, str], broker: Mapping[str, str]) -> dict[str, str]:
    """The effective value of each of BROKER_DYNAMIC: this broker's dynamic value, else the
    cluster-wide one, else the static one it was started with, else Kafka's default."""
    return {
        name: broker.get(name, cluster_default.get(name, static.get(name, definition.default)))
        for name, definition in BROKER_DYNAMIC.items()
    }


def cleaner_config(base: CleanerConfig, values: Mapping[str, str]) -> CleanerConfig:
    """`base` (the static log.cleaner.* settings) with the dynamic ones of `values` (broker names)."""
    fields: dict[str, Callable[[str], object]] = {
        "log.cleaner.threads": int, "log.cleaner.dedupe.buffer.size": int, "log.cleaner.io.max.bytes.per.second": float,
        "log.cleaner.backoff.ms": int,
    }  # fmt: skip
    changes = {name.removeprefix("log.cleaner.").replace(".", "_"): parse(values[name]) for name, parse in fields.items() if name in values}
    return replaced(base, **changes)  # type: ignore[arg-type]


def topic_default_levels(
    static: Mapping[str, str], cluster_default: Mapping[str, str], broker: Mapping[str, str]
) -> dict[ConfigSource, dict[str, str]]:
    """The broker-wide defaults of topic configs at each level, highest priority first
    (topic_configs.BROKER_LEVELS), by topic config name: this broker's dynamic values, the
    cluster-wide dynamic ones, the static ones (`--topic-default`, already by topic config name)."""
    return {
        ConfigSource.DYNAMIC_BROKER_CONFIG: {DYNAMIC[name]: value for name, value in broker.items() if name in DYNAMIC},
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG: {DYNAMIC[name]: value for name, value in cluster_default.items() if name in DYNAMIC},
        ConfigSource.STATIC_BROKER_CONFIG: dict(static),
    }


def topic_defaults(static: Mapping[str, str], cluster_default: Mapping[str, str], broker: Mapping[str, str]) -> dict[str, str]:
    """The broker-wide defaults of topic configs (by topic config name), dynamic over static."""
    defaults: dict[str, str] = {}
    for level in reversed(topic_default_levels(static, cluster_default, broker).values()):
        defaults.update(level)
    return defaults


__all__ = [
    "BROKER_DYNAMIC", "BROKER_RESOURCE", "CLUSTER_DEFAULT", "DYNAMIC", "BrokerConfigRefused", "apply", "broker_values", "cleaner_config",
    "topic_default_levels", "topic_defaults",
]
