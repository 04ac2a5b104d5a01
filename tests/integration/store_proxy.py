"""A byte-level TCP proxy on 127.0.0.1 in front of an object store (moto's S3 server), that a
test or a benchmark cuts in one of two ways:

  * `blackhole()`: the path dies silently. The proxy still accepts connections but forwards
    nothing either way, and the bytes it reads are dropped. A connection open during the
    blackhole stays dead after `restore()` (its bytes were lost, as when a load balancer or a
    NAT in the path restarts): only a client that gives up on it and connects again gets
    through. Clients see no error, only silence: their read timeouts must notice.
  * `refuse()`: every open connection is reset, and each new one is reset as soon as it is
    accepted, as when the store's port is closed.

`restore()` makes new connections forward again. Unlike tcp_proxy.TcpProxy (Kafka frames),
this proxy knows nothing of the protocol it carries: two threads per connection pump bytes.
Usable without an event loop, from tests and from bench/bucket_outage.py.
"""

from __future__ import annotations

import socket
import struct
import threading

_LINGER_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST


class _Link:
    """One client connection and, while the path is up, its upstream connection."""

    def __init__(self, client: socket.socket, upstream: socket.socket | None) -> None:
        self.client = client
        self.upstream = upstream
        self.dead = upstream is None  # set once: a dead link never forwards again
        self._lock = threading.Lock()
        self._closed = False

    def pump(self, source: socket.socket, sink: socket.socket | None, proxy: StoreProxy) -> None:
        try:
            while data := source.recv(65536):
                if self.dead or sink is None:
                    continue  # a black hole: read and drop
                sink.sendall(data)
        except OSError:
            pass
        self.close(reset=False)
        proxy._forget(self)

    def close(self, *, reset: bool) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for sock in (self.client, self.upstream):
            if sock is None:
                continue
            try:
                if reset:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
                else:
                    sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


class StoreProxy:
    """Forwards 127.0.0.1:`port` to 127.0.0.1:`upstream_port` until told otherwise."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.state = "up"  # "up", "blackhole" or "refuse"
        self.accepted = 0  # connections accepted so far, in every state
        self._links: set[_Link] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True, name="store-proxy-accept").start()

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def blackhole(self) -> None:
        with self._lock:
            self.state = "blackhole"
            for link in self._links:
                link.dead = True

    def refuse(self) -> None:
        with self._lock:
            self.state = "refuse"
            links = list(self._links)
        for link in links:
            link.close(reset=True)

    def restore(self) -> None:
        with self._lock:
            self.state = "up"

    def close(self) -> None:
        self._listener.close()
        with self._lock:
            links = list(self._links)
        for link in links:
            link.close(reset=True)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # listener closed
            with self._lock:
                self.accepted += 1
                state = self.state
            if state == "refuse":
                _Link(client, None).close(reset=True)
                continue
            upstream = None
            if state == "up":
                try:
                    upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
                except OSError:
                    _Link(client, None).close(reset=True)
                    continue
                for sock in (client, upstream):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            link = _Link(client, upstream)
            with self._lock:
                self._links.add(link)
            threading.Thread(target=link.pump, args=(client, upstream, self), daemon=True).start()
            if upstream is not None:
                threading.Thread(target=link.pump, args=(upstream, client, self), daemon=True).start()

    def _forget(self, link: _Link) -> None:
        with self._lock:
            self._links.discard(link)
