"""DescribeConfigs, IncrementalAlterConfigs and the legacy AlterConfigs for topics, groups and
the broker: its static configs are read-only, its dynamic ones (the log.* defaults of topic
configs, max.connections, max.connections.per.ip and log.cleaner.*; dynamic_broker_configs.py)
are set per broker or for the cluster (the empty name) and apply at once; a refused change of a
broker resource is INVALID_REQUEST, as Kafka 4 answers it.

GROUP resources (KIP-848) hold consumer.session.timeout.ms and consumer.heartbeat.interval.ms,
decided in group/group_configs.py and kept by the group shell in the metadata store; any group
id may be described or altered, as in Kafka. The legacy AlterConfigs replaces a resource's whole
set of configs.

What a topic config's entry says (value, source, synonyms, type, documentation) is decided in
topic_configs.describe; this module only filters by `configuration_keys` and builds the
response of the request's version (synonyms from v1, config_type and documentation from v3,
each only when the request asks for them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from diskless.wire import Request
from metadata.errors import UnknownTopic

from .. import topic_configs
from ..errors import InvalidRequest, error_code_for
from ..api import BrokerApi
from ..responses import NO_THROTTLE, make, response_module
from ..dynamic_broker_configs import BROKER_DYNAMIC, CLUSTER_DEFAULT
from ..dynamic_broker_configs import DYNAMIC as DYNAMIC_BROKER_CONFIGS
from ..group.group_configs import InvalidGroupConfig
from ..security import authorizer as acl
from ..topic_configs import AlterOp, ConfigSource, ConfigType

TOPIC = 2
BROKER = 4
GROUP = 32
# Config resource types to ACL resource types: a broker's configs are the cluster's.
_ACL_RESOURCE = {TOPIC: acl.TOPIC, BROKER: acl.CLUSTER, GROUP: acl.GROUP}
_ACL_REFUSAL = {
    TOPIC: ErrorCode.topic_authorization_failed, BROKER: ErrorCode.cluster_authorization_failed, GROUP: ErrorCode.group_authorization_failed,
}  # fmt: skip


def _acl_name(resource_type: int, name: str) -> str:
    return acl.CLUSTER_NAME if resource_type == BROKER else name


# The types of the broker configs DescribeConfigs reports (their values: RequestSettings.broker_configs).
_BROKER_CONFIG_TYPES = {
    "node.id": ConfigType.INT,
    "num.partitions": ConfigType.INT,
    "default.replication.factor": ConfigType.INT,
    "auto.create.topics.enable": ConfigType.BOOLEAN,
    "socket.request.max.bytes": ConfigType.INT,
    "log.retention.check.interval.ms": ConfigType.LONG,
    "group.initial.rebalance.delay.ms": ConfigType.INT,
    "offsets.retention.minutes": ConfigType.INT,
    "log.cleaner.enable": ConfigType.BOOLEAN,
    "log.cleaner.threads": ConfigType.INT,
    "log.cleaner.dedupe.buffer.size": ConfigType.LONG,
    "log.cleaner.io.max.bytes.per.second": ConfigType.DOUBLE,
    "log.cleaner.backoff.ms": ConfigType.LONG,
    "remote.log.manager.fetch.max.bytes.per.second": ConfigType.LONG,
    "remote.log.manager.fetch.quota.window.num": ConfigType.INT,
    "remote.log.manager.fetch.quota.window.size.seconds": ConfigType.INT,
}


def _broker_entries(broker: BrokerApi, resource_name: str) -> list[topic_configs.ConfigEntry]:
    """A broker's configs: the static ones (read-only) and the dynamic ones, this broker's over
    the cluster-wide default; the cluster-wide default resource ("") shows only its own."""
    dynamic = broker.registry.dynamic_broker_configs
    cluster, mine = dynamic.get(CLUSTER_DEFAULT, {}), dynamic.get(str(broker.settings.node_id), {})
    static = broker.settings.broker_configs
    entries = []
    if resource_name != CLUSTER_DEFAULT:
        entries += [
            topic_configs.ConfigEntry(
                name, value, ConfigSource.STATIC_BROKER_CONFIG, _BROKER_CONFIG_TYPES.get(name, ConfigType.STRING), "",
                (topic_configs.ConfigSynonym(name, value, ConfigSource.STATIC_BROKER_CONFIG),), read_only=True,
            )
            for name, value in static.items()
            if name not in BROKER_DYNAMIC
        ]
    # A broker lists every dynamic config (as Kafka lists all its configs); the default resource
    # only those set on it. First the broker's own settings (max.connections, log.cleaner.*):
    # a static value equal to Kafka's default is reported as the default.
    own = sorted(n for n in cluster if n in BROKER_DYNAMIC) if resource_name == CLUSTER_DEFAULT else sorted(BROKER_DYNAMIC)
    for name in own:
        setting = BROKER_DYNAMIC[name]
        levels = [] if resource_name == CLUSTER_DEFAULT or name not in mine else [(mine[name], ConfigSource.DYNAMIC_BROKER_CONFIG)]
        if name in cluster:
            levels.append((cluster[name], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
        if static.get(name, setting.default) != setting.default:
            levels.append((static[name], ConfigSource.STATIC_BROKER_CONFIG))
        levels.append((setting.default, ConfigSource.DEFAULT_CONFIG))
        synonyms = tuple(topic_configs.ConfigSynonym(name, value, source) for value, source in levels)
        entries.append(topic_configs.ConfigEntry(name, levels[0][0], levels[0][1], setting.type, setting.doc, synonyms))
    # Then the log.* defaults of topic configs, with the synonyms a topic's entry lists below its own
    # value (the levels the registry keeps; the default resource has no per-broker level).
    names = sorted(n for n in cluster if n in DYNAMIC_BROKER_CONFIGS) if resource_name == CLUSTER_DEFAULT else sorted(DYNAMIC_BROKER_CONFIGS)
    levels = broker.registry.topic_default_levels
    if resource_name == CLUSTER_DEFAULT:
        levels = {s: values for s, values in levels.items() if s is not ConfigSource.DYNAMIC_BROKER_CONFIG}
    for name in names:
        definition = topic_configs.TOPIC_CONFIGS[DYNAMIC_BROKER_CONFIGS[name]]
        synonyms = topic_configs.broker_synonyms(definition, levels)
        value, source = (synonyms[0].value, synonyms[0].source) if synonyms else (None, ConfigSource.DEFAULT_CONFIG)
        entries.append(topic_configs.ConfigEntry(name, value, source, definition.type, definition.doc, synonyms))  # type: ignore[arg-type]
    return entries


async def _group_entries(broker: BrokerApi, group_id: str) -> list[topic_configs.ConfigEntry]:
    """Kafka's ConfigHelper.createGroupConfigEntry: GROUP_CONFIG when set on the group, else
    DEFAULT_CONFIG (the broker's group.consumer.* value); synonyms list only the group's own."""
    entries = []
    for e in await broker.groups.describe_group_configs(group_id):
        source = ConfigSource.DEFAULT_CONFIG if e.is_default else ConfigSource.GROUP_CONFIG
        synonyms = () if e.is_default else (topic_configs.ConfigSynonym(e.name, e.value, source),)
        entries.append(topic_configs.ConfigEntry(e.name, e.value, source, ConfigType.INT, e.doc, synonyms))
    return entries


async def handle_describe_configs(broker: BrokerApi, request: Request) -> Any:
    body = request.body
    mod = response_module(32, request.header.api_version)
    results = []
    for resource in body.resources:
        error, message, entries = ErrorCode.none, None, []
        kind = _ACL_RESOURCE.get(resource.resource_type)
        if kind is not None and not broker.security.allowed(acl.DESCRIBE_CONFIGS, kind, _acl_name(resource.resource_type, resource.resource_name)):
            error, message = _ACL_REFUSAL[resource.resource_type], "Authorization failed."
        elif resource.resource_type == TOPIC:
            topic = await broker.registry.find_topic(resource.resource_name)  # made by another broker since the last view?
            if topic is None:
                error, message = ErrorCode.unknown_topic_or_partition, f"unknown topic {resource.resource_name}"
            else:
                entries = topic_configs.describe(topic.configs, broker.registry.topic_defaults, broker.registry.topic_default_levels)
        elif resource.resource_type == BROKER:
            if resource.resource_name not in ("", str(broker.settings.node_id)):
                error, message = ErrorCode.invalid_request, f"unknown broker {resource.resource_name}"
            else:
                entries = _broker_entries(broker, resource.resource_name)
        elif resource.resource_type == GROUP:
            if not resource.resource_name:
                error, message = ErrorCode.invalid_request, "Group name must not be empty"
            else:
                entries = await _group_entries(broker, resource.resource_name)
        else:
            error, message = ErrorCode.invalid_request, f"resource type {resource.resource_type} is not supported"
        if resource.configuration_keys:  # Kafka's ConfigHelper: null and empty both mean every config
            keys = set(resource.configuration_keys)
            entries = [e for e in entries if e.name in keys]
        include_synonyms = getattr(body, "include_synonyms", False)
        include_documentation = getattr(body, "include_documentation", False)
        configs = tuple(
            make(
                mod.DescribeConfigsResourceResult,
                name=e.name,
                value=e.value,
                read_only=e.read_only,
                config_source=int(e.source),
                is_default=e.is_default,  # v0 only
                is_sensitive=e.is_sensitive,
                synonyms=tuple(make(mod.DescribeConfigsSynonym, name=s.name, value=s.value, source=int(s.source)) for s in e.synonyms)
                if include_synonyms
                else (),
                config_type=int(e.type),
                documentation=(e.doc or None) if include_documentation else None,
            )
            for e in entries
        )
        results.append(
            make(
                mod.DescribeConfigsResult,
                error_code=error,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=configs,
            )
        )
    return make(mod.DescribeConfigsResponse, throttle_time=NO_THROTTLE, results=tuple(results))


async def handle_incremental_alter_configs(broker: BrokerApi, request: Request) -> Any:
    """IncrementalAlterConfigs (API 44): each resource's listed configs are set, deleted,
    appended to or subtracted from."""
    mod = response_module(44, request.header.api_version)
    return await _alter(
        broker, request.body, mod, mod.IncrementalAlterConfigsResponse,
        null_refused=lambda c: c.config_operation != AlterOp.DELETE,  # DELETE needs no value
        group_change=lambda configs: ([(c.name, int(c.config_operation), c.value) for c in configs], None),
        topic_change=lambda current, configs: topic_configs.apply_incremental(
            current, [(c.name, AlterOp(c.config_operation), c.value) for c in configs]
        ),
    )  # fmt: skip


async def _alter(
    broker: BrokerApi, body: Any, mod: Any, response_cls: type, *,
    null_refused: Callable[[Any], bool], group_change: Any, topic_change: Any,
) -> Any:
    """The loop both alter APIs share: per resource, a group's or a topic's configs changed
    (`group_change(configs)` -> (ops, replace); `topic_change(current, configs)` -> the new
    overrides), an error per resource."""
    copies = Counter((r.resource_type, r.resource_name) for r in body.resources)
    results = []
    for resource in body.resources:
        error, message = ErrorCode.none, None
        try:
            if copies[resource.resource_type, resource.resource_name] > 1:
                # Kafka's ConfigAdminManager.preprocess: every copy is refused, none applies.
                raise InvalidRequest("Each resource must appear at most once.")
            _check_well_formed(resource.configs, null_refused)
            kind = _ACL_RESOURCE.get(resource.resource_type)
            if kind is not None:
                broker.security.require(acl.ALTER_CONFIGS, kind, _acl_name(resource.resource_type, resource.resource_name))
            if resource.resource_type == GROUP:
                ops, replace = group_change(resource.configs)
                await _alter_group(broker, resource.resource_name, ops, replace, body.validate_only)
            elif resource.resource_type == BROKER:
                if resource.resource_name not in (CLUSTER_DEFAULT, str(broker.settings.node_id)):
                    raise ValueError(f"unknown broker {resource.resource_name}")
                ops, replace = group_change(resource.configs)  # the same shape: (name, op, value) or (name, value)
                await broker.registry.alter_broker_configs(resource.resource_name, ops, replace, body.validate_only)
            elif resource.resource_type != TOPIC:
                error, message = ErrorCode.invalid_request, "only topic, group and broker configs can be altered"
            else:
                topic = await broker.registry.find_topic(resource.resource_name)
                if topic is None:
                    raise UnknownTopic(resource.resource_name)
                updated = topic_change(topic.configs, resource.configs)
                if not body.validate_only:
                    await broker.registry.set_topic_configs(topic.name, updated)
        except Exception as exc:
            error, message = _alter_error(exc)
        results.append(
            make(
                mod.AlterConfigsResourceResponse,
                error_code=error,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )
        )
    return make(response_cls, throttle_time=NO_THROTTLE, responses=tuple(results))


def _check_well_formed(configs: Any, null_refused: Callable[[Any], bool]) -> None:
    """Kafka's ConfigAdminManager.preprocess, before authorization: a resource that names a
    config twice, or gives a null value where `null_refused(config)` (legacy AlterConfigs: every
    config; IncrementalAlterConfigs: all but DELETE), is refused whole with INVALID_REQUEST and
    nothing of it applies; the request's other resources go on."""
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        raise InvalidRequest("Error due to duplicate config keys")
    nulls = [c.name for c in configs if c.value is None and null_refused(c)]
    if nulls:
        raise InvalidRequest("Null value not supported for : " + ", ".join(nulls))


async def _alter_group(broker: BrokerApi, group_id: str, ops: list[tuple[str, int, str | None]] | None, replace: list[tuple[str, str | None]] | None, validate_only: bool) -> None:
    if not group_id:
        raise ValueError("Group name must not be empty")
    await broker.groups.alter_group_configs(group_id, ops, replace, validate_only)


def _alter_error(exc: Exception) -> tuple[ErrorCode, str]:
    if isinstance(exc, InvalidGroupConfig):
        return ErrorCode.invalid_config, str(exc)
    if isinstance(exc, ValueError) and not isinstance(exc, topic_configs.InvalidConfig):
        return ErrorCode.invalid_request, str(exc)
    return error_code_for(exc), str(exc)


async def handle_alter_configs(broker: BrokerApi, request: Request) -> Any:
    """The legacy AlterConfigs (API 33, still in Kafka 4): each resource's configs become
    exactly the ones given (those left out return to their defaults)."""
    mod = response_module(33, request.header.api_version)
    return await _alter(
        broker, request.body, mod, mod.AlterConfigsResponse, null_refused=lambda c: True,
        group_change=lambda configs: (None, [(c.name, c.value) for c in configs]),
        topic_change=lambda current, configs: topic_configs.apply_incremental(
            {}, [(c.name, AlterOp.SET, c.value) for c in configs]
        ),
    )  # fmt: skip
