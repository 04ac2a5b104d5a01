"""The TCP shell: reads Kafka frames, hands them to the broker, writes responses in order.

Requests on one connection are handled in order, as Kafka does, and one at a time, with one
exception: Produce requests are pipelined. While a Produce waits for durability (acks=all waits
for its write-ahead object: the commit interval, one PUT, one metadata commit), the next
Produce of the same connection is read and appended, up to `MAX_PIPELINED_PRODUCES` in flight.
librdkafka puts one partition in each ProduceRequest and relies on many requests in flight:
handled one at a time, a producer to 32 partitions gets one partition per durability wait, and
its records queue for hundreds of milliseconds. Order is kept: a Produce's appends happen in the
first step of its task (no await before them) and tasks run in the order they were created, so
appends follow request order (a transactional batch verified with a coordinator on another
broker awaits first, and such requests of one transactional id take turns: txn/produce_turns.py);
responses go in request order (each waits for the one before);
any other request waits until every pipelined Produce has been answered, and is then handled
alone. Record bytes of Fetch responses go from the segment file to the socket with sendfile.

A connection that breaks the framing is closed, as Kafka closes a connection whose request it
cannot parse: a size prefix that is negative or above `socket.request.max.bytes` (checked before
a byte of the body is read, so a claimed 1 GiB costs nothing), a truncated frame, an unknown API
key or a version outside our range (ApiVersions excepted: it is answered, see wire.framing), a
body whose lengths or nulls do not fit its frame or schema (wire.bounds; checked before kio
allocates anything). Nothing it sent can affect another connection.

Each such close is one log line - client address, api key and version when known, reason -
rate-limited by `RefusalLog` so that a flood of bad frames cannot flood the log: at most one line
per kind of reason per second, the next one saying how many were suppressed.

Limits (decisions in connection_limits.py): max.connections (accepting pauses at the limit),
max.connections.per.ip and its per-address overrides (the extra connection is closed),
max.connection.creation.rate (the acceptor waits the throttle time before it hands an accepted
connection on; one rate shared by the broker's listeners), connections.max.idle.ms, a deadline
for a request to arrive once it has begun (slow senders), and queued.max.request.bytes (reading
request bodies pauses while the bytes read and not yet answered, across connections, would pass
it).

Client quotas (decisions in quotas/): each request is charged to its client (a Produce as it is
read, anything else once handled, quotas/enforcement.py); a throttled response carries its
throttle time and the connection reads nothing more until it is over (KIP-219; a response
version from before KIP-219 is itself held back). A connection from an address over its IP's
connection_creation_rate is not served and is closed after the throttle time.

The shell owns the accept loop (not asyncio.start_server): when accept fails for lack of
descriptors (EMFILE, ENFILE) it waits with backoff and logs one warning per interval, while the
connections already open keep being served. RLIMIT_NOFILE's soft limit is raised to the hard
one when the server is built, before the broker opens its logs.

Security. Each server is one Kafka listener with a security protocol (security/config.py). A
TLS listener wraps each accepted socket in its ssl_context (the handshake bounded by the
request arrival deadline; a failed one is a refusal line), and sends file records as bytes, not
with sendfile. Each connection gets a `Session` (security/session.py) in its task's context:
the broker decides with it what the connection may do; after a failed SASL login the answer is
sent and the connection closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from diskless.wire import ProtocolError, Request, encode_response, frame_size, parse_request

from hot_tier.open_files import OPEN_SEGMENTS

from .api import PEER_HOST
from .metrics import REQUEST_THROTTLE_TIME, request_name
from .quotas.client_quotas import ClientQuotas
from .quotas.enforcement import Charge
from .quotas.throttling import client_throttles
from .security.config import ListenerSecurity
from .security.session import SESSION, Session
from .security.shell import SessionExpired
from .security.tls import principal_of_certificate
from .connection_limits import (
    AcceptBackoff,
    Admission,
    ConnectionCreationRate,
    ConnectionLimits,
    ConnectionQuotas,
    Phase,
    QueuedRequestBytes,
    descriptor_budget,
    normalize_address,
    overdue,
    raise_descriptor_limit,
    soft_descriptor_limit,
    sweep_interval_ms,
)
from .listen_sockets import listen_sockets, resolved_overrides
from .network_metrics import EXPIRED_CONNECTIONS_KILLED, ListenerMetrics
from .refusal_log import RefusalLog, describe_api

log = logging.getLogger(__name__)

PRODUCE_KEY = 0
MAX_PIPELINED_PRODUCES = 64  # Produce requests of one connection in flight at once
# After answering a failed login, the broker waits this long for the client to close first: a
# client that reads the answer and the close in one read may drop the answer (kafka-python 3 does).
REFUSED_LOGIN_LINGER_S = 1.0

async def _await_peer_close(reader: asyncio.StreamReader) -> None:
    """Discard what the peer still sends until it closes, for at most REFUSED_LOGIN_LINGER_S."""
    with contextlib.suppress(TimeoutError, ConnectionError):
        async with asyncio.timeout(REFUSED_LOGIN_LINGER_S):
            while await reader.read(65536):
                pass


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


# accept() failures that mean "no resources now, try later": the connection stays in the backlog.
_OUT_OF_RESOURCES = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
# accept() failures that concern only the connection being accepted.
_CONNECTION_GONE = {errno.ECONNABORTED, errno.EPROTO, errno.EPERM, errno.ETIMEDOUT, errno.ECONNRESET}


class _Connection:
    """What the shell tracks of one connection: its address, task and deadline phase."""

    __slots__ = ("host", "task", "phase", "since_ms", "closing_reason", "muted_until_s")

    def __init__(self, host: str, task: asyncio.Task[None], now_ms: int) -> None:
        self.host = host
        self.task = task
        self.phase = Phase.IDLE
        self.since_ms = now_ms
        self.closing_reason: str | None = None  # set when the shell cuts the connection
        self.muted_until_s = 0.0  # loop time until which nothing more is read (a client quota's throttle)

    def enter(self, phase: Phase) -> None:
        self.phase = phase
        self.since_ms = _now_ms()


@dataclass(slots=True)
class _Pipeline:
    """One connection's pipelined Produce requests."""

    last: asyncio.Future[None] | None = None  # the newest; it answers after all the others
    in_flight: int = 0
    failure: tuple[BaseException, bytes] | None = None  # the first, and its frame: closes the connection


class KafkaServer:
    def __init__(
        self, handle: Callable[[Request], Awaitable[Any]], host: str, port: int, max_request_bytes: int,
        limits: ConnectionLimits | None = None, listener_name: str | None = None,
        security: ListenerSecurity | None = None, ssl_context: ssl.SSLContext | None = None,
        creation_rate: ConnectionCreationRate | None = None, quotas: ClientQuotas | None = None,
    ) -> None:  # fmt: skip
        self.client_quotas = quotas  # client quotas, shared by the broker's listeners (quotas/)
        self.handle = handle  # the broker's: a parsed request in, its response (or None) out
        self.host = host
        self.port = port
        self.max_request_bytes = max_request_bytes
        self.limits = limits if limits is not None else ConnectionLimits()
        # The listener's name and security protocol; TLS listeners wrap every socket in ssl_context.
        self.security = security if security is not None else ListenerSecurity()
        self.ssl_context = ssl_context
        before, after = raise_descriptor_limit()  # before the broker opens logs and the store
        if after > before:
            log.info("raised the open file limit (RLIMIT_NOFILE) from %d to %d", before, after)
        self._listeners: list[socket.socket] = []
        self._tasks: list[asyncio.Task[None]] = []  # accept loops and the deadline sweeper
        self._connections: dict[asyncio.Task[None], _Connection] = {}
        self._quotas = ConnectionQuotas(self.limits.max_connections, self.limits.max_connections_per_ip,
                                        resolved_overrides(self.limits.max_connections_per_ip_overrides))
        # max.connection.creation.rate is broker-wide: the broker passes one rate to all its listeners.
        self._creation_rate = creation_rate if creation_rate is not None else ConnectionCreationRate(self.limits.max_connection_creation_rate)
        self._queued = QueuedRequestBytes(self.limits.queued_max_request_bytes)
        self._room: asyncio.Event | None = None  # set when queued request bytes fall below the bound
        self._slot_freed: asyncio.Event | None = None
        self._refusals = RefusalLog()
        self._accept_warnings = RefusalLog(interval_ms=5000)
        self.listener_name = listener_name  # the metrics' listener label; None: the bound host:port
        self._metrics = ListenerMetrics()

    @property
    def connection_count(self) -> int:
        return self._quotas.total

    @property
    def queued_request_bytes(self) -> int:
        return self._queued.used_bytes

    def set_connection_limits(
        self, max_connections: int, max_connections_per_ip: int, max_connections_per_ip_overrides: Mapping[str, int] | None = None,
        max_connection_creation_rate: int | None = None,
    ) -> None:  # fmt: skip
        """max.connections, max.connections.per.ip, its overrides (parsed; host names are
        resolved here) and max.connection.creation.rate changed at run time (dynamic broker
        configs): new connections are admitted by the new limits; open ones stay, as in Kafka,
        and a connection already waiting for its throttle time waits it out. An acceptor paused
        at the old max.connections looks again. None: unchanged."""
        overrides = self.limits.max_connections_per_ip_overrides if max_connections_per_ip_overrides is None else max_connections_per_ip_overrides
        rate = self.limits.max_connection_creation_rate if max_connection_creation_rate is None else max_connection_creation_rate
        self.limits = dataclasses.replace(
            self.limits, max_connections=max_connections, max_connections_per_ip=max_connections_per_ip,
            max_connections_per_ip_overrides=dict(overrides), max_connection_creation_rate=rate,
        )  # fmt: skip
        self._quotas.max_connections = max_connections
        self._quotas.max_connections_per_ip = max_connections_per_ip
        self._quotas.per_ip_overrides = resolved_overrides(overrides)
        self._creation_rate.max_rate = rate
        if self._slot_freed is not None:
            self._slot_freed.set()

    def connection_cap(self) -> int:
        """max.connections, lowered to what the descriptor limit leaves beside segment files."""
        return min(self.limits.max_connections, descriptor_budget(soft_descriptor_limit(), OPEN_SEGMENTS.max_descriptors()))

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._slot_freed = asyncio.Event()
        self._room = asyncio.Event()
        self._listeners = listen_sockets(self.host, self.port)
        self.port = self._listeners[0].getsockname()[1]
        self._metrics.bind(self.listener_name or f"{self.host}:{self.port}")
        for listener in self._listeners:
            self._tasks.append(loop.create_task(self._accept_loop(listener), name=f"accept {self.host}:{self.port}"))
        self._tasks.append(loop.create_task(self._sweep_loop(), name=f"connection deadlines {self.host}:{self.port}"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        for listener in self._listeners:
            listener.close()
        self._listeners.clear()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        self._metrics.remove()

    # --- accepting ------------------------------------------------------------------------

    async def _accept_loop(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        backoff = AcceptBackoff()
        assert self._slot_freed is not None
        while True:
            cap = self.connection_cap()
            while self._quotas.total >= cap:
                # As Kafka's acceptor: stop accepting until a connection closes; new ones wait
                # in the kernel's backlog.
                self._warn_accept(f"accepting paused: {self._quotas.total} connections open, the limit is {cap} "
                                  f"(max.connections {self.limits.max_connections}, and the open file limit)")
                self._slot_freed.clear()
                await self._slot_freed.wait()
                cap = self.connection_cap()
            try:
                sock, address = await loop.sock_accept(listener)
            except OSError as exc:
                if exc.errno in _CONNECTION_GONE:
                    continue
                delay_ms = backoff.failed()
                if exc.errno in _OUT_OF_RESOURCES:
                    self._warn_accept(f"cannot accept connections: {exc.strerror} (errno {exc.errno}); "
                                      f"retrying with backoff, open connections are still served ({self._quotas.total} open)")
                else:
                    self._warn_accept(f"accept failed: {type(exc).__name__}: {exc}; retrying")
                await asyncio.sleep(delay_ms / 1000)
                continue
            backoff.succeeded()
            throttle_ms = self._creation_rate.record(_now_ms())
            if throttle_ms > 0:
                # As Kafka's acceptor (KIP-612): this connection waits before it is served, and
                # the ones behind it wait in the backlog; none is refused for the rate.
                self._metrics.connection_throttled(throttle_ms)
                self._warn_accept(f"accepting throttled: max.connection.creation.rate {self._creation_rate.max_rate}/s exceeded, "
                                  "the acceptor waits before each connection")
                try:
                    await asyncio.sleep(throttle_ms / 1000)
                except asyncio.CancelledError:
                    sock.close()
                    raise
            host = normalize_address(address[0]) if isinstance(address, tuple) else str(address)
            if self._quotas.admit(host) is Admission.TOO_MANY_FOR_IP:
                sock.close()
                limit = self._quotas.limit_for(host)
                setting = (f"max.connections.per.ip.overrides {host}:{limit}" if host in self._quotas.per_ip_overrides
                           else f"max.connections.per.ip {limit}")
                self._refused(f"{host}:{address[1]}", ConnectionRefusedError(), None, f"too many connections from {host} ({setting})")
                continue
            ip_throttle_ms = self.client_quotas.record_ip_connection(host, _now_ms()) if self.client_quotas is not None else 0
            if ip_throttle_ms > 0:
                # As Kafka's acceptor (KIP-612): over its IP's connection_creation_rate, a
                # connection is not served, and closed once the throttle time is over.
                self._quotas.release(host)
                loop.call_later(ip_throttle_ms / 1000, sock.close)
                self._refused(f"{host}:{address[1]}", ConnectionRefusedError(), None,
                              f"connection_creation_rate of {host} exceeded (client quota): closed after {ip_throttle_ms} ms")
                continue
            task = loop.create_task(self._on_socket(sock, address))
            self._connections[task] = _Connection(host, task, _now_ms())
            self._metrics.connection_opened()

    def _warn_accept(self, reason: str) -> None:
        suppressed = self._accept_warnings.admit(reason, _now_ms())
        if suppressed is not None:
            more = f" [{suppressed} similar lines since the last one were not logged]" if suppressed else ""
            log.warning("%s%s", reason, more)

    async def _sweep_loop(self) -> None:
        """Close connections past connections.max.idle.ms or the request arrival deadline."""
        interval_s = sweep_interval_ms(self.limits) / 1000
        while True:
            await asyncio.sleep(interval_s)
            now_ms = _now_ms()
            for connection in list(self._connections.values()):
                if connection.closing_reason is None:
                    reason = overdue(connection.phase, connection.since_ms, now_ms, self.limits)
                    if reason is not None:
                        connection.closing_reason = reason
                        connection.task.cancel()

    # --- one connection -------------------------------------------------------------------

    async def _on_socket(self, sock: socket.socket, address: Any) -> None:
        task = asyncio.current_task()
        assert task is not None
        try:
            loop = asyncio.get_running_loop()
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                reader = asyncio.StreamReader(limit=2**16, loop=loop)
                protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
                # The TLS handshake, if any, must finish within the request arrival deadline.
                transport, _ = await loop.connect_accepted_socket(
                    lambda: protocol, sock, ssl=self.ssl_context,
                    ssl_handshake_timeout=self.limits.request_arrival_timeout_ms / 1000 if self.ssl_context else None,
                )  # fmt: skip
            except (OSError, asyncio.CancelledError, TimeoutError) as exc:
                sock.close()
                if self.ssl_context is not None and not isinstance(exc, asyncio.CancelledError):
                    self._refused(_address_text(address), exc, None, f"TLS handshake failed: {type(exc).__name__}: {exc}")
                return
            writer = asyncio.StreamWriter(transport, protocol, reader, loop)
            await self._on_connection(reader, writer, self._connections[task])
        finally:
            connection = self._connections.pop(task, None)
            if connection is not None:
                self._quotas.release(connection.host)
                self._metrics.connection_closed()
            if self._slot_freed is not None:
                self._slot_freed.set()

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, connection: _Connection) -> None:
        peer = writer.get_extra_info("peername")
        PEER_HOST.set(f"/{peer[0]}" if peer else "")
        tls_object = writer.get_extra_info("ssl_object")
        certificate = tls_object.getpeercert() if tls_object is not None else None
        session = Session.open(self.security, peer[0] if peer else "", peer[1] if peer else 0, principal_of_certificate(certificate))
        SESSION.set(session)
        client = f"{peer[0]}:{peer[1]}" if peer else "unknown peer"
        current: list[bytes | None] = [None]  # the frame being handled, for the log line
        try:
            await self._serve(reader, writer, current, connection, session)
        except asyncio.IncompleteReadError as exc:
            if exc.partial or exc.expected != 1:  # not a peer leaving between two requests
                self._refused(client, exc, exc.partial, f"truncated frame ({len(exc.partial)} bytes of {exc.expected})")
        except ProtocolError as exc:
            if isinstance(exc, SessionExpired):
                EXPIRED_CONNECTIONS_KILLED.labels(session.listener.name).inc()
            self._refused(client, exc, current[0], str(exc))
        except asyncio.CancelledError:
            reason = connection.closing_reason
            if reason is None:
                pass  # the server is stopping
            elif connection.phase is Phase.IDLE:
                log.debug("closing connection from %s: %s", client, reason)  # as Kafka: routine
            else:
                self._refused(client, TimeoutError(), None, reason)
        except ConnectionError:
            pass
        except RuntimeError as exc:
            if writer.is_closing():  # the peer left while sendfile was running
                log.debug("connection from %s closed while sending: %s", client, exc)
            else:
                self._refused(client, exc, current[0], f"internal error: {type(exc).__name__}: {exc}", internal=True)
        except Exception as exc:
            self._refused(client, exc, current[0], f"internal error: {type(exc).__name__}: {exc}", internal=True)
        finally:
            writer.close()

    def _refused(self, client: str, exc: BaseException, frame_start: bytes | None, reason: str, internal: bool = False) -> None:
        """One rate-limited log line for a connection closed because of what it sent (or of a
        bug its request hit: then with the traceback, also rate-limited)."""
        api = describe_api(exc, frame_start)
        suppressed = self._refusals.admit(f"{type(exc).__name__}{api}: {reason}" if internal else reason, _now_ms())
        if suppressed is None:
            return
        more = f" [{suppressed} similar closes since the last such line were not logged]" if suppressed else ""
        if internal:
            log.error("closing connection from %s%s: %s%s", client, api, reason, more, exc_info=exc)
        else:
            log.warning("closing connection from %s%s: %s%s", client, api, reason, more)

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, current: list[bytes | None], connection: _Connection,
        session: Session,
    ) -> None:
        pipeline = _Pipeline()
        try:
            while True:
                current[0] = None
                if connection.muted_until_s:
                    await self._wait_muted(connection)
                connection.enter(Phase.IDLE if pipeline.in_flight == 0 else Phase.BUSY)
                first = await reader.readexactly(1)
                if connection.muted_until_s:  # a pipelined Produce earned a throttle while we waited
                    await self._wait_muted(connection)
                connection.enter(Phase.ARRIVING)  # from the first byte on, the request must arrive in time
                prefix = first + await reader.readexactly(3)
                # The size is checked before any of the body is read: nothing is buffered for a frame
                # above socket.request.max.bytes, or for a negative size.
                size = frame_size(prefix, self.max_request_bytes)
                taken = [0]  # bytes of this request counted in queued.max.request.bytes
                pipelined = False
                try:
                    frame = await self._read_body(reader, size, connection, taken)
                    connection.enter(Phase.BUSY)
                    current[0] = frame
                    request = parse_request(frame)
                    self._metrics.request(request.header.api_key, request.body, size)
                    charge = self._charge(request, size, connection, session)
                    if request.header.api_key == PRODUCE_KEY and pipeline.in_flight < MAX_PIPELINED_PRODUCES:
                        self._pipeline(writer, request, pipeline, connection, frame, taken[0], charge)
                        pipelined = True
                        continue
                    if pipeline.last is not None:
                        await asyncio.shield(pipeline.last)  # every pipelined Produce answered first
                    await self._respond(writer, request, await self._handled(request, charge, connection))
                finally:
                    if not pipelined:
                        self._give_request_bytes(taken[0])
                if session.close_after_response:  # a failed SASL exchange: answered, then closed (as Kafka)
                    await _await_peer_close(reader)
                    return
        except asyncio.CancelledError:
            if pipeline.failure is not None:
                failure, current[0] = pipeline.failure
                raise failure from None  # closes the connection with this request's log line
            raise
        finally:
            if pipeline.last is not None and not pipeline.last.done():
                pipeline.last.cancel()

    async def _respond(self, writer: asyncio.StreamWriter, request: Request, response: Any) -> None:
        if response is not None:
            parts = encode_response(request.header.correlation_id, response)
            self._metrics.response(request.header.api_key, request.body, parts)
            await self._send(writer, parts)

    # --- pipelined Produce requests ---------------------------------------------------------

    def _pipeline(
        self, writer: asyncio.StreamWriter, request: Request, pipeline: _Pipeline, connection: _Connection, frame: bytes, taken: int,
        charge: Charge | None,
    ) -> None:  # fmt: skip
        task = asyncio.ensure_future(self._answer_pipelined(writer, request, pipeline.last, charge, connection))
        pipeline.last = task
        pipeline.in_flight += 1

        def done(task: asyncio.Future[None]) -> None:
            self._give_request_bytes(taken)
            pipeline.in_flight -= 1
            if pipeline.last is task:
                pipeline.last = None
            if task.cancelled() or pipeline.failure is not None:
                return  # a later request failing because this one did is not logged again
            failure = task.exception()
            if failure is not None:
                pipeline.failure = (failure, frame)
                connection.task.cancel()

        task.add_done_callback(done)

    async def _answer_pipelined(
        self, writer: asyncio.StreamWriter, request: Request, previous: asyncio.Future[None] | None, charge: Charge | None,
        connection: _Connection,
    ) -> None:  # fmt: skip
        try:
            response = await self._handled(request, charge, connection)
            if previous is not None:
                await previous  # responses in request order
            await self._respond(writer, request, response)
        except asyncio.CancelledError:
            if previous is not None:
                previous.cancel()
            raise

    # --- client quotas (quotas/) -------------------------------------------------------------

    def _charge(self, request: Request, size: int, connection: _Connection, session: Session) -> Charge | None:
        """The request's charge to its client's quotas (None while no quota is set). What it
        earned as read (a Produce's bytes) holds the connection's next read back at once."""
        quotas = self.client_quotas
        if quotas is None or not quotas.active:
            return None
        charge = Charge(quotas, request, size, session.principal, _now_ms)
        self._mute(connection, charge.throttle_ms)
        return charge

    async def _handled(self, request: Request, charge: Charge | None, connection: _Connection) -> Any:
        """The broker's response, charged when quotas are set: a throttled one carries its
        throttle time, and the connection reads nothing more until it is over (KIP-219); for a
        response version from before KIP-219 the answer itself waits."""
        if charge is None:
            return await self.handle(request)
        response = await charge.handled(self.handle)
        if charge.throttle_ms > 0:
            header = request.header
            REQUEST_THROTTLE_TIME.labels(request_name(header.api_key, request.body)).observe(charge.throttle_ms / 1000)
            self._mute(connection, charge.throttle_ms)
            if not client_throttles(header.api_key, header.api_version):
                await asyncio.sleep(charge.throttle_ms / 1000)
        return response

    def _mute(self, connection: _Connection, throttle_ms: int) -> None:
        if throttle_ms > 0:
            connection.muted_until_s = max(connection.muted_until_s, asyncio.get_running_loop().time() + throttle_ms / 1000)

    async def _wait_muted(self, connection: _Connection) -> None:
        # Idle while held: connections.max.idle.ms still closes a connection whose peer is gone.
        connection.enter(Phase.IDLE)
        loop = asyncio.get_running_loop()
        while (remaining := connection.muted_until_s - loop.time()) > 0:
            await asyncio.sleep(remaining)
        connection.muted_until_s = 0.0

    # --- queued.max.request.bytes ---------------------------------------------------------

    async def _read_body(self, reader: asyncio.StreamReader, size: int, connection: _Connection, taken: list[int]) -> bytes:
        """The `size` bytes of a request body, each chunk counted before it is read; waits
        while the bytes queued across connections are at queued.max.request.bytes, unless
        this request already holds some and every other one that does waits too (then none
        would ever finish and give bytes back; QueuedRequestBytes.may_read)."""
        parts: list[bytes] = []
        for chunk in self._queued.chunks(size):
            holding = taken[0] > 0
            if not self._queued.may_read(holding):
                connection.enter(Phase.WAITING)
                while not self._queued.may_read(holding):
                    assert self._room is not None
                    self._room.clear()
                    self._queued.waits(holding)
                    try:
                        await self._room.wait()
                    finally:
                        self._queued.waits(holding, False)
                connection.enter(Phase.ARRIVING)  # the sender was not late while we held it back
            self._queued.take(chunk, first=not holding)
            taken[0] += chunk
            parts.append(await reader.readexactly(chunk))
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _give_request_bytes(self, size: int) -> None:
        if size:
            self._queued.give(size)
            if self._room is not None and self._queued.may_progress():
                self._room.set()

    async def _send(self, writer: asyncio.StreamWriter, parts: list[Any]) -> None:
        loop = asyncio.get_running_loop()
        for part in parts:
            if isinstance(part, bytes):
                writer.write(part)
            elif self.ssl_context is not None:
                writer.write(part.read_bytes())  # TLS encrypts in user space: no sendfile
            else:
                # Zero copy: the default event loop sends a file range with os.sendfile once the
                # transport's buffer is empty (uvloop cannot; see DESIGN.md).
                await loop.sendfile(writer.transport, part.file, part.position, part.size_bytes, fallback=True)
        await writer.drain()


def _address_text(address: Any) -> str:
    return f"{address[0]}:{address[1]}" if isinstance(address, tuple) else str(address)
