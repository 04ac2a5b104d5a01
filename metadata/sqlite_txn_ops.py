"""SQLite operations for the transaction coordinator's state (metadata/transactions.py).

Same contract as sqlite_ops.py (one transaction each, on the store's worker thread).
"""

from __future__ import annotations

import sqlite3

from .sqlite_ops import _read, _write
from .transactions import COLUMNS, TransactionRecord


def put_transaction(conn: sqlite3.Connection, record: TransactionRecord) -> None:
    with _write(conn):
        conn.execute(f"INSERT OR REPLACE INTO transactions ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", record.row())


def list_transactions(conn: sqlite3.Connection) -> list[TransactionRecord]:
    with _read(conn):
        rows = conn.execute(f"SELECT {COLUMNS} FROM transactions ORDER BY transactional_id").fetchall()
    return [TransactionRecord.decode(tuple(row)) for row in rows]


def delete_transaction(conn: sqlite3.Connection, transactional_id: str) -> None:
    with _write(conn):
        conn.execute("DELETE FROM transactions WHERE transactional_id = ?", (transactional_id,))
