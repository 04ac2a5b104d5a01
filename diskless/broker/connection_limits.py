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
- `max.connections.per.ip.overrides`: per-address limits that replace max.connections.per.ip,
  "host:count" or "ip:count", comma-separated, read as Kafka's Csv.parseCsvMap reads them (the
  count after the last colon, so IPv6 addresses need no brackets). Host names are resolved by
  the shell when the setting is applied, as Kafka resolves them when it is configured; matching
  is by address. max.connections.per.ip may be 0 only with overrides (only the listed addresses
  may connect), as Kafka requires.
- `max.connection.creation.rate` (KIP-612): connections accepted per second, broker-wide (one
  `ConnectionCreationRate` shared by every listener). Each accepted connection is recorded, and
  when the measured rate is above the quota the acceptor waits the throttle time Kafka computes
  before it hands that connection on and accepts the next; connections are delayed, never
  refused, and the ones behind wait in the kernel's backlog. The rate is Kafka's `Rate` over
  `quota.window.num` (11) samples of `quota.window.size.seconds` (1 s): a young window counts as
  ten full ones, so a broker that has seen no connections lets about 10 x the rate through at
  once before it throttles; past that, the rate is held. The throttle is
  (rate - quota) / quota x window, at most one sample window (Kafka's QuotaUtils.boundedThrottleTime).
  Per-IP creation-rate quotas (KIP-612's `connection_creation_rate` of an IP entity, set with
  AlterClientQuotas) are client quotas (quotas/client_quotas.py).
- `connections.max.idle.ms`: a connection with no request in progress and no byte received
  for that long is closed (Kafka's default 600000).
- `queued.max.request.bytes`: bytes of requests read and not yet answered, across all
  connections. Bodies are read in chunks of at most READ_CHUNK_BYTES, each counted before it
  is read, and reading waits while the count is at or above the bound (Kafka's non-strict
  memory pool): so an unfinished frame costs what was sent of it, not what its size prefix
  claims, and the bytes held stay below the bound plus one chunk per connection. One
  exception, so that some request always progresses (as in Kafka's pool, which counts a
  request whole): when every request holding counted bytes waits, one of them reads on past
  the bound (by at most socket.request.max.bytes). -1: no bound (Kafka's default; ours is
  finite, see config.py).
- `request_arrival_timeout_ms` (no Kafka name; Kafka relies on idle expiry): once the first
  byte of a request has arrived, the rest of it must arrive within this time, counted again
  from the moment the broker lets the body be read if it had to wait for memory.
"""

from __future__ import annotations

import enum
import ipaddress
import math
import re
import resource
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from .quotas.rate import Rate, SampledStat

INT32_MAX = 2**31 - 1  # Kafka's default for max.connections and max.connections.per.ip
# Descriptors kept out of reach of connections: the metadata store, the bucket's HTTP
# connections, listening sockets, pipes of threads and the logging files.
RESERVED_DESCRIPTORS = 128


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The broker settings of this module, Kafka's names with dots as underscores."""

    max_connections: int = INT32_MAX
    max_connections_per_ip: int = INT32_MAX
    # max.connections.per.ip.overrides, parsed (parse_per_ip_overrides): host or address -> count.
    max_connections_per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    max_connection_creation_rate: int = INT32_MAX  # connections per second, broker-wide
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


class InvalidPerIpOverrides(ValueError):
    """max.connections.per.ip.overrides that Kafka could not parse; `reason` says which entry."""

    def __init__(self, value: str, reason: str) -> None:
        super().__init__(reason)
        self.value = value
        self.reason = reason


_INT = re.compile(r"[+-]?[0-9]+")


def parse_per_ip_overrides(text: str) -> dict[str, int]:
    """max.connections.per.ip.overrides as Kafka reads it (Csv.parseCsvMap, then toInt): ""
    is none; entries are split at commas (spaces around them ignored, a trailing one too),
    each at its last colon into a host or address and a count. Raises InvalidPerIpOverrides."""
    overrides: dict[str, int] = {}
    if text == "":
        return overrides
    entries = re.split(r"\s*,\s*", text)
    while entries and entries[-1] == "":  # Java's String.split drops trailing empty strings
        entries.pop()
    for entry in entries:
        host, sep, count = entry.rpartition(":")
        host, count = host.strip(), count.strip()
        if not sep or not host:
            raise InvalidPerIpOverrides(text, f"expected HOST:COUNT, got {entry!r}")
        if not _INT.fullmatch(count) or not -(2**31) <= int(count) <= INT32_MAX:
            raise InvalidPerIpOverrides(text, f"the count of {host} is not an int: {count!r}")
        overrides[host] = int(count)
    return overrides


def normalize_address(host: str) -> str:
    """One text per address, so that a peer and an override compare as Java's InetAddress does:
    IPv6 compressed (brackets dropped), an IPv4-mapped IPv6 address as its IPv4 address. A
    name that is not an address is returned as it is."""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def resolve_per_ip_overrides(
    overrides: Mapping[str, int], resolve: Callable[[str], Sequence[str]]
) -> tuple[dict[str, int], list[str]]:
    """The overrides by address: address literals as they are, host names through `resolve`
    (the shell's DNS lookup; every address a name has gets its count). Returns them and the
    names that resolved to nothing (not applied; the shell logs them)."""
    by_address: dict[str, int] = {}
    unresolved: list[str] = []
    for host, count in overrides.items():
        if _is_address(host.strip("[]")):
            by_address[normalize_address(host)] = count
            continue
        addresses = [normalize_address(a) for a in resolve(host)]
        if not addresses:
            unresolved.append(host)
        for resolved in addresses:
            by_address[resolved] = count
    return by_address, unresolved


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


class ConnectionQuotas:
    """Counts of open connections, in total and per address (Kafka's ConnectionQuotas).
    Addresses are `normalize_address` texts; `per_ip_overrides` is keyed by them."""

    def __init__(self, max_connections: int, max_connections_per_ip: int, per_ip_overrides: Mapping[str, int] | None = None) -> None:
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.per_ip_overrides: Mapping[str, int] = dict(per_ip_overrides or {})
        self.total = 0
        self._per_ip: dict[str, int] = {}

    def limit_for(self, host: str) -> int:
        """The connections `host` may have open: its override, else max.connections.per.ip."""
        return self.per_ip_overrides.get(host, self.max_connections_per_ip)

    def accepting(self) -> bool:
        """False while at max.connections: the acceptor should wait for a close."""
        return self.total < self.max_connections

    def admit(self, host: str) -> Admission:
        """Count a connection just accepted from `host`, or say why it must be closed."""
        count = self._per_ip.get(host, 0)
        if count >= self.limit_for(host):
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


QUOTA_WINDOW_NUM = 11  # Kafka's quota.window.num: samples of the connection creation rate
QUOTA_WINDOW_SIZE_MS = 1000  # Kafka's quota.window.size.seconds (1), in ms
# Kafka's default MetricConfig (2 samples of 30 s): the window of connection-accept-throttle-time.
METRIC_WINDOW_NUM = 2
METRIC_WINDOW_SIZE_MS = 30_000


class ConnectionCreationRate:
    """max.connection.creation.rate: Kafka's broker connection rate sensor, a `Rate` (per
    second) over QUOTA_WINDOW_NUM samples of QUOTA_WINDOW_SIZE_MS, with an upper quota.
    Shared by every listener of a broker; only the event-loop task calls it."""

    def __init__(self, max_rate: int, samples: int = QUOTA_WINDOW_NUM, window_ms: int = QUOTA_WINDOW_SIZE_MS) -> None:
        self.max_rate = max_rate
        self._rate = Rate(samples, window_ms)
        self.max_throttle_ms = window_ms  # Kafka: quota.window.size.seconds

    def record(self, now_ms: int) -> int:
        """Record one accepted connection; how long (ms) the acceptor must wait before it hands
        the connection on, 0 within the quota: Kafka's QuotaUtils.boundedThrottleTime, at most
        `max_throttle_ms`."""
        self._rate.record(1.0, now_ms)
        if self.max_rate == 0:
            return self.max_throttle_ms
        return min(self._rate.throttle_time_ms(self.max_rate, now_ms), self.max_throttle_ms)

    def rate(self, now_ms: int) -> float:
        """Connections per second, as Kafka's Rate.measure (its broker-connection-accept-rate)."""
        return self._rate.measure(now_ms)

    def window_size_ms(self, now_ms: int) -> int:
        return self._rate.window_size_ms(now_ms)


class ThrottleTimeAvg:
    """Kafka's connection-accept-throttle-time of a listener: the average of the non-zero
    throttle times (`Avg` over METRIC_WINDOW_NUM samples of METRIC_WINDOW_SIZE_MS); NaN
    while there are none in the window, as Kafka's Avg reports."""

    def __init__(self, samples: int = METRIC_WINDOW_NUM, window_ms: int = METRIC_WINDOW_SIZE_MS) -> None:
        self._stat = SampledStat(samples, window_ms)

    def record(self, throttle_ms: int, now_ms: int) -> None:
        self._stat.record(float(throttle_ms), now_ms)

    def value(self, now_ms: int) -> float:
        count = self._stat.count(now_ms)
        return self._stat.total(now_ms) / count if count else math.nan


READ_CHUNK_BYTES = 64 * 1024


class QueuedRequestBytes:
    """Bytes of requests read and not yet answered, bounded by queued.max.request.bytes; and
    how many requests hold some (holders), how many of those wait to read more."""

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self.used_bytes = 0
        self.holders = 0
        self.waiting_holders = 0

    def has_room(self) -> bool:
        """Below the bound? (The last chunk read may pass it by up to a chunk.)"""
        return self.limit_bytes < 0 or self.used_bytes < self.limit_bytes

    def may_read(self, holding: bool) -> bool:
        """May a request read its next chunk (`holding`: it holds counted bytes already, and
        is not counted as waiting)? Below the bound, yes. At it, only a holder while every
        other holder waits: else each would wait for the others to finish, and none would."""
        return self.has_room() or (holding and self.waiting_holders == self.holders - 1)

    def may_progress(self) -> bool:
        """Would a waiter be let through now (to wake them after bytes came back)?"""
        return self.has_room() or (self.holders > 0 and self.waiting_holders == self.holders)

    def chunks(self, size_bytes: int) -> list[int]:
        """The sizes in which a body of `size_bytes` is counted and read."""
        full, rest = divmod(size_bytes, READ_CHUNK_BYTES)
        return [READ_CHUNK_BYTES] * full + ([rest] if rest else [])

    def waits(self, holding: bool, waiting: bool = True) -> None:
        """A request begins (or ends) waiting to read; only holders are counted."""
        if holding:
            self.waiting_holders += 1 if waiting else -1

    def take(self, size_bytes: int, first: bool = False) -> None:
        """Count a chunk read; `first`: the request's first, which makes it a holder."""
        self.used_bytes += size_bytes
        self.holders += first

    def give(self, size_bytes: int) -> None:
        """A request that held `size_bytes` (all it took) was answered or gave up."""
        self.used_bytes -= size_bytes
        self.holders -= 1


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
