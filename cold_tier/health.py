"""Whether an object store answers, as its adapter sees it, and waking whoever waits for it.

A store is *unreachable* from the first request that got no answer at all (connection refused
or reset, connect or read timeout, a body cut short) until the next request or probe that got
any answer, an error answer included: a store that says 503 or AccessDenied is reachable, and
whoever sent the request logs that answer. Callers are told of the two transitions, by a line
to log:

- reachable -> unreachable: one WARNING naming the store, the request and what failed, at the
  moment it happens (not after the adapter's retries run out, which behind a black hole takes
  its attempts times the read timeout); while unreachable, one reminder per
  `reminder_interval_ms` with the count of failed requests;
- unreachable -> reachable: one INFO line saying how long it was away; every task waiting in
  `wait_answered` (a retry's back-off) wakes at once, so a backlog does not sit out the rest of
  its back-off once the store answers again.

The decisions are plain methods taking `now_ms`; only `wait_answered` awaits. Used from the one
event loop the store belongs to (the event is created on first wait, on that loop).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

REMINDER_INTERVAL_MS = 30_000


class StoreHealth:
    def __init__(self, name: str, *, reminder_interval_ms: int = REMINDER_INTERVAL_MS) -> None:
        self.name = name  # how log lines name the store: "s3://bucket/prefix/ at http://host:port"
        self.reminder_interval_ms = reminder_interval_ms
        self.unreachable_since_ms: int | None = None
        self.failed_requests = 0  # requests without an answer since unreachable_since_ms
        self.recoveries = 0  # unreachable -> reachable transitions so far
        self._last_warning_ms = 0
        self._answered: asyncio.Event | None = None

    @property
    def reachable(self) -> bool:
        return self.unreachable_since_ms is None

    def no_answer(self, what: str, reason: str, now_ms: int) -> str | None:
        """A request (`what`: "put of 'key'") got no answer; the WARNING line to log, if any."""
        self.failed_requests += 1
        if self.unreachable_since_ms is None:
            self.unreachable_since_ms = self._last_warning_ms = now_ms
            return f"object store {self.name} does not answer: {what} failed: {reason}; retrying, and probing until it answers"
        if now_ms - self._last_warning_ms >= self.reminder_interval_ms:
            self._last_warning_ms = now_ms
            away_s = (now_ms - self.unreachable_since_ms) / 1000
            return (f"object store {self.name} still does not answer after {away_s:.0f} s "
                    f"({self.failed_requests} request(s) failed); last: {what}: {reason}")  # fmt: skip
        return None

    def answered(self, now_ms: int) -> str | None:
        """A request got an answer; the INFO line to log if the store was unreachable until now."""
        if self.unreachable_since_ms is None:
            return None
        away_s = (now_ms - self.unreachable_since_ms) / 1000
        line = f"object store {self.name} answers again after {away_s:.1f} s ({self.failed_requests} request(s) failed)"
        self.unreachable_since_ms = None
        self.failed_requests = 0
        self.recoveries += 1
        if self._answered is not None:
            self._answered.set()
            self._answered = None
        return line

    async def wait_answered(self, timeout_s: float) -> None:
        """Sleep `timeout_s`, or less if the store is unreachable and answers again meanwhile."""
        if timeout_s <= 0:
            return
        if self.reachable:
            await asyncio.sleep(timeout_s)
            return
        if self._answered is None:
            self._answered = asyncio.Event()
        try:
            await asyncio.wait_for(self._answered.wait(), timeout_s)
        except TimeoutError:
            pass


def health_of(store: Any) -> StoreHealth | None:
    """The store's `StoreHealth`, if its adapter keeps one (the S3 adapter does; the local
    directory, and stores wrapped by tests, do not)."""
    health = getattr(store, "health", None)
    return health if isinstance(health, StoreHealth) else None


def retry_wait(store: Any, delay_s: float) -> Awaitable[None]:
    """A retry's back-off after a failed call to `store`: `delay_s`, cut short when the store
    was unreachable and answers again."""
    health = health_of(store)
    return asyncio.sleep(delay_s) if health is None else health.wait_answered(delay_s)
