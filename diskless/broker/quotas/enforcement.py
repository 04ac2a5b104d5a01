"""The TCP shell's side of client quotas: what one request is charged, when, and the
throttle time its response carries (throttling.py says what the shell then does with it).

A Produce is charged as soon as it is read, before it is handled: the shell pipelines a
connection's Produce requests, and a producer over its rate must be held back from its next
one at once, not after the ones already read complete. A Fetch is charged its response's
records, and every request the event loop's time on it, once handled.

`request_percentage` needs that time. A handler is a coroutine that awaits (the bucket, the
store, a long poll), and only its steps between awaits are the broker's work: `on_loop`
drives the coroutine step by step and adds up the time of each, as Kafka counts a request's
time on its I/O threads and not its time in purgatory. Tasks the handler starts are not
counted. It costs a clock read per step, so it runs only for clients with a
request_percentage quota.
"""

from __future__ import annotations

import time
import types
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any

from diskless.wire import Request

from .client_quotas import ClientQuotas, charge_request, charge_response, user_of
from .entities import REQUEST_PERCENTAGE
from .throttling import throttle_of, with_throttle


@types.coroutine
def on_loop(coro: Coroutine[Any, Any, Any], spent_ns: list[int]) -> Generator[Any, Any, Any]:
    """Await `coro`, adding the time each of its steps takes to `spent_ns[0]`."""
    value: Any = None
    error: BaseException | None = None
    while True:
        start = time.perf_counter_ns()
        try:
            yielded = coro.send(value) if error is None else coro.throw(error)
        except StopIteration as stop:
            spent_ns[0] += time.perf_counter_ns() - start
            return stop.value
        except BaseException:
            spent_ns[0] += time.perf_counter_ns() - start
            raise
        spent_ns[0] += time.perf_counter_ns() - start
        try:
            value, error = (yield yielded), None
        except BaseException as exc:  # a cancellation (or anything thrown in) goes on to the handler
            value, error = None, exc


class Charge:
    """One request's charge to its client's quotas; `throttle_ms` is what it earned so far."""

    __slots__ = ("_client_id", "_clock", "_quotas", "_request", "_user", "throttle_ms")

    def __init__(self, quotas: ClientQuotas, request: Request, request_bytes: int, principal: str, clock: Callable[[], int]) -> None:
        self._quotas = quotas
        self._request = request
        self._user = user_of(principal)
        self._client_id = request.header.client_id or ""
        self._clock = clock
        self.throttle_ms = charge_request(quotas, request.header.api_key, self._user, self._client_id, request_bytes, clock())

    async def handled(self, handle: Callable[[Request], Awaitable[Any]]) -> Any:
        """The handler's response, charged, carrying the longest throttle time: what the
        handler set itself (controller mutations) or what the request earned."""
        spent_ns = [0]
        pending = handle(self._request)
        timed = self._quotas.has(REQUEST_PERCENTAGE) and self._quotas.bound(REQUEST_PERCENTAGE, self._user, self._client_id) is not None
        response = await (on_loop(pending, spent_ns) if timed else pending)  # type: ignore[arg-type]
        header = self._request.header
        earned = max(self.throttle_ms, charge_response(self._quotas, header.api_key, self._request.body, response, self._user, self._client_id, spent_ns[0], self._clock()))
        own = throttle_of(response)
        self.throttle_ms = max(earned, own)
        return with_throttle(response, earned) if earned > own else response
