"""PostgreSQL operations for the transaction coordinator's state (metadata/transactions.py).

Same contract as postgres_ops.py (each runs inside the store's transaction or call).
"""

from __future__ import annotations

from .postgres_ops import Conn
from .transactions import COLUMNS, TransactionRecord


async def put_transaction(conn: Conn, record: TransactionRecord) -> None:
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


async def delete_transaction(conn: Conn, transactional_id: str) -> None:
    await conn.execute("DELETE FROM transactions WHERE transactional_id = $1", transactional_id)
