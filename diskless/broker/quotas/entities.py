"""Client quota entities and their configs, as Kafka's AlterClientQuotas and
DescribeClientQuotas (KIP-546) read and write them. Sans-IO.

An entity is a set of (entity type, name) pairs, a name of None meaning the type's default
(Kafka's `<default>`): `user` (the principal's name, "ANONYMOUS" on a listener without
authentication), `client-id`, or `ip` alone. Its configs are Kafka's quota keys:

    user, client-id   producer_byte_rate (long), consumer_byte_rate (long),
                      request_percentage (double), controller_mutation_rate (double)
    ip                connection_creation_rate (int)

Refusals are Kafka 4's (ClientQuotaControlManager, ClientQuotasImage.describe), with Kafka's
messages: INVALID_REQUEST (`InvalidQuota`), or UNSUPPORTED_VERSION for a filter of an entity or
match type Kafka does not know (`UnsupportedQuotaFilter`). An IP entity's name is kept as
connections' addresses are compared (compressed IPv6, an IPv4-mapped address as IPv4).

In the metadata store an entity is one resource of type "client-quota" whose name is the
entity as compact JSON (`[["client-id",null],["user","alice"]]`, pairs sorted by type), so a
default and a name that happens to read "<default>" stay apart; values are Kafka's doubles
as text.
"""

from __future__ import annotations

import math

import ipaddress
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from ..connection_limits import normalize_address

RESOURCE_TYPE = "client-quota"

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"


class ValueType(Enum):
    LONG = "a Long"
    INT = "an Integer"
    DOUBLE = "a Double"


CLIENT_KEYS = {
    PRODUCER_BYTE_RATE: ValueType.LONG,
    CONSUMER_BYTE_RATE: ValueType.LONG,
    REQUEST_PERCENTAGE: ValueType.DOUBLE,
    CONTROLLER_MUTATION_RATE: ValueType.DOUBLE,
}
IP_KEYS = {CONNECTION_CREATION_RATE: ValueType.INT}

# Entity = the sorted (type, name) pairs; name None is the type's default.
Entity = tuple[tuple[str, str | None], ...]


class InvalidQuota(ValueError):
    """An entity, a key, a value or a filter Kafka refuses with INVALID_REQUEST."""


class UnsupportedQuotaFilter(ValueError):
    """A filter of an entity type or match type Kafka does not know: UNSUPPORTED_VERSION."""


def entity_of(pairs: Iterable[tuple[str, str | None]]) -> Entity:
    """The entity of AlterClientQuotas' (entity_type, entity_name) pairs, checked."""
    pairs = list(pairs)
    if not pairs:
        raise InvalidQuota("Invalid empty client quota entity")
    types = [entity_type for entity_type, _ in pairs]
    for entity_type in types:
        if entity_type not in (USER, CLIENT_ID, IP):
            raise InvalidQuota(f"Unhandled client quota entity type: {entity_type}")
        if types.count(entity_type) > 1:
            raise InvalidQuota(f"Duplicate {entity_type} entity in the client quota entity")
    if IP in types and len(types) > 1:
        raise InvalidQuota("Invalid quota entity combination, IP entity should not be combined with User or ClientId")
    checked = []
    for entity_type, name in pairs:
        if entity_type == IP and name is not None:
            try:
                ipaddress.ip_address(name)
            except ValueError:
                raise InvalidQuota(f"{name} is not a valid IP address") from None
            name = normalize_address(name)  # as connections' addresses are: 2001:DB8::1 is 2001:db8::1
        checked.append((entity_type, name))
    return tuple(sorted(checked, key=lambda pair: pair[0]))


def keys_of(entity: Entity) -> Mapping[str, ValueType]:
    return IP_KEYS if entity[0][0] == IP else CLIENT_KEYS


def altered(entity: Entity, current: Mapping[str, float], ops: Iterable[tuple[str, float, bool]]) -> dict[str, float]:
    """The entity's configs after AlterClientQuotas' ops: (key, value, remove)."""
    valid = keys_of(entity)
    updated = dict(current)
    for key, value, remove in ops:
        value_type = valid.get(key)
        if value_type is None:
            raise InvalidQuota(f"Invalid configuration key {key}")
        if remove:
            updated.pop(key, None)
            continue
        if not math.isfinite(value):
            raise InvalidQuota(f"Configuration {key} must be a finite number, not {value}")
        if value_type is not ValueType.DOUBLE and (value != int(value) or abs(value) >= 2**63):
            raise InvalidQuota(f"Configuration {key} must be {value_type.value} value")
        if value_type is ValueType.INT and value > 2**31 - 1:
            raise InvalidQuota(f"Configuration {key} must be {value_type.value} value")
        if not value > 0:
            raise InvalidQuota(f"Configuration {key} must be greater than 0, not {value:g}")
        updated[key] = float(value)
    return updated


# --- DescribeClientQuotas filters ------------------------------------------------------------

MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_ANY = 2


@dataclass(frozen=True, slots=True)
class FilterComponent:
    entity_type: str
    match_type: int
    match: str | None


def check_filter(components: Sequence[FilterComponent]) -> None:
    types = [c.entity_type for c in components]
    for component in components:
        if component.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
            raise UnsupportedQuotaFilter(f"Unknown match type {component.match_type}")
        if component.match_type == MATCH_EXACT and component.match is None:
            raise InvalidQuota("Request specified MATCH_TYPE_EXACT, but set match string to null")
        if component.match_type != MATCH_EXACT and component.match is not None:
            name = "MATCH_TYPE_DEFAULT" if component.match_type == MATCH_DEFAULT else "MATCH_TYPE_SPECIFIED"
            raise InvalidQuota(f"Request specified {name}, but also specified a match string")
        if component.entity_type not in (USER, CLIENT_ID, IP):
            raise UnsupportedQuotaFilter(f"Custom entity type {component.entity_type} not supported")
        if types.count(component.entity_type) > 1:
            raise InvalidQuota(f"Entity type {component.entity_type} cannot appear more than once in the filter.")
    if IP in types and len(types) > 1:
        raise InvalidQuota("Invalid entity filter component combination, IP filter component should not be used with user or clientId filter component.")


def matches(entity: Entity, components: Sequence[FilterComponent], strict: bool) -> bool:
    """Whether DescribeClientQuotas' filter takes `entity`: every component names a type the
    entity has, with that name (exact), the default (default) or any name (specified); strict,
    the entity has no other type."""
    names = dict(entity)
    if strict and len(names) != len(components):
        return False
    for component in components:
        if component.entity_type not in names:
            return False
        name = names[component.entity_type]
        if component.match_type == MATCH_EXACT and name != component.match:
            return False
        if component.match_type == MATCH_DEFAULT and name is not None:
            return False
    return True


# --- the metadata store ---------------------------------------------------------------------


def resource_name(entity: Entity) -> str:
    return json.dumps([list(pair) for pair in entity], separators=(",", ":"))


def from_store(stored: Mapping[str, Mapping[str, str]]) -> dict[Entity, dict[str, float]]:
    """The configured quotas, from `list_resource_configs(RESOURCE_TYPE)`."""
    quotas: dict[Entity, dict[str, float]] = {}
    for name, configs in stored.items():
        entity = tuple((str(t), None if n is None else str(n)) for t, n in json.loads(name))
        values = {key: float(value) for key, value in configs.items()}
        if entity and values:
            quotas[entity] = values
    return quotas


def to_store(configs: Mapping[str, float]) -> dict[str, str]:
    return {key: repr(float(value)) for key, value in configs.items()}
