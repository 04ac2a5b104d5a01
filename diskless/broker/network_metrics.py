"""What the TCP shell counts: connections per listener, and request and response sizes per API.

Names as the Prometheus JMX exporter translates Kafka's (metrics.py says how):

- `kafka.server:type=socket-server-metrics,listener=L` attributes `connection-count`,
  `connection-creation-total` and `connection-close-total` become
  `kafka_server_socket_server_metrics_connection_count{listener="L"}` (a gauge) and the
  counters `..._connection_creation_total` and `..._connection_close_total`; Kafka's
  `-rate` attributes are PromQL's `rate()` of those.
- `connection-accept-throttle-time` (KIP-612), the average of the non-zero times the acceptor
  waited for max.connection.creation.rate over Kafka's metric window (2 x 30 s; NaN when none),
  becomes the gauge `kafka_server_socket_server_metrics_connection_accept_throttle_time{listener="L"}`
  (ms), computed at scrape time (connection_limits.ThrottleTimeAvg).
- Authentication, labelled with the name of the listener the session came in on:
  `failed-authentication-total` and `successful-authentication-total` count first logins,
  `failed-reauthentication-total` and `successful-reauthentication-total` the logins again on
  an authenticated connection (KIP-368), never both, as Kafka's Selector counts them; and
  `expired-connections-killed-count`, connections closed at a request after their SASL session
  expired, becomes `kafka_server_socket_server_metrics_expired_connections_killed_count`, the
  exporter's name for it (a gauge that only rises: a Prometheus counter would add `_total`).
- `kafka.network:type=RequestMetrics,name=RequestBytes,request=R` becomes the histogram
  `kafka_network_requestmetrics_requestbytes{request="R"}`: the size of each parsed request,
  header and body (the 4-byte size prefix not included, as Kafka's `sizeInBytes`). Kafka has
  no response-size metric; ours is `diskless_network_responsebytes`, measured the same way
  (file ranges sent with sendfile included).

A connection is counted once admitted (one closed at once for max.connections.per.ip is not,
as Kafka's acceptor closes it before its processor registers it). The listener label is the
listener's name when it has one, else its bound `host:port`: bounded by the broker's config.

Hot path: one `ListenerMetrics` per listener holds its label children, and the size histograms
of each API key are looked up once, then kept in a dict. Only the event-loop task calls it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from .connection_limits import ThrottleTimeAvg
from .metrics import EVENTS, request_name

# Bytes, powers of 4 from 64 B to 64 MiB (requests are bounded by socket.request.max.bytes, 100 MiB).
_SIZE_BUCKETS = tuple(float(4**k) for k in range(3, 14))

CONNECTIONS = Gauge(
    "kafka_server_socket_server_metrics_connection_count", "Connections open, per listener (Kafka's socket-server-metrics connection-count).",
    ["listener"], registry=EVENTS,
)  # fmt: skip
CONNECTIONS_CREATED = Counter(
    "kafka_server_socket_server_metrics_connection_creation",
    "Connections accepted and admitted, per listener (Kafka's connection-creation-total; its rate is connection-creation-rate).",
    ["listener"], registry=EVENTS,
)  # fmt: skip
CONNECTIONS_CLOSED = Counter(
    "kafka_server_socket_server_metrics_connection_close",
    "Connections closed, by either side, per listener (Kafka's connection-close-total; its rate is connection-close-rate).",
    ["listener"], registry=EVENTS,
)  # fmt: skip
CONNECTION_ACCEPT_THROTTLE_TIME = Gauge(
    "kafka_server_socket_server_metrics_connection_accept_throttle_time",
    "Average of the non-zero times (ms) the acceptor waited for max.connection.creation.rate, per listener, "
    "over the last 30-60 s; NaN when none (Kafka's connection-accept-throttle-time).",
    ["listener"], registry=EVENTS,
)  # fmt: skip
FAILED_AUTHENTICATIONS = Counter(
    "kafka_server_socket_server_metrics_failed_authentication",
    "Logins refused, per listener (Kafka's failed-authentication-total); the admin HTTP endpoint's basic logins under listener=\"http\".",
    ["listener"], registry=EVENTS,
)  # fmt: skip
SUCCESSFUL_AUTHENTICATIONS = Counter(
    "kafka_server_socket_server_metrics_successful_authentication",
    "SASL logins accepted, per listener (Kafka's successful-authentication-total).",
    ["listener"], registry=EVENTS,
)  # fmt: skip
SUCCESSFUL_REAUTHENTICATIONS = Counter(
    "kafka_server_socket_server_metrics_successful_reauthentication",
    "SASL re-authentications accepted, per listener (Kafka's successful-reauthentication-total, KIP-368).",
    ["listener"], registry=EVENTS,
)  # fmt: skip
FAILED_REAUTHENTICATIONS = Counter(
    "kafka_server_socket_server_metrics_failed_reauthentication",
    "SASL re-authentications refused, per listener (Kafka's failed-reauthentication-total, KIP-368).",
    ["listener"], registry=EVENTS,
)  # fmt: skip
EXPIRED_CONNECTIONS_KILLED = Gauge(
    "kafka_server_socket_server_metrics_expired_connections_killed_count",
    "Connections closed because their SASL session expired without re-authentication, per listener "
    "(Kafka's expired-connections-killed-count; only rises).",
    ["listener"], registry=EVENTS,
)  # fmt: skip
REQUEST_BYTES = Histogram(
    "kafka_network_requestmetrics_requestbytes", "Size of each request, header and body, per API (Kafka's RequestMetrics RequestBytes).",
    ["request"], buckets=_SIZE_BUCKETS, registry=EVENTS,
)  # fmt: skip
RESPONSE_BYTES = Histogram(
    "diskless_network_responsebytes", "Size of each response sent, header and body (record bytes sent by sendfile included), per API.",
    ["request"], buckets=_SIZE_BUCKETS, registry=EVENTS,
)  # fmt: skip

_SIZE_PREFIX_BYTES = 4


def response_size_bytes(parts: Sequence[Any]) -> int:
    """The size of an encoded response (`wire.encode_response`'s parts: bytes, or file ranges
    with `size_bytes`), without its size prefix."""
    return sum(len(part) if isinstance(part, (bytes, bytearray, memoryview)) else part.size_bytes for part in parts) - _SIZE_PREFIX_BYTES


class ListenerMetrics:
    """The counting of one listener (one `KafkaServer`), labelled once its port is bound."""

    __slots__ = ("listener", "_open", "_created", "_closed", "_sizes", "_throttle")

    def __init__(self) -> None:
        self.listener: str | None = None
        self._sizes: dict[int, tuple[Any, Any]] = {}  # api key: (request, response) histogram children
        self._throttle = ThrottleTimeAvg()

    def bind(self, listener: str) -> None:
        self.listener = listener
        self._open = CONNECTIONS.labels(listener)
        self._created = CONNECTIONS_CREATED.labels(listener)
        self._closed = CONNECTIONS_CLOSED.labels(listener)
        throttle = self._throttle
        CONNECTION_ACCEPT_THROTTLE_TIME.labels(listener).set_function(lambda: throttle.value(_now_ms()))

    def connection_throttled(self, throttle_ms: int) -> None:
        """The acceptor waits `throttle_ms` for max.connection.creation.rate."""
        self._throttle.record(throttle_ms, _now_ms())

    def connection_opened(self) -> None:
        self._created.inc()
        self._open.inc()

    def connection_closed(self) -> None:
        self._closed.inc()
        self._open.dec()

    def request(self, api_key: int, body: Any, size_bytes: int) -> None:
        self._histograms(api_key, body)[0].observe(size_bytes)

    def response(self, api_key: int, body: Any, parts: Sequence[Any]) -> None:
        self._histograms(api_key, body)[1].observe(response_size_bytes(parts))

    def _histograms(self, api_key: int, body: Any) -> tuple[Any, Any]:
        children = self._sizes.get(api_key)
        if children is None:
            name = request_name(api_key, body)
            children = self._sizes[api_key] = (REQUEST_BYTES.labels(name), RESPONSE_BYTES.labels(name))
        return children

    def remove(self) -> None:
        """The listener stopped: its series go (a process that starts and stops listeners, as
        the tests do, keeps no stale ones)."""
        if self.listener is None:
            return
        for metric in (CONNECTIONS, CONNECTIONS_CREATED, CONNECTIONS_CLOSED, CONNECTION_ACCEPT_THROTTLE_TIME):
            try:
                metric.remove(self.listener)
            except KeyError:
                pass


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000
