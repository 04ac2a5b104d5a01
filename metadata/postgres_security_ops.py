"""PostgreSQL operations for SCRAM credentials and ACL bindings (metadata/security.py).

Same contract as postgres_ops.py (each runs inside the store's transaction or call); split from
it along the protocol's own seam.
"""

from __future__ import annotations

from collections.abc import Sequence

from .postgres_ops import Conn
from .security import AclBinding, StoredScramCredential

_CREDENTIAL_COLUMNS = "user_name, mechanism, salt, iterations, stored_key, server_key"
_ACL_COLUMNS = "resource_type, resource_name, pattern_type, principal, host, operation, permission_type"


async def list_scram_credentials(conn: Conn, users: tuple[str, ...] | None) -> list[StoredScramCredential]:
    if users is None:
        rows = await conn.fetch(f"SELECT {_CREDENTIAL_COLUMNS} FROM scram_credentials ORDER BY user_name, mechanism")
    else:
        rows = await conn.fetch(
            f"SELECT {_CREDENTIAL_COLUMNS} FROM scram_credentials WHERE user_name = ANY($1::text[]) ORDER BY user_name, mechanism",
            list(users),
        )
    return [StoredScramCredential(r[0], r[1], bytes(r[2]), r[3], bytes(r[4]), bytes(r[5])) for r in rows]


async def alter_scram_credentials(
    conn: Conn, upsertions: Sequence[StoredScramCredential], deletions: Sequence[tuple[str, str]]
) -> None:
    for user, mechanism in deletions:
        await conn.execute("DELETE FROM scram_credentials WHERE user_name = $1 AND mechanism = $2", user, mechanism)
    for c in upsertions:
        await conn.execute(
            f"INSERT INTO scram_credentials ({_CREDENTIAL_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6) "
            "ON CONFLICT (user_name, mechanism) DO UPDATE SET salt = EXCLUDED.salt, iterations = EXCLUDED.iterations, "
            "stored_key = EXCLUDED.stored_key, server_key = EXCLUDED.server_key",
            c.user, c.mechanism, c.salt, c.iterations, c.stored_key, c.server_key,
        )


async def list_acls(conn: Conn) -> list[AclBinding]:
    rows = await conn.fetch(f"SELECT {_ACL_COLUMNS} FROM acls")
    return sorted(AclBinding(*tuple(row)) for row in rows)


async def create_acls(conn: Conn, bindings: Sequence[AclBinding]) -> None:
    for b in bindings:
        await conn.execute(
            f"INSERT INTO acls ({_ACL_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
            b.resource_type, b.resource_name, b.pattern_type, b.principal, b.host, b.operation, b.permission_type,
        )


async def delete_acls(conn: Conn, bindings: Sequence[AclBinding]) -> int:
    deleted = 0
    for b in bindings:
        status = await conn.execute(
            "DELETE FROM acls WHERE resource_type = $1 AND resource_name = $2 AND pattern_type = $3 AND principal = $4 "
            "AND host = $5 AND operation = $6 AND permission_type = $7",
            b.resource_type, b.resource_name, b.pattern_type, b.principal, b.host, b.operation, b.permission_type,
        )
        deleted += int(status.split()[-1])
    return deleted
