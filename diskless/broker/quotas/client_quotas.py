"""Client quotas: which bound applies to a client, the rates measured against it, and the
throttle time a request earns (Kafka's ClientQuotaManager with its default quota callback,
KIP-13, KIP-55, KIP-124, KIP-599). Sans-IO: the caller passes the time; one owner, the event
loop.

Which quota applies. For a request of user U (the principal's name) and client id C, the
first entity configured with the quota's key, in Kafka's order of precedence:

    (user U, client-id C)  (user U, client-id default)  (user U)
    (user default, client-id C)  (user default, client-id default)  (user default)
    (client-id C)  (client-id default)

No such entity: no quota. Which clients share one measured rate follows from the entity
found, as in Kafka: an entity naming or defaulting both user and client id measures each
(U, C) apart; a user entity alone measures all of U's client ids together; a client-id
entity alone measures all users of client id C together.

What is measured: Produce requests' sizes against producer_byte_rate; the bytes of records in
consumers' Fetch responses against consumer_byte_rate; the time the event loop spent on a
request (its handler's steps, parsing excluded) as a percentage of one second against
request_percentage (Kafka's "percentage of one I/O thread"), for every API but those before
authentication (ApiVersions, SaslHandshake, SaslAuthenticate) and the broker-to-broker one
(WriteTxnMarkers); and partitions created or deleted (CreateTopics, CreatePartitions,
DeleteTopics) against controller_mutation_rate; and connections accepted from an address
against its IP entity's connection_creation_rate (KIP-612). Rates of clients idle for an hour
are forgotten (Kafka's inactive sensor expiry).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .entities import (
    CLIENT_ID,
    CONNECTION_CREATION_RATE,
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    IP,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
    Entity,
)
from .rate import Rate, TokenBucket

SENSOR_EXPIRY_MS = 3_600_000  # Kafka's InactiveSensorExpirationTimeSeconds
EXPIRY_CHECK_MS = 60_000

# Metric tags of a measured rate: (user, client id), "" where the entity does not split by it.
Tags = tuple[str, str]


@dataclass(frozen=True, slots=True)
class QuotaWindows:
    """quota.window.num, quota.window.size.seconds and their controller.* counterparts."""

    windows: int = 11
    window_ms: int = 1000
    controller_windows: int = 11
    controller_window_ms: int = 1000


def _precedence(user: str, client_id: str) -> tuple[tuple[Entity, Tags], ...]:
    both = (user, client_id)
    return (
        (((CLIENT_ID, client_id), (USER, user)), both),
        (((CLIENT_ID, None), (USER, user)), both),
        (((USER, user),), (user, "")),
        (((CLIENT_ID, client_id), (USER, None)), both),
        (((CLIENT_ID, None), (USER, None)), both),
        (((USER, None),), (user, "")),
        (((CLIENT_ID, client_id),), ("", client_id)),
        (((CLIENT_ID, None),), ("", client_id)),
    )


class ClientQuotas:
    def __init__(self, windows: QuotaWindows = QuotaWindows()) -> None:
        self.windows = windows
        self.configured: dict[Entity, dict[str, float]] = {}
        self._keys: frozenset[str] = frozenset()  # the quota keys some client entity has
        self._bounds: dict[tuple[str, str, str], tuple[float, Tags] | None] = {}
        self._rates: dict[tuple[str, Tags], Rate] = {}
        self._buckets: dict[Tags, TokenBucket] = {}
        self._ip_rates: dict[str, Rate] = {}
        self._expiry_checked_ms = 0

    def set_configured(self, quotas: Mapping[Entity, Mapping[str, float]]) -> None:
        self.configured = {entity: dict(values) for entity, values in quotas.items()}
        self._keys = frozenset(key for values in self.configured.values() for key in values)
        self._bounds.clear()

    def has(self, key: str) -> bool:
        """Whether any entity has a quota of `key` (nothing is measured for a key none has)."""
        return key in self._keys

    @property
    def active(self) -> bool:
        return bool(self._keys)

    def bound(self, key: str, user: str, client_id: str) -> tuple[float, Tags] | None:
        """The bound of `key` for this client and the tags of the rate it is measured on."""
        cache_key = (key, user, client_id)
        if cache_key in self._bounds:
            return self._bounds[cache_key]
        found = None
        for entity, tags in _precedence(user, client_id):
            values = self.configured.get(entity)
            if values is not None and key in values:
                found = (values[key], tags)
                break
        if len(self._bounds) > 100_000:
            self._bounds.clear()
        self._bounds[cache_key] = found
        return found

    def record(self, key: str, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Count `value` against the client's quota of `key`; the throttle time it earned."""
        if key not in self._keys:
            return 0
        found = self.bound(key, user, client_id)
        if found is None:
            return 0
        bound, tags = found
        rate = self._rates.get((key, tags))
        if rate is None:
            rate = self._rates[(key, tags)] = Rate(self.windows.windows, self.windows.window_ms)
        rate.record(value, now_ms)
        self._expire(now_ms)
        return rate.throttle_time_ms(bound, now_ms)

    def record_ip_connection(self, host: str, now_ms: int) -> int:
        """Count a connection accepted from `host` against its IP's connection_creation_rate
        (the IP's own entity, else the IP default); the throttle time, at most one window
        (Kafka's QuotaUtils.boundedThrottleTime for connections)."""
        if CONNECTION_CREATION_RATE not in self._keys:
            return 0
        values = self.configured.get(((IP, host),))
        if values is None or CONNECTION_CREATION_RATE not in values:
            values = self.configured.get(((IP, None),))
        if values is None or CONNECTION_CREATION_RATE not in values:
            return 0
        rate = self._ip_rates.get(host)
        if rate is None:
            rate = self._ip_rates[host] = Rate(self.windows.windows, self.windows.window_ms)
        rate.record(1.0, now_ms)
        self._expire(now_ms)
        throttle_ms = min(rate.throttle_time_ms(values[CONNECTION_CREATION_RATE], now_ms), self.windows.window_ms)
        if throttle_ms > 0:
            rate.record(-1.0, now_ms)  # as Kafka: a refused connection does not count, or a client retrying faster than its rate never gets in
        return throttle_ms

    def max_fetch_bytes(self, user: str, client_id: str) -> int | None:
        """The most a consumer's Fetch may return under its consumer_byte_rate: what its rate
        allows over all windows but the current one (Kafka's getMaxValueInQuotaWindow), so that
        one response cannot earn a throttle of hours. None: no quota."""
        found = self.bound(CONSUMER_BYTE_RATE, user, client_id) if CONSUMER_BYTE_RATE in self._keys else None
        if found is None:
            return None
        return max(1, int(found[0] * (self.windows.windows - 1) * self.windows.window_ms / 1000))

    # --- controller mutations (KIP-599) -----------------------------------------------------------

    def _bucket(self, user: str, client_id: str) -> tuple[float, TokenBucket] | None:
        if CONTROLLER_MUTATION_RATE not in self._keys:
            return None
        found = self.bound(CONTROLLER_MUTATION_RATE, user, client_id)
        if found is None:
            return None
        bound, tags = found
        bucket = self._buckets.get(tags)
        if bucket is None:
            bucket = self._buckets[tags] = TokenBucket(self.windows.controller_windows, self.windows.controller_window_ms)
        return bound, bucket

    def mutation_exceeded(self, user: str, client_id: str, now_ms: int) -> bool:
        """Whether a strict request (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+)
        must refuse its next topic with THROTTLING_QUOTA_EXCEEDED."""
        found = self._bucket(user, client_id)
        return found is not None and found[1].exceeded(found[0], now_ms)

    def record_mutation(self, user: str, client_id: str, partitions: int, now_ms: int) -> None:
        found = self._bucket(user, client_id)
        if found is not None:
            found[1].record(partitions, found[0], now_ms)

    def mutation_throttle_ms(self, user: str, client_id: str, now_ms: int) -> int:
        found = self._bucket(user, client_id)
        return 0 if found is None else found[1].throttle_time_ms(found[0], now_ms)

    # ---------------------------------------------------------------------------------------------

    def _expire(self, now_ms: int) -> None:
        if now_ms - self._expiry_checked_ms < EXPIRY_CHECK_MS:
            return
        self._expiry_checked_ms = now_ms
        for table in (self._rates, self._buckets, self._ip_rates):
            for key in [key for key, stat in table.items() if now_ms - stat.last_record_ms > SENSOR_EXPIRY_MS]:
                del table[key]

    @property
    def measured(self) -> int:
        """How many clients' rates are kept (for the admin endpoint and tests)."""
        return len(self._rates) + len(self._buckets) + len(self._ip_rates)


def user_of(principal: str) -> str:
    """The user entity name of a principal ("User:alice" -> "alice"), as Kafka's principal name."""
    return principal.split(":", 1)[1] if ":" in principal else principal


# --- what a request is charged --------------------------------------------------------------------

PRODUCE, FETCH = 0, 1
# Answered before authentication, or sent by brokers to brokers: no request quota (Kafka exempts
# these too).
REQUEST_QUOTA_EXEMPT = frozenset({17, 18, 27, 36})


def fetched_bytes(response: Any) -> int:
    """The bytes of records in a Fetch response (what consumer_byte_rate counts)."""
    return sum(len(p.records or b"") for t in response.responses for p in t.partitions)


def charge_request(quotas: ClientQuotas, api_key: int, user: str, client_id: str, request_bytes: int, now_ms: int) -> int:
    """Count a request as it is read (a Produce's size against producer_byte_rate); the throttle
    time it earned. Counted before it is handled, so that a pipelining producer is held back
    from its next request at once."""
    if api_key != PRODUCE:
        return 0
    return quotas.record(PRODUCER_BYTE_RATE, user, client_id, request_bytes, now_ms)


def charge_response(quotas: ClientQuotas, api_key: int, body: Any, response: Any, user: str, client_id: str, on_loop_ns: int, now_ms: int) -> int:
    """Count a handled request (a consumer's Fetch response against consumer_byte_rate, the
    event loop's time on it against request_percentage); the longest throttle time it earned."""
    throttle_ms = 0
    if api_key == FETCH and response is not None and getattr(body, "replica_id", -1) < 0:
        throttle_ms = quotas.record(CONSUMER_BYTE_RATE, user, client_id, fetched_bytes(response), now_ms)
    if api_key not in REQUEST_QUOTA_EXEMPT and quotas.has(REQUEST_PERCENTAGE):
        percent_seconds = on_loop_ns * 100 / 1e9
        throttle_ms = max(throttle_ms, quotas.record(REQUEST_PERCENTAGE, user, client_id, percent_seconds, now_ms))
    return throttle_ms


class MutationQuota:
    """One CreateTopics, CreatePartitions or DeleteTopics request's controller_mutation_rate
    (Kafka's Strict/PermissiveControllerMutationQuota): from the versions KIP-599 made strict
    (`strict`), a topic is refused with THROTTLING_QUOTA_EXCEEDED while the client's bucket is
    below zero; before them every topic is done and only throttled."""

    __slots__ = ("_client_id", "_clock", "_quotas", "_strict", "_user")

    def __init__(self, quotas: ClientQuotas, principal: str, client_id: str, strict: bool, clock: Callable[[], int]) -> None:
        self._quotas = quotas
        self._user = user_of(principal)
        self._client_id = client_id
        self._strict = strict
        self._clock = clock

    def exceeded(self) -> bool:
        return self._strict and self._quotas.mutation_exceeded(self._user, self._client_id, self._clock())

    def record(self, partitions: int) -> None:
        self._quotas.record_mutation(self._user, self._client_id, partitions, self._clock())

    def throttle_time(self) -> datetime.timedelta:
        return datetime.timedelta(milliseconds=self._quotas.mutation_throttle_ms(self._user, self._client_id, self._clock()))
