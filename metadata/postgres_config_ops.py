"""PostgreSQL operations for the configs of resources other than topics (GROUP configs), keyed
by Kafka's resource type name ("group") and the resource's name.

Same contract as postgres_ops.py (each runs inside the store's transaction or call).
"""

from __future__ import annotations

from collections.abc import Mapping

from .postgres_ops import Conn


async def list_resource_configs(conn: Conn, resource_type: str) -> dict[str, dict[str, str]]:
    rows = await conn.fetch(
        "SELECT resource_name, name, value FROM resource_configs WHERE resource_type = $1 ORDER BY resource_name, name",
        resource_type,
    )
    configs: dict[str, dict[str, str]] = {}
    for resource_name, name, value in rows:
        configs.setdefault(resource_name, {})[name] = value
    return configs


async def set_resource_configs(conn: Conn, resource_type: str, resource_name: str, configs: Mapping[str, str]) -> None:
    await conn.execute("DELETE FROM resource_configs WHERE resource_type = $1 AND resource_name = $2", resource_type, resource_name)
    if configs:
        await conn.executemany(
            "INSERT INTO resource_configs (resource_type, resource_name, name, value) VALUES ($1, $2, $3, $4)",
            [(resource_type, resource_name, name, value) for name, value in sorted(configs.items())],
        )
