"""One TCP connection to one broker: pipelined requests matched to responses by correlation id.

Kafka answers the requests of a connection in the order they were sent, each response framed
as `int32 size, int32 correlation_id, ...` (see diskless/wire/framing.py). Any number of
requests may be in flight; each gets a future that the response completes. A request that is
not answered within its timeout fails with `RequestTimedOut` and closes the connection, as
the Java client does: after a lost response the connection's state is unknown. When the
connection breaks, every request in flight fails with `KafkaConnectionError`; whether the
broker acted on them is unknown (that is what idempotent producing is for).

On open, the connection asks ApiVersions and keeps the broker's ranges; `version(api_key)`
is then the highest version both sides speak. A broker that does not know our ApiVersions
version answers UNSUPPORTED_VERSION in a v0 body with its ranges (KIP-511); we retry with
the version it supports.

Re-authentication (KIP-368). When the SASL exchange answers a session lifetime, the connection
logs in again, as Java's client does, at a random 85 to 95 % of it: requests sent meanwhile are
held (registered, not written), the requests in flight are answered, SaslHandshake and
SaslAuthenticate run alone on the connection (the broker closes one that sends anything else
during them), and then the held requests are written in order. A failed re-authentication
closes the connection: its requests fail with `KafkaConnectionError` and are retried on a new one.

Used from one event loop, by any number of tasks of that loop.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from diskless.wire import encode_request, parse_response

from . import protocol
from .errors import (
    KafkaConnectionError,
    ProtocolViolation,
    RequestTimedOut,
    UnsupportedByBroker,
    UnsupportedVersionError,
    check,
)

if TYPE_CHECKING:
    from .security import ClientSecurity

log = logging.getLogger(__name__)

_INT32 = struct.Struct(">i")
_CORRELATION_AND_ERROR = struct.Struct(">ih")
_MAX_CORRELATION_ID = 2**31 - 1
_CLIENT_SOFTWARE_NAME = "diskless-python"
_CLIENT_SOFTWARE_VERSION = "0.1.0"


class Connection:
    """A connection to the broker at host:port, ready once `open()` returned it."""

    def __init__(self, host: str, port: int, *, client_id: str, request_timeout_ms: int, node_id: int = -1) -> None:
        self.host = host
        self.port = port
        self.node_id = node_id
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.api_versions: dict[int, tuple[int, int]] = {}
        self._versions: dict[int, int] = {}
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        # correlation_id -> (future, response class or None for raw frame, timer, api name)
        self._pending: dict[int, tuple[asyncio.Future[Any], type | None, asyncio.TimerHandle | None, str]] = {}
        self._next_correlation_id = 0
        self._buffer = bytearray()
        self._needed_bytes = 4
        self._closed = False
        self._close_reason = ""
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._close_callbacks: list[Callable[[Connection], None]] = []
        # KIP-368: re-authentication when the broker gave the session a lifetime.
        self._security: ClientSecurity | None = None
        self._held: list[bytes] | None = None  # requests written after the re-authentication, in order
        self._held_count = 0  # how many entries of _pending are held, not yet written
        self._quiet: asyncio.Future[None] | None = None  # done once only held requests are pending
        self._reauth_timer: asyncio.TimerHandle | None = None
        self._reauth_task: asyncio.Task[None] | None = None

    # --- life cycle ------------------------------------------------------------------------

    @classmethod
    async def open(
        cls, host: str, port: int, *, client_id: str, request_timeout_ms: int, node_id: int = -1,
        security: ClientSecurity | None = None,
    ) -> Connection:
        """Connect (with TLS and SASL when `security` says so) and negotiate API versions.
        Raises `KafkaConnectionError` on failure, the broker's error when it refuses a login."""
        connection = cls(host, port, client_id=client_id, request_timeout_ms=request_timeout_ms, node_id=node_id)
        loop = connection._loop
        context = security.ssl_context() if security is not None else None
        try:
            await asyncio.wait_for(
                loop.create_connection(lambda: _Protocol(connection), host, port, ssl=context, server_hostname=host if context else None),
                request_timeout_ms / 1000,
            )
        except asyncio.TimeoutError:
            raise KafkaConnectionError(host, port, f"connect timed out after {request_timeout_ms} ms") from None
        except OSError as exc:
            raise KafkaConnectionError(host, port, exc.strerror or str(exc)) from None
        try:
            await connection._negotiate()
        except BaseException:
            connection.close("API version negotiation failed")
            raise
        if security is not None and security.uses_sasl:
            from .security import authenticate

            try:
                lifetime_ms = await authenticate(connection, security, host, port)
            except BaseException:
                connection.close("SASL authentication failed")
                raise
            connection._security = security
            connection._schedule_reauthentication(lifetime_ms)
        return connection

    async def _negotiate(self) -> None:
        version = protocol.CLIENT_VERSIONS[protocol.API_VERSIONS][2]
        for _attempt in range(2):
            request = protocol.build(
                protocol.request_class(protocol.API_VERSIONS, version),
                client_software_name=_CLIENT_SOFTWARE_NAME,
                client_software_version=_CLIENT_SOFTWARE_VERSION,
            )
            frame = await self._send(request, None, self.request_timeout_ms)
            _correlation_id, error_code = _CORRELATION_AND_ERROR.unpack_from(frame, 0)
            if error_code == UnsupportedVersionError.errno:
                # KIP-511: the broker answered in v0 with its own ranges; use its highest.
                _cid, body = parse_response(frame, protocol.response_class(protocol.API_VERSIONS, 0))
                ranges = {key.api_key: (key.min_version, key.max_version) for key in body.api_keys}
                version = protocol.pick_version(protocol.API_VERSIONS, ranges.get(protocol.API_VERSIONS))
                continue
            _cid, body = parse_response(frame, protocol.response_class(protocol.API_VERSIONS, version))
            check(body.error_code, host=self.host, port=self.port)
            self.api_versions = {key.api_key: (key.min_version, key.max_version) for key in body.api_keys}
            return
        raise UnsupportedByBroker("ApiVersions", protocol.CLIENT_VERSIONS[protocol.API_VERSIONS][1:], None)

    # --- re-authentication (KIP-368) ----------------------------------------------------------

    def _schedule_reauthentication(self, lifetime_ms: int) -> None:
        if lifetime_ms > 0 and not self._closed:
            # 85-95 % of the lifetime as Java's SaslClientAuthenticator, yet a quarter second
            # early at least (a request sent just before must still reach the broker in time),
            # unless that leaves less than half the lifetime.
            delay_ms = min(lifetime_ms * random.uniform(0.85, 0.95), max(lifetime_ms / 2, lifetime_ms - 250))
            self._reauth_timer = self._loop.call_later(delay_ms / 1000, self._start_reauthentication)

    def _start_reauthentication(self) -> None:
        self._reauth_timer = None
        if not self._closed:
            self._reauth_task = self._loop.create_task(self._reauthenticate(), name=f"reauthenticate {self.host}:{self.port}")

    async def _reauthenticate(self) -> None:
        from .security import authenticate

        assert self._security is not None
        self._held, self._held_count = [], 0
        try:
            while len(self._pending) > self._held_count and not self._closed:
                self._quiet = self._loop.create_future()
                await self._quiet
            if self._closed:
                return
            lifetime_ms = await authenticate(_Direct(self), self._security, self.host, self.port)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("re-authentication with %s:%d failed (%s); closing the connection", self.host, self.port, exc)
            self.close(f"re-authentication failed: {exc}")
            return
        finally:
            self._quiet = None
        held, self._held, self._held_count = self._held or [], None, 0
        if not self._closed:
            assert self._transport is not None
            for data in held:
                self._transport.write(data)
            self._schedule_reauthentication(lifetime_ms)

    def close(self, reason: str = "closed by the client") -> None:
        """Close now; requests in flight fail with `KafkaConnectionError(reason)`."""
        if self._closed:
            return
        self._closed = True
        self._close_reason = reason
        if self._reauth_timer is not None:
            self._reauth_timer.cancel()
        if self._reauth_task is not None and self._reauth_task is not asyncio.current_task():
            self._reauth_task.cancel()
        if self._quiet is not None and not self._quiet.done():
            self._quiet.set_result(None)
        if self._transport is not None:
            self._transport.close()
        self._fail_pending(reason)
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._drain_waiters.clear()
        for callback in self._close_callbacks:
            callback(self)
        self._close_callbacks.clear()

    def on_close(self, callback: Callable[[Connection], None]) -> None:
        if self._closed:
            callback(self)
        else:
            self._close_callbacks.append(callback)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def __repr__(self) -> str:
        return f"<Connection node={self.node_id} {self.host}:{self.port}{' closed' if self._closed else ''}>"

    # --- versions --------------------------------------------------------------------------

    def version(self, api_key: int) -> int:
        """The version of `api_key` to use with this broker; raises `UnsupportedByBroker`."""
        version = self._versions.get(api_key)
        if version is None:
            version = self._versions[api_key] = protocol.pick_version(api_key, self.api_versions.get(api_key))
        return version

    def supports(self, api_key: int) -> bool:
        try:
            self.version(api_key)
        except UnsupportedByBroker:
            return False
        return True

    # --- requests --------------------------------------------------------------------------

    def send(self, request: Any, *, timeout_ms: int | None = None) -> asyncio.Future[Any]:
        """Send `request` (a kio request entity); the future resolves to its kio response."""
        response_class = protocol.response_class(type(request).__api_key__, type(request).__version__)
        return self._send(request, response_class, self.request_timeout_ms if timeout_ms is None else timeout_ms)

    async def request(self, request: Any, *, timeout_ms: int | None = None) -> Any:
        return await self.send(request, timeout_ms=timeout_ms)

    async def drain(self) -> None:
        """Wait while the transport's write buffer is above its high-water mark."""
        if self._write_paused and not self._closed:
            waiter = self._loop.create_future()
            self._drain_waiters.append(waiter)
            await waiter

    def _correlation_id(self) -> int:
        correlation_id = self._next_correlation_id
        self._next_correlation_id = 0 if correlation_id == _MAX_CORRELATION_ID else correlation_id + 1
        return correlation_id

    def send_frame(
        self, frame: bytearray, response_class: type | None, name: str, *, timeout_ms: int | None = None
    ) -> asyncio.Future[Any]:
        """Send a request encoded already (see protocol.encode_produce_request): its
        correlation id is written in here. With `response_class` None, nothing is awaited:
        the future is done once written (Produce with acks=0)."""
        if response_class is None:
            future: asyncio.Future[Any] = self._loop.create_future()
            if self._closed:
                future.set_exception(KafkaConnectionError(self.host, self.port, self._close_reason))
            else:
                assert self._transport is not None
                _INT32.pack_into(frame, protocol.CORRELATION_ID_AT, self._correlation_id())
                if self._held is not None:
                    self._held.append(bytes(frame))
                else:
                    self._transport.write(frame)
                future.set_result(None)
            return future
        return self._send(frame, response_class, self.request_timeout_ms if timeout_ms is None else timeout_ms, name)

    def _send(
        self, request: Any, response_class: type | None, timeout_ms: int, name: str | None = None, *, direct: bool = False
    ) -> asyncio.Future[Any]:
        """Register and write one request; while a re-authentication runs, hold it instead
        (`direct`: the re-authentication's own requests, written at once)."""
        future: asyncio.Future[Any] = self._loop.create_future()
        if self._closed:
            future.set_exception(KafkaConnectionError(self.host, self.port, self._close_reason))
            return future
        assert self._transport is not None
        correlation_id = self._correlation_id()
        if type(request) is bytearray:
            _INT32.pack_into(request, protocol.CORRELATION_ID_AT, correlation_id)
            data = request
        else:
            data = encode_request(correlation_id, self.client_id, request)
            name = type(request).__name__
        timer = self._loop.call_later(timeout_ms / 1000, self._on_timeout, correlation_id, timeout_ms)
        self._pending[correlation_id] = (future, response_class, timer, name or "")
        if self._held is not None and not direct:
            self._held.append(bytes(data))
            self._held_count += 1
        else:
            self._transport.write(data)
        return future

    def _on_timeout(self, correlation_id: int, timeout_ms: int) -> None:
        entry = self._pending.pop(correlation_id, None)
        if entry is None:
            return
        future, _cls, _timer, name = entry
        api = name.removesuffix("Request")
        if not future.done():
            future.set_exception(RequestTimedOut(api, self.host, self.port, timeout_ms))
        log.warning("%s request to %s:%d timed out after %d ms; closing the connection", api, self.host, self.port, timeout_ms)
        self.close(f"a {api} request timed out after {timeout_ms} ms")

    def _fail_pending(self, reason: str) -> None:
        pending, self._pending = self._pending, {}
        for future, _cls, timer, _name in pending.values():
            if timer is not None:
                timer.cancel()
            if not future.done():
                future.set_exception(KafkaConnectionError(self.host, self.port, reason))

    # --- called by the protocol ------------------------------------------------------------

    def _data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        if len(buffer) < self._needed_bytes:
            return
        position = 0
        end = len(buffer)
        frames = []
        with memoryview(buffer) as view:
            while end - position >= 4:
                (size,) = _INT32.unpack_from(view, position)
                if end - position - 4 < size:
                    break
                frames.append(bytes(view[position + 4 : position + 4 + size]))
                position += 4 + size
        del buffer[:position]
        self._needed_bytes = 4 if len(buffer) < 4 else 4 + _INT32.unpack_from(buffer, 0)[0]
        for frame in frames:
            self._on_frame(frame)

    def _on_frame(self, frame: bytes) -> None:
        if len(frame) < 4:
            self._violation(f"response frame of {len(frame)} bytes has no correlation id")
            return
        (correlation_id,) = _INT32.unpack_from(frame, 0)
        entry = self._pending.pop(correlation_id, None)
        if entry is None:
            self._violation(f"response with correlation id {correlation_id} matches no request in flight")
            return
        future, response_class, timer, _name = entry
        if timer is not None:
            timer.cancel()
        if self._quiet is not None and len(self._pending) <= self._held_count and not self._quiet.done():
            self._quiet.set_result(None)  # only held requests left: the re-authentication may start
        if future.done():  # the caller gave up on it
            return
        if response_class is None:
            future.set_result(frame)
            return
        try:
            _cid, body = parse_response(frame, response_class)
        except Exception as exc:
            future.set_exception(ProtocolViolation(self.host, self.port, str(exc)))
            return
        future.set_result(body)

    def _violation(self, reason: str) -> None:
        log.warning("closing connection to %s:%d: %s", self.host, self.port, reason)
        self.close(f"protocol error: {reason}")

    def _connection_lost(self, exc: Exception | None) -> None:
        if not self._closed:
            reason = "connection closed by the broker" if exc is None else f"connection lost: {exc}"
            self.close(reason)

    def _set_write_paused(self, paused: bool) -> None:
        self._write_paused = paused
        if not paused:
            waiters, self._drain_waiters = self._drain_waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)


class _Direct:
    """The connection as `authenticate` sees it during a re-authentication: its requests go
    straight to the socket while the others are held."""

    __slots__ = ("_connection", "api_versions")

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self.api_versions = connection.api_versions

    async def request(self, request: Any, *, timeout_ms: int | None = None) -> Any:
        connection = self._connection
        response_class = protocol.response_class(type(request).__api_key__, type(request).__version__)
        timeout = connection.request_timeout_ms if timeout_ms is None else timeout_ms
        return await connection._send(request, response_class, timeout, direct=True)


class _Protocol(asyncio.Protocol):
    __slots__ = ("_connection",)

    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport.set_write_buffer_limits(high=4 * 1024 * 1024)
        self._connection._transport = transport
        if self._connection._closed:
            transport.close()

    def data_received(self, data: bytes) -> None:
        self._connection._data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._connection._connection_lost(exc)

    def pause_writing(self) -> None:
        self._connection._set_write_paused(True)

    def resume_writing(self) -> None:
        self._connection._set_write_paused(False)
