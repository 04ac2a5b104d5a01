"""The embedded SQLite backend of `MetadataStore`.

Threading. One connection, owned by one dedicated worker thread (a single-thread
executor). Every call submits one function to that thread and awaits it, so SQLite never
runs on the event loop and the loop keeps serving while a transaction or an fsync takes its
time. The single thread also serialises the calls: transactions never interleave within one
store, and they run in the order they were made. The store may be shared by every task of
the event loop it was opened on; it is not for other threads.

Durability. The file is in WAL mode with `synchronous = FULL`: COMMIT returns only after
the write-ahead log has been fsynced, so a commit that was acknowledged survives kill -9,
and also a power cut or a kernel crash. `NORMAL` would have been enough for kill -9 (the
WAL is in the OS page cache before COMMIT returns) but can lose the last commits on power
loss, and the broker relies on ordering across media: it registers a segment as committed
here and then deletes the local copy, so the registration must be on disk first. Metadata
writes are few (offset commits, segment catalogue, topic changes), so the fsync per commit
is cheap next to what it protects. WAL also lets readers in other processes (tools, a second
broker on the same host) read while a write is in progress; writers take the lock with
BEGIN IMMEDIATE and wait up to `BUSY_TIMEOUT_S` for one another.

Crash. SQLite's WAL recovery on the next open rolls back any transaction that had not
committed; a crash can lose at most the call that was in flight, never half of it.

Cancellation. Cancelling a call's task before the worker picks it up drops it; once it has
started it runs to completion (commit or rollback) whatever happens to the awaiting task.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, Self, TypeVar

from . import sqlite_cluster_ops as cluster_ops
from . import sqlite_ops as ops
from . import sqlite_config_ops as config_ops
from . import sqlite_security_ops as security_ops
from . import sqlite_txn_ops as txn_ops
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
from .sqlite_schema import ensure_schema

MEMORY = ":memory:"
BUSY_TIMEOUT_S = 10.0

T = TypeVar("T")


def _connect(path: str) -> sqlite3.Connection:
    """Open and prepare the one connection. Runs on the worker thread, which then owns it."""
    if path != MEMORY:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    # isolation_level=None: no implicit BEGIN; ops.py writes every BEGIN and COMMIT itself.
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        (journal_mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
        if path != MEMORY and journal_mode != "wal":
            raise MetadataStorageError("open", f"{path}: cannot use WAL mode, journal mode is {journal_mode}")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        ensure_schema(conn, path)
    except BaseException:
        conn.close()
        raise
    return conn


class SqliteMetadataStore:
    """`MetadataStore` on one SQLite file. Open with `await SqliteMetadataStore.open(path)`
    (or `open_metadata_store("sqlite:///...")`); `path` is a filesystem path or ":memory:"."""

    def __init__(self, path: str, executor: ThreadPoolExecutor, conn: sqlite3.Connection) -> None:
        self._path = path
        self._executor = executor
        self._conn = conn  # used on the worker thread only; sqlite3's check_same_thread enforces it
        self._closing: asyncio.Future[None] | None = None
        # Transaction states waiting for the next group commit, and the task writing them.
        self._transaction_writes: list[tuple[TransactionRecord, tuple[int, int] | None, asyncio.Future[None]]] = []
        self._transaction_flush: asyncio.Task[None] | None = None
        # Producer id block state, touched on the worker thread only.
        self._producer_id_block: ProducerIdBlock | None = None
        self._next_producer_id = 0

    @classmethod
    async def open(cls, path: str) -> Self:
        if path != MEMORY:
            path = os.path.abspath(path)
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="metadata-sqlite")
        try:
            conn = await asyncio.get_running_loop().run_in_executor(executor, cls._guarded, "open", _connect, (path,))
        except BaseException:
            executor.shutdown(wait=False)
            raise
        return cls(path, executor, conn)

    @property
    def path(self) -> str:
        return self._path

    def __repr__(self) -> str:
        return f"SqliteMetadataStore({self._path!r})"

    # --- the worker thread -----------------------------------------------------------------

    @staticmethod
    def _guarded(operation: str, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        try:
            return fn(*args)
        except MetadataError:
            raise
        except sqlite3.Error as e:
            raise MetadataStorageError(operation, f"{type(e).__name__}: {e}") from e

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._closing is not None:
            raise MetadataStoreClosed(self._path)
        loop = asyncio.get_running_loop()
        # run_in_executor submits before returning, so calls queue in the order they were made.
        return await loop.run_in_executor(self._executor, self._guarded, fn.__name__, fn, (self._conn, *args))

    def _allocate_producer_id(self, conn: sqlite3.Connection) -> int:
        block = self._producer_id_block
        if block is None or self._next_producer_id > block.last_producer_id:
            block = self._producer_id_block = ops.claim_producer_id_block(conn, PRODUCER_ID_BLOCK_SIZE)
            self._next_producer_id = block.first_producer_id
        producer_id = self._next_producer_id
        self._next_producer_id += 1
        return producer_id

    # --- topics ----------------------------------------------------------------------------

    async def create_topic(
        self, name: str, num_partitions: int, configs: Mapping[str, str], topic_id: uuid.UUID | None = None
    ) -> TopicMetadata:
        return await self._call(ops.create_topic, name, num_partitions, dict(configs), topic_id)

    async def get_topic(self, name: str) -> TopicMetadata:
        return await self._call(ops.get_topic, name)

    async def get_topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata:
        return await self._call(ops.get_topic_by_id, topic_id)

    async def list_topics(self) -> list[TopicMetadata]:
        return await self._call(ops.list_topics)

    async def delete_topic(self, name: str) -> TopicMetadata:
        return await self._call(ops.delete_topic, name)

    async def alter_topic_configs(
        self, name: str, set_configs: Mapping[str, str], delete_configs: Iterable[str]
    ) -> TopicMetadata:
        return await self._call(ops.alter_topic_configs, name, dict(set_configs), frozenset(delete_configs))

    async def create_partitions(self, name: str, new_total: int) -> TopicMetadata:
        return await self._call(ops.create_partitions, name, new_total)

    # --- partition state -------------------------------------------------------------------

    async def set_log_start_offset(
        self, topic: str, partition: int, offset: int, *, leader_epoch: int | None = None
    ) -> int:
        return await self._call(ops.set_log_start_offset, topic, partition, offset, leader_epoch)

    async def get_log_start_offsets(self, topic: str) -> dict[int, int]:
        return await self._call(ops.get_log_start_offsets, topic)

    async def partitions_with_state(self, topic: str) -> set[int]:
        return await self._call(ops.partitions_with_state, topic)

    async def get_leader_epoch(self, topic: str, partition: int) -> int:
        return await self._call(ops.get_leader_epoch, topic, partition)

    async def bump_leader_epoch(self, topic: str, partition: int) -> int:
        return await self._call(ops.bump_leader_epoch, topic, partition)

    # --- consumer group offsets ------------------------------------------------------------

    async def commit_offsets(
        self, group_id: str, offsets: Iterable[CommittedOffset], coordinator: tuple[int, int] | None = None
    ) -> None:
        await self._call(ops.commit_offsets, group_id, list(offsets), coordinator)

    async def fetch_offsets(
        self, group_id: str, partitions: Iterable[tuple[str, int]] | None = None
    ) -> list[CommittedOffset]:
        return await self._call(ops.fetch_offsets, group_id, None if partitions is None else list(partitions))

    async def delete_offsets(
        self, group_id: str, partitions: Iterable[tuple[str, int]], coordinator: tuple[int, int] | None = None
    ) -> int:
        return await self._call(ops.delete_offsets, group_id, list(partitions), coordinator)

    async def delete_group(self, group_id: str, coordinator: tuple[int, int] | None = None) -> int:
        return await self._call(ops.delete_group, group_id, coordinator)

    async def list_groups_with_offsets(self) -> list[str]:
        return await self._call(ops.list_groups_with_offsets)

    async def expire_offsets(self, older_than_ms: int) -> int:
        return await self._call(ops.expire_offsets, older_than_ms)

    async def expire_group_offsets(
        self, group_id: str, older_than_ms: int, coordinator: tuple[int, int] | None = None
    ) -> int:
        return await self._call(ops.expire_group_offsets, group_id, older_than_ms, coordinator)

    # --- consumer groups (KIP-848) ---------------------------------------------------------

    async def put_consumer_group(self, group_id: str, state: str, coordinator: tuple[int, int] | None = None) -> None:
        await self._call(txn_ops.put_consumer_group, group_id, state, coordinator)

    async def get_consumer_group(self, group_id: str) -> str | None:
        return await self._call(txn_ops.get_consumer_group, group_id)

    async def list_consumer_groups(self) -> list[str]:
        return await self._call(txn_ops.list_consumer_groups)

    async def delete_consumer_group(self, group_id: str, coordinator: tuple[int, int] | None = None) -> None:
        await self._call(txn_ops.delete_consumer_group, group_id, coordinator)

    # --- producer ids and state ------------------------------------------------------------

    async def allocate_producer_id(self) -> int:
        return await self._call(self._allocate_producer_id)

    async def put_producer_snapshot(
        self, topic: str, partition: int, snapshot: ProducerSnapshot, *, leader_epoch: int
    ) -> None:
        await self._call(ops.put_producer_snapshot, topic, partition, snapshot, leader_epoch)

    async def get_producer_snapshot(self, topic: str, partition: int) -> ProducerSnapshot | None:
        return await self._call(ops.get_producer_snapshot, topic, partition)

    # --- remote segment catalogue ----------------------------------------------------------

    async def add_remote_segment(self, segment: RemoteSegment) -> RemoteSegment:
        return await self._call(ops.add_remote_segment, segment)

    async def commit_remote_segment(
        self, topic: str, partition: int, base_offset: int, object_key: str, *, leader_epoch: int
    ) -> RemoteSegment:
        return await self._call(ops.commit_remote_segment, topic, partition, base_offset, object_key, leader_epoch)

    async def replace_remote_segments(
        self, topic: str, partition: int, base_offset: int, object_key: str, replaced: Sequence[tuple[int, str]], *,
        leader_epoch: int, forget_aborted: Sequence[int] = (),
    ) -> RemoteSegment:
        return await self._call(
            ops.replace_remote_segments, topic, partition, base_offset, object_key, list(replaced), leader_epoch, list(forget_aborted)
        )

    async def list_remote_segments(
        self,
        topic: str,
        partition: int,
        states: Iterable[RemoteSegmentState | str] = (RemoteSegmentState.COMMITTED,),
    ) -> list[RemoteSegment]:
        return await self._call(ops.list_remote_segments, topic, partition, list(states))

    async def mark_remote_segment_deleting(
        self, topic: str, partition: int, base_offset: int, object_key: str, *, leader_epoch: int
    ) -> RemoteSegment:
        return await self._call(
            ops.mark_remote_segment_deleting, topic, partition, base_offset, object_key, leader_epoch
        )

    async def remove_remote_segment(
        self, topic: str, partition: int, base_offset: int, object_key: str, *, leader_epoch: int
    ) -> None:
        await self._call(ops.remove_remote_segment, topic, partition, base_offset, object_key, leader_epoch)

    # --- write-ahead objects ---------------------------------------------------------------

    async def commit_wal_object(self, object_key: str, batches: Sequence[WalBatch]) -> None:
        await self._call(ops.commit_wal_object, object_key, tuple(batches))

    async def list_wal_batches(self, topic: str, partition: int, from_offset: int = 0) -> list[WalBatch]:
        return await self._call(ops.list_wal_batches, topic, partition, from_offset)

    async def delete_wal_batches_below(self, topic: str, partition: int, offset: int, *, leader_epoch: int) -> int:
        return await self._call(ops.delete_wal_batches_below, topic, partition, offset, leader_epoch)

    async def list_unreferenced_wal_objects(self) -> list[str]:
        return await self._call(ops.list_unreferenced_wal_objects)

    async def delete_wal_object(self, object_key: str) -> None:
        await self._call(ops.delete_wal_object, object_key)

    async def recorded_wal_objects(self, object_keys: Sequence[str]) -> set[str]:
        return await self._call(ops.recorded_wal_objects, tuple(object_keys))

    # --- cluster ---------------------------------------------------------------------------

    async def get_or_create_cluster_id(self, proposed: str) -> str:
        return await self._call(cluster_ops.get_or_create_cluster_id, proposed)

    # --- membership and leadership ----------------------------------------------------------

    async def list_coordinator_slots(self) -> list[PartitionLeadership]:
        return await self._call(cluster_ops.list_coordinator_slots)

    async def create_coordinator_slots(self, count: int) -> int:
        return await self._call(cluster_ops.create_coordinator_slots, count)

    async def set_coordinator_slots(self, moves: Sequence[tuple[int, int | None, int]]) -> list[int | None]:
        return await self._call(cluster_ops.set_coordinator_slots, tuple(moves))

    async def register_broker(
        self, node_id: int, host: str, port: int, rack: str | None, incarnation: str, session_timeout_ms: int,
        listeners: Sequence[tuple[str, str, int]] = (),
    ) -> None:
        await self._call(cluster_ops.register_broker, node_id, host, port, rack, incarnation, session_timeout_ms, tuple(listeners))

    async def heartbeat_broker(self, node_id: int, incarnation: str, session_timeout_ms: int) -> bool:
        return await self._call(cluster_ops.heartbeat_broker, node_id, incarnation, session_timeout_ms)

    async def end_broker_sessions(self, node_id: int, incarnation: str) -> int:
        return 0  # one process holds the file: nothing of another broker to end

    async def unregister_broker(self, node_id: int, incarnation: str) -> None:
        await self._call(cluster_ops.unregister_broker, node_id, incarnation)

    async def list_brokers(self) -> list[BrokerRegistration]:
        return await self._call(cluster_ops.list_brokers)

    async def acquire_lease(self, name: str, holder: int, duration_ms: int) -> bool:
        return await self._call(cluster_ops.acquire_lease, name, holder, duration_ms)

    async def release_lease(self, name: str, holder: int) -> None:
        await self._call(cluster_ops.release_lease, name, holder)

    async def lease_holder(self, name: str) -> int | None:
        return await self._call(cluster_ops.lease_holder, name)

    async def watch_cluster(self, changed: Callable[[], None]) -> None:
        pass  # one broker per SQLite store: no other writer to hear

    async def list_partition_leaders(self) -> list[PartitionLeadership]:
        return await self._call(cluster_ops.list_partition_leaders)

    async def set_partition_leader(self, topic: str, partition: int, leader_id: int | None, expected_epoch: int) -> int:
        return await self._call(cluster_ops.set_partition_leader, topic, partition, leader_id, expected_epoch)

    async def set_partition_leaders(self, topic: str, moves: Sequence[tuple[int, int | None, int]]) -> list[int | None]:
        return await self._call(cluster_ops.set_partition_leaders, topic, tuple(moves))

    async def set_preferred_leaders(self, topic: str, preferred: Sequence[tuple[int, int | None]]) -> None:
        await self._call(cluster_ops.set_preferred_leaders, topic, tuple(preferred))

    # --- security --------------------------------------------------------------------------

    async def list_scram_credentials(self, users: Sequence[str] | None = None) -> list[StoredScramCredential]:
        return await self._call(security_ops.list_scram_credentials, None if users is None else tuple(users))

    async def alter_scram_credentials(
        self, upsertions: Sequence[StoredScramCredential], deletions: Sequence[tuple[str, str]]
    ) -> None:
        await self._call(security_ops.alter_scram_credentials, tuple(upsertions), tuple(deletions))

    async def list_acls(self) -> list[AclBinding]:
        return await self._call(security_ops.list_acls)

    async def create_acls(self, bindings: Sequence[AclBinding]) -> None:
        await self._call(security_ops.create_acls, tuple(bindings))

    async def delete_acls(self, bindings: Sequence[AclBinding]) -> int:
        return await self._call(security_ops.delete_acls, tuple(bindings))

    # --- configs of other resources ------------------------------------------------------------

    async def list_resource_configs(self, resource_type: str) -> dict[str, dict[str, str]]:
        return await self._call(config_ops.list_resource_configs, resource_type)

    async def set_resource_configs(self, resource_type: str, resource_name: str, configs: Mapping[str, str]) -> None:
        await self._call(config_ops.set_resource_configs, resource_type, resource_name, dict(configs))

    # --- transactions ----------------------------------------------------------------------------

    async def put_transaction(self, record: TransactionRecord, coordinator: tuple[int, int] | None = None) -> None:
        """Group commit: the states put while one SQLite transaction is being written go in the
        next one together (one fsync for many transactional ids), each checked against its own
        coordinator epoch; each call returns once its state is durable, or raises its error."""
        if self._closing is not None:
            raise MetadataStoreClosed(self._path)
        written: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._transaction_writes.append((record, coordinator, written))
        if self._transaction_flush is None:
            self._transaction_flush = asyncio.create_task(self._flush_transactions(), name="metadata-sqlite-transactions")
        await written

    async def _flush_transactions(self) -> None:
        try:
            while self._transaction_writes:
                batch, self._transaction_writes = self._transaction_writes, []
                try:
                    errors = await self._call(txn_ops.put_transactions, [(record, coordinator) for record, coordinator, _ in batch])
                except Exception as exc:  # the whole batch failed: each caller gets the error
                    errors = [exc] * len(batch)
                for (_, _, written), error in zip(batch, errors):
                    if written.done():
                        continue
                    if error is None:
                        written.set_result(None)
                    else:
                        written.set_exception(error)
        finally:
            self._transaction_flush = None

    async def list_transactions(self) -> list[TransactionRecord]:
        return await self._call(txn_ops.list_transactions)

    async def list_pending_offset_transactions(self, group_id: str) -> list[TransactionRecord]:
        return await self._call(txn_ops.list_pending_offset_transactions, group_id)

    async def delete_transaction(self, transactional_id: str, coordinator: tuple[int, int] | None = None) -> None:
        await self._call(txn_ops.delete_transaction, transactional_id, coordinator)

    async def put_aborted_transactions(
        self, topic: str, partition: int, entries: Sequence[tuple[int, int, int]], *, delete_below: int, leader_epoch: int
    ) -> None:
        await self._call(txn_ops.put_aborted_transactions, topic, partition, list(entries), delete_below, leader_epoch)

    async def list_aborted_transactions(self, topic: str, partition: int) -> list[tuple[int, int, int]]:
        return await self._call(txn_ops.list_aborted_transactions, topic, partition)

    # --- lifecycle -------------------------------------------------------------------------

    async def close(self) -> None:
        if self._closing is None:
            # Queued behind every call already made, so those finish first.
            self._closing = asyncio.get_running_loop().run_in_executor(
                self._executor, self._guarded, "close", self._conn.close, ()
            )
            self._closing.add_done_callback(lambda _: self._executor.shutdown(wait=False))
        await asyncio.shield(self._closing)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
