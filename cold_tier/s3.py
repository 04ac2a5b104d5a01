"""`ObjectStore` over any S3-compatible endpoint (AWS S3, MinIO, R2, moto), through aiobotocore.

A thin shell: it awaits, converts our calls to S3 requests, and maps S3's answers to our
errors. Path-style addressing (`http://endpoint/bucket/key`), so an endpoint needs no
wildcard DNS. `S3Config.prefix` is prepended to every key on the way out and stripped from
listed keys on the way in: callers never see it.

Retries are ours, not botocore's (its retry count is set to a single attempt): every request
is retried per `S3Config.retry` with full-jitter backoff on connection errors, timeouts,
throttling and 5xx (see `cold_tier.retry`); when the attempts run out the call raises
`StoreUnavailable`. A GET is retried as a whole, body included, so a connection that drops
mid-body is a retry, not a short read.

Outages (`self.health`, cold_tier/health.py). The connect and read timeouts are short
(S3Config: 2 s and 5 s), so a store that accepts connections and never answers (a black
hole) fails a request within seconds instead of hanging on it. Two holes in those timeouts are
closed here: PUTs are sent without `Expect: 100-continue` (aiohttp waits for the 100 with no
timeout at all), and an attempt with a body is bounded by the timeouts plus the body at
`_BODY_FLOOR_BYTES_S` (aiohttp puts no timeout on writing it). The first request that gets no
answer logs one WARNING naming the store and starts a probe: a one-key LIST every
`PROBE_INTERVAL_S`, each given `PROBE_TIMEOUT_S`. The first answer, to the probe or to any
request, logs that the store is back, wakes every back-off waiting on `health` (ours and our
callers', through `cold_tier.health.retry_wait`), and abandons the attempts still in flight
that began before it: behind a black hole they sit on connections that will never answer (a
path that lost its state stays dead), and would each wait out the read timeout. An abandoned
attempt is tried again at once and does not count against `max_attempts`. A store that
never retries (`max_attempts` 1, the CLI's start-up check) has no one waiting for it to come
back: it neither logs nor probes, its caller reports the failure.

One aiobotocore client per store, created on first use (or on `async with`) and closed by
`close()`. It may be shared by every task of the one event loop it was created on.

PUT to an endpoint of one's own (MinIO, moto, R2: `endpoint_url` set) skips botocore's request
pipeline: the request is signed by the client's own signer (botocore's SigV4, credentials
refreshed as botocore refreshes them) and sent on an aiohttp session of the store's, with the
same timeouts; an error answer becomes the `ClientError` botocore would have raised. PUT is
the hot call (every write-ahead object), and the pipeline (event hooks, endpoint rules, the
user agent, serialising and parsing) cost about 4 of the 5 ms of CPU per PUT, the largest share
of a broker's CPU under acks=all. AWS itself (no endpoint_url) keeps botocore's path.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Any, Self, TypeVar
from urllib.parse import quote
from xml.etree import ElementTree

import aiohttp
from aiobotocore.config import AioConfig
from aiobotocore.session import AioSession
from botocore.awsrequest import AWSRequest
from botocore.exceptions import ClientError, ConnectionError as BotoConnectionError
from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError, HTTPClientError, IncompleteReadError, ReadTimeoutError
from botocore.handlers import add_expect_header
from yarl import URL

from .config import S3Config
from .errors import ObjectNotFound, PreconditionFailed, StoreClosed, StoreRequestRejected, StoreUnavailable
from .health import StoreHealth
from .retry import backoff_ms, is_retryable_response
from .store import DEFAULT_PART_BYTES, ObjectInfo, check_key, check_part_bytes, check_prefix, check_range

T = TypeVar("T")

# Failures below HTTP: nothing was answered, so the request may be tried again.
_TRANSPORT_ERRORS = (
    BotoConnectionError,
    HTTPClientError,
    IncompleteReadError,
    aiohttp.ClientError,
    asyncio.TimeoutError,
    ConnectionError,
)
_SESSIONS = threading.local()
_DELETE_BATCH_KEYS = 1000  # the most keys one DeleteObjects request may carry
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
PROBE_INTERVAL_S = 0.5
PROBE_TIMEOUT_S = 2.0
_BODY_FLOOR_BYTES_S = 256 * 1024  # a PUT attempt may take its timeouts plus its body at this rate

log = logging.getLogger(__name__)


class S3ObjectStore:
    def __init__(self, config: S3Config) -> None:
        self._config = config
        self._exit_stack = AsyncExitStack()
        self._client: Any = None
        self._open_lock = asyncio.Lock()
        self._closed = False
        self._random = random.Random()
        self.health = StoreHealth(store_name(config))
        self._attempts: set[asyncio.Future[Any]] = set()  # requests in flight
        self._abandoned: set[asyncio.Future[Any]] = set()  # of those, the ones a recovery cancelled
        self._probe_task: asyncio.Task[None] | None = None
        self._http_session: aiohttp.ClientSession | None = None  # the signed PUTs' (module docstring)

    @property
    def config(self) -> S3Config:
        return self._config

    async def __aenter__(self) -> Self:
        await self._get_client("open")
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        self._closed = True
        if self._probe_task is not None:
            self._probe_task.cancel()
            await asyncio.gather(self._probe_task, return_exceptions=True)
            self._probe_task = None
        client, self._client = self._client, None
        if client is not None:
            await self._exit_stack.aclose()
        http, self._http_session = self._http_session, None
        if http is not None:
            await http.close()

    async def put(self, key: str, data: bytes, *, if_none_match: bool = False) -> None:
        check_key(key)
        client = await self._get_client("put")
        extra = {"IfNoneMatch": "*"} if if_none_match else {}

        async def call() -> None:
            if self._config.endpoint_url is not None:
                await self._signed_put(client, key, data, if_none_match)
            else:
                await client.put_object(Bucket=self._config.bucket, Key=self._full_key(key), Body=data, **extra)

        await self._retrying("put", key, call, body_bytes=len(data))

    async def _signed_put(self, client: Any, key: str, data: bytes, if_none_match: bool) -> None:
        """PutObject signed by botocore and sent by aiohttp (module docstring)."""
        config = self._config
        assert config.endpoint_url is not None
        url = f"{config.endpoint_url.rstrip('/')}/{config.bucket}/{quote(self._full_key(key), safe='/~')}"
        headers = {"If-None-Match": "*"} if if_none_match else {}
        request = AWSRequest(method="PUT", url=url, data=data, headers=headers)
        auth = await client._request_signer.get_auth_instance(signing_name="s3", region_name=config.region, signature_version="s3v4")
        auth.add_auth(request)
        try:
            async with self._http().put(URL(url, encoded=True), data=data, headers=dict(request.headers.items())) as response:
                body = await response.read()
        # Told as botocore tells them, so that a failure reads the same whichever path sent it.
        except aiohttp.ConnectionTimeoutError as exc:
            raise ConnectTimeoutError(endpoint_url=url) from exc
        except aiohttp.ServerTimeoutError as exc:
            raise ReadTimeoutError(endpoint_url=url) from exc
        except aiohttp.ClientConnectorError as exc:
            raise EndpointConnectionError(endpoint_url=url) from exc
        if response.status >= 300:
            raise _client_error(response.status, body, "PutObject")

    def _http(self) -> aiohttp.ClientSession:
        if self._http_session is None:
            config = self._config
            self._http_session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=config.max_pool_connections),
                timeout=aiohttp.ClientTimeout(sock_connect=config.connect_timeout_ms / 1000, sock_read=config.read_timeout_ms / 1000),
                auto_decompress=False,
            )  # fmt: skip
        return self._http_session

    async def put_file(
        self, key: str, path: str | os.PathLike[str], *, part_bytes: int = DEFAULT_PART_BYTES
    ) -> None:
        check_key(key)
        check_part_bytes(part_bytes)
        client = await self._get_client("put_file")
        if os.path.getsize(path) <= part_bytes:
            data = await asyncio.to_thread(_read_whole_file, path)
            await self.put(key, data)
            return
        bucket, full_key = self._config.bucket, self._full_key(key)

        async def create() -> str:
            response = await client.create_multipart_upload(Bucket=bucket, Key=full_key)
            return response["UploadId"]

        upload_id = await self._retrying("put_file", key, create)
        try:
            parts = await self._upload_parts(client, key, path, part_bytes, upload_id)

            async def complete() -> None:
                await client.complete_multipart_upload(
                    Bucket=bucket, Key=full_key, UploadId=upload_id, MultipartUpload={"Parts": parts}
                )

            await self._retrying("put_file", key, complete)
        except BaseException:
            await self._abort_multipart(client, key, upload_id)
            raise

    async def get(self, key: str, *, start: int | None = None, end: int | None = None) -> bytes:
        check_key(key)
        first, end = check_range(start, end)
        client = await self._get_client("get")
        if end == first:
            # An empty range cannot be written as an HTTP Range; it still must fail on a missing key.
            if await self.head(key) is None:
                raise ObjectNotFound(key)
            return b""
        extra = {}
        if first > 0 or end is not None:
            extra["Range"] = f"bytes={first}-{'' if end is None else end - 1}"

        async def call() -> bytes:
            response = await client.get_object(Bucket=self._config.bucket, Key=self._full_key(key), **extra)
            async with response["Body"] as body:
                return await body.read()

        try:
            return await self._retrying("get", key, call)
        except StoreRequestRejected as error:
            # 416: `start` is at or past the end. Slice semantics say b"" if the object exists.
            if error.code != "InvalidRange":
                raise
            if await self.head(key) is None:
                raise ObjectNotFound(key) from None
            return b""

    async def head(self, key: str) -> ObjectInfo | None:
        check_key(key)
        client = await self._get_client("head")

        async def call() -> ObjectInfo:
            response = await client.head_object(Bucket=self._config.bucket, Key=self._full_key(key))
            return ObjectInfo(key=key, size_bytes=response["ContentLength"], etag=response["ETag"])

        try:
            return await self._retrying("head", key, call)
        except ObjectNotFound:
            return None

    async def list(self, prefix: str = "") -> list[ObjectInfo]:
        check_prefix(prefix)
        client = await self._get_client("list")
        strip = len(self._config.prefix)
        infos: list[ObjectInfo] = []
        token: str | None = None
        while True:
            extra = {"ContinuationToken": token} if token is not None else {}

            async def call(extra: dict[str, str] = extra) -> dict[str, Any]:
                return await client.list_objects_v2(
                    Bucket=self._config.bucket, Prefix=self._config.prefix + prefix, **extra
                )

            page = await self._retrying("list", None, call)
            for entry in page.get("Contents", ()):
                infos.append(ObjectInfo(key=entry["Key"][strip:], size_bytes=entry["Size"], etag=entry["ETag"]))
            if not page.get("IsTruncated"):
                break
            token = page["NextContinuationToken"]
        infos.sort(key=lambda info: info.key)
        return infos

    async def delete(self, key: str) -> None:
        check_key(key)
        client = await self._get_client("delete")

        async def call() -> None:
            await client.delete_object(Bucket=self._config.bucket, Key=self._full_key(key))

        await self._retrying("delete", key, call)

    async def delete_many(self, keys: Iterable[str]) -> None:
        unique = sorted({check_key(key) for key in keys})
        client = await self._get_client("delete_many")
        for at in range(0, len(unique), _DELETE_BATCH_KEYS):
            await self._delete_batch(client, unique[at : at + _DELETE_BATCH_KEYS])

    async def _delete_batch(self, client: Any, keys: list[str]) -> None:
        """One DeleteObjects request; keys that fail with a retryable code are sent again."""
        pending = keys
        for attempt in range(1, self._config.retry.max_attempts + 1):

            async def call(pending: list[str] = pending) -> dict[str, Any]:
                objects = [{"Key": self._full_key(key)} for key in pending]
                return await client.delete_objects(
                    Bucket=self._config.bucket, Delete={"Objects": objects, "Quiet": True}
                )

            response = await self._retrying("delete_many", None, call)
            strip = len(self._config.prefix)
            retry_keys: list[str] = []
            for failure in response.get("Errors", ()):
                key, code = failure["Key"][strip:], failure.get("Code", "")
                if code in _NOT_FOUND_CODES:
                    continue
                if not is_retryable_response(code, None):
                    raise StoreRequestRejected(
                        operation="delete_many", key=key, code=code, reason=failure.get("Message", "")
                    )
                retry_keys.append(key)
            if not retry_keys:
                return
            pending = retry_keys
            if attempt < self._config.retry.max_attempts:
                await self._backoff(attempt)
        raise StoreUnavailable(
            f"{len(pending)} key(s) kept failing", operation="delete_many", key=pending[0], attempts=attempt
        )

    async def _upload_parts(
        self, client: Any, key: str, path: str | os.PathLike[str], part_bytes: int, upload_id: str
    ) -> list[dict[str, Any]]:
        bucket, full_key = self._config.bucket, self._full_key(key)
        parts: list[dict[str, Any]] = []
        with open(path, "rb") as file:
            part_number = 1
            while chunk := await asyncio.to_thread(file.read, part_bytes):

                async def call(chunk: bytes = chunk, part_number: int = part_number) -> str:
                    response = await client.upload_part(
                        Bucket=bucket, Key=full_key, UploadId=upload_id, PartNumber=part_number, Body=chunk
                    )
                    return response["ETag"]

                etag = await self._retrying("put_file", key, call, body_bytes=len(chunk))
                parts.append({"ETag": etag, "PartNumber": part_number})
                part_number += 1
        return parts

    async def _abort_multipart(self, client: Any, key: str, upload_id: str) -> None:
        """Best effort: the caller's own error is the one to report. A lifecycle rule for
        incomplete multipart uploads is the backstop for aborts that fail."""
        try:

            async def call() -> None:
                await client.abort_multipart_upload(
                    Bucket=self._config.bucket, Key=self._full_key(key), UploadId=upload_id
                )

            await self._retrying("abort_multipart_upload", key, call)
        except Exception:
            pass

    async def _retrying(
        self, operation: str, key: str | None, call: Callable[[], Awaitable[T]], *, body_bytes: int = 0
    ) -> T:
        # A body is written with no timeout of aiohttp's: into a path that drops packets, a
        # body larger than the socket's buffer would block for as long as TCP keeps trying.
        # Bound the attempt by the timeouts plus the body at a floor rate (a backstop: far
        # above what any working link needs).
        attempt_timeout_s = None
        if body_bytes:
            config = self._config
            attempt_timeout_s = (config.connect_timeout_ms + config.read_timeout_ms) / 1000 + body_bytes / _BODY_FLOOR_BYTES_S
        attempt = 0
        while True:
            attempt += 1
            attempt_task = asyncio.ensure_future(call())
            self._attempts.add(attempt_task)
            try:
                result = await asyncio.wait_for(attempt_task, attempt_timeout_s)
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if attempt_task not in self._abandoned or (current is not None and current.cancelling()):
                    raise
                attempt -= 1  # abandoned by a recovery (module docstring): try again at once
                continue
            except ClientError as error:
                self._answered()
                code, status, message = _error_fields(error)
                if not is_retryable_response(code, status):
                    raise _final_error(operation, key, code, status, message) from error
                reason = f"{code} (HTTP {status}): {message}"
            except _TRANSPORT_ERRORS as error:
                if isinstance(error, TimeoutError) and not str(error):
                    reason = f"no answer within {attempt_timeout_s:.1f} s"
                else:
                    reason = f"{type(error).__name__}: {error}"
                self._no_answer(operation, key, reason)
            else:
                self._answered()
                return result
            finally:
                self._attempts.discard(attempt_task)
                self._abandoned.discard(attempt_task)
            if attempt >= self._config.retry.max_attempts:
                raise StoreUnavailable(reason, operation=operation, key=key, attempts=attempt)
            await self._backoff(attempt)

    async def _backoff(self, retry_number: int) -> None:
        delay_s = backoff_ms(self._config.retry, retry_number, self._random.random()) / 1000.0
        await self.health.wait_answered(delay_s)

    # --- reachability (module docstring) ------------------------------------------------------

    def _no_answer(self, operation: str, key: str | None, reason: str) -> None:
        if self._config.retry.max_attempts == 1:
            return  # a store that never retries has no one waiting for it: its caller reports
        what = operation if key is None else f"{operation} of {key!r}"
        line = self.health.no_answer(what, reason, _now_ms())
        if line is not None:
            log.warning("%s", line)
        if not self._closed and (self._probe_task is None or self._probe_task.done()):
            self._probe_task = asyncio.get_running_loop().create_task(self._probe(), name="object-store-probe")

    def _answered(self) -> None:
        if self.health.reachable:
            return
        line = self.health.answered(_now_ms())
        if line is not None:
            log.info("%s", line)
        current = asyncio.current_task()
        for attempt_task in list(self._attempts):
            if attempt_task is not current and not attempt_task.done():
                self._abandoned.add(attempt_task)
                attempt_task.cancel()

    async def _probe(self) -> None:
        """While the store is unreachable: a one-key LIST every PROBE_INTERVAL_S, until one
        gets any answer. Probes are not requests of a caller: they count no failures."""
        while not self._closed and not self.health.reachable:
            await asyncio.sleep(PROBE_INTERVAL_S)
            client = self._client
            if self._closed or client is None or self.health.reachable:
                return
            try:
                await asyncio.wait_for(
                    client.list_objects_v2(Bucket=self._config.bucket, Prefix=self._config.prefix, MaxKeys=1),
                    PROBE_TIMEOUT_S,
                )
            except ClientError:
                pass  # an error answer is an answer
            except Exception:  # no answer (a transport error, the probe's timeout): probe again
                continue
            self._answered()

    async def _get_client(self, operation: str) -> Any:
        if self._closed:
            raise StoreClosed(operation)
        if self._client is not None:
            return self._client
        async with self._open_lock:
            if self._closed:
                raise StoreClosed(operation)
            if self._client is None:
                client = await self._exit_stack.enter_async_context(self._create_client())
                # botocore sends every PUT with `Expect: 100-continue`, and aiohttp waits for
                # the 100 with no timeout at all (its read timeout starts once the body is
                # sent): behind a black hole a PUT hung until the connection died, minutes to
                # never. Our bodies are at most a part (8 MiB): send them straight away.
                client.meta.events.unregister("before-call.s3", add_expect_header)
                self._client = client
        return self._client

    def _create_client(self) -> Any:
        config = self._config
        botocore_config = AioConfig(
            region_name=config.region,
            signature_version="s3v4",
            s3={"addressing_style": "path"},
            retries={"mode": "standard", "total_max_attempts": 1},
            connect_timeout=config.connect_timeout_ms / 1000.0,
            read_timeout=config.read_timeout_ms / 1000.0,
            max_pool_connections=config.max_pool_connections,
            # Checksums only where S3 requires them: many S3-compatible servers reject the
            # trailing checksums newer botocore sends by default.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            # The endpoint comes from our config only; the CLI alone reads the environment.
            ignore_configured_endpoint_urls=True,
        )
        return _session().create_client(
            "s3",
            endpoint_url=config.endpoint_url,
            region_name=config.region,
            aws_access_key_id=config.access_key_id,
            aws_secret_access_key=config.secret_access_key,
            aws_session_token=config.session_token,
            config=botocore_config,
        )

    def _full_key(self, key: str) -> str:
        return self._config.prefix + key


def store_name(config: S3Config) -> str:
    """How log lines name a store: its URL (no credentials) and where it is reached."""
    return f"s3://{config.bucket}/{config.prefix} at {config.endpoint_url or 'AWS'}"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _session() -> AioSession:
    """One session per thread: a session caches the parsed S3 service model, which makes every
    client after the first 20 times cheaper to create; botocore sessions are not thread-safe."""
    session = getattr(_SESSIONS, "session", None)
    if session is None:
        session = _SESSIONS.session = AioSession()
    return session


def _error_fields(error: ClientError) -> tuple[str, int | None, str]:
    details = error.response.get("Error", {})
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return str(details.get("Code", "")), status, str(details.get("Message", ""))


def _client_error(status: int, body: bytes, operation_name: str) -> ClientError:
    """The ClientError botocore raises for an S3 error answer (`<Error><Code>...`)."""
    code, message = str(status), ""
    try:
        root = ElementTree.fromstring(body)
        code = root.findtext("Code") or code
        message = root.findtext("Message") or ""
    except ElementTree.ParseError:
        pass  # an answer without an XML body (a proxy's 503): the status is all there is
    return ClientError({"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}, operation_name)


def _final_error(operation: str, key: str | None, code: str, status: int | None, message: str) -> Exception:
    if key is not None and (code in _NOT_FOUND_CODES or (status == 404 and code != "NoSuchBucket")):
        return ObjectNotFound(key)
    if key is not None and (status == 412 or code == "PreconditionFailed"):
        return PreconditionFailed(key)
    return StoreRequestRejected(operation=operation, key=key, code=code or str(status), reason=message)


def _read_whole_file(path: str | os.PathLike[str]) -> bytes:
    with open(path, "rb") as file:
        return file.read()
