"""The acknowledged tail from write-ahead objects, decided from the bucket alone. Pure.

A broker writes every batch it appends into write-ahead objects (cold_tier/wal_format.py:
`wal~/N/TTTTTTTTTTTTTTTTTTTT-U.wal`, the batches, then an index of (topic, partition, base
offset, last offset, leader epoch, position, size) entries, then a 24-byte footer) before it
acknowledges it; a batch leaves them only once a committed segment holds it. Which objects
the metadata store committed is not in the bucket, so a reader with only the bucket decides
which batch holds each offset of a partition by these rules, in this order:

0. A batch of another topic of the same name is left out: one deleted since, whose objects
   still hold batches of other topics. Entries carry their topic's id, and the bucket holds
   the id of the topic that has the name now (`T/topic-id`); objects or topics from before
   topic ids are taken as they are.

1. Committed segments win: only offsets from the partition's bucket log end offset (the last
   committed segment's next offset) are taken from write-ahead objects; a batch that ends
   below it is skipped, and of a batch that straddles it only the records from it are read
   (the slice's `base_offset` is then that end, and no reader goes below it).
2. A higher leader epoch truncates a lower one, as Kafka's leader epoch cache does: once an
   epoch e began at offset S, batches of epochs below e that end at or after S are what a
   fenced leader wrote and never made durable; they are left out. The epoch's start is the
   lowest of its mark (`T/P/epochs/`, written by its leader when it took the partition:
   diskless/broker/wal/epoch_marks.py) and its batches still in the bucket, which include
   every batch above the segments (objects go only once segments hold all their batches).
3. Within one epoch, batches holding the same offsets (a broker that restarted on the same
   epoch and wrote its tail again) are resolved in favour of the object sealed later (its
   key's timestamp, then its upload id); an overlapping loser is left out whole.
4. From the bucket log end offset (or, for a partition with no committed segment, the first
   offset any batch holds), the winners are read while they are contiguous; the first gap
   ends the tail (an object of a later group commit that landed before an earlier one).

What this cannot tell without the store: a batch PUT whose commit is still in flight (it is
read, a few milliseconds early), and a fenced leader's batches in the moment between the new
leader taking the partition and its mark landing in the bucket. Consecutive winning batches of one
object become one `WalSlice`, read with one ranged GET; slices are picklable and travel to
Spark's workers inside `plan.BucketRange` tasks beside the segments.
"""

from __future__ import annotations

import bisect
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from cold_tier.wal_format import WalEntry


@dataclass(frozen=True, slots=True)
class WalBatchRef:
    """One batch of a partition in a write-ahead object: bytes [position, position + size_bytes)."""

    base_offset: int
    last_offset: int
    position: int
    size_bytes: int


@dataclass(frozen=True, slots=True)
class WalSlice:
    """Consecutive batches of one partition, in offset order, all in the object `key`. It
    yields their records from `base_offset` on: its first batch may start below the end of the
    piece before it (rule 1), and those offsets are that piece's, never the slice's."""

    key: str
    batches: tuple[WalBatchRef, ...]
    start_offset: int | None = None  # the end of the piece before it, when the first batch straddles it

    @property
    def base_offset(self) -> int:
        """The first offset it yields (readers and planning start it here, not at its first batch)."""
        first = self.batches[0].base_offset
        return first if self.start_offset is None else max(first, self.start_offset)

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def start_position(self) -> int:
        return min(b.position for b in self.batches)

    @property
    def end_position(self) -> int:
        return max(b.position + b.size_bytes for b in self.batches)


@dataclass(frozen=True, slots=True)
class WalCandidate:
    """An index entry of a write-ahead object, with what its key says about the object."""

    key: str
    sealed_ms: int
    upload_id: str
    entry: WalEntry

    @property
    def base_offset(self) -> int:
        return self.entry.base_offset

    @property
    def last_offset(self) -> int:
        return self.entry.last_offset


def resolve_wal_tail(
    candidates: Iterable[WalCandidate], bucket_log_end_offset: int | None, epoch_starts: Mapping[int, int] | None = None,
    topic_id: uuid.UUID | None = None,
) -> tuple[WalSlice, ...]:
    """The slices that hold a partition's offsets from `bucket_log_end_offset` on (None: the
    partition has no committed segment), by the rules of the module header; `epoch_starts`:
    the partition's epoch marks (leader epoch -> start offset); `topic_id`: the id of the
    topic that has the name now (None: unknown)."""
    entries = [
        c for c in candidates
        if c.entry.last_offset >= c.entry.base_offset and (topic_id is None or c.entry.topic_id in (None, topic_id))
    ]  # fmt: skip
    entries = _truncate_by_epoch(entries, epoch_starts or {})
    if not entries:
        return ()
    winners = _resolve_overlaps(entries)
    cursor = bucket_log_end_offset if bucket_log_end_offset is not None else winners[0].base_offset
    chain: list[tuple[WalCandidate, int]] = []  # with the offset it is read from
    for candidate in winners:
        if candidate.last_offset < cursor:
            continue  # rule 1: a committed segment (or an earlier winner) holds it
        if candidate.base_offset > cursor:
            break  # rule 4: a gap ends the tail
        chain.append((candidate, cursor))  # a batch straddling `cursor` is read from it only
        cursor = candidate.last_offset + 1
    return _slices(chain)


def _truncate_by_epoch(entries: Sequence[WalCandidate], marks: Mapping[int, int]) -> list[WalCandidate]:
    """Rule 2: drop batches of an epoch that end at or after the start of a higher epoch."""
    epoch_start: dict[int, int] = dict(marks)
    for c in entries:
        epoch = c.entry.leader_epoch
        epoch_start[epoch] = min(epoch_start.get(epoch, c.base_offset), c.base_offset)
    # The smallest start offset of any higher epoch, per epoch.
    cutoff: dict[int, int | None] = {}
    lowest: int | None = None
    for epoch in sorted(epoch_start, reverse=True):
        cutoff[epoch] = lowest
        lowest = epoch_start[epoch] if lowest is None else min(lowest, epoch_start[epoch])
    return [c for c in entries if (limit := cutoff[c.entry.leader_epoch]) is None or c.last_offset < limit]


def _resolve_overlaps(entries: Sequence[WalCandidate]) -> list[WalCandidate]:
    """Rule 3: the later object wins offsets two batches share; returned in offset order."""
    ranked = sorted(entries, key=lambda c: (c.entry.leader_epoch, c.sealed_ms, c.upload_id, -c.entry.position), reverse=True)
    starts: list[int] = []  # of the accepted batches, sorted, with their ends beside them
    accepted: list[WalCandidate] = []
    for candidate in ranked:
        slot = bisect.bisect_right(starts, candidate.last_offset)
        if slot and accepted[slot - 1].last_offset >= candidate.base_offset:
            continue  # overlaps the accepted batch that starts at or before its end
        starts.insert(slot, candidate.base_offset)
        accepted.insert(slot, candidate)
    return accepted


def _slices(chain: Sequence[tuple[WalCandidate, int]]) -> tuple[WalSlice, ...]:
    slices: list[WalSlice] = []
    run: list[WalBatchRef] = []
    key = None
    start: int | None = None
    for candidate, read_from in chain:
        if candidate.key != key and run:
            slices.append(WalSlice(key, tuple(run), start))  # type: ignore[arg-type]
            run = []
        key = candidate.key
        e = candidate.entry
        if not run:
            start = read_from if read_from > e.base_offset else None
        run.append(WalBatchRef(e.base_offset, e.last_offset, e.position, e.size_bytes))
    if run:
        slices.append(WalSlice(key, tuple(run), start))  # type: ignore[arg-type]
    return tuple(slices)
