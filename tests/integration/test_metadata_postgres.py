"""PostgreSQL-only metadata tests: schema migrations, refused connections, and a real server
stopped and started again under a store in use. The scenarios every backend shares are in
test_metadata_store.py.

The fault tests stop a server, so they run on one of their own (`own_server`), not on the
session's shared one.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TypeVar

import asyncpg
import pytest

from metadata import (
    CommittedOffset,
    MetadataStorageError,
    TopicMetadata,
    UnsupportedSchemaVersion,
    WalBatch,
    open_metadata_store,
)
from metadata.postgres import PostgresMetadataStore
from metadata.postgres_schema import SCHEMA_VERSION, migrate

from .postgres_server import PostgresServer

T = TypeVar("T")


def name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def versions(url: str) -> list[int]:
    conn = await asyncpg.connect(url)
    try:
        return [r[0] for r in await conn.fetch("SELECT version FROM schema_version ORDER BY version")]
    finally:
        await conn.close()


# --- migrations --------------------------------------------------------------------------


async def test_open_migrates_an_empty_database_to_the_current_version(postgres_database: str) -> None:
    async with await open_metadata_store(postgres_database):
        pass
    assert await versions(postgres_database) == list(range(1, SCHEMA_VERSION + 1))
    async with await open_metadata_store(postgres_database):  # a second open changes nothing
        pass
    assert await versions(postgres_database) == list(range(1, SCHEMA_VERSION + 1))


async def test_a_version_1_database_is_migrated_with_its_data(postgres_database: str) -> None:
    conn = await asyncpg.connect(postgres_database)
    try:
        assert await migrate(conn, "test", target=1) == (0, 1)
        topic_id = uuid.uuid4()
        await conn.execute("INSERT INTO topics (topic_id, name, num_partitions) VALUES ($1, 'old', 2)", topic_id)
        await conn.execute("INSERT INTO partitions (topic_id, partition) VALUES ($1, 0), ($1, 1)", topic_id)
        assert await conn.fetchval("SELECT to_regclass('wal_batches')") is None
    finally:
        await conn.close()
    async with await open_metadata_store(postgres_database) as store:
        assert await store.get_topic("old") == TopicMetadata("old", topic_id, 2, {})
        batch = WalBatch("old", 1, 0, 9, 0, "wal/1", 0, 640)
        await store.commit_wal_object("wal/1", [batch])
        assert await store.list_wal_batches("old", 1) == [batch]
    assert await versions(postgres_database) == list(range(1, SCHEMA_VERSION + 1))


async def test_a_newer_schema_is_refused(postgres_database: str) -> None:
    async with await open_metadata_store(postgres_database):
        pass
    conn = await asyncpg.connect(postgres_database)
    try:
        await conn.execute("INSERT INTO schema_version (version) VALUES (99)")
    finally:
        await conn.close()
    with pytest.raises(UnsupportedSchemaVersion) as e:
        await open_metadata_store(postgres_database)
    assert (e.value.found_version, e.value.supported_version) == (99, SCHEMA_VERSION)
    assert "diskless-test-password" not in str(e.value)


async def test_brokers_starting_at_once_migrate_once(postgres_database: str) -> None:
    stores = await asyncio.gather(*(open_metadata_store(postgres_database) for _ in range(6)))
    try:
        assert await versions(postgres_database) == list(range(1, SCHEMA_VERSION + 1))
        topic = name()
        await stores[0].create_topic(topic, 1, {})
        assert [t.name for t in await stores[5].list_topics()] == [topic]
    finally:
        for store in stores:
            await store.close()


# --- refused and unreachable -------------------------------------------------------------


async def test_a_wrong_password_is_said_at_once(postgres_server: PostgresServer) -> None:
    started = time.monotonic()
    with pytest.raises(MetadataStorageError) as e:
        await open_metadata_store(postgres_server.url(password="wrong"))
    assert "password authentication failed" in e.value.reason
    assert "wrong" not in str(e.value)
    assert time.monotonic() - started < 3


async def test_an_unknown_database_is_said_at_once(postgres_server: PostgresServer) -> None:
    with pytest.raises(MetadataStorageError) as e:
        await open_metadata_store(postgres_server.url("no_such_database"))
    assert 'database "no_such_database" does not exist' in e.value.reason


async def test_nothing_listening_is_unreachable_within_the_timeout() -> None:
    from .postgres_server import free_port

    started = time.monotonic()
    with pytest.raises(MetadataStorageError) as e:
        await open_metadata_store(f"postgresql://u:p@127.0.0.1:{free_port()}/d?timeout_ms=800")
    assert e.value.operation == "open"
    assert "database unreachable" in e.value.reason
    assert time.monotonic() - started < 0.8 + 1.5


# --- faults: the server goes away and comes back ---------------------------------------------


@pytest.fixture(scope="module")
def own_server() -> Iterator[PostgresServer]:
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
async def faulty(own_server: PostgresServer) -> AsyncIterator[tuple[PostgresServer, PostgresMetadataStore, str]]:
    """(the server, a store with a 1.5 s timeout, the database's URL)."""
    url = own_server.create_database("fault")
    store = await open_metadata_store(url + "?timeout_ms=1500&connect_timeout_ms=500")
    assert isinstance(store, PostgresMetadataStore)
    try:
        yield own_server, store, url
    finally:
        if not (own_server.data_dir / "postmaster.pid").exists():
            own_server.restart()
        await store.close()
        own_server.drop_database(url)


async def eventually(call: Callable[[], Awaitable[T]], timeout_s: float = 30.0) -> T:
    """The first result of `call` that is not a MetadataStorageError, within the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await call()
        except MetadataStorageError:
            if time.monotonic() > deadline:
                raise


async def test_calls_fail_fast_while_the_server_is_down_and_work_again_after(faulty) -> None:
    server, store, _ = faulty
    topic = name()
    created = await store.create_topic(topic, 2, {})
    await store.commit_offsets("g", [CommittedOffset(topic, 0, 10, 0, "m", 1)])
    first_id = await store.allocate_producer_id()

    server.stop("fast")
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "list_topics": store.list_topics,
        "commit_offsets": lambda: store.commit_offsets("g", [CommittedOffset(topic, 1, 5, 0, "", 2)]),
        "create_topic": lambda: store.create_topic(name(), 1, {}),
        "bump_leader_epoch": lambda: store.bump_leader_epoch(topic, 0),
        "commit_wal_object": lambda: store.commit_wal_object("wal/x", [WalBatch(topic, 0, 0, 0, 0, "wal/x", 0, 1)]),
        "get_or_create_cluster_id": lambda: store.get_or_create_cluster_id("c"),
    }
    for operation, call in calls.items():
        started = time.monotonic()
        with pytest.raises(MetadataStorageError) as e:
            await call()
        elapsed = time.monotonic() - started
        assert e.value.operation == operation
        assert "database unreachable" in e.value.reason, e.value.reason
        assert elapsed < 1.5 + 1.0, f"{operation} took {elapsed:.1f} s with a 1.5 s timeout"

    server.restart()
    # The same store, not reopened: the pool replaces the dead connections by itself.
    assert await eventually(store.list_topics) == [created]
    assert await store.fetch_offsets("g") == [CommittedOffset(topic, 0, 10, 0, "m", 1)]
    await store.commit_offsets("g", [CommittedOffset(topic, 1, 5, 0, "", 2)])
    assert [o.offset for o in await store.fetch_offsets("g")] == [10, 5]
    assert await store.bump_leader_epoch(topic, 0) == 1
    # The producer id block claimed before the outage goes on.
    assert await store.allocate_producer_id() == first_id + 1


async def test_a_call_made_during_a_short_outage_succeeds_by_retrying(faulty, caplog) -> None:
    server, _, url = faulty
    caplog.set_level(logging.WARNING, logger="metadata.postgres")
    # A budget long enough to outlast the outage: the call retries with backoff until it answers.
    async with await open_metadata_store(url + "?timeout_ms=30000&connect_timeout_ms=500") as patient:
        topic = name()
        await patient.create_topic(topic, 1, {})
        server.stop("fast")
        call = asyncio.ensure_future(patient.list_topics())
        deadline = time.monotonic() + 10
        while not any("is unreachable" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, "the store never said the database was unreachable"
            assert not call.done()
            await asyncio.sleep(0.02)  # polling a condition with a deadline
        server.restart()
        assert [t.name for t in await asyncio.wait_for(call, 30)] == [topic]
    assert any("answers again" in r.getMessage() for r in caplog.records)


async def test_a_statement_that_waits_too_long_times_out(faulty) -> None:
    server, store, url = faulty
    topic = name()
    await store.create_topic(topic, 1, {})
    blocker = await asyncpg.connect(url)
    try:
        tx = blocker.transaction()
        await tx.start()
        await blocker.execute("LOCK TABLE topics IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        with pytest.raises(MetadataStorageError) as e:
            await store.get_topic(topic)
        assert "timed out after 1500 ms" in e.value.reason
        assert 1.4 < time.monotonic() - started < 1.5 + 1.0
        await tx.rollback()
    finally:
        await blocker.close()
    assert (await store.get_topic(topic)).name == topic


# --- cluster changes pushed to watchers (LISTEN/NOTIFY) --------------------------------------


class Heard:
    """A watch_cluster callback: how many times it was called, and a wait for the next one."""

    def __init__(self) -> None:
        self.calls = 0
        self._event = asyncio.Event()

    def __call__(self) -> None:
        self.calls += 1
        self._event.set()

    async def next(self, timeout_s: float = 10.0) -> None:
        await asyncio.wait_for(self._event.wait(), timeout_s)
        self._event.clear()


async def test_a_watching_store_hears_every_kind_of_cluster_change_made_through_another(postgres_database: str) -> None:
    heard = Heard()
    async with await open_metadata_store(postgres_database) as watcher, await open_metadata_store(postgres_database) as other:
        await watcher.watch_cluster(heard)
        await heard.next()  # once listening: whatever changed while nobody listened
        topic = name()
        changes: dict[str, Callable[[], Awaitable[object]]] = {
            "create_topic": lambda: other.create_topic(topic, 2, {}),
            "register_broker": lambda: other.register_broker(7, "127.0.0.1", 9092, "a", "7:x", 3000),
            "set_partition_leaders": lambda: other.set_partition_leaders(topic, [(0, 7, 0), (1, 7, 0)]),
            "set_partition_leader": lambda: other.set_partition_leader(topic, 0, None, 1),
            "create_partitions": lambda: other.create_partitions(topic, 3),
            "alter_topic_configs": lambda: other.alter_topic_configs(topic, {"retention.ms": "1000"}, []),
            "unregister_broker": lambda: other.unregister_broker(7, "7:x"),
            "delete_topic": lambda: other.delete_topic(topic),
        }
        for change, call in changes.items():
            before = heard.calls
            await call()
            await heard.next()
            assert heard.calls == before + 1, change


async def test_watching_resumes_after_the_server_restarts(faulty) -> None:
    server, store, url = faulty
    heard = Heard()
    await store.watch_cluster(heard)
    await heard.next()
    server.stop("fast")
    server.restart()
    await heard.next(30.0)  # listening again: told once, for what it may have missed
    async with await open_metadata_store(url) as other:
        await other.create_topic(name(), 1, {})
        await heard.next()
