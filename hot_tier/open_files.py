"""Which segments hold open files: a process-wide LRU, so descriptors do not grow with
partitions.

A segment opens its `.log` (and, while it appends index entries, its `.index` and `.timeindex`)
on first use and registers here; when more than `max_segments` segments hold files, the one
used least recently lets go of them (`LogSegment.release_files`) and opens them again on its
next use. Its `.log` file object is dropped rather than closed: a FileSlice being sent may still
hold it, and CPython closes the descriptor when the last reference goes (files.SegmentFile).
So a broker with tens of thousands of partitions holds at most about 3 x max_segments segment
descriptors, plus those of fetch responses in flight.

The default bound is an eighth of RLIMIT_NOFILE's soft limit at the time a file is opened
(so at most 3/8 of the descriptors go to segment files; the rest is left for connections),
at least 16 segments. Descriptors are a process resource, hence one table per process.
Only the event-loop task (the owner of every Log) calls it: no locks.
"""

from __future__ import annotations

import resource
from collections import OrderedDict
from typing import Protocol

FILES_PER_SEGMENT = 3  # .log, .index, .timeindex
MIN_SEGMENTS = 16


class HoldsFiles(Protocol):
    def release_files(self) -> None: ...


def default_max_segments() -> int:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 2**20
    return max(MIN_SEGMENTS, soft // 8)


class OpenSegments:
    """The LRU of segments holding open files. `max_segments` None: `default_max_segments()`."""

    def __init__(self, max_segments: int | None = None) -> None:
        self.max_segments = max_segments
        self._lru: OrderedDict[int, HoldsFiles] = OrderedDict()

    def __len__(self) -> int:
        return len(self._lru)

    def limit(self) -> int:
        return self.max_segments if self.max_segments is not None else default_max_segments()

    def max_descriptors(self) -> int:
        """Descriptors segment files may hold at most (not counting FileSlices in flight)."""
        return FILES_PER_SEGMENT * self.limit()

    def used(self, segment: HoldsFiles) -> None:
        """`segment` uses its files now: the most recently used. Cheap when already open."""
        key = id(segment)
        if key in self._lru:
            self._lru.move_to_end(key)
            return
        self._lru[key] = segment
        limit = self.limit()
        while len(self._lru) > limit:
            _key, oldest = self._lru.popitem(last=False)
            oldest.release_files()

    def forget(self, segment: HoldsFiles) -> None:
        """`segment` closed its files itself (close, delete, release)."""
        self._lru.pop(id(segment), None)


OPEN_SEGMENTS = OpenSegments()
