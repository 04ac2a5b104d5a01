"""Choosing a metadata backend by URL.

    sqlite:///RELATIVE/PATH.db     a file relative to the working directory at open time
    sqlite:////ABSOLUTE/PATH.db    an absolute path: "sqlite:///" followed by "/ABSOLUTE/..."
    sqlite://                      an in-memory database (tests only: nothing survives close)
    postgresql://USER:PASSWORD@HOST:PORT/DATABASE
                                   the cluster backend (also postgres://); query keys in
                                   `postgres_url` (pool size, timeouts)

The SQLite form is SQLAlchemy's: everything after "sqlite:///" is the path, verbatim (no
percent-decoding), so `"sqlite:///" + str(path)` is right for relative and absolute paths
alike; `sqlite_url(path)` builds it. `sqlite:///tmp/m.db` is therefore the RELATIVE path
"tmp/m.db", unlike a file: URL. No host, query or fragment is accepted: a URL that would
mean something else to someone else is refused rather than half-understood.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .errors import UnsupportedMetadataUrl
from .postgres_url import POSTGRES_SCHEMES, PostgresUrl, parse_postgres_url
from .store import MetadataStore

_SQLITE_PREFIX = "sqlite://"


@dataclass(frozen=True, slots=True)
class SqliteUrl:
    """A parsed `sqlite:` URL; `path` is as written (maybe relative) or ":memory:"."""

    path: str


def parse_metadata_url(url: str) -> SqliteUrl | PostgresUrl:
    """Parse without opening anything, so a bad URL fails at start-up, with the URL in the
    message. Raises UnsupportedMetadataUrl."""
    scheme, sep, _ = url.partition(":")
    if not sep or not scheme:
        raise UnsupportedMetadataUrl(url, "not a URL; expected sqlite:///PATH or postgresql://HOST/DATABASE")
    scheme = scheme.lower()
    if scheme.split("+", 1)[0] in POSTGRES_SCHEMES:
        return parse_postgres_url(url)
    if scheme != "sqlite":
        raise UnsupportedMetadataUrl(url, f"unknown scheme {scheme!r}; supported: sqlite, postgresql")
    if not url.lower().startswith(_SQLITE_PREFIX):
        raise UnsupportedMetadataUrl(url, "expected sqlite:///PATH (three slashes, then the path)")
    rest = url[len(_SQLITE_PREFIX) :]
    if "?" in rest or "#" in rest:
        raise UnsupportedMetadataUrl(url, "query parameters and fragments are not supported")
    if rest == "":
        return SqliteUrl(":memory:")
    if not rest.startswith("/"):
        raise UnsupportedMetadataUrl(url, "a sqlite URL has no host; expected sqlite:///PATH")
    path = rest[1:]
    if not path:
        raise UnsupportedMetadataUrl(url, "no database path after sqlite:///")
    return SqliteUrl(path)


def sqlite_url(path: str | os.PathLike[str]) -> str:
    """The URL of the SQLite file at `path` (relative or absolute)."""
    url = "sqlite:///" + os.fspath(path)
    parsed = parse_metadata_url(url)
    if not isinstance(parsed, SqliteUrl) or parsed.path != os.fspath(path):
        raise UnsupportedMetadataUrl(url, "this path cannot be written as a sqlite URL")
    return url


async def open_metadata_store(url: str) -> MetadataStore:
    """Open (creating if needed) the store the URL names. Use as
    `store = await open_metadata_store(url)` ... `await store.close()`, or
    `async with await open_metadata_store(url) as store:`."""
    parsed = parse_metadata_url(url)
    if isinstance(parsed, PostgresUrl):
        from .postgres import PostgresMetadataStore  # imports asyncpg only when asked for

        return await PostgresMetadataStore.open(parsed)
    from .sqlite import SqliteMetadataStore

    return await SqliteMetadataStore.open(parsed.path)
