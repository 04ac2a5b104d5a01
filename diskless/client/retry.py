"""The client's one retry loop: run an attempt until it succeeds, fails for good, or time is up.

Whether an error is worth another attempt is the error's own business, as in aiokafka: its
`retriable` class attribute (errors.py), narrowed by the caller where an error code is an
answer rather than a transient state. Between attempts the loop sleeps `retry_backoff_ms`,
doubling up to `retry_backoff_max_ms` (1 s, as every loop here did); it gives up, re-raising
the last error (or what `on_deadline` makes of it), when the next sleep would pass the
deadline. `on_retry` runs before each sleep: refresh metadata, forget a coordinator.

Used by one task at a time per call; holds no state between calls.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from .errors import KafkaError

T = TypeVar("T")


def is_retriable(error: KafkaError) -> bool:
    return error.retriable


async def retrying(
    attempt: Callable[[], Awaitable[T]],
    *,
    retry_backoff_ms: int,
    timeout_ms: int | None = None,
    deadline: float | None = None,
    retriable: Callable[[KafkaError], bool] = is_retriable,
    on_retry: Callable[[KafkaError], Awaitable[None] | None] | None = None,
    on_deadline: Callable[[KafkaError], BaseException] | None = None,
    retry_backoff_max_ms: int = 1000,
) -> T:
    """The result of the first `attempt()` that does not raise a retriable `KafkaError`.

    Give either `timeout_ms` (from now) or `deadline` (a `time.monotonic()` value).
    """
    if deadline is None:
        assert timeout_ms is not None, "retrying() needs timeout_ms or deadline"
        deadline = time.monotonic() + timeout_ms / 1000
    backoff = retry_backoff_ms / 1000
    backoff_max = retry_backoff_max_ms / 1000
    while True:
        try:
            return await attempt()
        except KafkaError as exc:
            if not retriable(exc):
                raise
            if time.monotonic() + backoff > deadline:
                if on_deadline is not None:
                    raise on_deadline(exc) from exc
                raise
            if on_retry is not None:
                pending = on_retry(exc)
                if pending is not None:
                    await pending
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, backoff_max)
