"""Named deadlines without a clock: the sans-IO stand-in for Kafka's coordinator timer.

Scheduling a key again replaces its deadline, as Kafka's `timer.schedule(key, ...)` does.
`pop_due(now_ms, before_seq)` hands out due timers earliest first, but only those scheduled
before `before_seq` (the sequence number read when a tick began): a timer that a firing
timer schedules for `now_ms` or earlier fires on the next tick, so one tick always ends.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Timer:
    key: Hashable
    deadline_ms: int
    seq: int
    payload: Any


class Timers:
    def __init__(self) -> None:
        self._by_key: dict[Hashable, Timer] = {}
        self._heap: list[tuple[int, int, Hashable]] = []  # stale entries are skipped lazily
        self._seq = 0

    @property
    def seq(self) -> int:
        return self._seq

    def schedule(self, key: Hashable, deadline_ms: int, payload: Any = None) -> None:
        self._seq += 1
        self._by_key[key] = Timer(key, deadline_ms, self._seq, payload)
        heapq.heappush(self._heap, (deadline_ms, self._seq, key))

    def cancel(self, key: Hashable) -> None:
        self._by_key.pop(key, None)

    def get(self, key: Hashable) -> Timer | None:
        return self._by_key.get(key)

    def __len__(self) -> int:
        return len(self._by_key)

    def cancel_where(self, matches: Callable[[Hashable], bool]) -> None:
        for key in [key for key in self._by_key if matches(key)]:
            del self._by_key[key]

    def clear(self) -> None:
        self._by_key.clear()
        self._heap.clear()

    def next_deadline_ms(self) -> int | None:
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: int, before_seq: int) -> Timer | None:
        """Remove and return the earliest timer due at `now_ms` scheduled at or before `before_seq`."""
        self._drop_stale()
        deferred: list[tuple[int, int, Hashable]] = []
        found: Timer | None = None
        while self._heap and self._heap[0][0] <= now_ms:
            entry = heapq.heappop(self._heap)
            timer = self._by_key.get(entry[2])
            if timer is None or timer.seq != entry[1]:
                continue
            if timer.seq > before_seq:
                deferred.append(entry)
                continue
            del self._by_key[timer.key]
            found = timer
            break
        for entry in deferred:
            heapq.heappush(self._heap, entry)
        return found

    def _drop_stale(self) -> None:
        heap = self._heap
        while heap:
            deadline_ms, seq, key = heap[0]
            timer = self._by_key.get(key)
            if timer is not None and timer.seq == seq:
                return
            heapq.heappop(heap)
