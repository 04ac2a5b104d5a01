"""PostgreSQL operations for the coordinators' own state: the transaction coordinator's
(metadata/transactions.py) and each KIP-848 consumer group's (an opaque text).

Same contract as postgres_ops.py (each runs inside the store's transaction or call).
"""

from __future__ import annotations

from .postgres_ops import Conn, _check_coordinator, _fenced_partition, _partition_row
from .store import NO_PENDING_OFFSETS_STATES
from .transactions import COLUMNS, TransactionRecord


async def put_transaction(conn: Conn, record: TransactionRecord, coordinator: tuple[int, int] | None = None) -> None:
    await _check_coordinator(conn, coordinator)
    await conn.execute(
        f"INSERT INTO transactions ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) "
        "ON CONFLICT (transactional_id) DO UPDATE SET producer_id = EXCLUDED.producer_id, "
        "producer_epoch = EXCLUDED.producer_epoch, timeout_ms = EXCLUDED.timeout_ms, state = EXCLUDED.state, "
        "partitions = EXCLUDED.partitions, offsets = EXCLUDED.offsets, txn_start_ms = EXCLUDED.txn_start_ms, "
        "last_update_ms = EXCLUDED.last_update_ms",
        *record.row(),
    )


async def list_transactions(conn: Conn) -> list[TransactionRecord]:
    rows = await conn.fetch(f"SELECT {COLUMNS} FROM transactions ORDER BY transactional_id")
    return [TransactionRecord.decode(tuple(row)) for row in rows]


async def list_pending_offset_transactions(conn: Conn, group_id: str) -> list[TransactionRecord]:
    """Idle rows are skipped by state in SQL, so only open and ending transactions are sent and
    decoded; the group is matched on the decoded offsets (exact, unlike a pattern on the JSON text)."""
    rows = await conn.fetch(
        f"SELECT {COLUMNS} FROM transactions WHERE state <> ALL($1::text[]) ORDER BY transactional_id", list(NO_PENDING_OFFSETS_STATES)
    )
    records = (TransactionRecord.decode(tuple(row)) for row in rows)
    return [r for r in records if any(g == group_id for g, _ in r.pending_offsets)]


async def delete_transaction(conn: Conn, transactional_id: str, coordinator: tuple[int, int] | None = None) -> None:
    await _check_coordinator(conn, coordinator)
    await conn.execute("DELETE FROM transactions WHERE transactional_id = $1", transactional_id)


async def put_consumer_group(conn: Conn, group_id: str, state: str, coordinator: tuple[int, int] | None = None) -> None:
    await _check_coordinator(conn, coordinator)
    await conn.execute(
        "INSERT INTO consumer_groups (group_id, state) VALUES ($1, $2) ON CONFLICT (group_id) DO UPDATE SET state = EXCLUDED.state",
        group_id, state,
    )  # fmt: skip


async def get_consumer_group(conn: Conn, group_id: str) -> str | None:
    return await conn.fetchval("SELECT state FROM consumer_groups WHERE group_id = $1", group_id)


async def list_consumer_groups(conn: Conn) -> list[str]:
    return [r["group_id"] for r in await conn.fetch("SELECT group_id FROM consumer_groups ORDER BY group_id")]


async def delete_consumer_group(conn: Conn, group_id: str, coordinator: tuple[int, int] | None = None) -> None:
    await _check_coordinator(conn, coordinator)
    await conn.execute("DELETE FROM consumer_groups WHERE group_id = $1", group_id)


async def put_aborted_transactions(
    conn: Conn, topic: str, partition: int, entries: list[tuple[int, int, int]], delete_below: int, leader_epoch: int
) -> None:
    topic_id = await _fenced_partition(conn, topic, partition, leader_epoch)
    await conn.execute(
        "DELETE FROM aborted_transactions WHERE topic_id = $1 AND partition = $2 AND last_offset < $3", topic_id, partition, delete_below
    )
    await conn.executemany(
        "INSERT INTO aborted_transactions (topic_id, partition, last_offset, producer_id, first_offset) VALUES ($1, $2, $3, $4, $5) "
        "ON CONFLICT (topic_id, partition, last_offset) DO UPDATE SET producer_id = EXCLUDED.producer_id, first_offset = EXCLUDED.first_offset",
        [(topic_id, partition, last, pid, first) for pid, first, last in entries],
    )


async def list_aborted_transactions(conn: Conn, topic: str, partition: int) -> list[tuple[int, int, int]]:
    topic_id, _ = await _partition_row(conn, topic, partition)
    rows = await conn.fetch(
        "SELECT producer_id, first_offset, last_offset FROM aborted_transactions WHERE topic_id = $1 AND partition = $2 ORDER BY last_offset",
        topic_id, partition,
    )
    return [(r[0], r[1], r[2]) for r in rows]
