"""SQLite operations for SCRAM credentials and ACL bindings (metadata/security.py).

Same contract as sqlite_ops.py (one transaction each, on the store's worker thread); split from
it along the protocol's own seam.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from .security import AclBinding, StoredScramCredential
from .sqlite_ops import _read, _write

_CREDENTIAL_COLUMNS = "user_name, mechanism, salt, iterations, stored_key, server_key"
_ACL_COLUMNS = "resource_type, resource_name, pattern_type, principal, host, operation, permission_type"


def list_scram_credentials(conn: sqlite3.Connection, users: tuple[str, ...] | None) -> list[StoredScramCredential]:
    with _read(conn):
        rows = conn.execute(f"SELECT {_CREDENTIAL_COLUMNS} FROM scram_credentials ORDER BY user_name, mechanism").fetchall()
    wanted = None if users is None else set(users)
    return [
        StoredScramCredential(row[0], row[1], bytes(row[2]), row[3], bytes(row[4]), bytes(row[5]))
        for row in rows
        if wanted is None or row[0] in wanted
    ]


def alter_scram_credentials(
    conn: sqlite3.Connection, upsertions: Sequence[StoredScramCredential], deletions: Sequence[tuple[str, str]]
) -> None:
    with _write(conn):
        for user, mechanism in deletions:
            conn.execute("DELETE FROM scram_credentials WHERE user_name = ? AND mechanism = ?", (user, mechanism))
        for c in upsertions:
            conn.execute(
                f"INSERT OR REPLACE INTO scram_credentials ({_CREDENTIAL_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
                (c.user, c.mechanism, c.salt, c.iterations, c.stored_key, c.server_key),
            )


def list_acls(conn: sqlite3.Connection) -> list[AclBinding]:
    with _read(conn):
        rows = conn.execute(f"SELECT {_ACL_COLUMNS} FROM acls").fetchall()
    return sorted(AclBinding(*row) for row in rows)


def create_acls(conn: sqlite3.Connection, bindings: Sequence[AclBinding]) -> None:
    with _write(conn):
        for b in bindings:
            conn.execute(
                f"INSERT OR IGNORE INTO acls ({_ACL_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (b.resource_type, b.resource_name, b.pattern_type, b.principal, b.host, b.operation, b.permission_type),
            )


def delete_acls(conn: sqlite3.Connection, bindings: Sequence[AclBinding]) -> int:
    deleted = 0
    with _write(conn):
        for b in bindings:
            deleted += conn.execute(
                "DELETE FROM acls WHERE resource_type = ? AND resource_name = ? AND pattern_type = ? AND principal = ? "
                "AND host = ? AND operation = ? AND permission_type = ?",
                (b.resource_type, b.resource_name, b.pattern_type, b.principal, b.host, b.operation, b.permission_type),
            ).rowcount
    return deleted
