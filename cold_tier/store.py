"""The object-store contract every adapter (S3, local directory) meets, and its pure helpers.

Semantics, identical for every adapter and proven by tests/integration/test_object_store_contract.py:

- A key is a non-empty string of at most 1024 UTF-8 bytes, made of '/'-separated components;
  no component is empty, '.' or '..', and none starts with `TEMP_PREFIX` (the local store's
  partial writes). Anything else is a caller bug: `ValueError`.
- `put` and `put_file` are atomic: a reader sees the whole old object, the whole new one, or
  nothing; never a partial object. `put(..., if_none_match=True)` creates the object only if
  the key is free (S3 `If-None-Match: *`); when it is taken it raises `PreconditionFailed` and
  changes nothing.
- `get(key, start=S, end=E)` returns the bytes of the half-open range [S, E), that is
  `object[S:E]` with Python's slice clamping: `start` defaults to 0, `end` to the object's
  size, an `end` past the size is cut to the size and a `start` at or past it gives b"".
  Negative bounds or `end < start` are a `ValueError`. (S3's own Range header is inclusive;
  the adapter converts.) A missing key is `ObjectNotFound`, whatever the range.
- `head` returns `ObjectInfo` or None; `etag` is opaque: equal etags mean equal contents for
  one adapter, nothing more.
- `list(prefix)` returns every object whose key starts with `prefix` (a plain string prefix,
  not a directory), all pages, sorted by key (code-point order = S3's UTF-8 byte order).
- `delete` and `delete_many` are idempotent: deleting a missing key is not an error.
- After `close()` every call raises `StoreClosed`.
- `StoreUnavailable` from a write means its outcome is unknown: the object may or may not
  exist. For the same reason a conditional put retried after a lost answer can report
  `PreconditionFailed` for its own first try; a writer whose keys are unique (commit keys
  carry an upload id) may check the object's contents before treating that as a lost race.

A store is used from one event loop and may be shared by all tasks on it; close it only once
the calls in flight have finished.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol, Self

DEFAULT_PART_BYTES = 8 * 1024 * 1024
MAX_KEY_BYTES = 1024
TEMP_PREFIX = ".diskless-tmp-"


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str
    size_bytes: int
    etag: str


class ObjectStore(Protocol):
    async def put(self, key: str, data: bytes, *, if_none_match: bool = False) -> None: ...

    async def put_file(
        self, key: str, path: str | os.PathLike[str], *, part_bytes: int = DEFAULT_PART_BYTES
    ) -> None:
        """Upload the file at `path`: one PUT when it is at most `part_bytes` long, else a
        multipart upload of `part_bytes` parts (S3 wants parts of 5 MiB or more), aborted if
        any step fails so no parts linger."""
        ...

    async def get(self, key: str, *, start: int | None = None, end: int | None = None) -> bytes:
        """The bytes [start, end) of the object; see the module docstring."""
        ...

    async def head(self, key: str) -> ObjectInfo | None: ...

    async def list(self, prefix: str = "") -> list[ObjectInfo]: ...

    async def delete(self, key: str) -> None: ...

    async def delete_many(self, keys: Iterable[str]) -> None: ...

    async def close(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


def check_key(key: str) -> str:
    """Return `key` if it is a valid object key (see the module docstring), else raise ValueError."""
    if not isinstance(key, str) or not key:
        raise ValueError(f"object key must be a non-empty string, got {key!r}")
    if len(key.encode("utf-8")) > MAX_KEY_BYTES:
        raise ValueError(f"object key is longer than {MAX_KEY_BYTES} bytes: {key[:64]!r}...")
    if "\x00" in key:
        raise ValueError(f"object key contains NUL: {key!r}")
    for component in key.split("/"):
        if component in ("", ".", ".."):
            raise ValueError(f"object key has an empty, '.' or '..' component: {key!r}")
        if component.startswith(TEMP_PREFIX):
            raise ValueError(f"object key component may not start with {TEMP_PREFIX!r}: {key!r}")
    return key


def check_prefix(prefix: str) -> str:
    """A list prefix is any string without NUL; '' lists everything."""
    if not isinstance(prefix, str) or "\x00" in prefix:
        raise ValueError(f"list prefix must be a string without NUL, got {prefix!r}")
    return prefix


def check_range(start: int | None, end: int | None) -> tuple[int, int | None]:
    """Validate a [start, end) byte range; return (start, end) with start defaulted to 0."""
    first = 0 if start is None else start
    if first < 0:
        raise ValueError(f"range start must be >= 0, got {start}")
    if end is not None and end < first:
        raise ValueError(f"range end {end} is before its start {first}")
    return first, end


def check_part_bytes(part_bytes: int) -> int:
    if part_bytes <= 0:
        raise ValueError(f"part_bytes must be positive, got {part_bytes}")
    return part_bytes
