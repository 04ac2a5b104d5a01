"""SQLite operations for the coordinators' own state: the transaction coordinator's
(metadata/transactions.py) and each KIP-848 consumer group's (an opaque text).

Same contract as sqlite_ops.py (one transaction each, on the store's worker thread).
"""

from __future__ import annotations

import sqlite3

from .errors import CoordinatorFenced
from .sqlite_ops import _check_coordinator, _fenced_partition, _partition_row, _read, _write
from .store import NO_PENDING_OFFSETS_STATES
from .transactions import COLUMNS, TransactionRecord


def put_transactions(
    conn: sqlite3.Connection, items: list[tuple[TransactionRecord, tuple[int, int] | None]]
) -> list[CoordinatorFenced | None]:
    """Many put_transaction in one SQLite transaction, in order; each one's CoordinatorFenced
    (its state not written) or None."""
    errors: list[CoordinatorFenced | None] = []
    with _write(conn):
        for record, coordinator in items:
            try:
                _check_coordinator(conn, coordinator)
            except CoordinatorFenced as exc:
                errors.append(exc)
                continue
            conn.execute(f"INSERT OR REPLACE INTO transactions ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", record.row())
            errors.append(None)
    return errors


def list_transactions(conn: sqlite3.Connection) -> list[TransactionRecord]:
    with _read(conn):
        rows = conn.execute(f"SELECT {COLUMNS} FROM transactions ORDER BY transactional_id").fetchall()
    return [TransactionRecord.decode(tuple(row)) for row in rows]


def list_pending_offset_transactions(conn: sqlite3.Connection, group_id: str) -> list[TransactionRecord]:
    """Idle rows are skipped by state in SQL, so only open and ending transactions are decoded;
    the group is matched on the decoded offsets (exact, unlike a pattern on the JSON text)."""
    marks = ", ".join("?" * len(NO_PENDING_OFFSETS_STATES))
    with _read(conn):
        rows = conn.execute(
            f"SELECT {COLUMNS} FROM transactions WHERE state NOT IN ({marks}) ORDER BY transactional_id", NO_PENDING_OFFSETS_STATES
        ).fetchall()
    records = (TransactionRecord.decode(tuple(row)) for row in rows)
    return [r for r in records if any(g == group_id for g, _ in r.pending_offsets)]


def delete_transaction(conn: sqlite3.Connection, transactional_id: str, coordinator: tuple[int, int] | None = None) -> None:
    with _write(conn):
        _check_coordinator(conn, coordinator)
        conn.execute("DELETE FROM transactions WHERE transactional_id = ?", (transactional_id,))


def put_consumer_group(conn: sqlite3.Connection, group_id: str, state: str, coordinator: tuple[int, int] | None = None) -> None:
    with _write(conn):
        _check_coordinator(conn, coordinator)
        conn.execute("INSERT OR REPLACE INTO consumer_groups (group_id, state) VALUES (?, ?)", (group_id, state))


def get_consumer_group(conn: sqlite3.Connection, group_id: str) -> str | None:
    row = conn.execute("SELECT state FROM consumer_groups WHERE group_id = ?", (group_id,)).fetchone()
    return None if row is None else row[0]


def list_consumer_groups(conn: sqlite3.Connection) -> list[str]:
    return [row[0] for row in conn.execute("SELECT group_id FROM consumer_groups ORDER BY group_id")]


def delete_consumer_group(conn: sqlite3.Connection, group_id: str, coordinator: tuple[int, int] | None = None) -> None:
    with _write(conn):
        _check_coordinator(conn, coordinator)
        conn.execute("DELETE FROM consumer_groups WHERE group_id = ?", (group_id,))


def put_aborted_transactions(
    conn: sqlite3.Connection, topic: str, partition: int, entries: list[tuple[int, int, int]], delete_below: int, leader_epoch: int
) -> None:
    with _write(conn):
        topic_id = _fenced_partition(conn, topic, partition, leader_epoch)
        conn.execute(
            "DELETE FROM aborted_transactions WHERE topic_id = ? AND partition = ? AND last_offset < ?", (topic_id, partition, delete_below)
        )
        conn.executemany(
            "INSERT OR REPLACE INTO aborted_transactions (topic_id, partition, last_offset, producer_id, first_offset) VALUES (?, ?, ?, ?, ?)",
            [(topic_id, partition, last, pid, first) for pid, first, last in entries],
        )


def list_aborted_transactions(conn: sqlite3.Connection, topic: str, partition: int) -> list[tuple[int, int, int]]:
    with _read(conn):
        topic_id, _ = _partition_row(conn, topic, partition)
        rows = conn.execute(
            "SELECT producer_id, first_offset, last_offset FROM aborted_transactions WHERE topic_id = ? AND partition = ? ORDER BY last_offset",
            (topic_id, partition),
        ).fetchall()
    return [tuple(row) for row in rows]  # type: ignore[misc]
