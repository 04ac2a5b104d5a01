"""Connection and memory limits of the TCP shell, as Kafka has them: the decisions, no I/O.

Sans-IO: callers pass `now_ms` and counts; nothing here awaits, reads a socket or a clock.
The shell (server.py) asks these objects and does the waiting. Only the event-loop task
calls them (no locks).

- `max.connections` (Kafka's SocketServer/ConnectionQuotas): at the limit the acceptor stops
  accepting until a connection closes; new connections wait in the kernel's backlog.
  The limit is also capped by the descriptors the process may open, less a reserve for
  segment files and the metadata store, so that connections alone can never exhaust them.
- `max.connections.per.ip`: a connection over its address's limit is closed at once, as
  Kafka closes it (TooManyConnectionsException).
- `connections.max.idle.ms`: a connection with no request in progress and no byte received
  for that long is closed (Kafka's default 600000).
- `queued.max.request.bytes`: bytes of requests read and not yet answered, across all
  connections. Bodies are read in chunks of at most READ_CHUNK_BYTES, each counted before it
  is read, and reading waits while the count is at or above the bound (Kafka's non-strict
  memory pool): so an unfinished frame costs what was sent of it, not what its size prefix
  claims, and the bytes held stay below the bound plus one chunk per connection. -1: no bound
  (Kafka's default; ours is finite, see config.py).
- `request_arrival_timeout_ms` (no Kafka name; Kafka relies on idle expiry): once the first
  byte of a request has arrived, the rest of it must arrive within this time, counted again
  from the moment the broker lets the body be read if it had to wait for memory.
"""

from __future__ import annotations

import enum
import resource
from dataclasses import dataclass

INT32_MAX = 2**31 - 1  # Kafka's default for max.connections and max.connections.per.ip
# Descriptors kept out of reach of connections: the metadata store, the bucket's HTTP
# connections, listening sockets, pipes of threads and the logging files.
RESERVED_DESCRIPTORS = 128


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The broker settings of this module, Kafka's names with dots as underscores."""

    max_connections: int = INT32_MAX
    max_connections_per_ip: int = INT32_MAX
    connections_max_idle_ms: int = 600_000
    queued_max_request_bytes: int = 256 * 2**20
    request_arrival_timeout_ms: int = 30_000


def raise_descriptor_limit() -> tuple[int, int]:
    """Raise RLIMIT_NOFILE's soft limit to its hard limit (as Kafka's scripts ask of ulimit);
    returns (soft before, soft after). Idempotent."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == hard:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):  # e.g. an infinite hard limit, above the kernel's nr_open
        return soft, soft
    return soft, hard


def soft_descriptor_limit() -> int:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 2**20


def descriptor_budget(soft_limit: int, reserved_for_files: int) -> int:
    """How many connections the descriptor limit leaves room for (at least 1)."""
    return max(1, soft_limit - reserved_for_files - RESERVED_DESCRIPTORS)


class Admission(enum.Enum):
    ACCEPTED = "accepted"
    TOO_MANY_FOR_IP = "too many connections from this address"


class ConnectionQuotas:
    """Counts of open connections, in total and per address (Kafka's ConnectionQuotas)."""

    def __init__(self, max_connections: int, max_connections_per_ip: int) -> None:
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.total = 0
        self._per_ip: dict[str, int] = {}

    def accepting(self) -> bool:
        """False while at max.connections: the acceptor should wait for a close."""
        return self.total < self.max_connections

    def admit(self, host: str) -> Admission:
        """Count a connection just accepted from `host`, or say why it must be closed."""
        count = self._per_ip.get(host, 0)
        if count >= self.max_connections_per_ip:
            return Admission.TOO_MANY_FOR_IP
        self._per_ip[host] = count + 1
        self.total += 1
        return Admission.ACCEPTED

    def release(self, host: str) -> None:
        count = self._per_ip.get(host, 0) - 1
        if count > 0:
            self._per_ip[host] = count
        else:
            self._per_ip.pop(host, None)
        self.total -= 1

    def count(self, host: str) -> int:
        return self._per_ip.get(host, 0)


READ_CHUNK_BYTES = 64 * 1024


class QueuedRequestBytes:
    """Bytes of requests read and not yet answered, bounded by queued.max.request.bytes."""

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self.used_bytes = 0

    def has_room(self) -> bool:
        """May one more chunk be read? (The last one may pass the bound by up to a chunk.)"""
        return self.limit_bytes < 0 or self.used_bytes < self.limit_bytes

    def chunks(self, size_bytes: int) -> list[int]:
        """The sizes in which a body of `size_bytes` is counted and read."""
        full, rest = divmod(size_bytes, READ_CHUNK_BYTES)
        return [READ_CHUNK_BYTES] * full + ([rest] if rest else [])

    def take(self, size_bytes: int) -> None:
        self.used_bytes += size_bytes

    def give(self, size_bytes: int) -> None:
        self.used_bytes -= size_bytes


class Phase(enum.Enum):
    """Where a connection is, for its deadlines."""

    IDLE = "idle"  # waiting for the first byte of a request
    ARRIVING = "arriving"  # a request has begun; the rest of it must arrive in time
    WAITING = "waiting"  # the broker holds the body back (queued.max.request.bytes)
    BUSY = "busy"  # handling the request or sending its response: no deadline here


def overdue(phase: Phase, since_ms: int, now_ms: int, limits: ConnectionLimits) -> str | None:
    """Why a connection in `phase` since `since_ms` must be closed now, or None."""
    if phase is Phase.IDLE and now_ms - since_ms >= limits.connections_max_idle_ms:
        return f"idle for {now_ms - since_ms} ms (connections.max.idle.ms {limits.connections_max_idle_ms})"
    if phase is Phase.ARRIVING and now_ms - since_ms >= limits.request_arrival_timeout_ms:
        return f"request not complete {now_ms - since_ms} ms after it began (request arrival timeout {limits.request_arrival_timeout_ms} ms)"
    return None


def sweep_interval_ms(limits: ConnectionLimits) -> int:
    """How often the shell checks deadlines: a tenth of the shortest, between 10 ms and 1 s."""
    shortest = min(limits.connections_max_idle_ms, limits.request_arrival_timeout_ms)
    return max(10, min(1000, shortest // 10))


class AcceptBackoff:
    """Delays between accept retries after failures for lack of descriptors: doubling from
    `initial_ms` to `max_ms`, back to the start after a success."""

    def __init__(self, initial_ms: int = 10, max_ms: int = 1000) -> None:
        self.initial_ms = initial_ms
        self.max_ms = max_ms
        self.failures = 0

    def failed(self) -> int:
        """Count a failure; the delay before the next try, in ms."""
        delay = min(self.max_ms, self.initial_ms * 2 ** min(self.failures, 30))
        self.failures += 1
        return delay

    def succeeded(self) -> None:
        self.failures = 0
