"""Errors raised by the cold tier: object stores, their URLs, and the bucket layout.

Every error carries the fields a caller needs to act on it. `StoreUnavailable` is the only
one worth retrying later (the adapters have already retried it); the others describe a
missing object, a lost race, a request the store refused, a closed store, or bytes at rest
(here: object keys) that cannot be trusted.
"""

from __future__ import annotations


class ColdTierError(Exception):
    """Base class of every error in `cold_tier`."""


class ObjectStoreError(ColdTierError):
    """Base class of the errors an `ObjectStore` raises."""


class ObjectNotFound(ObjectStoreError):
    def __init__(self, key: str) -> None:
        super().__init__(f"object {key!r} does not exist")
        self.key = key


class PreconditionFailed(ObjectStoreError):
    """A conditional write lost: `put(key, ..., if_none_match=True)` found `key` already there."""

    def __init__(self, key: str) -> None:
        super().__init__(f"object {key!r} already exists")
        self.key = key


class StoreUnavailable(ObjectStoreError):
    """The store could not be reached, or kept failing (throttling, 5xx), after `attempts` tries."""

    retriable = True

    def __init__(self, reason: str, *, operation: str = "", key: str | None = None, attempts: int = 1) -> None:
        where = f" for {key!r}" if key is not None else ""
        super().__init__(f"object store unavailable: {operation}{where} failed after {attempts} attempt(s): {reason}")
        self.reason = reason
        self.operation = operation
        self.key = key
        self.attempts = attempts


class StoreRequestRejected(ObjectStoreError):
    """The store refused a request and retrying will not help (access denied, no such bucket,
    a part below the minimum multipart size, a key that collides with a directory, ...).

    `code` is the S3 error code (`AccessDenied`, `NoSuchBucket`, `EntityTooSmall`) or, for the
    local store, a short name of our own (`KeyConflict`).
    """

    retriable = False

    def __init__(self, *, operation: str, key: str | None, code: str, reason: str) -> None:
        where = f" for {key!r}" if key is not None else ""
        super().__init__(f"object store rejected {operation}{where}: {code}: {reason}")
        self.operation = operation
        self.key = key
        self.code = code
        self.reason = reason


class StoreClosed(ObjectStoreError):
    def __init__(self, operation: str) -> None:
        super().__init__(f"object store is closed: cannot {operation}")
        self.operation = operation


class InvalidObjectStoreUrl(ColdTierError):
    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"invalid object store URL {url!r}: {reason}")
        self.url = url
        self.reason = reason


class InvalidSegmentKey(ColdTierError):
    """An object key in the bucket that claims to be part of the layout but does not parse:
    corrupt data at rest, not a bug of the caller."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"invalid segment object key {key!r}: {reason}")
        self.key = key
        self.reason = reason
