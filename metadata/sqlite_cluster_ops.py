"""SQLite operations of the cluster: its id, broker sessions, leases, partition leaders.

Same contract as sqlite_ops.py (one transaction each, on the store's worker thread); split from
it along the protocol's own seam. Times are this process's clock: one SQLite file is shared by
brokers of one machine at most.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence

from .errors import BrokerIdInUse, FencedLeaderEpoch
from .model import COORDINATOR_SLOTS, BrokerRegistration, PartitionLeadership, check_partition
from .sqlite_ops import _partition_row, _read, _topic_row, _write

# --- cluster ------------------------------------------------------------------------------


def get_or_create_cluster_id(conn: sqlite3.Connection, proposed: str) -> str:
    with _write(conn):
        conn.execute("INSERT OR IGNORE INTO cluster (name, value) VALUES ('cluster.id', ?)", (proposed,))
        (cluster_id,) = conn.execute("SELECT value FROM cluster WHERE name = 'cluster.id'").fetchone()
    return cluster_id


# --- membership and leadership ------------------------------------------------------------


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def register_broker(
    conn: sqlite3.Connection, node_id: int, host: str, port: int, rack: str | None, incarnation: str, session_timeout_ms: int,
    listeners: tuple[tuple[str, str, int], ...] = (),
) -> None:
    now = _now_ms()
    with _write(conn):
        row = conn.execute("SELECT incarnation, session_expires_ms FROM brokers WHERE node_id = ?", (node_id,)).fetchone()
        if row is not None and row[0] != incarnation and row[1] > now:
            raise BrokerIdInUse(node_id, row[0])
        if row is None or row[0] != incarnation:  # a new incarnation: fence the old one (store.py)
            conn.execute("UPDATE partitions SET leader_epoch = leader_epoch + 1 WHERE leader_id = ?", (node_id,))
            conn.execute("UPDATE coordinator_slots SET epoch = epoch + 1 WHERE holder = ?", (node_id,))
        conn.execute(
            "INSERT OR REPLACE INTO brokers (node_id, host, port, rack, incarnation, session_expires_ms, listeners) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (node_id, host, port, rack, incarnation, now + session_timeout_ms, json.dumps(listeners)),
        )


def heartbeat_broker(conn: sqlite3.Connection, node_id: int, incarnation: str, session_timeout_ms: int) -> bool:
    now = _now_ms()
    with _write(conn):
        cursor = conn.execute(
            "UPDATE brokers SET session_expires_ms = ? WHERE node_id = ? AND incarnation = ? AND session_expires_ms > ?",
            (now + session_timeout_ms, node_id, incarnation, now),
        )
        return cursor.rowcount == 1


def unregister_broker(conn: sqlite3.Connection, node_id: int, incarnation: str) -> None:
    with _write(conn):
        conn.execute("DELETE FROM brokers WHERE node_id = ? AND incarnation = ?", (node_id, incarnation))


def list_brokers(conn: sqlite3.Connection) -> list[BrokerRegistration]:
    now = _now_ms()
    with _read(conn):
        rows = conn.execute("SELECT node_id, host, port, rack, incarnation, session_expires_ms, listeners FROM brokers ORDER BY node_id").fetchall()
    return [
        BrokerRegistration(n, h, p, r, i, expires > now, max(expires - now, 0), _listeners(listeners))
        for n, h, p, r, i, expires, listeners in rows
    ]


def _listeners(stored: str) -> tuple[tuple[str, str, int], ...]:
    return tuple((name, host, port) for name, host, port in json.loads(stored))


def acquire_lease(conn: sqlite3.Connection, name: str, holder: int, duration_ms: int) -> bool:
    now = _now_ms()
    with _write(conn):
        row = conn.execute("SELECT holder, expires_ms FROM leases WHERE name = ?", (name,)).fetchone()
        if row is not None and row[0] != holder and row[1] > now:
            return False
        conn.execute("INSERT OR REPLACE INTO leases (name, holder, expires_ms) VALUES (?, ?, ?)", (name, holder, now + duration_ms))
        return True


def release_lease(conn: sqlite3.Connection, name: str, holder: int) -> None:
    with _write(conn):
        conn.execute("DELETE FROM leases WHERE name = ? AND holder = ?", (name, holder))


def lease_holder(conn: sqlite3.Connection, name: str) -> int | None:
    with _read(conn):
        row = conn.execute("SELECT holder FROM leases WHERE name = ? AND expires_ms > ?", (name, _now_ms())).fetchone()
    return None if row is None else row[0]


def list_partition_leaders(conn: sqlite3.Connection) -> list[PartitionLeadership]:
    with _read(conn):
        rows = conn.execute(
            "SELECT t.name, p.partition, p.leader_id, p.leader_epoch, p.preferred_leader FROM partitions p"
            " JOIN topics t ON t.topic_id = p.topic_id ORDER BY t.name, p.partition"
        ).fetchall()
    return [PartitionLeadership(*row) for row in rows]


def set_partition_leader(conn: sqlite3.Connection, topic: str, partition: int, leader_id: int | None, expected_epoch: int) -> int:
    with _write(conn):
        topic_id, current = _partition_row(conn, topic, partition)
        if current != expected_epoch:
            raise FencedLeaderEpoch(topic, partition, expected_epoch, current)
        conn.execute(
            "UPDATE partitions SET leader_id = ?, leader_epoch = leader_epoch + 1 WHERE topic_id = ? AND partition = ?",
            (leader_id, topic_id, partition),
        )
    return current + 1


def set_partition_leaders(conn: sqlite3.Connection, topic: str, moves: Sequence[tuple[int, int | None, int]]) -> list[int | None]:
    answers: list[int | None] = []
    with _write(conn):
        topic_id, num_partitions = _topic_row(conn, topic)
        for partition, leader_id, expected_epoch in moves:
            check_partition(topic, partition, num_partitions)
            cursor = conn.execute(
                "UPDATE partitions SET leader_id = ?, leader_epoch = leader_epoch + 1"
                " WHERE topic_id = ? AND partition = ? AND leader_epoch = ?",
                (leader_id, topic_id, partition, expected_epoch),
            )
            answers.append(expected_epoch + 1 if cursor.rowcount == 1 else None)
    return answers


def set_preferred_leaders(conn: sqlite3.Connection, topic: str, preferred: Sequence[tuple[int, int | None]]) -> None:
    with _write(conn):
        topic_id, num_partitions = _topic_row(conn, topic)
        for partition, node_id in preferred:
            check_partition(topic, partition, num_partitions)
        conn.executemany(
            "UPDATE partitions SET preferred_leader = ? WHERE topic_id = ? AND partition = ?",
            [(node_id, topic_id, partition) for partition, node_id in preferred],
        )


# --- coordinator slots -------------------------------------------------------------------------


def list_coordinator_slots(conn: sqlite3.Connection) -> list[PartitionLeadership]:
    with _read(conn):
        rows = conn.execute("SELECT slot, holder, epoch FROM coordinator_slots ORDER BY slot").fetchall()
    return [PartitionLeadership(COORDINATOR_SLOTS, slot, holder, epoch) for slot, holder, epoch in rows]


def create_coordinator_slots(conn: sqlite3.Connection, count: int) -> int:
    with _write(conn):
        (existing,) = conn.execute("SELECT COUNT(*) FROM coordinator_slots").fetchone()
        if existing:
            return existing
        conn.executemany("INSERT INTO coordinator_slots (slot) VALUES (?)", [(slot,) for slot in range(count)])
    return count


def set_coordinator_slots(conn: sqlite3.Connection, moves: Sequence[tuple[int, int | None, int]]) -> list[int | None]:
    answers: list[int | None] = []
    with _write(conn):
        for slot, holder, expected_epoch in moves:
            cursor = conn.execute(
                "UPDATE coordinator_slots SET holder = ?, epoch = epoch + 1 WHERE slot = ? AND epoch = ?", (holder, slot, expected_epoch)
            )
            answers.append(expected_epoch + 1 if cursor.rowcount == 1 else None)
    return answers
