"""Looking after a metadata database from outside a broker: `diskless metadata migrate` and
`diskless metadata check`, for either backend.

`migrate` brings the schema to the version this build knows (what opening a store does at
start-up anyway, but as a step of its own: run it before rolling out new brokers). `check`
only looks: it connects, reads the schema version and counts rows, and changes nothing, not
even an empty database. Both raise the store's typed errors (UnsupportedMetadataUrl,
MetadataStorageError with a reason a person can act on, UnsupportedSchemaVersion).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from dataclasses import dataclass, field

from .errors import MetadataStorageError, UnsupportedSchemaVersion
from .postgres_url import PostgresUrl
from .url import SqliteUrl, parse_metadata_url

# What `check` counts; the write-ahead tables exist from schema version 2, the transaction
# coordinator's from 6, the partitions' aborted transactions from 7, the consumer groups' from 11.
COUNTED_TABLES = (
    "topics", "partitions", "topic_configs", "committed_offsets", "consumer_groups", "remote_segments",
    "producer_snapshots", "wal_objects", "wal_batches", "transactions", "aborted_transactions",
)  # fmt: skip
_TABLES_SINCE = {"wal_objects": 2, "wal_batches": 2, "transactions": 6, "aborted_transactions": 7, "consumer_groups": 11}


@dataclass(frozen=True, slots=True)
class MigrationReport:
    location: str
    found_version: int
    version: int


@dataclass(frozen=True, slots=True)
class CheckReport:
    location: str
    backend: str
    schema_version: int  # 0: never migrated
    supported_version: int
    row_counts: dict[str, int] = field(default_factory=dict)


def _tables_at(version: int) -> tuple[str, ...]:
    return tuple(t for t in COUNTED_TABLES if version >= _TABLES_SINCE.get(t, 1))


async def migrate_metadata(url: str) -> MigrationReport:
    parsed = parse_metadata_url(url)
    if isinstance(parsed, PostgresUrl):
        from .postgres import PostgresMetadataStore

        async with await PostgresMetadataStore.open(parsed, migrate_schema=False) as store:
            found, version = await store.migrate()
        return MigrationReport(parsed.location, found, version)
    from .sqlite import SqliteMetadataStore

    found = (await asyncio.to_thread(_sqlite_inspect, parsed, ())).schema_version if _sqlite_exists(parsed) else 0
    async with await SqliteMetadataStore.open(parsed.path):  # opening migrates
        pass
    return MigrationReport(_sqlite_location(parsed), found, (await check_metadata(url)).schema_version)


async def check_metadata(url: str) -> CheckReport:
    parsed = parse_metadata_url(url)
    if isinstance(parsed, PostgresUrl):
        from .postgres import PostgresMetadataStore
        from .postgres_schema import SCHEMA_VERSION

        async with await PostgresMetadataStore.open(parsed, migrate_schema=False) as store:
            version = await store.schema_version()
            if version > SCHEMA_VERSION:
                raise UnsupportedSchemaVersion(parsed.location, version, SCHEMA_VERSION)
            counts = await store.row_counts(_tables_at(version)) if version else {}
        return CheckReport(parsed.location, "postgresql", version, SCHEMA_VERSION, counts)
    if not _sqlite_exists(parsed):
        raise MetadataStorageError("check", f"{_sqlite_location(parsed)}: no such file")
    return await asyncio.to_thread(_sqlite_inspect, parsed, COUNTED_TABLES)


def _sqlite_location(parsed: SqliteUrl) -> str:
    return parsed.path if parsed.path == ":memory:" else os.path.abspath(parsed.path)


def _sqlite_exists(parsed: SqliteUrl) -> bool:
    return parsed.path != ":memory:" and os.path.isfile(parsed.path)


def _sqlite_inspect(parsed: SqliteUrl, tables: tuple[str, ...]) -> CheckReport:
    from .sqlite_schema import SCHEMA_VERSION

    location = _sqlite_location(parsed)
    try:
        # Read-only: a check never creates, migrates or checkpoints the file.
        conn = sqlite3.connect(f"file:{location}?mode=ro", uri=True)
        try:
            (version,) = conn.execute("PRAGMA user_version").fetchone()
            if version > SCHEMA_VERSION:
                raise UnsupportedSchemaVersion(location, version, SCHEMA_VERSION)
            counts = {}
            if version:
                for table in _tables_at(version):
                    if table in tables:
                        (counts[table],) = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
        finally:
            conn.close()
    except sqlite3.Error as e:
        raise MetadataStorageError("check", f"{location}: {type(e).__name__}: {e}") from e
    return CheckReport(location, "sqlite", version, SCHEMA_VERSION, counts)
