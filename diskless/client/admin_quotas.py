"""The client-quotas part of the admin client (KIP-546): DescribeClientQuotas (48) and
AlterClientQuotas (49), shaped as Kafka's Admin.describeClientQuotas and alterClientQuotas.
Requests go to any broker: every broker serves them from the shared metadata store.

    entity = ClientQuotaEntity({USER: "alice", CLIENT_ID: None})      # None: the default
    await admin.alter_client_quotas([ClientQuotaAlteration(entity, {PRODUCER_BYTE_RATE: 1048576})])
    await admin.describe_client_quotas([ClientQuotaFilterComponent.of_entity(USER, "alice")])
    # {ClientQuotaEntity({'user': 'alice', 'client-id': None}): {'producer_byte_rate': 1048576.0}}

An entity is `user` and/or `client-id`, or `ip` alone; its keys are Kafka's:

    producer_byte_rate        bytes/s of Produce requests, per broker
    consumer_byte_rate        bytes/s of records in Fetch responses, per broker
    request_percentage        time of the broker's request handling, in % of one I/O thread
    controller_mutation_rate  partitions created or deleted per second (KIP-599)
    connection_creation_rate  connections accepted per second from the address (ip only)

Values are Kafka's doubles. A refusal (INVALID_REQUEST with Kafka's message, or
CLUSTER_AUTHORIZATION_FAILED) raises the typed error of errors.py, carrying the broker's
message and, for an alteration, the entity it is about.

A mixin of `Admin` (admin.py), which supplies `_cluster` and `_retrying`.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from diskless.wire import request_type

from .cluster import Cluster
from .errors import BrokerResponseError, UnknownServerError, UnsupportedByBroker, check, error_for

T = TypeVar("T")
DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 48, 49
_CLIENT_VERSIONS = {DESCRIBE_CLIENT_QUOTAS: (0, 1), ALTER_CLIENT_QUOTAS: (0, 1)}

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)  # Kafka's order, the order entities are written in

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE, CONNECTION_CREATION_RATE)

# DescribeClientQuotas' match types
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2

DEFAULT_NAME = "<default>"  # how a default is written (Kafka's ConfigEntityName.DEFAULT)


def _type_rank(entity_type: str) -> tuple[int, str]:
    return (ENTITY_TYPES.index(entity_type), "") if entity_type in ENTITY_TYPES else (len(ENTITY_TYPES), entity_type)


def _key_rank(key: str) -> tuple[int, str]:
    return (QUOTA_KEYS.index(key), "") if key in QUOTA_KEYS else (len(QUOTA_KEYS), key)


@dataclass(frozen=True, slots=True, init=False, repr=False)
class ClientQuotaEntity(Mapping[str, "str | None"]):
    """Kafka's ClientQuotaEntity: entity type -> name, None for the type's default. Hashable;
    two entities are equal when they have the same pairs, whatever order they were given in."""

    entries: tuple[tuple[str, str | None], ...]

    def __init__(self, entries: Mapping[str, str | None] | Iterable[tuple[str, str | None]] = ()) -> None:
        pairs = dict(entries)
        object.__setattr__(self, "entries", tuple(sorted(pairs.items(), key=lambda pair: _type_rank(pair[0]))))

    def __getitem__(self, entity_type: str) -> str | None:
        for key, name in self.entries:
            if key == entity_type:
                return name
        raise KeyError(entity_type)

    def __iter__(self) -> Iterator[str]:
        return (entity_type for entity_type, _ in self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __repr__(self) -> str:
        return f"ClientQuotaEntity({dict(self.entries)!r})"

    def __str__(self) -> str:
        """`user=alice,client-id=<default>`, as `diskless quotas describe` prints it."""
        return ",".join(f"{entity_type}={DEFAULT_NAME if name is None else name}" for entity_type, name in self.entries)

    def sort_key(self) -> tuple:
        """Users, then client ids, then addresses; a default before the names of its type."""
        return tuple((_type_rank(entity_type), name is not None, name or "") for entity_type, name in self.entries)


@dataclass(frozen=True, slots=True)
class ClientQuotaFilterComponent:
    """One component of DescribeClientQuotas' filter (Kafka's ClientQuotaFilterComponent):
    entities of `entity_type` named `match` (MATCH_EXACT), its default (MATCH_DEFAULT), or any
    name (MATCH_ANY). Build it with the constructors below."""

    entity_type: str
    match_type: int
    match: str | None = None

    @classmethod
    def of_entity(cls, entity_type: str, entity_name: str | None) -> ClientQuotaFilterComponent:
        """The entity of this name (None: the default, as Java's ofEntity with null)."""
        if entity_name is None:
            return cls.of_default_entity(entity_type)
        return cls(entity_type, MATCH_EXACT, entity_name)

    @classmethod
    def of_default_entity(cls, entity_type: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, MATCH_DEFAULT, None)

    @classmethod
    def of_entity_type(cls, entity_type: str) -> ClientQuotaFilterComponent:
        """Any entity that has this type, default or named."""
        return cls(entity_type, MATCH_ANY, None)


@dataclass(frozen=True, slots=True)
class ClientQuotaAlteration:
    """Kafka's ClientQuotaAlteration: the ops on one entity, each (key, value), a value of None
    removing the key. `entity` may be given as a mapping and `ops` as a mapping or pairs."""

    entity: ClientQuotaEntity
    ops: tuple[tuple[str, float | None], ...]

    def __post_init__(self) -> None:
        if not isinstance(self.entity, ClientQuotaEntity):
            object.__setattr__(self, "entity", ClientQuotaEntity(self.entity))
        pairs = self.ops.items() if isinstance(self.ops, Mapping) else self.ops
        object.__setattr__(self, "ops", tuple((str(key), None if value is None else float(value)) for key, value in pairs))


class QuotaAdmin:
    _cluster: Cluster

    async def _retrying(self, attempt: Callable[[], Awaitable[T]], final: frozenset[int] = frozenset()) -> T:
        """Admin's retries through retry.retrying (this class is a mixin of Admin, which defines it)."""
        ...

    async def _quota_request(self, api_key: int, make: Callable[[Any], Any]) -> Any:
        """Send `make(module of the request's version)` to any broker; one attempt."""
        connection = await self._cluster.any_connection()
        low, high = _CLIENT_VERSIONS[api_key]
        broker = connection.api_versions.get(api_key)
        if broker is None or min(high, broker[1]) < max(low, broker[0]):
            name = "DescribeClientQuotas" if api_key == DESCRIBE_CLIENT_QUOTAS else "AlterClientQuotas"
            raise UnsupportedByBroker(name, (low, high), broker)
        version = min(high, broker[1])
        return await connection.request(make(importlib.import_module(request_type(api_key, version).__module__)))

    async def describe_client_quotas(
        self, components: Iterable[ClientQuotaFilterComponent] = (), strict: bool = False
    ) -> dict[ClientQuotaEntity, dict[str, float]]:
        """The entities the filter takes, with their quotas: every component names a type the
        entity has (with that name, its default, or any name); `strict`, the entity has no other
        type (Java's ClientQuotaFilter.containsOnly). No components: every entity.

        In a stable order: users, then client ids, then addresses, a default before names;
        each entity's keys in Kafka's order. A filter Kafka refuses raises InvalidRequestError.
        """
        wanted = tuple(components)

        async def attempt() -> Any:
            response = await self._quota_request(DESCRIBE_CLIENT_QUOTAS, lambda mod: mod.DescribeClientQuotasRequest(
                components=tuple(mod.ComponentData(entity_type=c.entity_type, match_type=c.match_type, match=c.match) for c in wanted),
                strict=strict))  # fmt: skip
            check(response.error_code, response.error_message)
            return response

        response = await self._retrying(attempt)
        found = {
            ClientQuotaEntity((e.entity_type, e.entity_name) for e in entry.entity): {
                v.key: float(v.value) for v in sorted(entry.values, key=lambda v: _key_rank(v.key))
            }
            for entry in response.entries or ()
        }
        return {entity: found[entity] for entity in sorted(found, key=ClientQuotaEntity.sort_key)}

    async def alter_client_quotas(self, alterations: Iterable[ClientQuotaAlteration], validate_only: bool = False) -> None:
        """Apply each alteration's ops to its entity (`validate_only`: only check them).

        Kafka answers per entity and applies those it accepts even when it refuses another:
        this raises the error of the first refused entity (InvalidRequestError with Kafka's
        message, `context["entity"]` the entity as `str` writes it), as create_acls does.
        Entities refused with a retriable error are sent again (the ops are idempotent).
        """
        remaining = list(alterations)

        async def attempt() -> None:
            nonlocal remaining
            sending = remaining
            response = await self._quota_request(ALTER_CLIENT_QUOTAS, lambda mod: mod.AlterClientQuotasRequest(
                entries=tuple(mod.EntryData(
                    entity=tuple(mod.EntityData(entity_type=t, entity_name=n) for t, n in a.entity.entries),
                    ops=tuple(mod.OpData(key=key, value=0.0 if value is None else value, remove=value is None) for key, value in a.ops))
                    for a in sending),
                validate_only=validate_only))  # fmt: skip
            # Kafka's controller answers from a map of entities: match by entity, not by position.
            outcomes = {ClientQuotaEntity((e.entity_type, e.entity_name) for e in entry.entity): (entry.error_code, entry.error_message)
                        for entry in response.entries}  # fmt: skip
            failures: list[tuple[ClientQuotaAlteration, BrokerResponseError]] = []
            for alteration in sending:
                outcome = outcomes.get(alteration.entity)
                if outcome is None:
                    error: BrokerResponseError = UnknownServerError("the response has no result for the entity", entity=str(alteration.entity))
                    failures.append((alteration, error))
                elif outcome[0]:
                    failures.append((alteration, error_for(outcome[0], outcome[1], entity=str(alteration.entity))))
            remaining = [alteration for alteration, error in failures if error.retriable]
            for _, error in failures:
                if not error.retriable:
                    raise error
            if failures:
                raise failures[0][1]

        await self._retrying(attempt)
