"""`diskless metadata migrate` and `diskless metadata check`, run as a person would (the
command in a subprocess), against a SQLite file and the session's PostgreSQL server."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import asyncpg
import pytest

from metadata import open_metadata_store, sqlite_url
from metadata.postgres_schema import SCHEMA_VERSION

from .postgres_server import PASSWORD, PostgresServer, free_port


def diskless(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISKLESS_")}
    return subprocess.run(
        [sys.executable, "-m", "diskless.cli.main", *args], capture_output=True, text=True, timeout=60, env=env
    )


def test_sqlite_migrate_then_check(tmp_path) -> None:
    url = sqlite_url(tmp_path / "m.db")
    first = diskless("metadata", "migrate", "--metadata", url)
    assert (first.returncode, first.stderr) == (0, "")
    assert first.stdout == f"{tmp_path / 'm.db'}: schema version 0 -> {SCHEMA_VERSION}\n"
    again = diskless("metadata", "migrate", "--metadata", url)
    assert again.stdout == f"{tmp_path / 'm.db'}: schema version {SCHEMA_VERSION}, already current\n"
    check = diskless("metadata", "check", "--metadata", url, "--json")
    assert check.returncode == 0, check.stderr
    report = json.loads(check.stdout)
    assert (report["backend"], report["schema_version"], report["row_counts"]["topics"]) == ("sqlite", SCHEMA_VERSION, 0)


def test_sqlite_check_of_a_missing_file_changes_nothing(tmp_path) -> None:
    result = diskless("metadata", "check", "--data-dir", str(tmp_path / "data"))
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == f"diskless metadata check: {tmp_path / 'data' / 'metadata.db'}: no such file\n"
    assert not (tmp_path / "data").exists()


def test_postgresql_migrate_then_check(postgres_database: str) -> None:
    check = diskless("metadata", "check", "--metadata", postgres_database)
    assert check.returncode == 0, check.stderr
    assert "schema version: 0 (empty: run diskless metadata migrate" in check.stdout
    migrate = diskless("metadata", "migrate", "--metadata", postgres_database)
    assert migrate.returncode == 0, migrate.stderr
    assert migrate.stdout.endswith(f": schema version 0 -> {SCHEMA_VERSION}\n")
    assert PASSWORD not in migrate.stdout

    async def fill() -> None:
        async with await open_metadata_store(postgres_database) as store:
            await store.create_topic("orders", 3, {"retention.ms": "1"})
            await store.put_consumer_group("g", "{}")

    asyncio.run(fill())
    check = diskless("metadata", "check", "--metadata", postgres_database, "--json")
    assert check.returncode == 0, check.stderr
    report = json.loads(check.stdout)
    assert (report["backend"], report["connection"], report["schema_version"]) == ("postgresql", "ok", SCHEMA_VERSION)
    assert report["row_counts"] == {
        "topics": 1, "partitions": 3, "topic_configs": 1, "committed_offsets": 0, "consumer_groups": 1,
        "remote_segments": 0, "producer_snapshots": 0, "wal_objects": 0, "wal_batches": 0, "transactions": 0,
        "aborted_transactions": 0,
    }  # fmt: skip
    human = diskless("metadata", "check", "--metadata", postgres_database)
    assert f"schema version: {SCHEMA_VERSION} (current)" in human.stdout
    assert "  partitions:         3" in human.stdout


@pytest.mark.parametrize(
    ("url", "code", "line"),
    [
        ("postgresql://u:secret@127.0.0.1:port/d", 2,
         "metadata URL 'postgresql://u:***@127.0.0.1:port/d': not a valid postgresql URL: "),
        ("postgresql://127.0.0.1", 2, "name one database"),
        ("mysql://127.0.0.1/d", 2, "unknown scheme 'mysql'"),
    ],
)  # fmt: skip
def test_a_bad_url_is_one_line(url: str, code: int, line: str) -> None:
    for action in ("migrate", "check"):
        result = diskless("metadata", action, "--metadata", url)
        assert (result.returncode, result.stdout) == (code, "")
        assert result.stderr.count("\n") == 1 and line in result.stderr, result.stderr
        assert result.stderr.startswith(f"diskless metadata {action}: ")
        assert "secret" not in result.stderr


def test_a_wrong_password_an_unknown_database_and_no_server_are_one_line(postgres_server: PostgresServer) -> None:
    cases = [
        (postgres_server.url(password="not-the-password"), 'password authentication failed for user "diskless"'),
        (postgres_server.url("no_such_db"), 'database "no_such_db" does not exist'),
        (f"postgresql://u:p@127.0.0.1:{free_port()}/d?timeout_ms=500", "database unreachable at postgresql://u@127.0.0.1:"),
    ]
    for url, line in cases:
        for action in ("migrate", "check"):
            result = diskless("metadata", action, "--metadata", url)
            assert (result.returncode, result.stdout) == (1, ""), result
            assert result.stderr.count("\n") == 1 and line in result.stderr, result.stderr
            assert "not-the-password" not in result.stderr


def test_a_newer_schema_is_refused(postgres_database: str) -> None:
    assert diskless("metadata", "migrate", "--metadata", postgres_database).returncode == 0

    async def from_the_future() -> None:
        conn = await asyncpg.connect(postgres_database)
        try:
            await conn.execute("INSERT INTO schema_version (version) VALUES (99)")
        finally:
            await conn.close()

    asyncio.run(from_the_future())
    for action in ("migrate", "check"):
        result = diskless("metadata", action, "--metadata", postgres_database)
        assert result.returncode == 1
        assert f"has schema version 99, this build reads up to {SCHEMA_VERSION}" in result.stderr
