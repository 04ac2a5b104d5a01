"""SCRAM credentials and ACL bindings in the metadata store, one scenario on SQLite and on
PostgreSQL; and a SQLite database of schema v3 (before security) migrated in place to v4."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from metadata import MetadataStore, open_metadata_store, sqlite_url
from metadata.security import AclBinding, StoredScramCredential
from metadata.sqlite_schema import _MIGRATIONS, SCHEMA_VERSION, _statements

BACKENDS = [pytest.param("sqlite", id="sqlite"), pytest.param("postgresql", id="postgresql")]


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgresql":
        return request.getfixturevalue("postgres_database")
    return sqlite_url(tmp_path / "metadata.db")


@pytest.fixture
async def store(url: str) -> AsyncIterator[MetadataStore]:
    opened = await open_metadata_store(url)
    yield opened
    await opened.close()


def credential(user: str, mechanism: str, salt: bytes = b"salt") -> StoredScramCredential:
    return StoredScramCredential(user, mechanism, salt, 4096, b"stored-" + user.encode() + b"\0\xff", b"server-" + user.encode())


async def test_scram_credentials_are_kept_salted_per_user_and_mechanism(store: MetadataStore) -> None:
    alice512, alice256, bob = credential("alice", "SCRAM-SHA-512"), credential("alice", "SCRAM-SHA-256"), credential("bob", "SCRAM-SHA-512")
    await store.alter_scram_credentials([alice512, alice256, bob], [])
    assert await store.list_scram_credentials() == [alice256, alice512, bob]
    assert await store.list_scram_credentials(["alice", "nobody"]) == [alice256, alice512]
    replaced = credential("alice", "SCRAM-SHA-512", salt=b"new salt")
    await store.alter_scram_credentials([replaced], [("alice", "SCRAM-SHA-256"), ("nobody", "SCRAM-SHA-256")])
    assert await store.list_scram_credentials(["alice"]) == [replaced]
    await store.alter_scram_credentials([], [("alice", "SCRAM-SHA-512"), ("bob", "SCRAM-SHA-512")])
    assert await store.list_scram_credentials() == []


async def test_acl_bindings_are_a_set(store: MetadataStore) -> None:
    read = AclBinding(2, "orders", 3, "User:alice", "*", 3, 3)
    prefixed = AclBinding(2, "orders.", 4, "User:alice", "10.0.0.1", 4, 2)
    group = AclBinding(3, "billing", 3, "User:bob", "*", 3, 3)
    await store.create_acls([read, prefixed, group, read])
    assert await store.list_acls() == sorted([read, prefixed, group])
    assert await store.delete_acls([read, AclBinding(2, "orders", 3, "User:alice", "*", 4, 3)]) == 1
    assert await store.list_acls() == sorted([prefixed, group])


async def test_a_version_3_database_migrates_to_the_latest_keeping_its_topics(tmp_path: Path) -> None:
    path = tmp_path / "v3.db"
    conn = sqlite3.connect(path)
    for version in (1, 2, 3):
        for statement in _statements(_MIGRATIONS[version]):
            conn.execute(statement)
    conn.execute("INSERT INTO topics (topic_id, name, num_partitions) VALUES ('00000000-0000-0000-0000-000000000001', 'old', 1)")
    conn.execute("PRAGMA user_version = 3")
    conn.commit()
    conn.close()
    store = await open_metadata_store(sqlite_url(path))
    try:
        assert [t.name for t in await store.list_topics()] == ["old"]
        await store.create_acls([AclBinding(2, "old", 3, "User:a", "*", 3, 3)])
        assert len(await store.list_acls()) == 1
    finally:
        await store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
