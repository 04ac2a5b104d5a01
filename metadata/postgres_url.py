"""`postgresql://` metadata URLs: libpq's form, plus the store's own settings as query keys.

    postgresql://USER:PASSWORD@HOST:PORT/DATABASE[?KEY=VALUE&...]
    postgres://...  and  postgresql+asyncpg://...  mean the same

Query keys the store reads (and removes before the rest reaches the driver):

    pool_max_size=10          connections to the database at most, per store (per broker)
    timeout_ms=5000           the server's statement_timeout, and the most one call may take,
                              retries after a lost connection included
    connect_timeout_ms=5000   one connection attempt

Any other key (sslmode, ...) goes to asyncpg as libpq would read it. Parsing is pure and
imports no driver, so the CLI can check a URL at start-up without one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .errors import UnsupportedMetadataUrl

POSTGRES_SCHEMES = ("postgresql", "postgres")


@dataclass(frozen=True, slots=True)
class PostgresSettings:
    pool_max_size: int = 10
    timeout_ms: int = 5_000
    connect_timeout_ms: int = 5_000


_SETTING_KEYS = frozenset(PostgresSettings.__dataclass_fields__)


@dataclass(frozen=True, slots=True)
class PostgresUrl:
    """`dsn` is what the driver gets (our keys removed, scheme normalised); `location` is the
    URL without its password, for messages and logs."""

    dsn: str
    location: str
    database: str
    settings: PostgresSettings = field(default_factory=PostgresSettings)


def redact_password(url: str) -> str:
    """The URL with its password (if any) as ***, for messages."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, hostpart = rest.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return url
    return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{hostpart}"


def parse_postgres_url(url: str) -> PostgresUrl:
    """Raises UnsupportedMetadataUrl, whose message never shows the password."""
    try:
        return _parse(url)
    except UnsupportedMetadataUrl as e:
        raise UnsupportedMetadataUrl(redact_password(url), e.reason) from None


def _parse(url: str) -> PostgresUrl:
    try:
        parts = urlsplit(url)
        port = parts.port  # ValueError when not a number in 0..65535
    except ValueError as e:
        raise UnsupportedMetadataUrl(url, f"not a valid postgresql URL: {e}") from None
    if parts.scheme.lower().split("+", 1)[0] not in POSTGRES_SCHEMES:
        raise UnsupportedMetadataUrl(url, "expected postgresql://USER:PASSWORD@HOST:PORT/DATABASE")
    if parts.fragment:
        raise UnsupportedMetadataUrl(url, "a fragment (#...) means nothing in a postgresql URL")
    database = parts.path.lstrip("/")
    if not database or "/" in database:
        raise UnsupportedMetadataUrl(url, "name one database: postgresql://USER:PASSWORD@HOST:PORT/DATABASE")
    settings: dict[str, int] = {}
    passed: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key not in _SETTING_KEYS:
            passed.append((key, value))
            continue
        try:
            settings[key] = int(value)
        except ValueError:
            raise UnsupportedMetadataUrl(url, f"{key} must be a whole number, got {value!r}") from None
        if settings[key] < 1:
            raise UnsupportedMetadataUrl(url, f"{key} must be at least 1, got {value!r}")
    dsn = urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(passed), ""))
    host = parts.hostname or "localhost"
    user = f"{parts.username}@" if parts.username else ""
    location = f"postgresql://{user}{host}{f':{port}' if port else ''}/{database}"
    return PostgresUrl(dsn, location, database, PostgresSettings(**settings))
