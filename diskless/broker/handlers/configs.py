"""DescribeConfigs and IncrementalAlterConfigs for topics (and, read-only, the broker).

What a topic config's entry says (value, source, synonyms, type, documentation) is decided in
topic_configs.describe; this module only filters by `configuration_keys` and builds the
response of the request's version (synonyms from v1, config_type and documentation from v3,
each only when the request asks for them).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from diskless.wire import Request
from metadata.errors import UnknownTopic

from .. import topic_configs
from ..errors import error_code_for
from ..api import BrokerApi
from ..responses import NO_THROTTLE, make, response_module
from ..topic_configs import AlterOp, ConfigSource, ConfigType

TOPIC = 2
BROKER = 4


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
}


def _broker_entries(broker: BrokerApiApi) -> list[topic_configs.ConfigEntry]:
    return [
        topic_configs.ConfigEntry(
            name, value, ConfigSource.STATIC_BROKER_CONFIG, _BROKER_CONFIG_TYPES.get(name, ConfigType.STRING), "",
            (topic_configs.ConfigSynonym(name, value, ConfigSource.STATIC_BROKER_CONFIG),), read_only=True,
        )
        for name, value in broker.settings.broker_configs.items()
    ]


async def handle_describe_configs(broker: BrokerApi, request: Request) -> Any:
    body = request.body
    mod = response_module(32, request.header.api_version)
    results = []
    for resource in body.resources:
        error, message, entries = ErrorCode.none, None, []
        if resource.resource_type == TOPIC:
            topic = broker.registry.topics.get(resource.resource_name)
            if topic is None:
                error, message = ErrorCode.unknown_topic_or_partition, f"unknown topic {resource.resource_name}"
            else:
                entries = topic_configs.describe(topic.configs, broker.settings.topic_defaults)
        elif resource.resource_type == BROKER:
            if resource.resource_name not in ("", str(broker.settings.node_id)):
                error, message = ErrorCode.invalid_request, f"unknown broker {resource.resource_name}"
            else:
                entries = _broker_entries(broker)
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
    body = request.body
    mod = response_module(44, request.header.api_version)
    results = []
    for resource in body.resources:
        error, message = ErrorCode.none, None
        try:
            if resource.resource_type != TOPIC:
                error, message = ErrorCode.invalid_request, "only topic configs can be altered; broker configs are static"
            else:
                topic = broker.registry.topics.get(resource.resource_name)
                if topic is None:
                    raise UnknownTopic(resource.resource_name)
                ops = [(c.name, AlterOp(c.config_operation), c.value) for c in resource.configs]
                updated = topic_configs.apply_incremental(topic.configs, ops)
                if not body.validate_only:
                    await broker.registry.set_topic_configs(topic.name, updated)
        except ValueError as exc:
            error, message = ErrorCode.invalid_request, str(exc)
        except Exception as exc:
            error, message = error_code_for(exc), str(exc)
        results.append(
            make(
                mod.AlterConfigsResourceResponse,
                error_code=error,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )
        )
    return make(mod.IncrementalAlterConfigsResponse, throttle_time=NO_THROTTLE, responses=tuple(results))
