"""SQLite operations for the configs of resources other than topics: GROUP configs (KIP-848's
consumer.session.timeout.ms, consumer.heartbeat.interval.ms), keyed by Kafka's resource type
name ("group") and the resource's name.

Same contract as sqlite_ops.py (one transaction each, on the store's worker thread).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping

from .sqlite_ops import _read, _write


def list_resource_configs(conn: sqlite3.Connection, resource_type: str) -> dict[str, dict[str, str]]:
    with _read(conn):
        rows = conn.execute(
            "SELECT resource_name, name, value FROM resource_configs WHERE resource_type = ? ORDER BY resource_name, name",
            (resource_type,),
        ).fetchall()
    configs: dict[str, dict[str, str]] = {}
    for resource_name, name, value in rows:
        configs.setdefault(resource_name, {})[name] = value
    return configs


def set_resource_configs(conn: sqlite3.Connection, resource_type: str, resource_name: str, configs: Mapping[str, str]) -> None:
    with _write(conn):
        conn.execute("DELETE FROM resource_configs WHERE resource_type = ? AND resource_name = ?", (resource_type, resource_name))
        conn.executemany(
            "INSERT INTO resource_configs (resource_type, resource_name, name, value) VALUES (?, ?, ?, ?)",
            [(resource_type, resource_name, name, value) for name, value in sorted(configs.items())],
        )
