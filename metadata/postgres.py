"""The PostgreSQL backend of `MetadataStore`: the store the brokers of a cluster share.

Driver: asyncpg. It is asyncio-native (no thread hop per call, unlike SQLite's worker
thread), speaks the binary protocol with prepared statements cached per connection (a
metadata call is a handful of small statements; asyncpg's per-statement overhead is the
lowest of the Python drivers), ships a bounded connection pool of its own, and is one
dependency with wheels for every platform we target, well maintained (MagicStack). psycopg 3
would need psycopg-pool beside it and a libpq or its binary extra; its advantages (libpq's
full DSN support, server-side cursors, COPY in both directions) are not what this store
needs. asyncpg's prepared-statement cache needs a session-pooling proxy, not PgBouncer's
transaction mode (or `statement_cache_size=0`, not exposed here).

Calls. Each call is one transaction on one connection taken from the pool (at most
`pool_max_size` per store; a call waits for a free one). Isolation is READ COMMITTED with
explicit row locks; `postgres_ops` says which and why, and how every write that concerns a
partition is a compare-and-set on its leader epoch. The store may be shared by every task of
the event loop it was opened on.

Order. Calls about the same partition (epoch bumps, log start offset, producer snapshot,
catalogue and WAL deletions) and about the same group (its offsets, its consumer group state)
run one at a time, in the order they were made, as on SQLite; unrelated calls run side by side
on the pool.

Time. The server's `statement_timeout` is `timeout_ms`, and so is the budget of one call,
retries included: a call answers (or raises) within about `timeout_ms` whatever the
database does, never hangs.

Faults. A lost or refused connection (the database down, restarting, unreachable) is
retried with exponential backoff inside the call's budget when that is safe: always if the
transaction had not reached COMMIT (it was rolled back), and after that only for operations
that are idempotent (reads, upserts, monotonic updates). Otherwise, and once the budget is
spent, the call raises `MetadataStorageError` whose reason says the database is unreachable;
the broker maps it to a retriable Kafka error. One warning is logged when the database
becomes unreachable and one line when it answers again. Nothing needs reopening: the pool
replaces dead connections on the next call. A statement that hits the timeout, a wrong
password or an unknown database raise `MetadataStorageError` at once, with a reason that
says so.

Crash. PostgreSQL's COMMIT is durable (with the server's default `synchronous_commit`); a
broker crash rolls back its open transactions: at most the calls in flight are lost, never
half of one.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from types import TracebackType
from typing import Any, Self, TypeVar

import asyncpg

from . import postgres_cluster_ops as cluster_ops
from . import postgres_ops as ops
from . import postgres_config_ops as config_ops
from . import postgres_security_ops as security_ops
from . import postgres_txn_ops as txn_ops
from .transactions import TransactionRecord
from .errors import MetadataError, MetadataStorageError, MetadataStoreClosed
from .model import (
    BrokerRegistration,
    PartitionLeadership,
    PRODUCER_ID_BLOCK_SIZE,
    CommittedOffset,
    ProducerIdBlock,
    ProducerSnapshot,
    RemoteSegment,
    RemoteSegmentState,
    TopicMetadata,
    WalBatch,
)
from .security import AclBinding, StoredScramCredential
from .postgres_notify import ClusterChangeListener
from .postgres_schema import migrate, schema_version
from .postgres_url import PostgresSettings, PostgresUrl, parse_postgres_url

log = logging.getLogger(__name__)

T = TypeVar("T")

_FIRST_BACKOFF_S = 0.05
_MAX_BACKOFF_S = 1.0
_CLOSE_TIMEOUT_S = 10.0

# Errors after which the connection is gone or was refused: worth another connection.
_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,  # refused, reset, unreachable
    TimeoutError,  # connect timeout, or no answer
    asyncpg.PostgresConnectionError,  # SQLSTATE class 08, and "connection was closed in the middle of operation"
    asyncpg.CannotConnectNowError,  # 57P03: the server is starting up or shutting down
    asyncpg.AdminShutdownError,  # 57P01: pg_ctl stop -m fast
    asyncpg.CrashShutdownError,  # 57P02
    asyncpg.TooManyConnectionsError,  # 53300
)
# The transaction was rolled back by the server; running it again is always safe.
_ROLLED_BACK_ERRORS = (asyncpg.SerializationError, asyncpg.DeadlockDetectedError)
# The database refused us for good: no retry helps.
_ACCESS_ERRORS = (asyncpg.InvalidAuthorizationSpecificationError, asyncpg.InvalidCatalogNameError)


def _is_connection_error(e: BaseException) -> bool:
    if isinstance(e, asyncpg.InterfaceError):  # "connection is closed", but also misuse
        return "closed" in str(e) and not isinstance(e, asyncpg.ClientConfigurationError)
    if isinstance(e, asyncpg.InternalClientError):
        # A pooled connection the server ended while it sat idle (end_broker_sessions) fails
        # its next use so: "cannot switch to state ...; another operation is in progress".
        return "another operation" in str(e)
    return isinstance(e, _CONNECTION_ERRORS)


async def _no_session_state(conn: asyncpg.Connection) -> None:
    return None


def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


async def commit_offsets(
    conn: asyncpg.Connection, group_id: str, offsets: list[CommittedOffset], coordinator: tuple[int, int] | None
) -> None:
    """The store's OffsetCommit (named so for error messages). One round trip when every partition exists and the
    coordinator's slot is at its epoch (the common case); else the transaction that finds the typed error."""
    if not await ops.commit_offsets_at_once(conn, group_id, offsets, coordinator):
        async with conn.transaction():
            await ops.commit_offsets(conn, group_id, offsets, coordinator)


class _OrderedKeys:
    """FIFO locks by key, created on demand and dropped when nobody holds or waits: calls
    with the same key run one at a time in the order they asked (asyncio.Lock is fair)."""

    def __init__(self) -> None:
        self._locks: dict[Hashable, tuple[asyncio.Lock, list[int]]] = {}

    @asynccontextmanager
    async def hold(self, key: Hashable | None) -> AsyncIterator[None]:
        if key is None:
            yield
            return
        lock, users = self._locks.setdefault(key, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if users[0] == 0:
                del self._locks[key]


SESSION_NAME = "diskless"  # application_name, until a broker registers


def broker_session_name(node_id: int, incarnation: str) -> str:
    """The application_name of a broker's database sessions (at most 63 bytes are kept)."""
    return f"diskless broker {node_id} {incarnation}"[:63]


def _connect_args(s: PostgresSettings, session_name: str) -> dict[str, Any]:
    return {
        "timeout": s.connect_timeout_ms / 1000,
        # A client-side guard for a server that stops answering altogether.
        "command_timeout": s.timeout_ms / 1000 + 1.0,
        "server_settings": {
            "application_name": session_name,
            "statement_timeout": str(s.timeout_ms),
            "idle_in_transaction_session_timeout": str(max(2 * s.timeout_ms, 10_000)),
            # A broker that vanished mid-transaction (a dead network path) is noticed within
            # about half a minute, not the system's two hours: its locks go with it.
            "tcp_keepalives_idle": "10",
            "tcp_keepalives_interval": "5",
            "tcp_keepalives_count": "3",
        },
    }


class PostgresMetadataStore:
    """`MetadataStore` on a PostgreSQL database. Open with
    `await PostgresMetadataStore.open("postgresql://...")` (or `open_metadata_store(url)`):
    the schema is migrated before it returns."""

    def __init__(self, url: PostgresUrl, pool: asyncpg.Pool) -> None:
        self._url = url
        self._settings: PostgresSettings = url.settings
        self._pool = pool
        self._ordered = _OrderedKeys()
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._closing: asyncio.Future[None] | None = None
        self._unreachable = False
        self._producer_id_lock = asyncio.Lock()
        self._producer_id_block: ProducerIdBlock | None = None
        self._next_producer_id = 0
        self._listener: ClusterChangeListener | None = None
        self._session_name = SESSION_NAME

    @classmethod
    async def open(cls, url: str | PostgresUrl, *, migrate_schema: bool = True) -> Self:
        """Connect and migrate (unless `migrate_schema` is false: tools that only look).
        Raises MetadataStorageError (unreachable within the timeout, wrong password, unknown
        database), UnsupportedSchemaVersion."""
        parsed = parse_postgres_url(url) if isinstance(url, str) else url
        s = parsed.settings
        pool = asyncpg.create_pool(
            parsed.dsn,
            min_size=0,  # connect on demand: open() then retries like any call
            # No reset query on release (one round trip per call saved): calls leave no session
            # state behind (SET LOCAL and xact advisory locks end with their transaction), and
            # asyncpg rolls back any transaction left open before the custom reset runs.
            reset=_no_session_state,
            max_size=s.pool_max_size,
            **_connect_args(s, SESSION_NAME),
        )
        try:
            await pool  # with min_size=0 this makes no connection
        except Exception as e:
            raise MetadataStorageError("open", f"{parsed.location}: {_describe(e)}") from e
        store = cls(parsed, pool)
        try:
            if migrate_schema:
                await store._run("open", lambda conn: migrate(conn, parsed.location), idempotent=True, transaction=False)
            else:  # still prove the database answers, with the same errors as open
                await store._run("open", schema_version, idempotent=True)
        except BaseException:
            pool.terminate()
            raise
        return store

    @property
    def location(self) -> str:
        return self._url.location

    def __repr__(self) -> str:
        return f"PostgresMetadataStore({self._url.location!r})"

    # --- the one way to the database ---------------------------------------------------------

    async def _run(
        self,
        operation: str,
        fn: Callable[..., Awaitable[T]],
        *args: Any,
        idempotent: bool,
        transaction: bool = True,
    ) -> T:
        """Run `fn(conn, *args)` in one transaction, retrying lost connections as the
        module header says, within `timeout_ms`."""
        loop = asyncio.get_running_loop()
        budget_s = self._settings.timeout_ms / 1000
        deadline = loop.time() + budget_s
        backoff_s = _FIRST_BACKOFF_S
        while True:
            committing = False
            try:
                # The hard bound: a little over the budget, so the server's own timeout fires first.
                async with asyncio.timeout(max(deadline - loop.time(), 0.0) + 1.0):
                    async with self._pool.acquire(timeout=max(deadline - loop.time(), 0.001)) as conn:
                        if not transaction:
                            result = await fn(conn, *args)
                        else:
                            async with conn.transaction():
                                result = await fn(conn, *args)
                                committing = True  # leaving the block sends COMMIT
                self._reachable_again()
                return result
            except MetadataError:
                raise
            except asyncpg.QueryCanceledError as e:
                raise MetadataStorageError(
                    operation, f"{self._url.location}: timed out after {self._settings.timeout_ms} ms ({e})"
                ) from e
            except _ACCESS_ERRORS as e:
                raise MetadataStorageError(operation, f"{self._url.location}: {e}") from e
            except Exception as e:
                rolled_back = isinstance(e, _ROLLED_BACK_ERRORS)
                if not rolled_back and not _is_connection_error(e):
                    raise MetadataStorageError(operation, f"{self._url.location}: {_describe(e)}") from e
                if not rolled_back:
                    self._became_unreachable(e)
                if committing and not idempotent and not rolled_back:
                    raise MetadataStorageError(
                        operation,
                        f"database unreachable at {self._url.location} while committing; the change may or may "
                        f"not have been applied ({_describe(e)})",
                    ) from e
                if loop.time() + backoff_s >= deadline:
                    what = "transaction kept being rolled back" if rolled_back else "database unreachable"
                    raise MetadataStorageError(
                        operation,
                        f"{what} at {self._url.location} for {self._settings.timeout_ms} ms ({_describe(e)})",
                    ) from e
                await asyncio.sleep(backoff_s * random.uniform(0.5, 1.0))
                backoff_s = min(backoff_s * 2, _MAX_BACKOFF_S)

    def _became_unreachable(self, e: BaseException) -> None:
        if not self._unreachable:
            self._unreachable = True
            log.warning("metadata database at %s is unreachable (%s); calls retry until it answers", self._url.location, _describe(e))

    def _reachable_again(self) -> None:
        if self._unreachable:
            self._unreachable = False
            log.warning("metadata database at %s answers again", self._url.location)

    async def _call(
        self,
        fn: Callable[..., Awaitable[T]],
        *args: Any,
        idempotent: bool,
        key: Hashable | None = None,
        transaction: bool = True,
    ) -> T:
        with self._counted():
            async with self._ordered.hold(key):
                return await self._run(fn.__name__, fn, *args, idempotent=idempotent, transaction=transaction)

    @contextmanager
    def _counted(self) -> Iterator[None]:
        """Count a call in flight from before its first await: close() waits for every call
        made before it."""
        if self._closing is not None:
            raise MetadataStoreClosed(self._url.location)
        self._in_flight += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    # --- topics ----------------------------------------------------------------------------

    async def create_topic(
        self, name: str, num_partitions: int, configs: Mapping[str, str], topic_id: uuid.UUID | None = None
    ) -> TopicMetadata:
        return await self._call(
            ops.create_topic, name, num_partitions, dict(configs), topic_id, idempotent=False, key=("topic", name)
        )

    async def get_topic(self, name: str) -> TopicMetadata:
        return await self._call(ops.get_topic, name, idempotent=True)

    async def get_topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata:
        return await self._call(ops.get_topic_by_id, topic_id, idempotent=True)

    async def list_topics(self) -> list[TopicMetadata]:
        return await self._call(ops.list_topics, idempotent=True)

    async def delete_topic(self, name: str) -> TopicMetadata:
        return await self._call(ops.delete_topic, name, idempotent=False, key=("topic", name))

    async def alter_topic_configs(
        self, name: str, set_configs: Mapping[str, str], delete_configs: Iterable[str]
    ) -> TopicMetadata:
        return await self._call(
            ops.alter_topic_configs, name, dict(set_configs), frozenset(delete_configs),
            idempotent=True, key=("topic", name),
        )  # fmt: skip

    async def create_partitions(self, name: str, new_total: int) -> TopicMetadata:
        return await self._call(ops.create_partitions, name, new_total, idempotent=False, key=("topic", name))

    # --- partition state -------------------------------------------------------------------

    async def set_log_start_offset(
        self, topic: str, partition: int, offset: int, *, leader_epoch: int | None = None
    ) -> int:
        return await self._call(
            ops.set_log_start_offset, topic, partition, offset, leader_epoch,
            idempotent=True, key=("partition", topic, partition),
        )  # fmt: skip

    async def get_log_start_offsets(self, topic: str) -> dict[int, int]:
        return await self._call(ops.get_log_start_offsets, topic, idempotent=True)

    async def partitions_with_state(self, topic: str) -> set[int]:
        return await self._call(ops.partitions_with_state, topic, idempotent=True)

    async def get_leader_epoch(self, topic: str, partition: int) -> int:
        return await self._call(ops.get_leader_epoch, topic, partition, idempotent=True)

    async def bump_leader_epoch(self, topic: str, partition: int) -> int:
        return await self._call(
            ops.bump_leader_epoch, topic, partition, idempotent=False, key=("partition", topic, partition)
        )

    # --- consumer group offsets ------------------------------------------------------------

    async def commit_offsets(
        self, group_id: str, offsets: Iterable[CommittedOffset], coordinator: tuple[int, int] | None = None
    ) -> None:
        await self._call(
            commit_offsets, group_id, list(offsets), coordinator, idempotent=True, key=("group", group_id), transaction=False
        )

    async def fetch_offsets(
        self, group_id: str, partitions: Iterable[tuple[str, int]] | None = None
    ) -> list[CommittedOffset]:
        wanted = None if partitions is None else list(partitions)
        return await self._call(ops.fetch_offsets, group_id, wanted, idempotent=True)

    async def delete_offsets(
        self, group_id: str, partitions: Iterable[tuple[str, int]], coordinator: tuple[int, int] | None = None
    ) -> int:
        # Not idempotent: a retry after a lost COMMIT would count 0.
        return await self._call(
            ops.delete_offsets, group_id, list(partitions), coordinator, idempotent=False, key=("group", group_id)
        )

    async def delete_group(self, group_id: str, coordinator: tuple[int, int] | None = None) -> int:
        return await self._call(ops.delete_group, group_id, coordinator, idempotent=False, key=("group", group_id))

    async def list_groups_with_offsets(self) -> list[str]:
        return await self._call(ops.list_groups_with_offsets, idempotent=True)

    async def expire_offsets(self, older_than_ms: int) -> int:
        return await self._call(ops.expire_offsets, older_than_ms, idempotent=False)

    async def expire_group_offsets(
        self, group_id: str, older_than_ms: int, coordinator: tuple[int, int] | None = None
    ) -> int:
        return await self._call(
            ops.expire_group_offsets, group_id, older_than_ms, coordinator, idempotent=False, key=("group", group_id)
        )

    # --- consumer groups (KIP-848) ---------------------------------------------------------

    async def put_consumer_group(self, group_id: str, state: str, coordinator: tuple[int, int] | None = None) -> None:
        await self._call(txn_ops.put_consumer_group, group_id, state, coordinator, idempotent=True, key=("group", group_id))

    async def get_consumer_group(self, group_id: str) -> str | None:
        return await self._call(txn_ops.get_consumer_group, group_id, idempotent=True, transaction=False)

    async def list_consumer_groups(self) -> list[str]:
        return await self._call(txn_ops.list_consumer_groups, idempotent=True, transaction=False)

    async def delete_consumer_group(self, group_id: str, coordinator: tuple[int, int] | None = None) -> None:
        await self._call(txn_ops.delete_consumer_group, group_id, coordinator, idempotent=True, key=("group", group_id))

    # --- producer ids and state ------------------------------------------------------------

    async def allocate_producer_id(self) -> int:
        with self._counted():
            async with self._producer_id_lock:  # fair: ids come out in call order
                return await self._allocate_producer_id()

    async def _allocate_producer_id(self) -> int:
        block = self._producer_id_block
        if block is None or self._next_producer_id > block.last_producer_id:
            # Idempotent enough: a block claimed by a COMMIT whose answer was lost is skipped.
            block = await self._run(
                "allocate_producer_id", ops.claim_producer_id_block, PRODUCER_ID_BLOCK_SIZE, idempotent=True
            )
            self._producer_id_block = block
            self._next_producer_id = block.first_producer_id
        producer_id = self._next_producer_id
        self._next_producer_id += 1
        return producer_id

    async def put_producer_snapshot(
        self, topic: str, partition: int, snapshot: ProducerSnapshot, *, leader_epoch: int
    ) -> None:
        await self._call(
            ops.put_producer_snapshot, topic, partition, snapshot, leader_epoch,
            idempotent=True, key=("partition", topic, partition),
        )  # fmt: skip

    async def get_producer_snapshot(self, topic: str, partition: int) -> ProducerSnapshot | None:
        return await self._call(ops.get_producer_snapshot, topic, partition, idempotent=True)

    # --- remote segment catalogue ----------------------------------------------------------

    async def add_remote_segment(self, segment: RemoteSegment) -> RemoteSegment:
        return await self._call(
            ops.add_remote_segment, segment, idempotent=False, key=("partition", segment.topic, segment.partition)
        )

    async def commit_remote_segment(
        self, topic: str, partition: int, base_offset: int, object_key: str, *, leader_epoch: int
    ) -> RemoteSegment:
        return await self._call(
            ops.commit_remote_segment, topic, partition, base_offset, object_key, leader_epoch,
            idempotent=False, key=("partition", topic, partition),
        )  # fmt: skip

    async def replace_remote_segments(
        self, topic: str, partition: int, base_offset: int, object_key: str, replaced: Sequence[tuple[int, str]], *,
        leader_epoch: int, forget_aborted: Sequence[int] = (),
    ) -> RemoteSegment:
        return await self._call(
            ops.replace_remote_segments, topic, partition, base_offset, object_key, list(replaced), leader_epoch, list(forget_aborted),
            idempotent=False, key=("partition", topic, partition),
        )  # fmt: skip

    async def list_remote_segments(
        self,
        topic: str,
        partition: int,
        states: Iterable[RemoteSegmentState | str] = (RemoteSegmentState.COMMITTED,),
    ) -> list[RemoteSegment]:
        return await self._call(ops.list_remote_segments, topic, partition, list(states), idempotent=True)

    async def mark_remote_segment_deleting(
        self, topic: str, partition: int, base_offset: int, object_key: str, *, leader_epoch: int
    ) -> RemoteSegment:
        return await self._call(
            ops.mark_remote_segment_deleting, topic, partition, base_offset, object_key, leader_epoch,
            idempotent=False, key=("partition", topic, partition),
        )  # fmt: skip

    async def remove_remote_segment(
        self, topic: str, partition: int, base_offset: int, object_key: str, *, leader_epoch: int
    ) -> None:
        await self._call(
            ops.remove_remote_segment, topic, partition, base_offset, object_key, leader_epoch,
            idempotent=False, key=("partition", topic, partition),
        )  # fmt: skip

    # --- write-ahead objects ---------------------------------------------------------------

    async def commit_wal_object(self, object_key: str, batches: Sequence[WalBatch]) -> None:
        # Idempotent by design: a retried commit of the same object writes the same rows.
        await self._call(ops.commit_wal_object, object_key, tuple(batches), idempotent=True)

    async def list_wal_batches(self, topic: str, partition: int, from_offset: int = 0) -> list[WalBatch]:
        return await self._call(ops.list_wal_batches, topic, partition, from_offset, idempotent=True)

    async def delete_wal_batches_below(self, topic: str, partition: int, offset: int, *, leader_epoch: int) -> int:
        return await self._call(
            ops.delete_wal_batches_below, topic, partition, offset, leader_epoch,
            idempotent=False, key=("partition", topic, partition),
        )  # fmt: skip

    async def list_unreferenced_wal_objects(self) -> list[str]:
        return await self._call(ops.list_unreferenced_wal_objects, idempotent=True)

    async def delete_wal_object(self, object_key: str) -> None:
        await self._call(ops.delete_wal_object, object_key, idempotent=True)

    async def recorded_wal_objects(self, object_keys: Sequence[str]) -> set[str]:
        return await self._call(ops.recorded_wal_objects, tuple(object_keys), idempotent=True)

    # --- cluster ---------------------------------------------------------------------------

    async def get_or_create_cluster_id(self, proposed: str) -> str:
        return await self._call(cluster_ops.get_or_create_cluster_id, proposed, idempotent=True)

    # --- membership and leadership ----------------------------------------------------------

    async def list_coordinator_slots(self) -> list[PartitionLeadership]:
        return await self._call(cluster_ops.list_coordinator_slots, idempotent=True, transaction=False)

    async def create_coordinator_slots(self, count: int) -> int:
        return await self._call(cluster_ops.create_coordinator_slots, count, idempotent=True)

    async def set_coordinator_slots(self, moves: Sequence[tuple[int, int | None, int]]) -> list[int | None]:
        return await self._call(cluster_ops.set_coordinator_slots, tuple(moves), idempotent=False, key=("slots",))

    async def register_broker(
        self, node_id: int, host: str, port: int, rack: str | None, incarnation: str, session_timeout_ms: int,
        listeners: Sequence[tuple[str, str, int]] = (),
    ) -> None:
        await self._name_sessions(broker_session_name(node_id, incarnation))
        await self._call(
            cluster_ops.register_broker, node_id, host, port, rack, incarnation, session_timeout_ms, tuple(listeners), idempotent=True
        )

    async def heartbeat_broker(self, node_id: int, incarnation: str, session_timeout_ms: int) -> bool:
        return await self._call(cluster_ops.heartbeat_broker, node_id, incarnation, session_timeout_ms, idempotent=True, transaction=False)

    async def end_broker_sessions(self, node_id: int, incarnation: str) -> int:
        return await self._call(cluster_ops.end_sessions, broker_session_name(node_id, incarnation), idempotent=True, transaction=False)

    async def _name_sessions(self, name: str) -> None:
        """Name this store's database sessions after the broker (`application_name`), so that
        the controller can end them once the broker's session expired (end_broker_sessions).
        Connections already open are replaced as they come back to the pool."""
        if name == self._session_name:
            return
        self._session_name = name
        self._pool.set_connect_args(self._url.dsn, **_connect_args(self._settings, name))
        await self._pool.expire_connections()

    async def unregister_broker(self, node_id: int, incarnation: str) -> None:
        await self._call(cluster_ops.unregister_broker, node_id, incarnation, idempotent=True, transaction=False)

    async def list_brokers(self) -> list[BrokerRegistration]:
        return await self._call(cluster_ops.list_brokers, idempotent=True, transaction=False)

    async def acquire_lease(self, name: str, holder: int, duration_ms: int) -> bool:
        return await self._call(cluster_ops.acquire_lease, name, holder, duration_ms, idempotent=True, transaction=False)

    async def release_lease(self, name: str, holder: int) -> None:
        await self._call(cluster_ops.release_lease, name, holder, idempotent=True, transaction=False)

    async def lease_holder(self, name: str) -> int | None:
        return await self._call(cluster_ops.lease_holder, name, idempotent=True, transaction=False)

    async def watch_cluster(self, changed: Callable[[], None]) -> None:
        if self._listener is None:
            self._listener = ClusterChangeListener(self._url.dsn, self._settings.connect_timeout_ms / 1000, changed)
            self._listener.start()

    async def list_partition_leaders(self) -> list[PartitionLeadership]:
        return await self._call(cluster_ops.list_partition_leaders, idempotent=True, transaction=False)

    async def set_partition_leader(self, topic: str, partition: int, leader_id: int | None, expected_epoch: int) -> int:
        return await self._call(
            cluster_ops.set_partition_leader, topic, partition, leader_id, expected_epoch, idempotent=False, key=("partition", topic, partition)
        )

    async def set_partition_leaders(self, topic: str, moves: Sequence[tuple[int, int | None, int]]) -> list[int | None]:
        return await self._call(cluster_ops.set_partition_leaders, topic, tuple(moves), idempotent=False, key=("topic", topic))

    async def set_preferred_leaders(self, topic: str, preferred: Sequence[tuple[int, int | None]]) -> None:
        await self._call(cluster_ops.set_preferred_leaders, topic, tuple(preferred), idempotent=True, key=("topic", topic))

    # --- security --------------------------------------------------------------------------

    async def list_scram_credentials(self, users: Sequence[str] | None = None) -> list[StoredScramCredential]:
        users_arg = None if users is None else tuple(users)
        return await self._call(security_ops.list_scram_credentials, users_arg, idempotent=True, transaction=False)

    async def alter_scram_credentials(
        self, upsertions: Sequence[StoredScramCredential], deletions: Sequence[tuple[str, str]]
    ) -> None:
        await self._call(security_ops.alter_scram_credentials, tuple(upsertions), tuple(deletions), idempotent=True)

    async def list_acls(self) -> list[AclBinding]:
        return await self._call(security_ops.list_acls, idempotent=True, transaction=False)

    async def create_acls(self, bindings: Sequence[AclBinding]) -> None:
        await self._call(security_ops.create_acls, tuple(bindings), idempotent=True)

    async def delete_acls(self, bindings: Sequence[AclBinding]) -> int:
        return await self._call(security_ops.delete_acls, tuple(bindings), idempotent=False)

    # --- configs of other resources ------------------------------------------------------------

    async def list_resource_configs(self, resource_type: str) -> dict[str, dict[str, str]]:
        return await self._call(config_ops.list_resource_configs, resource_type, idempotent=True, transaction=False)

    async def set_resource_configs(self, resource_type: str, resource_name: str, configs: Mapping[str, str]) -> None:
        await self._call(config_ops.set_resource_configs, resource_type, resource_name, dict(configs), idempotent=True)

    # --- transactions ----------------------------------------------------------------------------

    async def put_transaction(self, record: TransactionRecord, coordinator: tuple[int, int] | None = None) -> None:
        await self._call(txn_ops.put_transaction, record, coordinator, idempotent=True)

    async def list_transactions(self) -> list[TransactionRecord]:
        return await self._call(txn_ops.list_transactions, idempotent=True, transaction=False)

    async def list_pending_offset_transactions(self, group_id: str) -> list[TransactionRecord]:
        return await self._call(txn_ops.list_pending_offset_transactions, group_id, idempotent=True, transaction=False)

    async def delete_transaction(self, transactional_id: str, coordinator: tuple[int, int] | None = None) -> None:
        await self._call(txn_ops.delete_transaction, transactional_id, coordinator, idempotent=True)

    async def put_aborted_transactions(
        self, topic: str, partition: int, entries: Sequence[tuple[int, int, int]], *, delete_below: int, leader_epoch: int
    ) -> None:
        await self._call(
            txn_ops.put_aborted_transactions, topic, partition, list(entries), delete_below, leader_epoch,
            idempotent=True, key=("partition", topic, partition),
        )  # fmt: skip

    async def list_aborted_transactions(self, topic: str, partition: int) -> list[tuple[int, int, int]]:
        return await self._call(txn_ops.list_aborted_transactions, topic, partition, idempotent=True, transaction=False)

    # --- administration (diskless metadata migrate / check) -------------------------------------

    async def schema_version(self) -> int:
        """The database's schema version; 0 when it was never migrated."""
        return await self._call(schema_version, idempotent=True)

    async def migrate(self) -> tuple[int, int]:
        """Bring the schema to SCHEMA_VERSION; (version found, version now)."""
        with self._counted():
            return await self._run(
                "migrate", lambda conn: migrate(conn, self._url.location), idempotent=True, transaction=False
            )

    async def row_counts(self, tables: Sequence[str]) -> dict[str, int]:
        return await self._call(ops.row_counts, tuple(tables), idempotent=True)

    # --- lifecycle -------------------------------------------------------------------------

    async def close(self) -> None:
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        if self._listener is not None:
            await self._listener.stop()
        await self._idle.wait()  # the calls already made finish first
        try:
            await asyncio.wait_for(self._pool.close(), _CLOSE_TIMEOUT_S)
        except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            self._pool.terminate()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
