"""Object-store URLs: parse them, and open the store they name.

    file:///abs/path                       a local directory (file://localhost/abs/path too)
    s3://BUCKET[/PREFIX][?endpoint_url=http://127.0.0.1:9000&region=us-east-1]

For `s3://`, PREFIX (percent-decoded, '/'-separated, no empty, '.' or '..' parts) is put in
front of every key, so several clusters can share a bucket. The query takes only
`endpoint_url` (http or https, with a host) and `region`. What the URL leaves out comes from
the `env` mapping the caller passes, with the names the AWS tools use:

    AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY  both or neither; neither means botocore's own
                                              chain (profile files, instance roles)
    AWS_SESSION_TOKEN                         optional
    AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL     endpoint when the URL has none (in that order);
                                              neither means AWS itself
    AWS_REGION, AWS_DEFAULT_REGION            region when the URL has none; else us-east-1

This module never reads `os.environ`: only the CLI does, and it passes it in.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, unquote, urlsplit

from .config import LocalStoreConfig, S3Config
from .errors import InvalidObjectStoreUrl
from .retry import RetryPolicy

if TYPE_CHECKING:
    from .store import ObjectStore

_NO_ENV: Mapping[str, str] = MappingProxyType({})
_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_S3_QUERY_KEYS = ("endpoint_url", "region")
DEFAULT_REGION = "us-east-1"


def parse_object_store_url(
    url: str,
    *,
    env: Mapping[str, str] = _NO_ENV,
    retry: RetryPolicy | None = None,
    connect_timeout_ms: int | None = None,
    read_timeout_ms: int | None = None,
) -> LocalStoreConfig | S3Config:
    """The store configuration `url` names; `InvalidObjectStoreUrl` saying why if it is wrong.

    `retry` and the timeouts apply to S3 only; None keeps `S3Config`'s defaults.
    """
    if not isinstance(url, str) or not url:
        raise InvalidObjectStoreUrl(str(url), "empty; expected file:///abs/path or s3://BUCKET[/PREFIX]")
    try:
        parts = urlsplit(url)
    except ValueError as error:
        raise InvalidObjectStoreUrl(url, str(error)) from None
    scheme = parts.scheme.lower()
    if scheme == "file":
        return _parse_file(url, parts.netloc, parts.path, parts.query, parts.fragment)
    if scheme == "s3":
        config = _parse_s3(url, parts.netloc, parts.path, parts.query, parts.fragment, env)
        overrides = {"retry": retry, "connect_timeout_ms": connect_timeout_ms, "read_timeout_ms": read_timeout_ms}
        return dataclasses.replace(config, **{name: value for name, value in overrides.items() if value is not None})
    raise InvalidObjectStoreUrl(url, f"unsupported scheme {parts.scheme!r}; use file:// or s3://")


def open_object_store(
    url: str,
    *,
    env: Mapping[str, str] = _NO_ENV,
    retry: RetryPolicy | None = None,
    connect_timeout_ms: int | None = None,
    read_timeout_ms: int | None = None,
) -> ObjectStore:
    """Build the store `url` names. Nothing is contacted yet: an S3 store connects on first use
    or on `async with`, so a wrong endpoint shows up there as `StoreUnavailable`."""
    config = parse_object_store_url(
        url, env=env, retry=retry, connect_timeout_ms=connect_timeout_ms, read_timeout_ms=read_timeout_ms
    )
    if isinstance(config, LocalStoreConfig):
        from .local import LocalObjectStore

        return LocalObjectStore(config.root)
    from .s3 import S3ObjectStore  # imported here: aiobotocore is heavy and file:// needs none of it

    return S3ObjectStore(config)


def _parse_file(url: str, netloc: str, path: str, query: str, fragment: str) -> LocalStoreConfig:
    if netloc not in ("", "localhost"):
        raise InvalidObjectStoreUrl(
            url,
            f"file URLs name an absolute path, file:///abs/path; got host {netloc!r}"
            " (a relative path is not allowed)",
        )
    if query or fragment:
        raise InvalidObjectStoreUrl(url, "file URLs take no query or fragment")
    root = unquote(path)
    if not root.startswith("/"):
        raise InvalidObjectStoreUrl(url, "file URLs need an absolute path: file:///abs/path")
    if "\x00" in root:
        raise InvalidObjectStoreUrl(url, "path contains NUL")
    return LocalStoreConfig(root=Path(root))


def _parse_s3(url: str, netloc: str, path: str, query: str, fragment: str, env: Mapping[str, str]) -> S3Config:
    if "@" in netloc or ":" in netloc:
        raise InvalidObjectStoreUrl(
            url,
            "no credentials or port in an s3:// URL: credentials come from AWS_* variables,"
            " the endpoint from ?endpoint_url=",
        )
    bucket = netloc
    if not _BUCKET_NAME.fullmatch(bucket) or ".." in bucket:
        raise InvalidObjectStoreUrl(
            url,
            f"bad bucket name {bucket!r}: 3 to 63 lowercase letters, digits, '.' or '-',"
            " starting and ending with a letter or digit",
        )
    if fragment:
        raise InvalidObjectStoreUrl(url, "s3 URLs take no fragment")
    prefix = _parse_prefix(url, unquote(path))
    options = _parse_query(url, query)
    endpoint_url = (
        options.get("endpoint_url") or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None
    )
    if endpoint_url is not None:
        _check_endpoint(url, endpoint_url)
    region = options.get("region") or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION
    access_key_id = env.get("AWS_ACCESS_KEY_ID") or None
    secret_access_key = env.get("AWS_SECRET_ACCESS_KEY") or None
    if (access_key_id is None) != (secret_access_key is None):
        raise InvalidObjectStoreUrl(url, "set both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or neither")
    return S3Config(
        bucket=bucket,
        prefix=prefix,
        endpoint_url=endpoint_url,
        region=region,
        access_key_id=access_key_id,
        secret_access_key=secret_access_key,
        session_token=env.get("AWS_SESSION_TOKEN") or None,
    )


def _parse_prefix(url: str, path: str) -> str:
    stripped = path.strip("/")
    if not stripped:
        return ""
    for component in stripped.split("/"):
        if component in ("", ".", ".."):
            raise InvalidObjectStoreUrl(url, f"bad prefix {path!r}: empty, '.' or '..' part")
    if "\x00" in stripped:
        raise InvalidObjectStoreUrl(url, "prefix contains NUL")
    return stripped + "/"


def _parse_query(url: str, query: str) -> dict[str, str]:
    options: dict[str, str] = {}
    if not query:
        return options
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True)
    except ValueError as error:
        raise InvalidObjectStoreUrl(url, f"bad query: {error}") from None
    for name, value in pairs:
        if name not in _S3_QUERY_KEYS:
            raise InvalidObjectStoreUrl(url, f"unknown option {name!r}; known: {', '.join(_S3_QUERY_KEYS)}")
        if name in options:
            raise InvalidObjectStoreUrl(url, f"option {name!r} given twice")
        if not value:
            raise InvalidObjectStoreUrl(url, f"option {name!r} is empty")
        options[name] = value
    return options


def _check_endpoint(url: str, endpoint_url: str) -> None:
    try:
        parts = urlsplit(endpoint_url)
        parts.port  # raises ValueError on a bad port
    except ValueError as error:
        raise InvalidObjectStoreUrl(url, f"bad endpoint_url {endpoint_url!r}: {error}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidObjectStoreUrl(url, f"bad endpoint_url {endpoint_url!r}: expected http(s)://host[:port]")
