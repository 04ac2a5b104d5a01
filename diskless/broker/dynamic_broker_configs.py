"""Dynamic broker configs: the broker-wide defaults of topic configs that Kafka lets change at
run time (its DynamicLogConfig: every `log.*` synonym of a topic config, e.g. log.retention.ms
for retention.ms), set with IncrementalAlterConfigs or AlterConfigs on a BROKER resource. Sans-IO.

Two levels, as in Kafka: the cluster-wide default (the resource with an empty name) and one
broker's own (the resource named by its node id), which wins. Both are kept in the metadata store
by broker config name (resource type "broker"); a topic's effective config is then its own
value, else this broker's dynamic value, else the cluster-wide dynamic default, else the static
default the broker was started with (`--topic-default`), else Kafka's built-in default.

Names are checked against the topic configs' broker synonyms (anything else: Kafka's "Cannot
update these configs dynamically", INVALID_CONFIG here too), values by the topic config's own
rules (topic_configs.validate).
"""

from __future__ import annotations

from collections.abc import Mapping

from . import topic_configs
from .topic_configs import AlterOp, InvalidConfig

BROKER_RESOURCE = "broker"  # the metadata store's resource type of dynamic broker configs
CLUSTER_DEFAULT = ""  # the resource name of the cluster-wide default

# broker config name -> the topic config it is the default of
DYNAMIC: Mapping[str, str] = {d.synonym: d.name for d in topic_configs.TOPIC_CONFIGS.values() if d.synonym is not None}


def apply(current: Mapping[str, str], ops: list[tuple[str, int, str | None]] | None, replace: list[tuple[str, str | None]] | None) -> dict[str, str]:
    """The new dynamic configs of one BROKER resource (broker names -> values): incremental
    SET/DELETE `ops`, or the legacy AlterConfigs' `replace` (the whole set). Raises InvalidConfig."""
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
    not_dynamic = sorted(name for name in updated if name not in DYNAMIC)
    if not_dynamic:
        raise InvalidConfig(not_dynamic[0], updated[not_dynamic[0]], f"Cannot update these configs dynamically: {', '.join(not_dynamic)}")
    topic_configs.validate({DYNAMIC[name]: value for name, value in updated.items()})
    return updated


def topic_defaults(static: Mapping[str, str], cluster_default: Mapping[str, str], broker: Mapping[str, str]) -> dict[str, str]:
    """The broker-wide defaults of topic configs (by topic config name), dynamic over static."""
    defaults = dict(static)
    for level in (cluster_default, broker):
        defaults.update({DYNAMIC[name]: value for name, value in level.items() if name in DYNAMIC})
    return defaults


__all__ = ["BROKER_RESOURCE", "CLUSTER_DEFAULT", "DYNAMIC", "apply", "topic_defaults"]
