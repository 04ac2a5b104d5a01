"""Aligned chunks of immutable objects, and the bounded LRU cache that holds them. Pure.

A remote .log object of `size_bytes` bytes is read in aligned chunks of `chunk_bytes` (C):

    chunk k = object[k*C : min((k+1)*C, size_bytes)]      for 0 <= k < ceil(size_bytes / C)

Alignment makes every reader of an object ask for the same ranges, so one cached (or
in-flight) GET serves them all whatever offsets they start at; and since committed objects are
never modified, a cached chunk never goes stale: it can only become unreachable when its
segment is deleted (drop it then, `LruCache.discard_where`).

`prefetch_targets` decides which chunks a sequential reader needs next: the ones after the
last chunk it touched, continuing into the following segments of the catalogue when a segment
ends (Kafka's remote fetch reads one segment per request; the consumer's next fetch starts at
the next segment's first batch).

Nothing here awaits or locks: the reader that uses it runs on one event loop.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, Protocol, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Sized(Protocol):
    @property
    def size_bytes(self) -> int: ...


def chunk_of(position: int, chunk_bytes: int) -> int:
    """The chunk holding byte `position`."""
    return position // chunk_bytes


def chunk_count(size_bytes: int, chunk_bytes: int) -> int:
    return -(-size_bytes // chunk_bytes)


def chunk_span(chunk: int, chunk_bytes: int, size_bytes: int) -> tuple[int, int]:
    """The [start, end) byte range of `chunk` in an object of `size_bytes`."""
    if not 0 <= chunk < chunk_count(size_bytes, chunk_bytes):
        raise ValueError(f"chunk {chunk} is outside an object of {size_bytes} bytes in {chunk_bytes}-byte chunks")
    start = chunk * chunk_bytes
    return start, min(start + chunk_bytes, size_bytes)


def chunks_covering(start: int, end: int, chunk_bytes: int) -> range:
    """The chunks that hold the bytes [start, end); empty when the range is."""
    if end <= start:
        return range(0)
    return range(start // chunk_bytes, (end - 1) // chunk_bytes + 1)


def join_range(
    parts: Sequence[bytes], first_chunk: int, start: int, end: int, chunk_bytes: int
) -> bytes | memoryview:
    """The bytes [start, end) of an object, given the whole consecutive chunks `parts` that
    begin with chunk `first_chunk` and cover the range. A view when one chunk holds it all."""
    base = first_chunk * chunk_bytes
    if not parts or start < base or end > base + sum(len(part) for part in parts):
        raise ValueError(f"chunks {first_chunk}..+{len(parts)} do not cover [{start}, {end})")
    if len(parts) == 1:
        return memoryview(parts[0])[start - base : end - base]
    last_base = base + (len(parts) - 1) * chunk_bytes
    pieces = [memoryview(parts[0])[start - base :], *parts[1:-1], memoryview(parts[-1])[: end - last_base]]
    return b"".join(pieces)


def prefetch_targets(
    segments: Sequence[Sized], at: int, after_chunk: int, count: int, chunk_bytes: int
) -> list[tuple[int, int]]:
    """The next `count` chunks after chunk `after_chunk` of `segments[at]`, as (segment
    index, chunk) pairs, crossing into `segments[at + 1:]` (skipping empty ones) when a
    segment has no more chunks."""
    targets: list[tuple[int, int]] = []
    chunk = after_chunk + 1
    while count > len(targets) and at < len(segments):
        last = chunk_count(segments[at].size_bytes, chunk_bytes)
        while chunk < last and len(targets) < count:
            targets.append((at, chunk))
            chunk += 1
        at += 1
        chunk = 0
    return targets


class LruCache(Generic[K, V]):
    """A least-recently-used cache bounded by total weight (`weigh(value)`: bytes for chunks,
    1 for index entries). A value heavier than the whole capacity is not kept at all.
    Not thread-safe; meant for one event loop."""

    def __init__(self, capacity: int, weigh: Callable[[V], int] = lambda value: 1) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self._capacity = capacity
        self._weigh = weigh
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._weight = 0

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def weight(self) -> int:
        return self._weight

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def get(self, key: K) -> V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: K, value: V) -> None:
        self.discard(key)
        weight = self._weigh(value)
        if weight > self._capacity:
            return
        self._entries[key] = (value, weight)
        self._weight += weight
        while self._weight > self._capacity:
            _, (_, evicted) = self._entries.popitem(last=False)
            self._weight -= evicted

    def discard(self, key: K) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._weight -= entry[1]

    def discard_where(self, predicate: Callable[[K], bool]) -> int:
        """Drop every entry whose key matches; return how many."""
        doomed = [key for key in self._entries if predicate(key)]
        for key in doomed:
            self.discard(key)
        return len(doomed)

    def clear(self) -> None:
        self._entries.clear()
        self._weight = 0
