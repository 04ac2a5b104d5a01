"""Topic administration on a broker that has not yet heard of a topic another broker made (its
view is read from the store now and then): DeleteTopics by name or by topic id, and
DescribeConfigs, find it in the store, as Kafka's controller would, instead of answering
UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_TOPIC_ID; CreateTopics and auto-creation refuse a name
that collides with it. A real SQLite store and bucket directory, the broker's own Registry,
and the request handlers."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kio.schema.errors import ErrorCode

from cold_tier.local import LocalObjectStore
from cold_tier.remote_log import RemoteLogReader
from diskless.broker.handlers.configs import handle_describe_configs
from diskless.broker.handlers.topics import handle_create_topics, handle_delete_topics
from diskless.broker.quotas.client_quotas import ClientQuotas
from diskless.broker.registry import Registry, RegistrySettings
from diskless.broker.tiering.remote_log import RemoteStorage
from diskless.broker.tiering.uploader import Uploader
from metadata import MetadataStore, UnknownTopic, open_metadata_store

TOPIC_RESOURCE = 2


@contextlib.asynccontextmanager
async def registry_of(tmp_path: Path, node_id: int) -> AsyncIterator[tuple[Registry, MetadataStore]]:
    """Broker `node_id`'s Registry, loaded, over a real SQLite store and a directory bucket."""
    store = await open_metadata_store(f"sqlite:///{tmp_path / 'metadata.db'}")
    bucket = LocalObjectStore(tmp_path / "bucket")
    reader = RemoteLogReader(bucket)
    try:
        uploader = Uploader(bucket, lambda: [], lambda: 0)
        registry = Registry(RegistrySettings(node_id, tmp_path / "logs", {}, 1, 10**9), store, RemoteStorage(bucket, store, reader), uploader, None, lambda: 0)
        await registry.load()
        yield registry, store
    finally:
        await reader.close()
        await store.close()


def request(body: Any, version: int) -> Any:
    return SimpleNamespace(header=SimpleNamespace(api_version=version, client_id="admin"), body=body)


async def test_a_topic_another_broker_made_is_deleted_and_described_here(tmp_path: Path) -> None:
    async with registry_of(tmp_path, 2) as (registry, store):
        security = SimpleNamespace(allowed=lambda *args: True, require=lambda *args: None)
        broker = SimpleNamespace(registry=registry, security=security, settings=SimpleNamespace(node_id=2), client_quotas=ClientQuotas(), clock=lambda: 0)
        # Another broker makes three topics; this one's view has none of them.
        by_name, by_id, described = [await store.create_topic(f"t-{uuid.uuid4().hex[:8]}", 1, {"retention.ms": "1000"}) for _ in range(3)]
        assert registry.topics == {}

        body = SimpleNamespace(resources=[SimpleNamespace(resource_type=TOPIC_RESOURCE, resource_name=described.name, configuration_keys=["retention.ms"])])
        [result] = (await handle_describe_configs(broker, request(body, 4))).results
        assert (result.error_code, [(c.name, c.value) for c in result.configs]) == (ErrorCode.none, [("retention.ms", "1000")])

        body = SimpleNamespace(topics=[SimpleNamespace(name=by_name.name, topic_id=uuid.UUID(int=0)), SimpleNamespace(name=None, topic_id=by_id.topic_id)], timeout_ms=30_000)
        answers = (await handle_delete_topics(broker, request(body, 6))).responses
        assert [(a.name, a.topic_id, a.error_code) for a in answers] == [
            (by_name.name, by_name.topic_id, ErrorCode.none), (by_id.name, by_id.topic_id, ErrorCode.none),
        ]  # fmt: skip
        for gone in (by_name, by_id):
            try:
                await store.get_topic(gone.name)
                raise AssertionError(f"{gone.name} is still in the store")
            except UnknownTopic:
                pass
        body = SimpleNamespace(topics=[SimpleNamespace(name=None, topic_id=uuid.uuid4())], timeout_ms=30_000)
        [unknown] = (await handle_delete_topics(broker, request(body, 6))).responses
        assert unknown.error_code is ErrorCode.unknown_topic_id


async def test_a_name_colliding_with_a_topic_another_broker_made_is_refused_here(tmp_path: Path) -> None:
    """The collision check is the store's: this broker's view does not have the topic yet."""
    async with registry_of(tmp_path, 2) as (registry, store):
        security = SimpleNamespace(require_create_topic=lambda name: None)
        broker = SimpleNamespace(registry=registry, security=security, settings=SimpleNamespace(node_id=2), client_quotas=ClientQuotas(), clock=lambda: 0)
        made = await store.create_topic(f"c{uuid.uuid4().hex[:8]}.orders", 1, {})
        clash = made.name.replace(".", "_")
        assert registry.topics == {}

        wanted = SimpleNamespace(name=clash, num_partitions=1, replication_factor=1, assignments=(), configs=())
        body = SimpleNamespace(topics=[wanted], validate_only=False, timeout_ms=30_000)
        [answered] = (await handle_create_topics(broker, request(body, 7))).topics
        assert (answered.name, answered.error_code, answered.error_message, answered.num_partitions) == (
            clash, ErrorCode.invalid_topic_exception, f"Topic '{clash}' collides with existing topic: {made.name}", -1,
        )  # fmt: skip
        assert await registry.auto_create_topic(clash) is None
        assert [t.name for t in await store.list_topics()] == [made.name]
