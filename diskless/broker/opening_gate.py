"""Requests for partitions this broker is opening wait for them, released in arrival order.

A new leader rebuilds a partition's tail before serving it (from the bucket: a fraction of a
second, more after a long tail). Told NOT_LEADER_OR_FOLLOWER meanwhile, a client refreshes its
metadata, finds this broker again, is refused again and backs off longer each time (librdkafka
doubles its backoff up to retry.backoff.max.ms, 1 s), so it comes back up to a second after
the partition opened. Held instead, its request goes on the moment the partition opens.

Order matters: a connection's Produce requests are appended in request order (server.py), so
a held request must not be overtaken by a later one that finds its partition already open.
Waiters are released strictly in arrival order, and while any waits or has been released but
not yet resumed, a newcomer queues behind it, even for a partition that is open.

Only the event-loop task uses this class.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable

Key = tuple[str, int]  # (topic, partition)


class OpeningGate:
    def __init__(self) -> None:
        self._opening: set[Key] = set()
        self._waiters: deque[tuple[frozenset[Key], asyncio.Future[None]]] = deque()
        self._resuming = 0  # released, not yet run on

    def begin(self, keys: Iterable[Key]) -> None:
        """These partitions are being opened here from now on."""
        self._opening.update(keys)

    def end(self, keys: Iterable[Key]) -> None:
        """These partitions are open (or failed to open, or are no longer led here)."""
        self._opening.difference_update(keys)
        self._release()

    async def until_open(self, keys: Iterable[Key], timeout_s: float) -> None:
        """Return once none of `keys` is being opened and every request held before this one
        went on, or after `timeout_s` (the request is then answered as things stand). Returns
        at once, without yielding to the loop, when nothing is held."""
        wanted = frozenset(keys)
        if not self._waiters and not self._resuming and not wanted & self._opening:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append((wanted, waiter))
        self._release()
        try:
            async with asyncio.timeout(timeout_s):
                await waiter
        except TimeoutError:
            pass
        finally:
            if waiter.done() and not waiter.cancelled():
                self._resuming -= 1
            else:
                self._waiters = deque(w for w in self._waiters if w[1] is not waiter)
                waiter.cancel()
                self._release()  # a head that gave up may have held others back

    @property
    def held(self) -> int:
        return len(self._waiters)

    def _release(self) -> None:
        while self._waiters and not self._waiters[0][0] & self._opening:
            _, waiter = self._waiters.popleft()
            self._resuming += 1
            waiter.set_result(None)
