"""The metadata store's operations as PostgreSQL transactions.

One coroutine per `MetadataStore` method, each taking a connection on which the caller
(`postgres.py`) has already begun the transaction, and which it commits or rolls back.
Decisions are the pure checks of `model`; this module moves rows and takes the row locks
that make those checks hold when several brokers write to one database at once.

Isolation is READ COMMITTED, PostgreSQL's default; what must not change between a check and
the write it guards is locked explicitly, in one order (topic row, then partition rows by
(topic_id, partition)), so concurrent transactions queue instead of deadlocking:

- Leader-epoch fencing is a compare-and-set: the partition row is read `FOR SHARE` (the WAL
  commit) or `FOR NO KEY UPDATE` (catalogue and producer state, which check more than the
  epoch), the epoch compared by `model.check_leader_epoch`, and the write made in the same
  transaction. `bump_leader_epoch` updates that row, so it waits for every fenced write in
  flight and every later one sees the new epoch: a write under an old epoch either commits
  before the bump or is refused after it, never in between.
- Topic changes lock the topic row (`FOR NO KEY UPDATE`, `FOR UPDATE` to delete it); offset
  commits take `FOR KEY SHARE` on the topic rows they name, so a concurrent delete either
  waits or makes them UnknownTopic, and a config change does not block them.
- Uniqueness races between brokers (topic names and ids, object keys, the cluster id) are
  settled by the unique indexes with INSERT ... ON CONFLICT DO NOTHING, then a read of the
  row that won: the loser gets the same typed error as on SQLite.
- Topic names that differ only in '.' against '_' (Kafka refuses the second) have no unique
  index to settle them: their creations take turns on a transaction-scoped advisory lock
  keyed on the unified name, and each looks for the other's row once it holds it.
- Producer-id blocks come from one counter row updated with RETURNING: the row lock hands
  each block to exactly one store.

Every coroutine here runs on the event loop of the store that owns the pool.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

import asyncpg

from .errors import (
    CoordinatorFenced,
    RemoteSegmentAlreadyExists,
    RemoteSegmentOverlap,
    TopicAlreadyExists,
    TopicIdAlreadyExists,
    UnknownRemoteSegment,
    UnknownTopic,
    UnknownTopicId,
    WalBatchConflict,
)
from .model import (
    CommittedOffset,
    ProducerIdBlock,
    ProducerSnapshot,
    ProducerStateEntry,
    RemoteSegment,
    RemoteSegmentState,
    TopicMetadata,
    WalBatch,
    apply_config_changes,
    check_leader_epoch,
    check_offset,
    check_partition,
    check_remote_segment_removable,
    check_remote_segment_transition,
    check_topic_collision,
    has_collision_chars,
    unify_collision_chars,
    validate_partition_count,
    validate_producer_snapshot,
    validate_remote_segment,
    validate_topic_id,
    validate_topic_name,
)
from .postgres_notify import NOTIFY

Conn = asyncpg.Connection

# The first key of the advisory locks that serialize creating topics whose names collide
# (create_topic); the second is the unified name's hash. Two-key advisory locks never meet
# the one-key migration lock (postgres_schema.MIGRATION_LOCK_ID). "dtop" in ASCII.
TOPIC_NAME_LOCK_CLASS = 0x64746F70


def _uuid(value: uuid.UUID) -> uuid.UUID:
    # asyncpg returns its own UUID subclass; the store hands out plain ones.
    return uuid.UUID(int=value.int)


def _encode_metadata(metadata: str) -> bytes:
    return metadata.encode("utf-8", "surrogatepass")


def _decode_metadata(raw: bytes) -> str:
    return bytes(raw).decode("utf-8", "surrogatepass")


# --- topics ------------------------------------------------------------------------------


async def _topic_row(conn: Conn, name: str, lock: str = "") -> tuple[uuid.UUID, int]:
    """(topic_id, num_partitions) of the topic, or UnknownTopic. `lock` is a locking clause."""
    row = await conn.fetchrow(f"SELECT topic_id, num_partitions FROM topics WHERE name = $1 {lock}", name)
    if row is None:
        raise UnknownTopic(name)
    return row["topic_id"], row["num_partitions"]


async def _load_topic(conn: Conn, topic_id: uuid.UUID, name: str, num_partitions: int) -> TopicMetadata:
    rows = await conn.fetch("SELECT name, value FROM topic_configs WHERE topic_id = $1", topic_id)
    return TopicMetadata(name, _uuid(topic_id), num_partitions, {r["name"]: r["value"] for r in rows})


async def _partition_row(conn: Conn, topic: str, partition: int, lock: str = "") -> tuple[uuid.UUID, int]:
    """(topic_id, leader_epoch) of an existing partition, its row locked by `lock`."""
    topic_id, num_partitions = await _topic_row(conn, topic)
    check_partition(topic, partition, num_partitions)
    leader_epoch = await conn.fetchval(
        f"SELECT leader_epoch FROM partitions WHERE topic_id = $1 AND partition = $2 {lock}", topic_id, partition
    )
    if leader_epoch is None:  # the topic was deleted since we read it
        raise UnknownTopic(topic)
    return topic_id, leader_epoch


async def _fenced_partition(conn: Conn, topic: str, partition: int, leader_epoch: int) -> uuid.UUID:
    """topic_id of the partition, its row locked until the transaction ends, once
    `leader_epoch` is known to be its current epoch (the compare of compare-and-set)."""
    topic_id, current_leader_epoch = await _partition_row(conn, topic, partition, "FOR NO KEY UPDATE")
    check_leader_epoch(topic, partition, leader_epoch, current_leader_epoch)
    return topic_id


async def create_topic(
    conn: Conn, name: str, num_partitions: int, configs: Mapping[str, str], topic_id: uuid.UUID | None
) -> TopicMetadata:
    validate_topic_name(name)
    validate_partition_count(name, None, num_partitions)
    topic_id = uuid.uuid4() if topic_id is None else topic_id
    validate_topic_id(topic_id)
    topic = TopicMetadata(name, topic_id, num_partitions, configs)
    unified = unify_collision_chars(name)
    if has_collision_chars(name):
        # Two brokers creating a.b and a_b at once would each miss the other's uncommitted row:
        # the creations of names that unify alike take turns on one advisory lock (until
        # COMMIT), so the second one's read below sees the first one's row.
        await conn.execute("SELECT pg_advisory_xact_lock($1, hashtext($2))", TOPIC_NAME_LOCK_CLASS, unified)
    # ON CONFLICT DO NOTHING waits for a concurrent insert of the same name or id to commit
    # or roll back: of two brokers creating one topic, exactly one row goes in.
    inserted = await conn.fetchval(
        "INSERT INTO topics (topic_id, name, num_partitions) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING"
        " RETURNING topic_id",
        topic_id, name, num_partitions,
    )  # fmt: skip
    if inserted is None:
        if await conn.fetchval("SELECT 1 FROM topics WHERE name = $1", name):
            raise TopicAlreadyExists(name)
        existing = await conn.fetchval("SELECT name FROM topics WHERE topic_id = $1", topic_id)
        raise TopicIdAlreadyExists(topic_id, existing)
    if has_collision_chars(name):  # raising rolls our row back
        rows = await conn.fetch("SELECT name FROM topics WHERE replace(name, '.', '_') = $1", unified)
        check_topic_collision(name, (row["name"] for row in rows))
    await conn.executemany(
        "INSERT INTO topic_configs (topic_id, name, value) VALUES ($1, $2, $3)",
        [(topic_id, key, value) for key, value in topic.configs.items()],
    )
    await conn.execute(
        "INSERT INTO partitions (topic_id, partition) SELECT $1, p FROM generate_series(0, $2 - 1) AS p",
        topic_id, num_partitions,
    )  # fmt: skip
    await conn.execute(NOTIFY)
    return topic


async def get_topic(conn: Conn, name: str) -> TopicMetadata:
    topic_id, num_partitions = await _topic_row(conn, name)
    return await _load_topic(conn, topic_id, name, num_partitions)


async def get_topic_by_id(conn: Conn, topic_id: uuid.UUID) -> TopicMetadata:
    row = await conn.fetchrow("SELECT name, num_partitions FROM topics WHERE topic_id = $1", topic_id)
    if row is None:
        raise UnknownTopicId(topic_id)
    return await _load_topic(conn, topic_id, row["name"], row["num_partitions"])


async def list_topics(conn: Conn) -> list[TopicMetadata]:
    # One statement, one snapshot: read as two, a topic created between them came back
    # without its configs (READ COMMITTED), and a broker following the store applied that.
    rows = await conn.fetch(
        "SELECT t.topic_id, t.name, t.num_partitions, c.name AS config, c.value FROM topics t"
        " LEFT JOIN topic_configs c ON c.topic_id = t.topic_id ORDER BY t.name"
    )
    topics: dict[uuid.UUID, tuple[str, int, dict[str, str]]] = {}
    for r in rows:
        _, _, configs = topics.setdefault(r["topic_id"], (r["name"], r["num_partitions"], {}))
        if r["config"] is not None:
            configs[r["config"]] = r["value"]
    return [TopicMetadata(name, _uuid(topic_id), partitions, configs) for topic_id, (name, partitions, configs) in topics.items()]


async def delete_topic(conn: Conn, name: str) -> TopicMetadata:
    topic_id, num_partitions = await _topic_row(conn, name, "FOR UPDATE")
    topic = await _load_topic(conn, topic_id, name, num_partitions)
    # ON DELETE CASCADE takes configs, partitions, offsets, catalogue rows, WAL batches and
    # producer state.
    await conn.execute("DELETE FROM topics WHERE topic_id = $1", topic_id)
    await conn.execute(NOTIFY)
    return topic


async def alter_topic_configs(
    conn: Conn, name: str, set_configs: Mapping[str, str], delete_configs: Iterable[str]
) -> TopicMetadata:
    delete_configs = frozenset(delete_configs)
    topic_id, num_partitions = await _topic_row(conn, name, "FOR NO KEY UPDATE")
    topic = await _load_topic(conn, topic_id, name, num_partitions)
    configs = apply_config_changes(name, topic.configs, set_configs, delete_configs)
    if delete_configs:
        await conn.execute(
            "DELETE FROM topic_configs WHERE topic_id = $1 AND name = ANY($2::text[])", topic_id, list(delete_configs)
        )
    await conn.executemany(
        "INSERT INTO topic_configs (topic_id, name, value) VALUES ($1, $2, $3)"
        " ON CONFLICT (topic_id, name) DO UPDATE SET value = excluded.value",
        [(topic_id, key, value) for key, value in set_configs.items()],
    )
    await conn.execute(NOTIFY)
    return replace(topic, configs=configs)


async def create_partitions(conn: Conn, name: str, new_total: int) -> TopicMetadata:
    topic_id, num_partitions = await _topic_row(conn, name, "FOR NO KEY UPDATE")
    validate_partition_count(name, num_partitions, new_total)
    await conn.execute("UPDATE topics SET num_partitions = $1 WHERE topic_id = $2", new_total, topic_id)
    await conn.execute(
        "INSERT INTO partitions (topic_id, partition) SELECT $1, p FROM generate_series($2::int, $3 - 1) AS p",
        topic_id, num_partitions, new_total,
    )  # fmt: skip
    await conn.execute(NOTIFY)
    return await _load_topic(conn, topic_id, name, new_total)


# --- partition state ---------------------------------------------------------------------


async def set_log_start_offset(conn: Conn, topic: str, partition: int, offset: int, leader_epoch: int | None) -> int:
    check_offset(topic, partition, offset)
    topic_id, current_leader_epoch = await _partition_row(conn, topic, partition, "FOR NO KEY UPDATE")
    if leader_epoch is not None:
        check_leader_epoch(topic, partition, leader_epoch, current_leader_epoch)
    # GREATEST(): the log start offset only ever moves forward, as Kafka's
    # maybeIncrementLogStartOffset; a stale retention pass cannot resurrect deleted data.
    return await conn.fetchval(
        "UPDATE partitions SET log_start_offset = GREATEST(log_start_offset, $1)"
        " WHERE topic_id = $2 AND partition = $3 RETURNING log_start_offset",
        offset, topic_id, partition,
    )  # fmt: skip


async def get_log_start_offsets(conn: Conn, topic: str) -> dict[int, int]:
    topic_id, _ = await _topic_row(conn, topic)
    rows = await conn.fetch("SELECT partition, log_start_offset FROM partitions WHERE topic_id = $1", topic_id)
    return {r["partition"]: r["log_start_offset"] for r in rows}


async def partitions_with_state(conn: Conn, topic: str) -> set[int]:
    topic_id, _ = await _topic_row(conn, topic)
    rows = await conn.fetch(
        "SELECT DISTINCT partition FROM remote_segments WHERE topic_id = $1"
        " UNION SELECT DISTINCT partition FROM wal_batches WHERE topic_id = $1"
        " UNION SELECT DISTINCT partition FROM aborted_transactions WHERE topic_id = $1",
        topic_id,
    )
    return {r["partition"] for r in rows}


async def get_leader_epoch(conn: Conn, topic: str, partition: int) -> int:
    return (await _partition_row(conn, topic, partition))[1]


async def bump_leader_epoch(conn: Conn, topic: str, partition: int) -> int:
    topic_id, num_partitions = await _topic_row(conn, topic)
    check_partition(topic, partition, num_partitions)
    # The UPDATE waits for every fenced write holding the row; they commit at the old epoch
    # first, and every write after this commit sees the new one.
    leader_epoch = await conn.fetchval(
        "UPDATE partitions SET leader_epoch = leader_epoch + 1 WHERE topic_id = $1 AND partition = $2"
        " RETURNING leader_epoch",
        topic_id, partition,
    )  # fmt: skip
    if leader_epoch is None:
        raise UnknownTopic(topic)
    return leader_epoch


# --- consumer group offsets --------------------------------------------------------------

# A coordinator's writes read its slot's row FOR SHARE and compare the epoch before writing, in
# the same transaction: a slot move (an UPDATE of the row) waits for the write, or the write
# sees the move and raises CoordinatorFenced. The slot row is locked before any topic row.


async def _check_coordinator(conn: Conn, coordinator: tuple[int, int] | None) -> None:
    """CoordinatorFenced unless the slot is at the epoch (always passes for None)."""
    if coordinator is not None:
        slot, epoch = coordinator
        found = await conn.fetchval("SELECT epoch FROM coordinator_slots WHERE slot = $1 FOR SHARE", slot)
        if found != epoch:
            raise CoordinatorFenced(slot, epoch, found)


async def commit_offsets_at_once(
    conn: Conn, group_id: str, offsets: Sequence[CommittedOffset], coordinator: tuple[int, int] | None = None
) -> bool:
    """OffsetCommit's common case in one statement, one round trip, outside any explicit
    transaction (the statement is its own): every offset is written if the coordinator's slot
    is at its epoch (CTE `s`, FOR SHARE as `_check_coordinator`) and every (topic, partition)
    exists, none otherwise. Returns whether it wrote them; when it did not, the caller runs
    `commit_offsets`, which finds the typed error to raise."""
    # The last commit of a partition within one request wins, as in `commit_offsets`.
    latest = {(o.topic, o.partition): o for o in offsets}
    rows = list(latest.values())
    try:
        written = await conn.fetchval(
            "WITH w AS (SELECT * FROM unnest($2::text[], $3::int[], $4::bigint[], $5::int[], $6::bytea[], $7::bigint[])"
            "   AS w (topic, partition, committed_offset, leader_epoch, metadata, commit_timestamp_ms)),"
            " s AS (SELECT epoch FROM coordinator_slots WHERE slot = $9 FOR SHARE),"
            " k AS (SELECT w.*, t.topic_id FROM w JOIN topics t"
            "   ON t.name = w.topic AND w.partition >= 0 AND w.partition < t.num_partitions),"
            " ins AS (INSERT INTO committed_offsets (group_id, topic_id, partition, committed_offset, leader_epoch,"
            "   metadata, commit_timestamp_ms) SELECT $1, topic_id, partition, committed_offset, leader_epoch, metadata,"
            "   commit_timestamp_ms FROM k WHERE (SELECT count(*) FROM k) = $8"
            "   AND ($9::int IS NULL OR (SELECT epoch FROM s) = $10::int)"
            "   ON CONFLICT (group_id, topic_id, partition) DO UPDATE SET committed_offset = excluded.committed_offset,"
            "   leader_epoch = excluded.leader_epoch, metadata = excluded.metadata,"
            "   commit_timestamp_ms = excluded.commit_timestamp_ms RETURNING 1)"
            " SELECT count(*) FROM ins",
            group_id, [o.topic for o in rows], [o.partition for o in rows], [o.offset for o in rows],
            [o.leader_epoch for o in rows], [_encode_metadata(o.metadata) for o in rows],
            [o.commit_timestamp_ms for o in rows], len(rows),
            *(coordinator if coordinator is not None else (None, None)),
        )  # fmt: skip
    except asyncpg.ForeignKeyViolationError:  # a topic deleted under us: let commit_offsets say which
        return False
    return written == len(rows)


async def commit_offsets(
    conn: Conn, group_id: str, offsets: Sequence[CommittedOffset], coordinator: tuple[int, int] | None = None
) -> None:
    await _check_coordinator(conn, coordinator)
    topics: dict[str, tuple[uuid.UUID, int]] = {}
    rows = []
    for o in offsets:
        if o.topic not in topics:
            # KEY SHARE: a concurrent delete_topic waits for this commit, or wins and we see no row.
            topics[o.topic] = await _topic_row(conn, o.topic, "FOR KEY SHARE")
        topic_id, num_partitions = topics[o.topic]
        check_partition(o.topic, o.partition, num_partitions)
        rows.append(
            (group_id, topic_id, o.partition, o.offset, o.leader_epoch, _encode_metadata(o.metadata), o.commit_timestamp_ms)
        )
    await conn.executemany(
        "INSERT INTO committed_offsets (group_id, topic_id, partition, committed_offset, leader_epoch, metadata,"
        " commit_timestamp_ms) VALUES ($1, $2, $3, $4, $5, $6, $7)"
        " ON CONFLICT (group_id, topic_id, partition) DO UPDATE SET committed_offset = excluded.committed_offset,"
        " leader_epoch = excluded.leader_epoch, metadata = excluded.metadata,"
        " commit_timestamp_ms = excluded.commit_timestamp_ms",
        rows,
    )


async def fetch_offsets(conn: Conn, group_id: str, partitions: Iterable[tuple[str, int]] | None) -> list[CommittedOffset]:
    wanted = None if partitions is None else {(topic, partition) for topic, partition in partitions}
    rows = await conn.fetch(
        "SELECT t.name, o.partition, o.committed_offset, o.leader_epoch, o.metadata, o.commit_timestamp_ms"
        " FROM committed_offsets o JOIN topics t ON t.topic_id = o.topic_id"
        " WHERE o.group_id = $1 ORDER BY t.name, o.partition",
        group_id,
    )
    return [
        CommittedOffset(r[0], r[1], r[2], r[3], _decode_metadata(r[4]), r[5])
        for r in rows
        if wanted is None or (r[0], r[1]) in wanted
    ]


async def delete_offsets(
    conn: Conn, group_id: str, partitions: Iterable[tuple[str, int]], coordinator: tuple[int, int] | None = None
) -> int:
    await _check_coordinator(conn, coordinator)
    pairs = sorted(set(partitions))
    if not pairs:
        return 0
    status = await conn.execute(
        "DELETE FROM committed_offsets o USING topics t, unnest($2::text[], $3::int[]) AS w (topic, partition)"
        " WHERE o.group_id = $1 AND t.name = w.topic AND o.topic_id = t.topic_id AND o.partition = w.partition",
        group_id, [t for t, _ in pairs], [p for _, p in pairs],
    )  # fmt: skip
    return _rowcount(status)


async def delete_group(conn: Conn, group_id: str, coordinator: tuple[int, int] | None = None) -> int:
    await _check_coordinator(conn, coordinator)
    await conn.execute("DELETE FROM consumer_groups WHERE group_id = $1", group_id)
    return _rowcount(await conn.execute("DELETE FROM committed_offsets WHERE group_id = $1", group_id))


async def list_groups_with_offsets(conn: Conn) -> list[str]:
    rows = await conn.fetch("SELECT DISTINCT group_id FROM committed_offsets ORDER BY 1")
    return [r[0] for r in rows]


async def expire_offsets(conn: Conn, older_than_ms: int) -> int:
    return _rowcount(await conn.execute("DELETE FROM committed_offsets WHERE commit_timestamp_ms < $1", older_than_ms))


async def expire_group_offsets(
    conn: Conn, group_id: str, older_than_ms: int, coordinator: tuple[int, int] | None = None
) -> int:
    await _check_coordinator(conn, coordinator)
    return _rowcount(await conn.execute(
        "DELETE FROM committed_offsets WHERE group_id = $1 AND commit_timestamp_ms < $2", group_id, older_than_ms
    ))  # fmt: skip


def _rowcount(status: str) -> int:
    """Rows affected, from a command tag such as 'DELETE 3'."""
    return int(status.rsplit(" ", 1)[1])


# --- producer ids and state --------------------------------------------------------------


async def claim_producer_id_block(conn: Conn, size: int) -> ProducerIdBlock:
    """Move the cluster's next-block counter past a new block, durably, before any id of it
    is handed out: the row lock gives each block to one store, and after a crash the block's
    unused ids are skipped, never reused."""
    next_block = await conn.fetchval(
        "UPDATE counters SET value = value + $1 WHERE name = 'next_producer_id_block' RETURNING value", size
    )
    return ProducerIdBlock(next_block - size, size)


async def put_producer_snapshot(
    conn: Conn, topic: str, partition: int, snapshot: ProducerSnapshot, leader_epoch: int
) -> None:
    validate_producer_snapshot(topic, partition, snapshot)
    topic_id = await _fenced_partition(conn, topic, partition, leader_epoch)
    # Deleting the snapshot row cascades to its entries: the new snapshot replaces the old whole.
    await conn.execute("DELETE FROM producer_snapshots WHERE topic_id = $1 AND partition = $2", topic_id, partition)
    await conn.execute(
        "INSERT INTO producer_snapshots (topic_id, partition, log_end_offset) VALUES ($1, $2, $3)",
        topic_id, partition, snapshot.log_end_offset,
    )  # fmt: skip
    await conn.executemany(
        "INSERT INTO producer_states (topic_id, partition, producer_id, producer_epoch, last_sequence,"
        " last_offset, offset_delta, last_timestamp_ms, coordinator_epoch, current_txn_first_offset)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        [
            (topic_id, partition, e.producer_id, e.producer_epoch, e.last_sequence, e.last_offset,
             e.offset_delta, e.last_timestamp_ms, e.coordinator_epoch, e.current_txn_first_offset)
            for e in snapshot.entries
        ],
    )  # fmt: skip


async def get_producer_snapshot(conn: Conn, topic: str, partition: int) -> ProducerSnapshot | None:
    topic_id, _ = await _partition_row(conn, topic, partition)
    log_end_offset = await conn.fetchval(
        "SELECT log_end_offset FROM producer_snapshots WHERE topic_id = $1 AND partition = $2", topic_id, partition
    )
    if log_end_offset is None:
        return None
    entries = await conn.fetch(
        "SELECT producer_id, producer_epoch, last_sequence, last_offset, offset_delta, last_timestamp_ms,"
        " coordinator_epoch, current_txn_first_offset FROM producer_states WHERE topic_id = $1 AND partition = $2 ORDER BY producer_id",
        topic_id, partition,
    )  # fmt: skip
    return ProducerSnapshot(log_end_offset, tuple(ProducerStateEntry(*e) for e in entries))


# --- remote segment catalogue ------------------------------------------------------------

_SEGMENT_COLUMNS = "base_offset, last_offset, base_timestamp, max_timestamp, size_bytes, leader_epoch, object_key, state"


def _segment(topic: str, partition: int, row: asyncpg.Record) -> RemoteSegment:
    *fields, state = row
    return RemoteSegment(topic, partition, *fields, state=RemoteSegmentState(state))


async def _load_segment(
    conn: Conn, topic: str, topic_id: uuid.UUID, partition: int, base_offset: int, object_key: str
) -> RemoteSegment:
    row = await conn.fetchrow(
        f"SELECT {_SEGMENT_COLUMNS} FROM remote_segments"
        " WHERE topic_id = $1 AND partition = $2 AND base_offset = $3 AND object_key = $4",
        topic_id, partition, base_offset, object_key,
    )  # fmt: skip
    if row is None:
        raise UnknownRemoteSegment(topic, partition, base_offset, object_key)
    return _segment(topic, partition, row)


async def _set_segment_state(conn: Conn, topic_id: uuid.UUID, segment: RemoteSegment) -> None:
    await conn.execute(
        "UPDATE remote_segments SET state = $1 WHERE topic_id = $2 AND partition = $3 AND base_offset = $4"
        " AND object_key = $5",
        segment.state.value, topic_id, segment.partition, segment.base_offset, segment.object_key,
    )  # fmt: skip


async def add_remote_segment(conn: Conn, segment: RemoteSegment) -> RemoteSegment:
    validate_remote_segment(segment)
    s = segment
    topic_id = await _fenced_partition(conn, s.topic, s.partition, s.leader_epoch)
    # An object key names one object, bucket-wide: the unique index settles races between brokers.
    inserted = await conn.fetchval(
        f"INSERT INTO remote_segments (topic_id, partition, {_SEGMENT_COLUMNS})"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT DO NOTHING RETURNING 1",
        topic_id, s.partition, s.base_offset, s.last_offset, s.base_timestamp, s.max_timestamp, s.size_bytes,
        s.leader_epoch, s.object_key, s.state.value,
    )  # fmt: skip
    if inserted is None:
        raise RemoteSegmentAlreadyExists(s.topic, s.partition, s.base_offset, s.object_key)
    return segment


async def commit_remote_segment(
    conn: Conn, topic: str, partition: int, base_offset: int, object_key: str, leader_epoch: int
) -> RemoteSegment:
    # The partition row stays locked (NO KEY UPDATE) to the end: two commits of overlapping
    # segments cannot both pass the overlap check below.
    topic_id = await _fenced_partition(conn, topic, partition, leader_epoch)
    segment = await _load_segment(conn, topic, topic_id, partition, base_offset, object_key)
    check_remote_segment_transition(segment, RemoteSegmentState.COMMITTED)
    # Readers trust that committed segments never cover the same offset twice.
    overlap = await conn.fetchrow(
        "SELECT base_offset, last_offset FROM remote_segments WHERE topic_id = $1 AND partition = $2"
        " AND state = 'committed' AND base_offset <= $3 AND last_offset >= $4 ORDER BY base_offset LIMIT 1",
        topic_id, partition, segment.last_offset, segment.base_offset,
    )  # fmt: skip
    if overlap is not None:
        raise RemoteSegmentOverlap(topic, partition, segment.base_offset, segment.last_offset, *overlap)
    committed = replace(segment, state=RemoteSegmentState.COMMITTED)
    await _set_segment_state(conn, topic_id, committed)
    return committed


async def replace_remote_segments(
    conn: Conn, topic: str, partition: int, base_offset: int, object_key: str, replaced: Sequence[tuple[int, str]], leader_epoch: int,
    forget_aborted: Sequence[int] = (),
) -> RemoteSegment:
    for old_base, old_key in replaced:
        await mark_remote_segment_deleting(conn, topic, partition, old_base, old_key, leader_epoch)
    committed = await commit_remote_segment(conn, topic, partition, base_offset, object_key, leader_epoch)
    if forget_aborted:
        topic_id, _ = await _partition_row(conn, topic, partition)
        await conn.execute(
            "DELETE FROM aborted_transactions WHERE topic_id = $1 AND partition = $2 AND last_offset = ANY($3::bigint[])",
            topic_id, partition, list(forget_aborted),
        )  # fmt: skip
    return committed


async def list_remote_segments(
    conn: Conn, topic: str, partition: int, states: Iterable[RemoteSegmentState | str]
) -> list[RemoteSegment]:
    states = sorted({RemoteSegmentState(s).value for s in states})
    topic_id, _ = await _partition_row(conn, topic, partition)
    rows = await conn.fetch(
        f"SELECT {_SEGMENT_COLUMNS} FROM remote_segments WHERE topic_id = $1 AND partition = $2"
        " AND state = ANY($3::text[]) ORDER BY base_offset, object_key",
        topic_id, partition, states,
    )  # fmt: skip
    return [_segment(topic, partition, row) for row in rows]


async def mark_remote_segment_deleting(
    conn: Conn, topic: str, partition: int, base_offset: int, object_key: str, leader_epoch: int
) -> RemoteSegment:
    topic_id = await _fenced_partition(conn, topic, partition, leader_epoch)
    segment = await _load_segment(conn, topic, topic_id, partition, base_offset, object_key)
    check_remote_segment_transition(segment, RemoteSegmentState.DELETING)
    deleting = replace(segment, state=RemoteSegmentState.DELETING)
    await _set_segment_state(conn, topic_id, deleting)
    return deleting


async def remove_remote_segment(
    conn: Conn, topic: str, partition: int, base_offset: int, object_key: str, leader_epoch: int
) -> None:
    topic_id = await _fenced_partition(conn, topic, partition, leader_epoch)
    segment = await _load_segment(conn, topic, topic_id, partition, base_offset, object_key)
    check_remote_segment_removable(segment)
    await conn.execute(
        "DELETE FROM remote_segments WHERE topic_id = $1 AND partition = $2 AND base_offset = $3 AND object_key = $4",
        topic_id, partition, base_offset, object_key,
    )  # fmt: skip


# --- write-ahead objects -----------------------------------------------------------------

_WAL_COLUMNS = "base_offset, last_offset, leader_epoch, object_key, position, size_bytes"


async def commit_wal_object(conn: Conn, object_key: str, batches: Sequence[WalBatch]) -> None:
    # 1. Resolve every partition, in the caller's order, so the first unknown one is named. A
    #    batch carrying a topic id goes to that topic only: one made again under its name has
    #    another id, and its epochs start over (WalBatch).
    topics: dict[str, tuple[uuid.UUID, int]] = {}
    for b in batches:
        if b.topic not in topics:
            try:
                topics[b.topic] = await _topic_row(conn, b.topic)
            except UnknownTopic:
                if b.topic_id is None:
                    raise
                raise UnknownTopicId(b.topic_id) from None
        if b.topic_id is not None and b.topic_id != topics[b.topic][0]:
            raise UnknownTopicId(b.topic_id)
        check_partition(b.topic, b.partition, topics[b.topic][1])
    # 2. Lock their rows FOR SHARE in (topic_id, partition) order, one statement: WAL commits
    #    of one partition run side by side, a bump waits for them, and two commits touching
    #    the same partitions lock them in the same order, so they never deadlock.
    keys = sorted({(topics[b.topic][0], b.partition) for b in batches})
    rows = await conn.fetch(
        "SELECT p.topic_id, p.partition, p.leader_epoch FROM partitions p"
        " JOIN unnest($1::uuid[], $2::int[]) AS w (topic_id, partition)"
        " ON p.topic_id = w.topic_id AND p.partition = w.partition"
        " ORDER BY p.topic_id, p.partition FOR SHARE OF p",
        [k[0] for k in keys], [k[1] for k in keys],
    )  # fmt: skip
    epochs = {(r["topic_id"], r["partition"]): r["leader_epoch"] for r in rows}
    # 3. Compare each batch's epoch, in the caller's order; one stale epoch writes nothing.
    for b in batches:
        current = epochs.get((topics[b.topic][0], b.partition))
        if current is None:  # deleted since step 1
            raise UnknownTopic(b.topic) if b.topic_id is None else UnknownTopicId(b.topic_id)
        check_leader_epoch(b.topic, b.partition, b.leader_epoch, current)
    # 4. Write, one statement. A retried commit of the same object (or upload) rewrites its
    #    rows: replace, not fail; but never a row of another leader epoch (WalBatchConflict):
    #    that one is neither replaced nor counted. A batch listed twice counts once (the last).
    await conn.execute("INSERT INTO wal_objects (object_key) VALUES ($1) ON CONFLICT DO NOTHING", object_key)
    written = {(topics[b.topic][0], b.partition, b.base_offset): b for b in batches}
    status = await conn.execute(
        f"INSERT INTO wal_batches (topic_id, partition, {_WAL_COLUMNS})"
        " SELECT w.topic_id, w.partition, w.base_offset, w.last_offset, w.leader_epoch, $1, w.position, w.size_bytes"
        " FROM unnest($2::uuid[], $3::int[], $4::bigint[], $5::bigint[], $6::int[], $7::bigint[], $8::bigint[])"
        " AS w (topic_id, partition, base_offset, last_offset, leader_epoch, position, size_bytes)"
        " ON CONFLICT (topic_id, partition, base_offset) DO UPDATE SET last_offset = excluded.last_offset,"
        " object_key = excluded.object_key, position = excluded.position, size_bytes = excluded.size_bytes"
        " WHERE wal_batches.leader_epoch = excluded.leader_epoch",
        object_key, [k[0] for k in written], [k[1] for k in written], [k[2] for k in written],
        [b.last_offset for b in written.values()], [b.leader_epoch for b in written.values()],
        [b.position for b in written.values()], [b.size_bytes for b in written.values()],
    )  # fmt: skip
    if _rowcount(status) < len(written):
        conflict = await conn.fetchrow(
            "SELECT w.i, b.leader_epoch FROM unnest($1::uuid[], $2::int[], $3::bigint[], $4::int[]) WITH ORDINALITY"
            " AS w (topic_id, partition, base_offset, leader_epoch, i)"
            " JOIN wal_batches b ON b.topic_id = w.topic_id AND b.partition = w.partition AND b.base_offset = w.base_offset"
            " WHERE b.leader_epoch <> w.leader_epoch ORDER BY w.i LIMIT 1",
            [topics[b.topic][0] for b in batches], [b.partition for b in batches], [b.base_offset for b in batches],
            [b.leader_epoch for b in batches],
        )  # fmt: skip
        if conflict is not None:
            b = batches[conflict["i"] - 1]
            raise WalBatchConflict(b.topic, b.partition, b.base_offset, b.leader_epoch, conflict["leader_epoch"])


async def list_wal_batches(conn: Conn, topic: str, partition: int, from_offset: int) -> list[WalBatch]:
    topic_id, _ = await _partition_row(conn, topic, partition)
    rows = await conn.fetch(
        f"SELECT {_WAL_COLUMNS} FROM wal_batches WHERE topic_id = $1 AND partition = $2 AND last_offset >= $3"
        " ORDER BY base_offset",
        topic_id, partition, from_offset,
    )  # fmt: skip
    return [WalBatch(topic, partition, *row) for row in rows]


async def delete_wal_batches_below(conn: Conn, topic: str, partition: int, offset: int, leader_epoch: int) -> int:
    topic_id = await _fenced_partition(conn, topic, partition, leader_epoch)
    status = await conn.execute(
        "DELETE FROM wal_batches WHERE topic_id = $1 AND partition = $2 AND last_offset < $3",
        topic_id, partition, offset,
    )  # fmt: skip
    return _rowcount(status)


async def list_unreferenced_wal_objects(conn: Conn) -> list[str]:
    rows = await conn.fetch(
        "SELECT object_key FROM wal_objects o"
        " WHERE NOT EXISTS (SELECT 1 FROM wal_batches b WHERE b.object_key = o.object_key) ORDER BY object_key"
    )
    return [r[0] for r in rows]


async def delete_wal_object(conn: Conn, object_key: str) -> None:
    await conn.execute("DELETE FROM wal_objects WHERE object_key = $1", object_key)


async def recorded_wal_objects(conn: Conn, object_keys: Sequence[str]) -> set[str]:
    rows = await conn.fetch("SELECT object_key FROM wal_objects WHERE object_key = ANY($1::text[])", list(object_keys))
    return {r[0] for r in rows}


# --- inspection (diskless metadata check) ---------------------------------------------------


async def row_counts(conn: Conn, tables: Sequence[str]) -> dict[str, int]:
    """Rows per table; `tables` are names from the schema, never user input."""
    return {table: await conn.fetchval(f"SELECT count(*) FROM {table}") for table in tables}
