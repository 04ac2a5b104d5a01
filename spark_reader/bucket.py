"""Synchronous, read-only access to the bucket from Spark's driver and workers.

The broker's stores (cold_tier.s3, cold_tier.local) are asyncio; Spark's Python workers are
plain threads, so the reader has its own small clients: `LocalBucket` for file:// and
`MinioBucket` (the `minio` client: light, synchronous, enough for LIST and ranged GET).
Keys are the layout's (cold_tier.layout), relative to the store root; an s3:// URL's prefix
is added here, as the broker's store adds it.

Where the bucket is and how to reach it (`BucketLocation`) is resolved once, on the driver,
and shipped to the workers inside the reader: a worker's environment need not hold the
credentials. Precedence, highest first: the URL's own query (endpoint_url, region), reader
options named like the AWS variables, then the driver's environment:

    AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
    AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, AWS_REGION, AWS_DEFAULT_REGION

Without any credentials the minio client tries the AWS config files and instance roles. A
missing object raises `cold_tier.errors.ObjectNotFound`, as the broker's stores do. A client
is not shared between processes; `MinioBucket` may be used from several threads at once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

from cold_tier.config import LocalStoreConfig, S3Config
from cold_tier.errors import ObjectNotFound, StoreRequestRejected, StoreUnavailable
from cold_tier.retry import RETRYABLE_CODES
from cold_tier.url import parse_object_store_url

from .options import AWS_OPTION_NAMES

_NOT_FOUND_CODES = ("NoSuchKey", "NoSuchObject", "ResourceNotFound")


@dataclass(frozen=True, slots=True)
class BucketLocation:
    url: str
    store: LocalStoreConfig | S3Config


def resolve_location(url: str, options_env: Mapping[str, str], environ: Mapping[str, str]) -> BucketLocation:
    """Parse `url`, taking what it leaves out from `options_env`, then `environ`."""
    env = {name: environ[name] for name in AWS_OPTION_NAMES if environ.get(name)}
    env.update({name: value for name, value in options_env.items() if value})
    return BucketLocation(url=url, store=parse_object_store_url(url, env=env))


class Bucket(Protocol):
    def list_keys(self, directory: str) -> list[str]:
        """Every key under `directory` (which ends in '/'), sorted."""
        ...

    def list_directories(self, directory: str) -> list[str]:
        """The names of the 'subdirectories' right under `directory` ('' is the root)."""
        ...

    def list_sizes(self, directory: str) -> list[tuple[str, int]]:
        """(key, size in bytes) of every object under `directory`, sorted by key."""
        ...

    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        """Bytes [start, end) of the object, clamped to its size, as ObjectStore.get."""
        ...

    def close(self) -> None: ...


def open_bucket(location: BucketLocation) -> Bucket:
    if isinstance(location.store, LocalStoreConfig):
        return LocalBucket(location.store.root)
    return MinioBucket(location.store)


class LocalBucket:
    """A bucket that is a local directory; the broker's temp files (never valid keys) are
    skipped, as `LocalObjectStore.list` skips them."""

    def __init__(self, root: Path) -> None:
        self._root = Path(root)

    def list_keys(self, directory: str) -> list[str]:
        base = self._root.joinpath(*directory.strip("/").split("/")) if directory.strip("/") else self._root
        keys: list[str] = []
        for dirpath, dirnames, filenames in os.walk(base):
            relative = Path(dirpath).relative_to(self._root).as_posix()
            prefix = "" if relative == "." else relative + "/"
            keys.extend(prefix + name for name in filenames if not name.startswith(".diskless-tmp-"))
        keys.sort()
        return keys

    def list_sizes(self, directory: str) -> list[tuple[str, int]]:
        sizes = []
        for key in self.list_keys(directory):
            try:
                sizes.append((key, self._root.joinpath(*key.split("/")).stat().st_size))
            except FileNotFoundError:
                pass  # deleted since the walk
        return sizes

    def list_directories(self, directory: str) -> list[str]:
        base = self._root.joinpath(*directory.strip("/").split("/")) if directory.strip("/") else self._root
        try:
            return sorted(entry.name for entry in os.scandir(base) if entry.is_dir())
        except (FileNotFoundError, NotADirectoryError):
            return []

    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        try:
            with open(self._root.joinpath(*key.split("/")), "rb") as file:
                if start:
                    file.seek(start)
                return file.read() if end is None else file.read(max(0, end - start))
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise ObjectNotFound(key) from None

    def close(self) -> None:
        pass


class MinioBucket:
    def __init__(self, config: S3Config) -> None:
        from minio import Minio  # imported here: file:// readers need none of it
        from minio.credentials import AWSConfigProvider, ChainedProvider, IamAwsProvider

        endpoint = urlsplit(config.endpoint_url or "https://s3.amazonaws.com")
        credentials = None
        if config.access_key_id is None:
            credentials = ChainedProvider([AWSConfigProvider(), IamAwsProvider()])
        self._client = Minio(
            endpoint.netloc,
            access_key=config.access_key_id,
            secret_key=config.secret_access_key,
            session_token=config.session_token,
            secure=endpoint.scheme == "https",
            region=config.region,
            credentials=credentials,
        )
        self._bucket = config.bucket
        self._prefix = config.prefix

    def list_keys(self, directory: str) -> list[str]:
        cut = len(self._prefix)
        objects = self._call("list", directory, lambda: list(
            self._client.list_objects(self._bucket, prefix=self._prefix + directory, recursive=True)
        ))  # fmt: skip
        return sorted(item.object_name[cut:] for item in objects if not item.is_dir)

    def list_sizes(self, directory: str) -> list[tuple[str, int]]:
        cut = len(self._prefix)
        objects = self._call("list", directory, lambda: list(
            self._client.list_objects(self._bucket, prefix=self._prefix + directory, recursive=True)
        ))  # fmt: skip
        return sorted((item.object_name[cut:], int(item.size)) for item in objects if not item.is_dir)

    def list_directories(self, directory: str) -> list[str]:
        cut = len(self._prefix + directory)
        objects = self._call("list", directory, lambda: list(
            self._client.list_objects(self._bucket, prefix=self._prefix + directory, recursive=False)
        ))  # fmt: skip
        return sorted(item.object_name[cut:].rstrip("/") for item in objects if item.is_dir)

    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        if end is not None and end <= start:
            return b""

        def fetch() -> bytes:
            response = self._client.get_object(
                self._bucket, self._prefix + key, offset=start, length=0 if end is None else end - start
            )
            try:
                return response.read()
            finally:
                response.close()
                response.release_conn()

        return self._call("get", key, fetch)

    def _call(self, operation: str, key: str, call):
        from minio.error import S3Error
        from urllib3.exceptions import HTTPError

        try:
            return call()
        except S3Error as error:
            if error.code in _NOT_FOUND_CODES:
                raise ObjectNotFound(key) from None
            if error.code == "InvalidRange":
                return b""  # start at or past the end: an empty slice, as ObjectStore.get
            if error.code in RETRYABLE_CODES:
                raise StoreUnavailable(f"{error.code}: {error.message}", operation=operation, key=key) from error
            raise StoreRequestRejected(operation=operation, key=key, code=error.code, reason=str(error.message)) from error
        except (HTTPError, OSError) as error:  # urllib3 has retried already
            raise StoreUnavailable(str(error), operation=operation, key=key) from error

    def close(self) -> None:
        pass  # urllib3 closes pooled connections when the client is collected
