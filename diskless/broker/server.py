"""The TCP shell: reads Kafka frames, hands them to the broker, writes responses in order.

Requests on one connection are handled one at a time, in order, as Kafka does: this keeps
responses in request order and produce requests of one connection in sequence order. Record
bytes of Fetch responses go from the segment file to the socket with sendfile.

A connection that breaks the framing is closed, as Kafka closes a connection whose request it
cannot parse: a size prefix that is negative or above `socket.request.max.bytes` (checked before
a byte of the body is read, so a claimed 1 GiB costs nothing), a truncated frame, an unknown API
key or a version outside our range (ApiVersions excepted: it is answered, see wire.framing), a
body whose lengths or nulls do not fit its frame or schema (wire.bounds; checked before kio
allocates anything). Nothing it sent can affect another connection.

Each such close is one log line - client address, api key and version when known, reason -
rate-limited by `RefusalLog` so that a flood of bad frames cannot flood the log: at most one line
per kind of reason per second, the next one saying how many were suppressed.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any

from diskless.wire import ProtocolError, Request, encode_response, frame_size, parse_request

from .api import PEER_HOST

log = logging.getLogger(__name__)

class RefusalLog:
    """Which refusals to log: at most one line per kind of reason per `interval_ms`.

    Sans-IO: the caller passes `now_ms`. The kind of a reason is its text with the numbers taken
    out ("array X claims 7 entries" and "... 9 entries" are one kind), so that a peer cannot
    defeat the limit by varying a length. Kinds are kept at most `max_kinds` at a time (the
    oldest is forgotten first): memory stays bounded whatever peers send.
    """

    _NUMBERS = re.compile(r"-?\d+")

    def __init__(self, interval_ms: int = 1000, max_kinds: int = 1024) -> None:
        self.interval_ms = interval_ms
        self.max_kinds = max_kinds
        self._kinds: dict[str, list[int]] = {}  # kind: [last logged at ms, suppressed since]

    def admit(self, reason: str, now_ms: int) -> int | None:
        """None to suppress this line; else how many lines of its kind were suppressed before it."""
        kind = self._NUMBERS.sub("N", reason)
        entry = self._kinds.get(kind)
        if entry is not None and now_ms - entry[0] < self.interval_ms:
            entry[1] += 1
            return None
        suppressed = 0 if entry is None else entry[1]
        self._kinds.pop(kind, None)
        if len(self._kinds) >= self.max_kinds:
            del self._kinds[next(iter(self._kinds))]
        self._kinds[kind] = [now_ms, 0]
        return suppressed


_API_KEY_AND_VERSION = struct.Struct(">hh")


def _describe_api(exc: BaseException, frame_start: bytes | None) -> str:
    """'api key K version V' from the error, or from the first bytes of the frame; '' if unknown."""
    api_key, api_version = getattr(exc, "api_key", None), getattr(exc, "api_version", None)
    if frame_start is not None and len(frame_start) >= _API_KEY_AND_VERSION.size:
        api_key, api_version = _API_KEY_AND_VERSION.unpack_from(frame_start, 0)
    if api_key is None:
        return ""
    return f" (api key {api_key} version {'?' if api_version is None else api_version})"


class KafkaServer:
    def __init__(self, handle: Callable[[Request], Awaitable[Any]], host: str, port: int, max_request_bytes: int) -> None:
        self.handle = handle  # the broker's: a parsed request in, its response (or None) out
        self.host = host
        self.port = port
        self.max_request_bytes = max_request_bytes
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._refusals = RefusalLog()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._on_connection, self.host, self.port, reuse_address=True, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        PEER_HOST.set(f"/{peer[0]}" if peer else "")
        client = f"{peer[0]}:{peer[1]}" if peer else "unknown peer"
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        current: list[bytes | None] = [None]  # the frame being handled, for the log line
        try:
            await self._serve(reader, writer, current)
        except asyncio.IncompleteReadError as exc:
            if exc.partial or exc.expected != 4:  # not a peer leaving between two requests
                self._refused(client, exc, exc.partial, f"truncated frame ({len(exc.partial)} bytes of {exc.expected})")
        except ProtocolError as exc:
            self._refused(client, exc, current[0], str(exc))
        except (ConnectionError, asyncio.CancelledError):
            pass
        except RuntimeError as exc:
            if writer.is_closing():  # the peer left while sendfile was running
                log.debug("connection from %s closed while sending: %s", client, exc)
            else:
                self._refused(client, exc, current[0], f"internal error: {type(exc).__name__}: {exc}", internal=True)
        except Exception as exc:
            self._refused(client, exc, current[0], f"internal error: {type(exc).__name__}: {exc}", internal=True)
        finally:
            self._connections.discard(task)
            writer.close()

    def _refused(self, client: str, exc: BaseException, frame_start: bytes | None, reason: str, internal: bool = False) -> None:
        """One rate-limited log line for a connection closed because of what it sent (or of a
        bug its request hit: then with the traceback, also rate-limited)."""
        api = _describe_api(exc, frame_start)
        suppressed = self._refusals.admit(f"{type(exc).__name__}{api}: {reason}" if internal else reason, time.monotonic_ns() // 1_000_000)
        if suppressed is None:
            return
        more = f" [{suppressed} similar closes since the last such line were not logged]" if suppressed else ""
        if internal:
            log.error("closing connection from %s%s: %s%s", client, api, reason, more, exc_info=exc)
        else:
            log.warning("closing connection from %s%s: %s%s", client, api, reason, more)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, current: list[bytes | None]) -> None:
        while True:
            current[0] = None
            prefix = await reader.readexactly(4)
            # The size is checked before any of the body is read: nothing is buffered for a frame
            # above socket.request.max.bytes, or for a negative size.
            size = frame_size(prefix, self.max_request_bytes)
            frame = await reader.readexactly(size)
            current[0] = frame
            request = parse_request(frame)
            response = await self.handle(request)
            if response is not None:
                await self._send(writer, encode_response(request.header.correlation_id, response))

    async def _send(self, writer: asyncio.StreamWriter, parts: list[Any]) -> None:
        loop = asyncio.get_running_loop()
        for part in parts:
            if isinstance(part, bytes):
                writer.write(part)
            else:
                # Zero copy: the default event loop sends a file range with os.sendfile once the
                # transport's buffer is empty (uvloop cannot; see DESIGN.md).
                await loop.sendfile(writer.transport, part.file, part.position, part.size_bytes, fallback=True)
        await writer.drain()
