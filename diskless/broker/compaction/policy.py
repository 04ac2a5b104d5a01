"""What the log cleaner cleans, and the key -> last offset map it cleans with (sans-IO).

Kafka's LogCleanerManager.cleanableOffsets and grabFilthiestCompactedLog, and LogCleaner's
buildOffsetMap, as pure functions of a partition's segments, its cleaner checkpoint and now_ms:

    log_start_offset <= first_dirty_offset <= first_uncleanable_offset <= active segment's base

    clean section    [log start, first dirty)        cleaned before: one record per key there
    dirty section    [first dirty, first uncleanable) written since the last cleaning
    uncleanable      the active segment, anything at or above the high watermark, and every
                     segment from the first whose newest record is younger than
                     min.compaction.lag.ms

    dirty ratio      dirty bytes / (clean bytes + dirty bytes); a partition is cleaned when it
                     is above min.cleanable.dirty.ratio, or at once when the first dirty
                     segment's first record is older than max.compaction.lag.ms, or when a
                     tombstone kept by the last cleaning has passed delete.retention.ms

The offset map holds, for each key of the dirty section, the offset of its last record. Its
memory is bounded by log.cleaner.dedupe.buffer.size (shared by the cleaner threads): a key is
its 16-byte BLAKE2b digest, or itself when shorter (Kafka keeps a 16-byte MD5), and an entry
of a Python dict holding at most 16 bytes and an offset costs about 125 bytes, counted as
ENTRY_BYTES to leave room for the dict's growth. When the map is full the pass cleans only up to the first record it could
not take (`OffsetMap.end_offset`), as Kafka does, and the next pass starts there.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from hashlib import blake2b

from .config import CompactionRules

ENTRY_BYTES = 160


def key_digest(key: bytes) -> bytes:
    """The map's key for a record key: the key itself when shorter than a digest (no hashing,
    and no collision: every digest is 16 bytes long), else its 16-byte BLAKE2b digest."""
    return key if len(key) < 16 else blake2b(key, digest_size=16).digest()


@dataclass(frozen=True, slots=True)
class SegmentView:
    """What the policy needs of a local segment. `end_offset` is where the next segment starts
    (a cleaned segment may end before it: its last batches went)."""

    base_offset: int
    end_offset: int
    size_bytes: int
    max_timestamp: int  # newest record's timestamp, -1 when none
    first_timestamp: int  # first batch's first timestamp, -1 when empty
    active: bool


@dataclass(frozen=True, slots=True)
class CleaningPlan:
    """One partition's cleanable range, and whether it should be cleaned now."""

    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    dirty_bytes: int
    forced: bool  # max.compaction.lag.ms passed, or a kept tombstone's delete.retention.ms

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0

    def should_clean(self, rules: CompactionRules) -> bool:
        if self.first_dirty_offset >= self.first_uncleanable_offset:
            return self.forced and self.clean_bytes > 0  # tombstones to drop from the clean section
        return self.forced or self.dirty_ratio > rules.min_cleanable_dirty_ratio


def plan(
    segments: Sequence[SegmentView], *, checkpoint: int | None, log_start_offset: int, high_watermark: int,
    rules: CompactionRules, now_ms: int, tombstone_horizon_ms: int | None = None,
) -> CleaningPlan:
    """The cleanable range of a partition whose segments (in offset order, the last active)
    are `segments`. `checkpoint` is where the last cleaning stopped (None: never cleaned);
    `tombstone_horizon_ms` when the oldest tombstone the last cleaning kept may go."""
    log_end = segments[-1].end_offset if segments else log_start_offset
    first_dirty = checkpoint if checkpoint is not None and log_start_offset <= checkpoint <= log_end else log_start_offset
    uncleanable = min(high_watermark, segments[-1].base_offset if segments else log_start_offset)
    for segment in segments:
        if segment.active or segment.base_offset >= uncleanable:
            break
        if segment.end_offset > first_dirty and segment.max_timestamp > now_ms - rules.min_compaction_lag_ms:
            uncleanable = max(first_dirty, segment.base_offset)  # too young to compact, and all after it
            break
    first_dirty = min(first_dirty, uncleanable)
    clean_bytes = dirty_bytes = 0
    first_dirty_timestamp = -1
    for segment in segments:
        if segment.active or segment.base_offset >= uncleanable:
            break
        if segment.end_offset <= first_dirty:
            clean_bytes += segment.size_bytes
        else:
            dirty_bytes += segment.size_bytes
            if first_dirty_timestamp < 0:
                first_dirty_timestamp = segment.first_timestamp
    forced = dirty_bytes > 0 and first_dirty_timestamp >= 0 and now_ms - first_dirty_timestamp > rules.max_compaction_lag_ms
    if tombstone_horizon_ms is not None and now_ms >= tombstone_horizon_ms:
        forced = True
    return CleaningPlan(first_dirty, uncleanable, clean_bytes, dirty_bytes, forced)


def segments_to_clean(segments: Sequence[SegmentView], end_offset: int) -> list[SegmentView]:
    """The segments one pass rewrites: every non-active segment that starts below `end_offset`
    (the offset map's end; the clean section is cleaned again with the new map, as in Kafka)."""
    return [s for s in segments if not s.active and s.base_offset < end_offset]


class OffsetMap:
    """Key digest -> offset of the key's last record, at most `capacity` keys (Kafka's
    SkimpyOffsetMap). Filled in offset order; `end_offset` is the first offset it does not
    cover. Not shared between tasks."""

    __slots__ = ("_map", "_latest", "capacity", "start_offset", "end_offset", "full")

    def __init__(self, capacity: int, start_offset: int) -> None:
        self._map: dict[bytes, int] = {}
        self._latest: list[int] | None = None  # the map's offsets, sorted: built at the first latest_between
        self.capacity = max(1, capacity)
        self.start_offset = start_offset
        self.end_offset = start_offset
        self.full = False

    @classmethod
    def for_buffer(cls, dedupe_buffer_bytes: int, start_offset: int) -> OffsetMap:
        return cls(dedupe_buffer_bytes // ENTRY_BYTES, start_offset)

    def __len__(self) -> int:
        return len(self._map)

    def get(self, digest: bytes) -> int | None:
        return self._map.get(digest)

    def latest_between(self, first: int, last: int) -> int:
        """How many keys have their last record in [first, last]: within [start_offset,
        end_offset), where every keyed record went through the map, the records a cleaning
        keeps there (a batch with none goes without a walk of its records)."""
        if self._latest is None:
            self._latest = sorted(self._map.values())
        return bisect_right(self._latest, last) - bisect_left(self._latest, first)

    def add_records(self, records: Iterable[tuple[int, bytes | None]]) -> bool:
        """Take (offset, key) pairs in offset order; return False (and stop) at the first new
        key that does not fit: `end_offset` is then that record's offset. Records without a
        key are passed over (the cleaner drops them, as Kafka does)."""
        if self.full:
            return False
        self._latest = None
        entries, capacity = self._map, self.capacity
        end = self.end_offset
        for offset, key in records:  # the hot loop of a pass: key_digest inlined, end kept local
            if key is not None:
                digest = key if len(key) < 16 else blake2b(key, digest_size=16).digest()
                if len(entries) >= capacity and digest not in entries:
                    self.full = True
                    self.end_offset = offset
                    return False
                entries[digest] = offset
            end = offset + 1
        self.end_offset = end
        return True

    def cover_to(self, offset: int) -> None:
        """Everything below `offset` was read (a batch's trailing offsets, a segment's tail gap)."""
        if not self.full and offset > self.end_offset:
            self.end_offset = offset
