"""The PostgreSQL schema of the metadata store, and how a database is brought up to it.

Versions. `schema_version` holds one row per migration applied (version, when); the
database's version is the largest. Versions match the SQLite schema's (`sqlite_schema`):
1 is topics, partitions, offsets, catalogue and producer state; 2 adds write-ahead objects
and the cluster id. A database at a version above SCHEMA_VERSION was written by newer code
and is refused (`UnsupportedSchemaVersion`) rather than guessed at.

Several brokers starting at once. The whole migration runs in one transaction that first
takes a transaction-scoped advisory lock (`pg_advisory_xact_lock(MIGRATION_LOCK_ID)`): one
broker migrates, the others wait on the lock, then find the work done. A crash mid-migration
rolls the transaction back (PostgreSQL's DDL is transactional), leaving the old version.

Types. Offsets, timestamps, sizes and positions are BIGINT; partitions and epochs INTEGER.
Names a reader sorts by (topic names, group ids, object keys) are `COLLATE "C"`, so order is
by bytes, as in SQLite and Kafka, whatever the database's default collation. Offset-commit
metadata is BYTEA: clients send arbitrary strings, NUL bytes included (librdkafka sends its C
terminator), which TEXT cannot hold.

Rows are keyed on the topic id (UUID) and hang off `topics` through foreign keys with ON
DELETE CASCADE, as in SQLite: deleting the topic row deletes everything keyed on it.
"""

from __future__ import annotations

import asyncpg

from .errors import UnsupportedSchemaVersion

SCHEMA_VERSION = 12

# Any fixed 64-bit number, the same for every broker of every version: "diskless" in ASCII.
MIGRATION_LOCK_ID = 0x6469736B6C657373

# A migration may wait for another broker's; the store's statement timeout is for requests.
MIGRATION_STATEMENT_TIMEOUT_MS = 120_000

_SCHEMA_V1 = """
CREATE TABLE topics (
    topic_id        UUID    PRIMARY KEY,
    name            TEXT    COLLATE "C" NOT NULL UNIQUE,
    num_partitions  INTEGER NOT NULL CHECK (num_partitions > 0)
);

CREATE TABLE topic_configs (
    topic_id  UUID NOT NULL REFERENCES topics (topic_id) ON DELETE CASCADE,
    name      TEXT COLLATE "C" NOT NULL,
    value     TEXT NOT NULL,
    PRIMARY KEY (topic_id, name)
);

CREATE TABLE partitions (
    topic_id          UUID    NOT NULL REFERENCES topics (topic_id) ON DELETE CASCADE,
    partition         INTEGER NOT NULL CHECK (partition >= 0),
    log_start_offset  BIGINT  NOT NULL DEFAULT 0 CHECK (log_start_offset >= 0),
    leader_epoch      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (topic_id, partition)
);

CREATE TABLE committed_offsets (
    group_id             TEXT    COLLATE "C" NOT NULL,
    topic_id             UUID    NOT NULL,
    partition            INTEGER NOT NULL,
    committed_offset     BIGINT  NOT NULL,
    leader_epoch         INTEGER,                 -- NULL: the client sent none
    metadata             BYTEA   NOT NULL,        -- UTF-8 of the client's string, verbatim
    commit_timestamp_ms  BIGINT  NOT NULL,
    PRIMARY KEY (group_id, topic_id, partition),
    FOREIGN KEY (topic_id, partition) REFERENCES partitions (topic_id, partition) ON DELETE CASCADE
);
CREATE INDEX committed_offsets_by_partition ON committed_offsets (topic_id, partition);
CREATE INDEX committed_offsets_by_commit_time ON committed_offsets (commit_timestamp_ms);

CREATE TABLE remote_segments (
    topic_id        UUID    NOT NULL,
    partition       INTEGER NOT NULL,
    base_offset     BIGINT  NOT NULL,
    object_key      TEXT    COLLATE "C" NOT NULL UNIQUE,
    last_offset     BIGINT  NOT NULL,
    base_timestamp  BIGINT  NOT NULL,
    max_timestamp   BIGINT  NOT NULL,
    size_bytes      BIGINT  NOT NULL,
    leader_epoch    INTEGER NOT NULL,
    state           TEXT    NOT NULL CHECK (state IN ('uploading', 'committed', 'deleting')),
    PRIMARY KEY (topic_id, partition, base_offset, object_key),
    FOREIGN KEY (topic_id, partition) REFERENCES partitions (topic_id, partition) ON DELETE CASCADE
);

CREATE TABLE producer_snapshots (
    topic_id        UUID    NOT NULL,
    partition       INTEGER NOT NULL,
    log_end_offset  BIGINT  NOT NULL,
    PRIMARY KEY (topic_id, partition),
    FOREIGN KEY (topic_id, partition) REFERENCES partitions (topic_id, partition) ON DELETE CASCADE
);

CREATE TABLE producer_states (
    topic_id           UUID    NOT NULL,
    partition          INTEGER NOT NULL,
    producer_id        BIGINT  NOT NULL,
    producer_epoch     INTEGER NOT NULL,
    last_sequence      INTEGER NOT NULL,
    last_offset        BIGINT  NOT NULL,
    offset_delta       INTEGER NOT NULL,
    last_timestamp_ms  BIGINT  NOT NULL,
    PRIMARY KEY (topic_id, partition, producer_id),
    FOREIGN KEY (topic_id, partition) REFERENCES producer_snapshots (topic_id, partition) ON DELETE CASCADE
);

-- Cluster-wide counters; one row per counter, updated under its row lock.
CREATE TABLE counters (
    name   TEXT   PRIMARY KEY,
    value  BIGINT NOT NULL
);
INSERT INTO counters (name, value) VALUES ('next_producer_id_block', 0);
"""

# v2: write-ahead objects (their durable batches) and the cluster id.
_SCHEMA_V2 = """
CREATE TABLE wal_objects (
    object_key  TEXT COLLATE "C" PRIMARY KEY
);

CREATE TABLE wal_batches (
    topic_id      UUID    NOT NULL,
    partition     INTEGER NOT NULL,
    base_offset   BIGINT  NOT NULL,
    last_offset   BIGINT  NOT NULL,
    leader_epoch  INTEGER NOT NULL,
    object_key    TEXT    COLLATE "C" NOT NULL REFERENCES wal_objects (object_key) ON DELETE CASCADE,
    position      BIGINT  NOT NULL CHECK (position >= 0),
    size_bytes    BIGINT  NOT NULL CHECK (size_bytes > 0),
    PRIMARY KEY (topic_id, partition, base_offset),
    FOREIGN KEY (topic_id, partition) REFERENCES partitions (topic_id, partition) ON DELETE CASCADE
);
CREATE INDEX wal_batches_by_object ON wal_batches (object_key);
CREATE INDEX wal_batches_by_last_offset ON wal_batches (topic_id, partition, last_offset);

CREATE TABLE cluster (
    name   TEXT PRIMARY KEY,
    value  TEXT NOT NULL
);
"""

# v3: brokers' sessions, leases (the controller's), and each partition's leader. Times are the
# database's clock (clock_timestamp()), the one clock every broker of the cluster shares.
_SCHEMA_V3 = """
CREATE TABLE brokers (
    node_id          INTEGER     PRIMARY KEY,
    host             TEXT        NOT NULL,
    port             INTEGER     NOT NULL,
    rack             TEXT,
    incarnation      TEXT        NOT NULL,
    session_expires  TIMESTAMPTZ NOT NULL
);

CREATE TABLE leases (
    name     TEXT        PRIMARY KEY,
    holder   INTEGER     NOT NULL,
    expires  TIMESTAMPTZ NOT NULL
);

ALTER TABLE partitions ADD COLUMN leader_id INTEGER;
"""

# v4: SCRAM credentials (salted, KIP-554) and ACL bindings (metadata/security.py).
_SCHEMA_V4 = """
CREATE TABLE scram_credentials (
    user_name   TEXT    COLLATE "C" NOT NULL,
    mechanism   TEXT    NOT NULL CHECK (mechanism IN ('SCRAM-SHA-256', 'SCRAM-SHA-512')),
    salt        BYTEA   NOT NULL,
    iterations  INTEGER NOT NULL CHECK (iterations > 0),
    stored_key  BYTEA   NOT NULL,
    server_key  BYTEA   NOT NULL,
    PRIMARY KEY (user_name, mechanism)
);

CREATE TABLE acls (
    resource_type    SMALLINT NOT NULL,
    resource_name    TEXT     COLLATE "C" NOT NULL,
    pattern_type     SMALLINT NOT NULL,
    principal        TEXT     COLLATE "C" NOT NULL,
    host             TEXT     NOT NULL,
    operation        SMALLINT NOT NULL,
    permission_type  SMALLINT NOT NULL,
    PRIMARY KEY (resource_type, resource_name, pattern_type, principal, host, operation, permission_type)
);
"""

# v5: configs of resources other than topics (GROUP configs), by resource type name and name.
_SCHEMA_V5 = """
CREATE TABLE resource_configs (
    resource_type  TEXT COLLATE "C" NOT NULL,
    resource_name  TEXT COLLATE "C" NOT NULL,
    name           TEXT NOT NULL,
    value          TEXT NOT NULL,
    PRIMARY KEY (resource_type, resource_name, name)
);
"""

# v6: the transaction coordinator's state, one row per transactional id (metadata/transactions.py).
_SCHEMA_V6 = """
CREATE TABLE transactions (
    transactional_id  TEXT     COLLATE "C" PRIMARY KEY,
    producer_id       BIGINT   NOT NULL,
    producer_epoch    SMALLINT NOT NULL,
    timeout_ms        INTEGER  NOT NULL,
    state             TEXT     NOT NULL,
    partitions        TEXT     NOT NULL,
    offsets           TEXT     NOT NULL,
    txn_start_ms      BIGINT   NOT NULL,
    last_update_ms    BIGINT   NOT NULL
);
"""

# v7: each partition's aborted transactions whose batches reached the bucket (metadata/transactions.py).
_SCHEMA_V7 = """
CREATE TABLE aborted_transactions (
    topic_id      UUID    NOT NULL,
    partition     INTEGER NOT NULL,
    last_offset   BIGINT  NOT NULL,
    producer_id   BIGINT  NOT NULL,
    first_offset  BIGINT  NOT NULL,
    PRIMARY KEY (topic_id, partition, last_offset),
    FOREIGN KEY (topic_id, partition) REFERENCES partitions (topic_id, partition) ON DELETE CASCADE
);
"""

# v8: every listener of a broker (JSON [[name, host, port], ...]): Metadata answers a client
# with the other brokers' addresses on the listener it came in on.
_SCHEMA_V8 = """
ALTER TABLE brokers ADD COLUMN listeners TEXT NOT NULL DEFAULT '[]';
"""

# v9: coordinator slots (Kafka's __consumer_offsets partitions): each group and transactional
# id hashes to one; its holder coordinates them, moved by the controller under an epoch.
_SCHEMA_V9 = """
CREATE TABLE coordinator_slots (
    slot    INTEGER PRIMARY KEY,
    holder  INTEGER,
    epoch   INTEGER NOT NULL DEFAULT 0
);
"""

# v10: each producer's coordinator epoch and open transaction in the published producer state
# (Kafka's snapshot fields CoordinatorEpoch and CurrentTxnFirstOffset).
_SCHEMA_V10 = """
ALTER TABLE producer_states ADD COLUMN coordinator_epoch INTEGER NOT NULL DEFAULT -1;
ALTER TABLE producer_states ADD COLUMN current_txn_first_offset BIGINT NOT NULL DEFAULT -1;
"""

# v11: each KIP-848 consumer group's state, one opaque text per group (its coordinator's snapshot).
_SCHEMA_V11 = """
CREATE TABLE consumer_groups (
    group_id  TEXT COLLATE "C" PRIMARY KEY,
    state     TEXT NOT NULL
);
"""

# v12: the broker a reassignment asked to lead each partition (Kafka's preferred replica).
_SCHEMA_V12 = """
ALTER TABLE partitions ADD COLUMN preferred_leader INTEGER;
"""

MIGRATIONS = {1: _SCHEMA_V1, 2: _SCHEMA_V2, 3: _SCHEMA_V3, 4: _SCHEMA_V4, 5: _SCHEMA_V5, 6: _SCHEMA_V6, 7: _SCHEMA_V7, 8: _SCHEMA_V8, 9: _SCHEMA_V9, 10: _SCHEMA_V10, 11: _SCHEMA_V11, 12: _SCHEMA_V12}

_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS schema_version (
    version     INTEGER     PRIMARY KEY,
    applied_at  TIMESTAMPTZ NOT NULL DEFAULT now()
)
"""


async def schema_version(conn: asyncpg.Connection) -> int:
    """The database's schema version, 0 when nothing was ever applied."""
    exists = await conn.fetchval("SELECT to_regclass('schema_version') IS NOT NULL")
    if not exists:
        return 0
    return await conn.fetchval("SELECT COALESCE(MAX(version), 0) FROM schema_version")


async def migrate(conn: asyncpg.Connection, location: str, target: int = SCHEMA_VERSION) -> tuple[int, int]:
    """Bring the database to `target` (SCHEMA_VERSION unless a test wants an older one), in
    one transaction under the migration lock. Returns (version found, version now).
    Raises UnsupportedSchemaVersion when the database is newer than this code."""
    async with conn.transaction():
        await conn.execute(f"SET LOCAL statement_timeout = {MIGRATION_STATEMENT_TIMEOUT_MS}")
        await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK_ID)
        await conn.execute(_VERSION_TABLE)
        found = await conn.fetchval("SELECT COALESCE(MAX(version), 0) FROM schema_version")
        if found > SCHEMA_VERSION:
            raise UnsupportedSchemaVersion(location, found, SCHEMA_VERSION)
        for version in range(found + 1, target + 1):
            await conn.execute(MIGRATIONS[version])  # a script: the simple query protocol runs it whole
            await conn.execute("INSERT INTO schema_version (version) VALUES ($1)", version)
    return found, max(found, target)
