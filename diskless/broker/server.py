"""The TCP shell: reads Kafka frames, hands them to the broker, writes responses in order.

Requests on one connection are handled one at a time, in order, as Kafka does: this keeps
responses in request order and produce requests of one connection in sequence order. Record
bytes of Fetch responses go from the segment file to the socket with sendfile.

A connection that breaks the framing (garbage, an absurd size, a truncated frame) is closed
with a log line; nothing it sent can affect another connection.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import socket
from typing import TYPE_CHECKING, Any

from diskless.wire import ProtocolError, encode_response, frame_size, parse_request


if TYPE_CHECKING:
    from .app import Broker

log = logging.getLogger(__name__)

# The peer's host, for handlers that report it (JoinGroup's client_host); set per connection task.
PEER_HOST: contextvars.ContextVar[str] = contextvars.ContextVar("peer_host", default="")


class KafkaServer:
    def __init__(self, broker: Broker, host: str, port: int, max_request_bytes: int) -> None:
        self.broker = broker
        self.host = host
        self.port = port
        self.max_request_bytes = max_request_bytes
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

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
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            await self._serve(reader, writer)
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                log.warning("closing connection from %s: truncated frame (%d bytes of %s)", peer, len(exc.partial), exc.expected)
        except ProtocolError as exc:
            log.warning("closing connection from %s: %s", peer, exc)
        except (ConnectionError, asyncio.CancelledError):
            pass
        except RuntimeError as exc:
            if writer.is_closing():  # the peer left while sendfile was running
                log.debug("connection from %s closed while sending: %s", peer, exc)
            else:
                log.exception("closing connection from %s after an internal error", peer)
        except Exception:
            log.exception("closing connection from %s after an internal error", peer)
        finally:
            self._connections.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        broker = self.broker
        while True:
            prefix = await reader.readexactly(4)
            frame = await reader.readexactly(frame_size(prefix, self.max_request_bytes))
            request = parse_request(frame)
            response = await broker.handle(request)
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
