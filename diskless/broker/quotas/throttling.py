"""Where a throttle time goes: into the response, and into how the connection waits (KIP-219).

A throttled response carries its throttle time (`throttle_time_ms`, the longest any quota
asked for). From the versions KIP-219 bumped (Kafka 2.0) on, the client keeps away from the
broker for that time itself: the broker answers at once and then reads nothing more from the
connection until the time is over (Kafka mutes the channel). Before them, the broker holds the
response back for the time. `CLIENT_THROTTLES_FROM` is Kafka's `shouldClientThrottle` per API:
the versions from which the client keeps away; an API it does not list is held back.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

CLIENT_THROTTLES_FROM = {
    0: 6, 1: 8, 2: 3, 3: 6, 8: 4, 9: 4, 10: 2, 11: 3, 12: 2, 13: 2, 14: 2, 15: 2, 16: 2, 18: 2,
    19: 3, 20: 2, 21: 1, 22: 1, 24: 1, 25: 1, 26: 1, 28: 1, 29: 1, 30: 1, 31: 1, 32: 2, 33: 1,
    35: 1, 37: 1, 42: 1, 43: 0, 44: 0, 45: 0, 46: 0, 47: 0, 50: 0, 51: 0,
}  # fmt: skip


def client_throttles(api_key: int, api_version: int) -> bool:
    """Whether the client of this response version keeps away by itself (else the broker delays
    it). An API Kafka does not say it of (its default, false) is delayed."""
    since = CLIENT_THROTTLES_FROM.get(api_key)
    return since is not None and api_version >= since


def throttle_of(response: Any) -> int:
    """The throttle time (ms) a response carries already (a handler's own quota, KIP-599)."""
    value = getattr(response, "throttle_time", None)
    return 0 if value is None else int(value.total_seconds() * 1000)


def with_throttle(response: Any, throttle_ms: int) -> Any:
    """The response carrying `throttle_ms` (unchanged when its version has no such field)."""
    if response is None or not hasattr(response, "throttle_time"):
        return response
    return dataclasses.replace(response, throttle_time=datetime.timedelta(milliseconds=throttle_ms))
