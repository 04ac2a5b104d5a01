"""The SQLite schema of the metadata store, and how a database file is brought up to it.

The version lives in `PRAGMA user_version` (0 = empty file). Opening a file at a lower
version creates or migrates it inside one transaction, so a crash mid-migration leaves the
old version; a higher version is refused (`UnsupportedSchemaVersion`) rather than guessed at.

Rows are keyed on the topic id, not the name: deleting a topic and creating one with the
same name gives a new id and none of the old state. Everything hangs off `topics` through
foreign keys with ON DELETE CASCADE (enforced because every connection sets
`PRAGMA foreign_keys = ON`), so deleting the topic row deletes its configs, partition
state, committed offsets, catalogue rows and producer state in the same transaction.

The DDL is plain SQL that PostgreSQL also accepts, apart from `WITHOUT ROWID` and the
`?` placeholders used elsewhere.

Runs on the store's worker thread only.
"""

from __future__ import annotations

import sqlite3

from .errors import UnsupportedSchemaVersion

SCHEMA_VERSION = 12

_SCHEMA_V1 = """
CREATE TABLE topics (
    topic_id        TEXT    PRIMARY KEY,          -- canonical UUID text
    name            TEXT    NOT NULL UNIQUE,
    num_partitions  INTEGER NOT NULL CHECK (num_partitions > 0)
);

CREATE TABLE topic_configs (
    topic_id  TEXT NOT NULL REFERENCES topics (topic_id) ON DELETE CASCADE,
    name      TEXT NOT NULL,
    value     TEXT NOT NULL,
    PRIMARY KEY (topic_id, name)
) WITHOUT ROWID;

CREATE TABLE partitions (
    topic_id          TEXT    NOT NULL REFERENCES topics (topic_id) ON DELETE CASCADE,
    partition         INTEGER NOT NULL CHECK (partition >= 0),
    log_start_offset  INTEGER NOT NULL DEFAULT 0 CHECK (log_start_offset >= 0),
    leader_epoch      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (topic_id, partition)
) WITHOUT ROWID;

CREATE TABLE committed_offsets (
    group_id             TEXT    NOT NULL,
    topic_id             TEXT    NOT NULL,
    partition            INTEGER NOT NULL,
    committed_offset     INTEGER NOT NULL,
    leader_epoch         INTEGER,                 -- NULL: the client sent none
    metadata             TEXT    NOT NULL,
    commit_timestamp_ms  INTEGER NOT NULL,
    PRIMARY KEY (group_id, topic_id, partition),
    FOREIGN KEY (topic_id, partition) REFERENCES partitions (topic_id, partition) ON DELETE CASCADE
) WITHOUT ROWID;
CREATE INDEX committed_offsets_by_partition ON committed_offsets (topic_id, partition);
CREATE INDEX committed_offsets_by_commit_time ON committed_offsets (commit_timestamp_ms);

CREATE TABLE remote_segments (
    topic_id        TEXT    NOT NULL,
    partition       INTEGER NOT NULL,
    base_offset     INTEGER NOT NULL,
    object_key      TEXT    NOT NULL UNIQUE,
    last_offset     INTEGER NOT NULL,
    base_timestamp  INTEGER NOT NULL,
    max_timestamp   INTEGER NOT NULL,
    size_bytes      INTEGER NOT NULL,
    leader_epoch    INTEGER NOT NULL,
    state           TEXT    NOT NULL CHECK (state IN ('uploading', 'committed', 'deleting')),
    PRIMARY KEY (topic_id, partition, base_offset, object_key),
    FOREIGN KEY (topic_id, partition) REFERENCES partitions (topic_id, partition) ON DELETE CASCADE
);

CREATE TABLE producer_snapshots (
    topic_id        TEXT    NOT NULL,
    partition       INTEGER NOT NULL,
    log_end_offset  INTEGER NOT NULL,
    PRIMARY KEY (topic_id, partition),
    FOREIGN KEY (topic_id, partition) REFERENCES partitions (topic_id, partition) ON DELETE CASCADE
) WITHOUT ROWID;

CREATE TABLE producer_states (
    topic_id           TEXT    NOT NULL,
    partition          INTEGER NOT NULL,
    producer_id        INTEGER NOT NULL,
    producer_epoch     INTEGER NOT NULL,
    last_sequence      INTEGER NOT NULL,
    last_offset        INTEGER NOT NULL,
    offset_delta       INTEGER NOT NULL,
    last_timestamp_ms  INTEGER NOT NULL,
    PRIMARY KEY (topic_id, partition, producer_id),
    FOREIGN KEY (topic_id, partition) REFERENCES producer_snapshots (topic_id, partition) ON DELETE CASCADE
) WITHOUT ROWID;

-- Cluster-wide counters; one row per counter.
CREATE TABLE counters (
    name   TEXT    PRIMARY KEY,
    value  INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO counters (name, value) VALUES ('next_producer_id_block', 0);
"""

# v2: write-ahead objects (their durable batches) and the cluster id.
_SCHEMA_V2 = """
CREATE TABLE wal_objects (
    object_key  TEXT PRIMARY KEY
) WITHOUT ROWID;

CREATE TABLE wal_batches (
    topic_id      TEXT    NOT NULL,
    partition     INTEGER NOT NULL,
    base_offset   INTEGER NOT NULL,
    last_offset   INTEGER NOT NULL,
    leader_epoch  INTEGER NOT NULL,
    object_key    TEXT    NOT NULL REFERENCES wal_objects (object_key) ON DELETE CASCADE,
    position      INTEGER NOT NULL CHECK (position >= 0),
    size_bytes    INTEGER NOT NULL CHECK (size_bytes > 0),
    PRIMARY KEY (topic_id, partition, base_offset),
    FOREIGN KEY (topic_id, partition) REFERENCES partitions (topic_id, partition) ON DELETE CASCADE
) WITHOUT ROWID;
CREATE INDEX wal_batches_by_object ON wal_batches (object_key);

CREATE TABLE cluster (
    name   TEXT PRIMARY KEY,
    value  TEXT NOT NULL
) WITHOUT ROWID;
"""

# v3: brokers' sessions, leases (the controller's), and each partition's leader.
_SCHEMA_V3 = """
CREATE TABLE brokers (
    node_id             INTEGER PRIMARY KEY,
    host                TEXT    NOT NULL,
    port                INTEGER NOT NULL,
    rack                TEXT,
    incarnation         TEXT    NOT NULL,
    session_expires_ms  INTEGER NOT NULL
);

CREATE TABLE leases (
    name        TEXT    PRIMARY KEY,
    holder      INTEGER NOT NULL,
    expires_ms  INTEGER NOT NULL
) WITHOUT ROWID;

ALTER TABLE partitions ADD COLUMN leader_id INTEGER;
"""

# v4: SCRAM credentials (salted, KIP-554) and ACL bindings (metadata/security.py).
_SCHEMA_V4 = """
CREATE TABLE scram_credentials (
    user_name   TEXT    NOT NULL,
    mechanism   TEXT    NOT NULL CHECK (mechanism IN ('SCRAM-SHA-256', 'SCRAM-SHA-512')),
    salt        BLOB    NOT NULL,
    iterations  INTEGER NOT NULL CHECK (iterations > 0),
    stored_key  BLOB    NOT NULL,
    server_key  BLOB    NOT NULL,
    PRIMARY KEY (user_name, mechanism)
) WITHOUT ROWID;

CREATE TABLE acls (
    resource_type    INTEGER NOT NULL,
    resource_name    TEXT    NOT NULL,
    pattern_type     INTEGER NOT NULL,
    principal        TEXT    NOT NULL,
    host             TEXT    NOT NULL,
    operation        INTEGER NOT NULL,
    permission_type  INTEGER NOT NULL,
    PRIMARY KEY (resource_type, resource_name, pattern_type, principal, host, operation, permission_type)
) WITHOUT ROWID;
"""

# v5: configs of resources other than topics (GROUP configs), by resource type name and name.
_SCHEMA_V5 = """
CREATE TABLE resource_configs (
    resource_type  TEXT NOT NULL,
    resource_name  TEXT NOT NULL,
    name           TEXT NOT NULL,
    value          TEXT NOT NULL,
    PRIMARY KEY (resource_type, resource_name, name)
) WITHOUT ROWID;
"""

# v6: the transaction coordinator's state, one row per transactional id (metadata/transactions.py).
_SCHEMA_V6 = """
CREATE TABLE transactions (
    transactional_id  TEXT    PRIMARY KEY,
    producer_id       INTEGER NOT NULL,
    producer_epoch    INTEGER NOT NULL,
    timeout_ms        INTEGER NOT NULL,
    state             TEXT    NOT NULL,
    partitions        TEXT    NOT NULL,              -- JSON [[topic, partition], ...]
    offsets           TEXT    NOT NULL,              -- JSON {"groups": [...], "offsets": [...]}
    txn_start_ms      INTEGER NOT NULL,
    last_update_ms    INTEGER NOT NULL
) WITHOUT ROWID;
"""

# v7: each partition's aborted transactions whose batches reached the bucket (metadata/transactions.py).
_SCHEMA_V7 = """
CREATE TABLE aborted_transactions (
    topic_id      TEXT    NOT NULL,
    partition     INTEGER NOT NULL,
    last_offset   INTEGER NOT NULL,              -- the abort marker's offset
    producer_id   INTEGER NOT NULL,
    first_offset  INTEGER NOT NULL,
    PRIMARY KEY (topic_id, partition, last_offset),
    FOREIGN KEY (topic_id, partition) REFERENCES partitions (topic_id, partition) ON DELETE CASCADE
) WITHOUT ROWID;
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
CREATE TABLE consumer_groups (          -- a rowid table: a state outgrows WITHOUT ROWID's small rows
    group_id  TEXT PRIMARY KEY,
    state     TEXT NOT NULL
);
"""

# v12: the broker a reassignment asked to lead each partition (Kafka's preferred replica).
_SCHEMA_V12 = """
ALTER TABLE partitions ADD COLUMN preferred_leader INTEGER;
"""

_MIGRATIONS = {1: _SCHEMA_V1, 2: _SCHEMA_V2, 3: _SCHEMA_V3, 4: _SCHEMA_V4, 5: _SCHEMA_V5, 6: _SCHEMA_V6, 7: _SCHEMA_V7, 8: _SCHEMA_V8, 9: _SCHEMA_V9, 10: _SCHEMA_V10, 11: _SCHEMA_V11, 12: _SCHEMA_V12}


def ensure_schema(conn: sqlite3.Connection, location: str) -> None:
    """Bring the database to SCHEMA_VERSION. `conn` must be in autocommit mode
    (isolation_level=None); the migration is one explicit transaction."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        (found,) = conn.execute("PRAGMA user_version").fetchone()
        if found > SCHEMA_VERSION:
            raise UnsupportedSchemaVersion(location, found, SCHEMA_VERSION)
        for version in range(found + 1, SCHEMA_VERSION + 1):
            # executescript() would COMMIT first; run the statements one by one instead.
            for statement in _statements(_MIGRATIONS[version]):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {version}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:  # some errors (SQLITE_FULL, ...) have rolled back already
            conn.execute("ROLLBACK")
        raise


def _statements(script: str) -> list[str]:
    lines = [line.split("--", 1)[0] for line in script.splitlines()]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
