"""DescribeClientQuotas (48) and AlterClientQuotas (49), KIP-546, as Kafka 4 answers them:
DESCRIBE_CONFIGS, resp. ALTER_CONFIGS on the cluster or CLUSTER_AUTHORIZATION_FAILED; a bad
filter, entity, key or value is INVALID_REQUEST with Kafka's message, a filter of an unknown
entity or match type UNSUPPORTED_VERSION (quotas/entities.py);
a store that cannot be read or written is the error `error_code_for` maps it to.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from diskless.wire import Request

from ..api import BrokerApi
from ..errors import error_code_for
from ..quotas.entities import FilterComponent, InvalidQuota, UnsupportedQuotaFilter
from ..responses import NO_THROTTLE, make, response_module
from ..security import authorizer as acl


async def handle_describe_client_quotas(broker: BrokerApi, request: Request) -> Any:
    body = request.body
    mod = response_module(48, request.header.api_version)
    error, message, entries = ErrorCode.none, None, None
    if not broker.security.allowed(acl.DESCRIBE_CONFIGS, acl.CLUSTER, acl.CLUSTER_NAME):
        error = ErrorCode.cluster_authorization_failed
    else:
        components = [FilterComponent(c.entity_type, c.match_type, c.match) for c in body.components]
        try:
            found = broker.quota_configs.describe(components, body.strict)
        except (InvalidQuota, UnsupportedQuotaFilter) as exc:
            error, message = error_code_for(exc), str(exc)
        else:
            entries = tuple(
                make(
                    mod.EntryData,
                    entity=tuple(make(mod.EntityData, entity_type=t, entity_name=n) for t, n in entity),
                    values=tuple(make(mod.ValueData, key=k, value=v) for k, v in sorted(values.items())),
                )
                for entity, values in found
            )
    return make(mod.DescribeClientQuotasResponse, throttle_time=NO_THROTTLE, error_code=error, error_message=message, entries=entries)


async def handle_alter_client_quotas(broker: BrokerApi, request: Request) -> Any:
    body = request.body
    mod = response_module(49, request.header.api_version)
    alterations = [([(e.entity_type, e.entity_name) for e in entry.entity], [(op.key, float(op.value), op.remove) for op in entry.ops])
                   for entry in body.entries]  # fmt: skip
    outcomes: list[tuple[ErrorCode, str | None]]
    if not broker.security.allowed(acl.ALTER_CONFIGS, acl.CLUSTER, acl.CLUSTER_NAME):
        outcomes = [(ErrorCode.cluster_authorization_failed, None)] * len(alterations)
    else:
        try:
            refusals = await broker.quota_configs.alter(alterations, body.validate_only)
        except Exception as exc:
            code = error_code_for(exc, "AlterClientQuotas")
            outcomes = [(code, str(exc))] * len(alterations)
        else:
            outcomes = [(ErrorCode.none, None) if why is None else (ErrorCode.invalid_request, why) for why in refusals]
    entries = tuple(
        make(
            mod.EntryData,
            error_code=code,
            error_message=message,
            entity=tuple(make(mod.EntityData, entity_type=t, entity_name=n) for t, n in pairs),
        )
        for (pairs, _), (code, message) in zip(alterations, outcomes)
    )
    return make(mod.AlterClientQuotasResponse, throttle_time=NO_THROTTLE, entries=entries)
