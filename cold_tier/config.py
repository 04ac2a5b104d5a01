"""Where a bucket is and how to reach it: the parsed form of an object-store URL.

Plain frozen dataclasses with no I/O and no heavy imports, so the Spark reader and the CLI can
parse a URL (`cold_tier.url.parse_object_store_url`) without loading aiobotocore.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .retry import RetryPolicy


@dataclass(frozen=True, slots=True)
class LocalStoreConfig:
    """A bucket that is a local directory: `file:///abs/path`."""

    root: Path


@dataclass(frozen=True, slots=True)
class S3Config:
    """An S3-compatible bucket: `s3://BUCKET[/PREFIX]?endpoint_url=...&region=...`.

    `prefix` is '' or ends with '/'; the store puts it in front of every key. Credentials left
    as None fall back to botocore's own provider chain (profile files, instance roles).
    `endpoint_url` None means AWS itself.
    """

    bucket: str
    prefix: str = ""
    endpoint_url: str | None = None
    region: str = "us-east-1"
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    retry: RetryPolicy = RetryPolicy()
    # Short, so a store that accepts connections and never answers fails a request within
    # seconds (a read timeout counts from the request's last byte sent, or the last byte
    # received: a long transfer that keeps moving never trips it). A request that times out is
    # retried, on a new connection.
    connect_timeout_ms: int = 2_000
    read_timeout_ms: int = 5_000
    max_pool_connections: int = 32

    def __post_init__(self) -> None:
        if not self.bucket:
            raise ValueError("bucket must not be empty")
        if self.prefix and not self.prefix.endswith("/"):
            raise ValueError(f"prefix must be empty or end with '/', got {self.prefix!r}")
        if self.connect_timeout_ms <= 0 or self.read_timeout_ms <= 0:
            raise ValueError("timeouts must be positive")
