"""The metadata store's operations as synchronous SQLite transactions.

One function per `MetadataStore` method, each taking the connection first and running one
transaction: writes start with BEGIN IMMEDIATE, so they take the database's write lock
before reading what they check and no other connection (another process sharing the file)
can change it between check and write; multi-statement reads run in one deferred
transaction, so they see a single snapshot. Decisions are the pure checks of `model`; this
module only moves rows.

Called only on the store's worker thread (see `sqlite.py`): the connection is not shared.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace

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


@contextmanager
def _write(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if conn.in_transaction:  # some errors (SQLITE_FULL, ...) have rolled back already
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


@contextmanager
def _read(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("BEGIN")
    try:
        yield
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")


# --- topics ------------------------------------------------------------------------------


def _topic_row(conn: sqlite3.Connection, name: str) -> tuple[str, int]:
    """(topic_id text, num_partitions) of the topic, or UnknownTopic."""
    row = conn.execute("SELECT topic_id, num_partitions FROM topics WHERE name = ?", (name,)).fetchone()
    if row is None:
        raise UnknownTopic(name)
    return row


def _load_topic(conn: sqlite3.Connection, topic_id: str, name: str, num_partitions: int) -> TopicMetadata:
    configs = dict(conn.execute("SELECT name, value FROM topic_configs WHERE topic_id = ?", (topic_id,)))
    return TopicMetadata(name, uuid.UUID(topic_id), num_partitions, configs)


def _partition_row(conn: sqlite3.Connection, topic: str, partition: int) -> tuple[str, int]:
    """(topic_id text, leader_epoch) of an existing partition."""
    topic_id, num_partitions = _topic_row(conn, topic)
    check_partition(topic, partition, num_partitions)
    (leader_epoch,) = conn.execute(
        "SELECT leader_epoch FROM partitions WHERE topic_id = ? AND partition = ?", (topic_id, partition)
    ).fetchone()
    return topic_id, leader_epoch


def _fenced_partition(conn: sqlite3.Connection, topic: str, partition: int, leader_epoch: int) -> str:
    """topic_id text of the partition, once `leader_epoch` is known to be its current epoch."""
    topic_id, current_leader_epoch = _partition_row(conn, topic, partition)
    check_leader_epoch(topic, partition, leader_epoch, current_leader_epoch)
    return topic_id


def create_topic(
    conn: sqlite3.Connection,
    name: str,
    num_partitions: int,
    configs: Mapping[str, str],
    topic_id: uuid.UUID | None,
) -> TopicMetadata:
    validate_topic_name(name)
    validate_partition_count(name, None, num_partitions)
    topic_id = uuid.uuid4() if topic_id is None else topic_id
    validate_topic_id(topic_id)
    topic = TopicMetadata(name, topic_id, num_partitions, configs)
    tid = str(topic_id)
    with _write(conn):
        if conn.execute("SELECT 1 FROM topics WHERE name = ?", (name,)).fetchone():
            raise TopicAlreadyExists(name)
        if has_collision_chars(name):  # BEGIN IMMEDIATE: no colliding name can go in before ours
            unified = unify_collision_chars(name)
            rows = conn.execute("SELECT name FROM topics WHERE replace(name, '.', '_') = ?", (unified,)).fetchall()
            check_topic_collision(name, (row[0] for row in rows))
        row = conn.execute("SELECT name FROM topics WHERE topic_id = ?", (tid,)).fetchone()
        if row is not None:
            raise TopicIdAlreadyExists(topic_id, row[0])
        conn.execute(
            "INSERT INTO topics (topic_id, name, num_partitions) VALUES (?, ?, ?)", (tid, name, num_partitions)
        )
        conn.executemany(
            "INSERT INTO topic_configs (topic_id, name, value) VALUES (?, ?, ?)",
            ((tid, key, value) for key, value in topic.configs.items()),
        )
        conn.executemany(
            "INSERT INTO partitions (topic_id, partition) VALUES (?, ?)", ((tid, p) for p in range(num_partitions))
        )
    return topic


def get_topic(conn: sqlite3.Connection, name: str) -> TopicMetadata:
    with _read(conn):
        topic_id, num_partitions = _topic_row(conn, name)
        return _load_topic(conn, topic_id, name, num_partitions)


def get_topic_by_id(conn: sqlite3.Connection, topic_id: uuid.UUID) -> TopicMetadata:
    with _read(conn):
        row = conn.execute("SELECT name, num_partitions FROM topics WHERE topic_id = ?", (str(topic_id),)).fetchone()
        if row is None:
            raise UnknownTopicId(topic_id)
        return _load_topic(conn, str(topic_id), row[0], row[1])


def list_topics(conn: sqlite3.Connection) -> list[TopicMetadata]:
    with _read(conn):
        configs: dict[str, dict[str, str]] = {}
        for topic_id, key, value in conn.execute("SELECT topic_id, name, value FROM topic_configs"):
            configs.setdefault(topic_id, {})[key] = value
        rows = conn.execute("SELECT topic_id, name, num_partitions FROM topics ORDER BY name").fetchall()
    return [TopicMetadata(name, uuid.UUID(tid), n, configs.get(tid, {})) for tid, name, n in rows]


def delete_topic(conn: sqlite3.Connection, name: str) -> TopicMetadata:
    with _write(conn):
        topic_id, num_partitions = _topic_row(conn, name)
        topic = _load_topic(conn, topic_id, name, num_partitions)
        # ON DELETE CASCADE takes configs, partitions, offsets, catalogue rows and producer state.
        conn.execute("DELETE FROM topics WHERE topic_id = ?", (topic_id,))
    return topic


def alter_topic_configs(
    conn: sqlite3.Connection, name: str, set_configs: Mapping[str, str], delete_configs: Iterable[str]
) -> TopicMetadata:
    set_configs = dict(set_configs)
    delete_configs = frozenset(delete_configs)
    with _write(conn):
        topic_id, num_partitions = _topic_row(conn, name)
        topic = _load_topic(conn, topic_id, name, num_partitions)
        configs = apply_config_changes(name, topic.configs, set_configs, delete_configs)
        conn.executemany(
            "DELETE FROM topic_configs WHERE topic_id = ? AND name = ?", ((topic_id, key) for key in delete_configs)
        )
        conn.executemany(
            "INSERT INTO topic_configs (topic_id, name, value) VALUES (?, ?, ?)"
            " ON CONFLICT (topic_id, name) DO UPDATE SET value = excluded.value",
            ((topic_id, key, value) for key, value in set_configs.items()),
        )
    return replace(topic, configs=configs)


def create_partitions(conn: sqlite3.Connection, name: str, new_total: int) -> TopicMetadata:
    with _write(conn):
        topic_id, num_partitions = _topic_row(conn, name)
        validate_partition_count(name, num_partitions, new_total)
        conn.execute("UPDATE topics SET num_partitions = ? WHERE topic_id = ?", (new_total, topic_id))
        conn.executemany(
            "INSERT INTO partitions (topic_id, partition) VALUES (?, ?)",
            ((topic_id, p) for p in range(num_partitions, new_total)),
        )
        return _load_topic(conn, topic_id, name, new_total)


# --- partition state ---------------------------------------------------------------------


def set_log_start_offset(
    conn: sqlite3.Connection, topic: str, partition: int, offset: int, leader_epoch: int | None
) -> int:
    check_offset(topic, partition, offset)
    with _write(conn):
        topic_id, current_leader_epoch = _partition_row(conn, topic, partition)
        if leader_epoch is not None:
            check_leader_epoch(topic, partition, leader_epoch, current_leader_epoch)
        # MAX(): the log start offset only ever moves forward, as Kafka's
        # maybeIncrementLogStartOffset; a stale retention pass cannot resurrect deleted data.
        (log_start_offset,) = conn.execute(
            "UPDATE partitions SET log_start_offset = MAX(log_start_offset, ?)"
            " WHERE topic_id = ? AND partition = ? RETURNING log_start_offset",
            (offset, topic_id, partition),
        ).fetchone()
    return log_start_offset


def get_log_start_offsets(conn: sqlite3.Connection, topic: str) -> dict[int, int]:
    with _read(conn):
        topic_id, _ = _topic_row(conn, topic)
        return dict(
            conn.execute("SELECT partition, log_start_offset FROM partitions WHERE topic_id = ?", (topic_id,))
        )


def partitions_with_state(conn: sqlite3.Connection, topic: str) -> set[int]:
    with _read(conn):
        topic_id, _ = _topic_row(conn, topic)
        rows = conn.execute(
            "SELECT DISTINCT partition FROM remote_segments WHERE topic_id = ?1"
            " UNION SELECT DISTINCT partition FROM wal_batches WHERE topic_id = ?1"
            " UNION SELECT DISTINCT partition FROM aborted_transactions WHERE topic_id = ?1",
            (topic_id,),
        )
        return {row[0] for row in rows}


def get_leader_epoch(conn: sqlite3.Connection, topic: str, partition: int) -> int:
    with _read(conn):
        return _partition_row(conn, topic, partition)[1]


def bump_leader_epoch(conn: sqlite3.Connection, topic: str, partition: int) -> int:
    with _write(conn):
        topic_id, _ = _partition_row(conn, topic, partition)
        (leader_epoch,) = conn.execute(
            "UPDATE partitions SET leader_epoch = leader_epoch + 1"
            " WHERE topic_id = ? AND partition = ? RETURNING leader_epoch",
            (topic_id, partition),
        ).fetchone()
    return leader_epoch


# --- consumer group offsets --------------------------------------------------------------

# A coordinator's writes check its slot's epoch inside their BEGIN IMMEDIATE: a slot move
# (set_coordinator_slots, register_broker) writes too, so it lands before the check or after
# the write, never between.


def _check_coordinator(conn: sqlite3.Connection, coordinator: tuple[int, int] | None) -> None:
    """CoordinatorFenced unless the slot is at the epoch (always passes for None)."""
    if coordinator is not None:
        slot, epoch = coordinator
        row = conn.execute("SELECT epoch FROM coordinator_slots WHERE slot = ?", (slot,)).fetchone()
        if row is None or row[0] != epoch:
            raise CoordinatorFenced(slot, epoch, None if row is None else row[0])


def commit_offsets(
    conn: sqlite3.Connection, group_id: str, offsets: Iterable[CommittedOffset], coordinator: tuple[int, int] | None = None
) -> None:
    offsets = list(offsets)
    with _write(conn):
        _check_coordinator(conn, coordinator)
        topics: dict[str, tuple[str, int]] = {}
        rows = []
        for o in offsets:
            if o.topic not in topics:
                topics[o.topic] = _topic_row(conn, o.topic)
            topic_id, num_partitions = topics[o.topic]
            check_partition(o.topic, o.partition, num_partitions)
            rows.append((group_id, topic_id, o.partition, o.offset, o.leader_epoch, o.metadata, o.commit_timestamp_ms))
        conn.executemany(
            "INSERT INTO committed_offsets (group_id, topic_id, partition, committed_offset, leader_epoch, metadata,"
            " commit_timestamp_ms) VALUES (?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (group_id, topic_id, partition) DO UPDATE SET committed_offset = excluded.committed_offset,"
            " leader_epoch = excluded.leader_epoch, metadata = excluded.metadata,"
            " commit_timestamp_ms = excluded.commit_timestamp_ms",
            rows,
        )


def fetch_offsets(
    conn: sqlite3.Connection, group_id: str, partitions: Iterable[tuple[str, int]] | None
) -> list[CommittedOffset]:
    wanted = None if partitions is None else {(topic, partition) for topic, partition in partitions}
    rows = conn.execute(
        "SELECT t.name, o.partition, o.committed_offset, o.leader_epoch, o.metadata, o.commit_timestamp_ms"
        " FROM committed_offsets o JOIN topics t ON t.topic_id = o.topic_id"
        " WHERE o.group_id = ? ORDER BY t.name, o.partition",
        (group_id,),
    )
    return [CommittedOffset(*row) for row in rows if wanted is None or (row[0], row[1]) in wanted]


def delete_offsets(
    conn: sqlite3.Connection, group_id: str, partitions: Iterable[tuple[str, int]], coordinator: tuple[int, int] | None = None
) -> int:
    with _write(conn):
        _check_coordinator(conn, coordinator)
        cursor = conn.executemany(
            "DELETE FROM committed_offsets WHERE group_id = ? AND partition = ?"
            " AND topic_id = (SELECT topic_id FROM topics WHERE name = ?)",
            ((group_id, partition, topic) for topic, partition in set(partitions)),
        )
        return cursor.rowcount


def delete_group(conn: sqlite3.Connection, group_id: str, coordinator: tuple[int, int] | None = None) -> int:
    with _write(conn):
        _check_coordinator(conn, coordinator)
        conn.execute("DELETE FROM consumer_groups WHERE group_id = ?", (group_id,))
        return conn.execute("DELETE FROM committed_offsets WHERE group_id = ?", (group_id,)).rowcount


def list_groups_with_offsets(conn: sqlite3.Connection) -> list[str]:
    return [group_id for (group_id,) in conn.execute("SELECT DISTINCT group_id FROM committed_offsets ORDER BY 1")]


def expire_offsets(conn: sqlite3.Connection, older_than_ms: int) -> int:
    with _write(conn):
        return conn.execute("DELETE FROM committed_offsets WHERE commit_timestamp_ms < ?", (older_than_ms,)).rowcount


def expire_group_offsets(
    conn: sqlite3.Connection, group_id: str, older_than_ms: int, coordinator: tuple[int, int] | None = None
) -> int:
    with _write(conn):
        _check_coordinator(conn, coordinator)
        return conn.execute(
            "DELETE FROM committed_offsets WHERE group_id = ? AND commit_timestamp_ms < ?", (group_id, older_than_ms)
        ).rowcount


# --- producer ids and state --------------------------------------------------------------


def claim_producer_id_block(conn: sqlite3.Connection, size: int) -> ProducerIdBlock:
    """Durably move the cluster's next-block counter past a new block before any id of it
    is handed out: after a crash the block's unused ids are skipped, never reused."""
    with _write(conn):
        (next_block,) = conn.execute(
            "UPDATE counters SET value = value + ? WHERE name = 'next_producer_id_block' RETURNING value", (size,)
        ).fetchone()
    return ProducerIdBlock(next_block - size, size)


def put_producer_snapshot(
    conn: sqlite3.Connection, topic: str, partition: int, snapshot: ProducerSnapshot, leader_epoch: int
) -> None:
    validate_producer_snapshot(topic, partition, snapshot)
    with _write(conn):
        topic_id = _fenced_partition(conn, topic, partition, leader_epoch)
        # Deleting the snapshot row cascades to its entries: the new snapshot replaces the old whole.
        conn.execute("DELETE FROM producer_snapshots WHERE topic_id = ? AND partition = ?", (topic_id, partition))
        conn.execute(
            "INSERT INTO producer_snapshots (topic_id, partition, log_end_offset) VALUES (?, ?, ?)",
            (topic_id, partition, snapshot.log_end_offset),
        )
        conn.executemany(
            "INSERT INTO producer_states (topic_id, partition, producer_id, producer_epoch, last_sequence,"
            " last_offset, offset_delta, last_timestamp_ms, coordinator_epoch, current_txn_first_offset)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                (topic_id, partition, e.producer_id, e.producer_epoch, e.last_sequence, e.last_offset,
                 e.offset_delta, e.last_timestamp_ms, e.coordinator_epoch, e.current_txn_first_offset)
                for e in snapshot.entries
            ),
        )  # fmt: skip


def get_producer_snapshot(conn: sqlite3.Connection, topic: str, partition: int) -> ProducerSnapshot | None:
    with _read(conn):
        topic_id, _ = _partition_row(conn, topic, partition)
        row = conn.execute(
            "SELECT log_end_offset FROM producer_snapshots WHERE topic_id = ? AND partition = ?", (topic_id, partition)
        ).fetchone()
        if row is None:
            return None
        entries = conn.execute(
            "SELECT producer_id, producer_epoch, last_sequence, last_offset, offset_delta, last_timestamp_ms,"
            " coordinator_epoch, current_txn_first_offset FROM producer_states WHERE topic_id = ? AND partition = ? ORDER BY producer_id",
            (topic_id, partition),
        )
        return ProducerSnapshot(row[0], tuple(ProducerStateEntry(*e) for e in entries))


# --- remote segment catalogue ------------------------------------------------------------

_SEGMENT_COLUMNS = (
    "base_offset, last_offset, base_timestamp, max_timestamp, size_bytes, leader_epoch, object_key, state"
)


def _segment(topic: str, partition: int, row: tuple) -> RemoteSegment:
    *fields, state = row
    return RemoteSegment(topic, partition, *fields, state=RemoteSegmentState(state))


def _load_segment(
    conn: sqlite3.Connection, topic: str, topic_id: str, partition: int, base_offset: int, object_key: str
) -> RemoteSegment:
    row = conn.execute(
        f"SELECT {_SEGMENT_COLUMNS} FROM remote_segments"
        " WHERE topic_id = ? AND partition = ? AND base_offset = ? AND object_key = ?",
        (topic_id, partition, base_offset, object_key),
    ).fetchone()
    if row is None:
        raise UnknownRemoteSegment(topic, partition, base_offset, object_key)
    return _segment(topic, partition, row)


def _set_segment_state(conn: sqlite3.Connection, topic_id: str, segment: RemoteSegment) -> None:
    conn.execute(
        "UPDATE remote_segments SET state = ? WHERE topic_id = ? AND partition = ? AND base_offset = ?"
        " AND object_key = ?",
        (segment.state.value, topic_id, segment.partition, segment.base_offset, segment.object_key),
    )


def add_remote_segment(conn: sqlite3.Connection, segment: RemoteSegment) -> RemoteSegment:
    validate_remote_segment(segment)
    s = segment
    with _write(conn):
        topic_id = _fenced_partition(conn, s.topic, s.partition, s.leader_epoch)
        if conn.execute("SELECT 1 FROM remote_segments WHERE object_key = ?", (s.object_key,)).fetchone():
            raise RemoteSegmentAlreadyExists(s.topic, s.partition, s.base_offset, s.object_key)
        conn.execute(
            f"INSERT INTO remote_segments (topic_id, partition, {_SEGMENT_COLUMNS})"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (topic_id, s.partition, s.base_offset, s.last_offset, s.base_timestamp, s.max_timestamp, s.size_bytes,
             s.leader_epoch, s.object_key, s.state.value),
        )  # fmt: skip
    return segment


def commit_remote_segment(
    conn: sqlite3.Connection, topic: str, partition: int, base_offset: int, object_key: str, leader_epoch: int
) -> RemoteSegment:
    with _write(conn):
        return _commit_segment(conn, topic, partition, base_offset, object_key, leader_epoch)


def _commit_segment(conn: sqlite3.Connection, topic: str, partition: int, base_offset: int, object_key: str, leader_epoch: int) -> RemoteSegment:
    topic_id = _fenced_partition(conn, topic, partition, leader_epoch)
    segment = _load_segment(conn, topic, topic_id, partition, base_offset, object_key)
    check_remote_segment_transition(segment, RemoteSegmentState.COMMITTED)
    # Readers trust that committed segments never cover the same offset twice.
    overlap = conn.execute(
        "SELECT base_offset, last_offset FROM remote_segments WHERE topic_id = ? AND partition = ?"
        " AND state = 'committed' AND base_offset <= ? AND last_offset >= ? ORDER BY base_offset LIMIT 1",
        (topic_id, partition, segment.last_offset, segment.base_offset),
    ).fetchone()
    if overlap is not None:
        raise RemoteSegmentOverlap(topic, partition, segment.base_offset, segment.last_offset, *overlap)
    committed = replace(segment, state=RemoteSegmentState.COMMITTED)
    _set_segment_state(conn, topic_id, committed)
    return committed


def replace_remote_segments(
    conn: sqlite3.Connection, topic: str, partition: int, base_offset: int, object_key: str,
    replaced: Sequence[tuple[int, str]], leader_epoch: int, forget_aborted: Sequence[int] = (),
) -> RemoteSegment:
    with _write(conn):
        for old_base, old_key in replaced:
            _mark_deleting(conn, topic, partition, old_base, old_key, leader_epoch)
        committed = _commit_segment(conn, topic, partition, base_offset, object_key, leader_epoch)
        if forget_aborted:
            topic_id, _ = _partition_row(conn, topic, partition)
            conn.executemany(
                "DELETE FROM aborted_transactions WHERE topic_id = ? AND partition = ? AND last_offset = ?",
                [(topic_id, partition, offset) for offset in forget_aborted],
            )
        return committed


def list_remote_segments(
    conn: sqlite3.Connection, topic: str, partition: int, states: Iterable[RemoteSegmentState | str]
) -> list[RemoteSegment]:
    states = sorted({RemoteSegmentState(s).value for s in states})
    with _read(conn):
        topic_id, _ = _partition_row(conn, topic, partition)
        rows = conn.execute(
            f"SELECT {_SEGMENT_COLUMNS} FROM remote_segments WHERE topic_id = ? AND partition = ?"
            f" AND state IN ({', '.join('?' * len(states))}) ORDER BY base_offset, object_key",
            (topic_id, partition, *states),
        ).fetchall()
    return [_segment(topic, partition, row) for row in rows]


def mark_remote_segment_deleting(
    conn: sqlite3.Connection, topic: str, partition: int, base_offset: int, object_key: str, leader_epoch: int
) -> RemoteSegment:
    with _write(conn):
        return _mark_deleting(conn, topic, partition, base_offset, object_key, leader_epoch)


def _mark_deleting(conn: sqlite3.Connection, topic: str, partition: int, base_offset: int, object_key: str, leader_epoch: int) -> RemoteSegment:
    topic_id = _fenced_partition(conn, topic, partition, leader_epoch)
    segment = _load_segment(conn, topic, topic_id, partition, base_offset, object_key)
    check_remote_segment_transition(segment, RemoteSegmentState.DELETING)
    deleting = replace(segment, state=RemoteSegmentState.DELETING)
    _set_segment_state(conn, topic_id, deleting)
    return deleting


def remove_remote_segment(
    conn: sqlite3.Connection, topic: str, partition: int, base_offset: int, object_key: str, leader_epoch: int
) -> None:
    with _write(conn):
        topic_id = _fenced_partition(conn, topic, partition, leader_epoch)
        segment = _load_segment(conn, topic, topic_id, partition, base_offset, object_key)
        check_remote_segment_removable(segment)
        conn.execute(
            "DELETE FROM remote_segments WHERE topic_id = ? AND partition = ? AND base_offset = ? AND object_key = ?",
            (topic_id, partition, base_offset, object_key),
        )


# --- write-ahead objects -----------------------------------------------------------------


_WAL_COLUMNS = "base_offset, last_offset, leader_epoch, object_key, position, size_bytes"


def commit_wal_object(conn: sqlite3.Connection, object_key: str, batches: Sequence[WalBatch]) -> None:
    # A fixed number of statements whatever the number of batches: this thread takes the GIL
    # back after every statement, and behind a busy event loop each wait is a switch interval
    # (5 ms); three statements per batch made a commit of 32 partitions take 30 ms.
    rows = json.dumps([
        [b.topic, b.partition, b.base_offset, b.last_offset, b.leader_epoch, b.position, b.size_bytes,
         None if b.topic_id is None else str(b.topic_id)]
        for b in batches
    ])  # fmt: skip
    # The topic a batch goes to: the one of its name, and of its id when it carries one (a
    # topic made again under the name has another id, and its epochs start over).
    topic_of_batch = "t.name = j.value ->> 0 AND t.topic_id = coalesce(j.value ->> 7, t.topic_id)"
    with _write(conn):
        conn.execute("INSERT OR IGNORE INTO wal_objects (object_key) VALUES (?)", (object_key,))
        stale = conn.execute(
            "SELECT 1 FROM json_each(?) AS j"
            f" LEFT JOIN topics AS t ON {topic_of_batch}"
            " LEFT JOIN partitions AS p ON p.topic_id = t.topic_id AND p.partition = j.value ->> 1"
            " WHERE p.leader_epoch IS NOT j.value ->> 4 LIMIT 1",
            (rows,),
        ).fetchone()
        if stale is not None:  # raise the precise error: topic gone or made again, unknown partition, fenced or unknown epoch
            for b in batches:
                _check_wal_batch(conn, b)
        # A retried commit of the same object (or upload) rewrites its rows: replace, not fail;
        # but never a row of another leader epoch (WalBatchConflict). A row not replaced is not
        # counted in rowcount. ("WHERE true": SQLite's upsert after a join needs a WHERE.)
        written = conn.execute(
            f"INSERT INTO wal_batches (topic_id, partition, {_WAL_COLUMNS})"
            " SELECT t.topic_id, j.value ->> 1, j.value ->> 2, j.value ->> 3, j.value ->> 4, ?, j.value ->> 5, j.value ->> 6"
            f" FROM json_each(?) AS j JOIN topics AS t ON {topic_of_batch} WHERE true"
            " ON CONFLICT (topic_id, partition, base_offset) DO UPDATE SET last_offset = excluded.last_offset,"
            " object_key = excluded.object_key, position = excluded.position, size_bytes = excluded.size_bytes"
            " WHERE wal_batches.leader_epoch = excluded.leader_epoch",
            (object_key, rows),
        ).rowcount
        if written < len(batches):
            conflict = conn.execute(
                "SELECT j.key, b.leader_epoch FROM json_each(?) AS j"
                f" JOIN topics AS t ON {topic_of_batch}"
                " JOIN wal_batches AS b ON b.topic_id = t.topic_id AND b.partition = j.value ->> 1 AND b.base_offset = j.value ->> 2"
                " WHERE b.leader_epoch IS NOT j.value ->> 4 ORDER BY j.key LIMIT 1",
                (rows,),
            ).fetchone()
            if conflict is not None:
                b = batches[conflict[0]]
                raise WalBatchConflict(b.topic, b.partition, b.base_offset, b.leader_epoch, conflict[1])


def _check_wal_batch(conn: sqlite3.Connection, batch: WalBatch) -> None:
    """Raise why `batch` may not commit, if it may not."""
    if batch.topic_id is not None:
        found = conn.execute("SELECT 1 FROM topics WHERE topic_id = ? AND name = ?", (str(batch.topic_id), batch.topic)).fetchone()
        if found is None:
            raise UnknownTopicId(batch.topic_id)
    _fenced_partition(conn, batch.topic, batch.partition, batch.leader_epoch)


def list_wal_batches(conn: sqlite3.Connection, topic: str, partition: int, from_offset: int) -> list[WalBatch]:
    with _read(conn):
        topic_id, _ = _partition_row(conn, topic, partition)
        rows = conn.execute(
            f"SELECT {_WAL_COLUMNS} FROM wal_batches WHERE topic_id = ? AND partition = ? AND last_offset >= ?"
            " ORDER BY base_offset",
            (topic_id, partition, from_offset),
        ).fetchall()
    return [WalBatch(topic, partition, *row) for row in rows]


def delete_wal_batches_below(conn: sqlite3.Connection, topic: str, partition: int, offset: int, leader_epoch: int) -> int:
    with _write(conn):
        topic_id = _fenced_partition(conn, topic, partition, leader_epoch)
        cursor = conn.execute(
            "DELETE FROM wal_batches WHERE topic_id = ? AND partition = ? AND last_offset < ?", (topic_id, partition, offset)
        )
        return cursor.rowcount


def list_unreferenced_wal_objects(conn: sqlite3.Connection) -> list[str]:
    with _read(conn):
        rows = conn.execute(
            "SELECT object_key FROM wal_objects o"
            " WHERE NOT EXISTS (SELECT 1 FROM wal_batches b WHERE b.object_key = o.object_key) ORDER BY object_key"
        ).fetchall()
    return [key for (key,) in rows]


def delete_wal_object(conn: sqlite3.Connection, object_key: str) -> None:
    with _write(conn):
        conn.execute("DELETE FROM wal_objects WHERE object_key = ?", (object_key,))


def recorded_wal_objects(conn: sqlite3.Connection, object_keys: Sequence[str]) -> set[str]:
    found: set[str] = set()
    with _read(conn):
        for start in range(0, len(object_keys), 500):  # below SQLite's limit of bound parameters
            chunk = object_keys[start : start + 500]
            rows = conn.execute(
                f"SELECT object_key FROM wal_objects WHERE object_key IN ({', '.join('?' * len(chunk))})", chunk
            ).fetchall()
            found.update(key for (key,) in rows)
    return found
