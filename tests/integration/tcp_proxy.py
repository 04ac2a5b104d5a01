"""A small TCP proxy on 127.0.0.1 that cuts Kafka connections when a test tells it to.

Clients connect to the proxy, which forwards to one upstream broker. Start the broker with
`--advertised-listener <proxy address>` so that every connection a client opens (bootstrap
and the ones Metadata points to) goes through the proxy.

The proxy reads whole Kafka frames (4-byte size, then the frame) in both directions. For
each request it asks `plan(api_key, seen)` — `seen` counts requests of that api key across
all connections, from 0 — what to do:

  * None: forward it;
  * CutRequest(after_bytes): forward only the first `after_bytes` bytes of the frame (size
    prefix included), then close both sides: the broker sees a truncated frame and never
    handles the request;
  * CutResponse(): forward the whole request, then close both sides when its response comes
    back, instead of forwarding it: the broker handled the request, the client never knows.

`cut_all()` closes every open connection at once. Threads do the forwarding (two per
connection), so tests with synchronous clients need no event loop.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

_REQUEST_HEADER = struct.Struct(">hhi")  # api_key, api_version, correlation_id


@dataclass(frozen=True, slots=True)
class CutRequest:
    after_bytes: int


@dataclass(frozen=True, slots=True)
class CutResponse:
    pass


Plan = Callable[[int, int], CutRequest | CutResponse | None]


def _recv_exactly(sock: socket.socket, size: int) -> bytes | None:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            return None
        chunks += chunk
    return bytes(chunks)


def _recv_frame(sock: socket.socket) -> bytes | None:
    """One frame with its size prefix, or None at end of stream."""
    prefix = _recv_exactly(sock, 4)
    if prefix is None:
        return None
    body = _recv_exactly(sock, int.from_bytes(prefix, "big", signed=True))
    return None if body is None else prefix + body


class _Connection:
    def __init__(self, proxy: TcpProxy, client: socket.socket, upstream: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        self.doomed_responses: set[int] = set()  # correlation ids whose response cuts the connection
        self.lock = threading.Lock()
        self.closed = False

    def start(self) -> None:
        threading.Thread(target=self._requests, daemon=True, name="proxy-requests").start()
        threading.Thread(target=self._responses, daemon=True, name="proxy-responses").start()

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
        for sock in (self.client, self.upstream):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        self.proxy._forget(self)

    def _requests(self) -> None:
        try:
            while (frame := _recv_frame(self.client)) is not None:
                api_key, _version, correlation_id = _REQUEST_HEADER.unpack_from(frame, 4)
                action = self.proxy._decide(api_key)
                if isinstance(action, CutRequest):
                    self.upstream.sendall(frame[: action.after_bytes])
                    self.proxy._count_cut("request")
                    break
                if isinstance(action, CutResponse):
                    with self.lock:
                        self.doomed_responses.add(correlation_id)
                self.upstream.sendall(frame)
        except OSError:
            pass
        self.close()

    def _responses(self) -> None:
        try:
            while (frame := _recv_frame(self.upstream)) is not None:
                (correlation_id,) = struct.unpack_from(">i", frame, 4)
                with self.lock:
                    doomed = correlation_id in self.doomed_responses
                if doomed:
                    self.proxy._count_cut("response")
                    break
                self.client.sendall(frame)
        except OSError:
            pass
        self.close()


class TcpProxy:
    def __init__(self, upstream_port: int | None = None) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._plan: Plan = lambda api_key, seen: None
        self._seen: Counter[int] = Counter()
        self._cuts: Counter[str] = Counter()
        self._connections: set[_Connection] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, daemon=True, name="proxy-accept")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> TcpProxy:
        assert self.upstream_port is not None, "set upstream_port before start()"
        self._thread.start()
        return self

    def set_plan(self, plan: Plan) -> None:
        with self._lock:
            self._plan = plan

    def seen(self, api_key: int) -> int:
        """Requests of `api_key` the proxy has read from clients so far."""
        with self._lock:
            return self._seen[api_key]

    def cuts(self, kind: str) -> int:
        """Connections cut so far by CutRequest ("request") or CutResponse ("response")."""
        with self._lock:
            return self._cuts[kind]

    def cut_all(self) -> int:
        """Close every open connection now; returns how many there were."""
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            connection.close()
        return len(connections)

    def close(self) -> None:
        self._listener.close()
        self.cut_all()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # listener closed
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:
                client.close()
                continue
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection = _Connection(self, client, upstream)
            with self._lock:
                self._connections.add(connection)
            connection.start()

    def _decide(self, api_key: int) -> CutRequest | CutResponse | None:
        with self._lock:
            seen = self._seen[api_key]
            self._seen[api_key] += 1
            plan = self._plan
        return plan(api_key, seen)

    def _count_cut(self, kind: str) -> None:
        with self._lock:
            self._cuts[kind] += 1

    def _forget(self, connection: _Connection) -> None:
        with self._lock:
            self._connections.discard(connection)
