"""The configured client quotas of the cluster: kept in the metadata store (entities.py says
how), read at start-up and every `refresh_interval_ms` (AlterClientQuotas through another
broker), written by AlterClientQuotas through this one. The thin async shell around
`ClientQuotas`; only the event-loop task calls it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

from metadata import MetadataStore

from .client_quotas import ClientQuotas
from .entities import RESOURCE_TYPE, Entity, FilterComponent, InvalidQuota, altered, check_filter, entity_of, from_store, matches, resource_name, to_store

log = logging.getLogger(__name__)

# One alteration of AlterClientQuotas: the entity's (type, name) pairs and its ops (key, value, remove).
Alteration = tuple[Sequence[tuple[str, str | None]], Sequence[tuple[str, float, bool]]]


class QuotaConfigs:
    def __init__(self, store: MetadataStore, quotas: ClientQuotas, refresh_interval_ms: int = 2000) -> None:
        self._store = store
        self.quotas = quotas
        self._refresh_interval_ms = refresh_interval_ms
        self._task: asyncio.Task[None] | None = None
        # One AlterClientQuotas or refresh at a time: an alteration reads an entity's values and
        # writes them all back, and a refresh read before it must not put the old ones back.
        self._changing = asyncio.Lock()

    async def load(self) -> None:
        async with self._changing:
            await self._load()

    async def _load(self) -> None:
        configured = from_store(await self._store.list_resource_configs(RESOURCE_TYPE))
        if configured != self.quotas.configured:
            self.quotas.set_configured(configured)
            log.info("client quotas: %s", _describe(configured) or "none")

    def start(self) -> None:
        self._task = asyncio.create_task(self._refresh_loop(), name="client-quota-refresh")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_interval_ms / 1000)
            try:
                await self.load()
            except Exception as exc:  # the store is down: keep the quotas, try again
                log.warning("reading client quotas failed: %s", exc)

    def describe(self, components: Sequence[FilterComponent], strict: bool) -> list[tuple[Entity, dict[str, float]]]:
        """DescribeClientQuotas: the entities the filter takes, with their values (InvalidQuota)."""
        check_filter(components)
        return [(entity, dict(values)) for entity, values in sorted(self.quotas.configured.items(), key=lambda e: resource_name(e[0]))
                if matches(entity, components, strict)]  # fmt: skip

    async def alter(self, alterations: Sequence[Alteration], validate_only: bool) -> list[str | None]:
        """AlterClientQuotas: per alteration, None or why it was refused (INVALID_REQUEST).
        The valid ones are written, each entity's whole set of values at once (two brokers
        altering one entity at the same moment: the last write wins, keys of the other lost)."""
        async with self._changing:
            return await self._alter(alterations, validate_only)

    async def _alter(self, alterations: Sequence[Alteration], validate_only: bool) -> list[str | None]:
        await self._load()
        outcomes: list[str | None] = []
        changes: dict[Entity, dict[str, float]] = {}
        for pairs, ops in alterations:
            try:
                entity = entity_of(pairs)
                changes[entity] = altered(entity, changes.get(entity, self.quotas.configured.get(entity, {})), ops)
                outcomes.append(None)
            except InvalidQuota as exc:
                outcomes.append(str(exc))
        if validate_only or not changes:
            return outcomes
        for entity, values in changes.items():
            await self._store.set_resource_configs(RESOURCE_TYPE, resource_name(entity), to_store(values))
            log.info("client quota of %s is now %s", _entity_text(entity), _values_text(values) or "none")
        configured = dict(self.quotas.configured)
        for entity, values in changes.items():
            if values:
                configured[entity] = values
            else:
                configured.pop(entity, None)
        self.quotas.set_configured(configured)
        return outcomes


def _entity_text(entity: Entity) -> str:
    return ",".join(f"{entity_type}={'<default>' if name is None else name}" for entity_type, name in entity)


def _values_text(values: dict[str, float]) -> str:
    return ",".join(f"{key}={value:g}" for key, value in sorted(values.items()))


def _describe(configured: dict[Entity, dict[str, float]]) -> str:
    return "; ".join(f"{_entity_text(entity)}: {_values_text(values)}" for entity, values in configured.items())
