"""Compaction in the bucket: the cleaned local copies of a tiered compacted partition take the
place of the segments uploaded as written.

A tiered compacted partition keeps its local copies, and the cleaner cleans a segment only once
the bucket holds it (leader.cleanable_end_offset), so the bucket keeps each segment as
written until this module replaces it. After every cleaner round, for each such partition
this broker leads:

    1. `plan_rewrites` (sans-IO) finds the bucket segments whose local copies the cleaner has
       changed: the local segments covering exactly a bucket segment's offsets hold fewer
       bytes than it. Consecutive bucket segments are grouped, up to segment.bytes of cleaned
       bytes, so small cleaned segments are merged: a group is one rewrite when it holds a
       changed segment.
    2. a rewrite concatenates the local copies (their descriptors opened first, so a retention
       that deletes one meanwhile does not change what is read) into a scratch segment under
       the partition's directory, whose indexes are rebuilt as a cleaned segment's are;
    3. it is catalogued `uploading` (RemoteLog.begin_rewrite), uploaded with a new upload id,
       the same base offset and the replaced segments' last offset, its commit object last;
       the transaction indexes of the replaced segments, concatenated, less the transactions
       whose abort markers the cleaner removed, and the producer snapshot of the last one go
       with it;
    4. one fenced store write swaps it in (RemoteLog.replace): the replaced rows become
       `deleting`, the new one `committed`, and the store forgets the transactions whose
       markers went (the leader too, in the same event-loop step as its catalogue changes).
       The replaced commit objects are deleted at once, their data objects after
       file.delete.delay.ms (RemoteLog.collect_replaced, from the leader's retention pass),
       so fetches and Spark jobs that found them finish on them.

A bucket reader between 3 and 4 sees the old and the new commit objects: both start at the
same base offset, so the layout's overlap resolution picks one whole set (the old segments or
the copy), each complete. A crash before 4 leaves an `uploading` row overlapping committed
ones, which RemoteLog.load removes with its objects; a crash after 4 leaves `deleting` rows,
whose objects load deletes. Only a partition's leader rewrites it, and every store write is
fenced by its leader epoch.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cold_tier.errors import ObjectNotFound
from cold_tier.layout import CommittedSegment
from cold_tier.segments import upload_committed
from hot_tier import SegmentInfo
from hot_tier.records.transactions import AbortedTxn, CorruptTxnIndex, decode_txn_index, encode_txn_index
from hot_tier.scan import first_timestamp, scan_batches
from hot_tier.segment import TRUST_ALL, LogSegment

from . import metrics

log = logging.getLogger(__name__)

SCRATCH_DIRECTORY = "bucket-cleaning"
MAX_RELATIVE_OFFSET = 2**31 - 1  # an index entry's offset is 4 bytes relative to the base
_COPY_CHUNK_BYTES = 4 * 2**20


@dataclass(frozen=True, slots=True)
class BucketRewrite:
    """Consecutive bucket segments and the local segments that cover exactly their offsets."""

    replaced: tuple[CommittedSegment, ...]
    local: tuple[SegmentInfo, ...]

    @property
    def base_offset(self) -> int:
        return self.replaced[0].base_offset

    @property
    def last_offset(self) -> int:
        return self.replaced[-1].last_offset

    @property
    def old_bytes(self) -> int:
        return sum(s.size_bytes for s in self.replaced)

    @property
    def new_bytes(self) -> int:
        return sum(s.size_bytes for s in self.local)


def plan_rewrites(
    remote: Sequence[CommittedSegment], local: Sequence[SegmentInfo], max_bytes: int, cleaned: Collection[int] = ()
) -> list[BucketRewrite]:
    """The rewrites that bring the bucket up to the cleaned local copies (see the module
    header): those of a size other than their bucket segments', or named in `cleaned` (base
    offsets of copies known rewritten: stamping a delete horizon may keep a batch's size)."""
    at = {s.base_offset: i for i, s in enumerate(local)}
    groups: list[list[tuple[CommittedSegment, tuple[SegmentInfo, ...]]]] = []
    current: list[tuple[CommittedSegment, tuple[SegmentInfo, ...]]] = []
    current_bytes = 0
    for segment in remote:
        first, end = at.get(segment.base_offset), at.get(segment.next_offset)
        cover = tuple(local[first:end]) if first is not None and end is not None else ()
        if not cover or any(s.is_active for s in cover):
            groups.append(current)
            current, current_bytes = [], 0
            continue
        size = sum(s.size_bytes for s in cover)
        contiguous = bool(current) and current[-1][0].next_offset == segment.base_offset
        fits = current_bytes + size <= max_bytes and bool(current) and segment.last_offset - current[0][0].base_offset <= MAX_RELATIVE_OFFSET
        if not (contiguous and fits):
            groups.append(current)
            current, current_bytes = [], 0
        current.append((segment, cover))
        current_bytes += size
    groups.append(current)
    rewrites = []
    for group in groups:
        changed = any(
            segment.size_bytes != sum(s.size_bytes for s in cover) or any(s.base_offset in cleaned for s in cover) for segment, cover in group
        )  # fmt: skip
        if group and changed:
            rewrites.append(BucketRewrite(tuple(s for s, _ in group), tuple(s for _, cover in group for s in cover)))
    return rewrites


async def clean_bucket(leader: Any, now_ms: int) -> int:
    """Run the rewrites `leader`'s bucket needs now; return how many were swapped in."""
    remote = leader.remote
    config = leader.log_config
    rewrites = plan_rewrites(remote.segments, leader.local_segments, config.segment_bytes)
    swapped = 0
    for planned in rewrites:
        if leader.closed:
            break
        swapped += await rewrite(leader, planned, now_ms)
    return swapped


async def rewrite(leader: Any, planned: BucketRewrite, now_ms: int) -> bool:
    """Upload the concatenation of `planned.local` in place of `planned.replaced` (steps 2 to 4
    of the module header); False when a source file went meanwhile."""
    remote, epoch = leader.remote, leader.leader_epoch
    bucket = remote.storage.bucket
    scratch = leader.dir / SCRATCH_DIRECTORY
    config = leader.log_config
    try:
        copy = await asyncio.to_thread(_build_copy, scratch, planned, config.index_interval_bytes, config.segment_index_bytes)
    except FileNotFoundError:  # a local segment went meanwhile (retention, DeleteRecords)
        await asyncio.to_thread(shutil.rmtree, scratch, True)
        return False
    try:
        carried, snapshot = await _carried_objects(bucket, planned.replaced)
        known = leader.txns.aborted_with_markers_in(planned.base_offset, planned.last_offset + 1)
        txn_index, forgotten = await asyncio.to_thread(_kept_aborts, carried, known, copy.info)
        segment = await remote.begin_rewrite(
            base_offset=planned.base_offset, last_offset=planned.last_offset, base_timestamp=copy.base_timestamp,
            max_timestamp=copy.info.max_timestamp, size_bytes=copy.info.size_bytes, leader_epoch=epoch,
        )  # fmt: skip
        try:
            await upload_committed(
                bucket, segment, log_path=copy.info.log_path, index_path=copy.info.index_path,
                timeindex_path=copy.info.timeindex_path, txn_index=txn_index, producer_snapshot=snapshot,
            )  # fmt: skip
            rules = leader.rules.compaction
            await remote.replace(
                segment, list(planned.replaced), epoch, delete_at_ms=now_ms + rules.file_delete_delay_ms,
                forget_aborted=forgotten, on_swap=lambda: leader.forget_aborted(forgotten),
            )  # fmt: skip
        except Exception:
            try:
                await remote.abandon_rewrite(segment, epoch)
                if any(s.commit_key == segment.commit_key for s in remote.segments):  # swapped after all
                    leader.forget_aborted(forgotten)
            except Exception as exc:  # the row stays `uploading`: the next load removes it
                log.warning("%s-%d: could not remove an unfinished bucket rewrite: %s", leader.topic, leader.index, exc)
            raise
        # Cancelled (the broker stops): the store says whether the swap happened; the next
        # load keeps the copy or removes it.
    finally:
        await asyncio.to_thread(shutil.rmtree, scratch, True)
    metrics.observe_bucket_rewrite(leader.topic, len(planned.replaced), planned.old_bytes - copy.info.size_bytes)
    log.info(
        "%s-%d: bucket segments %d-%d compacted: %d segment(s) of %d bytes replaced by one of %d bytes",
        leader.topic, leader.index, planned.base_offset, planned.last_offset, len(planned.replaced), planned.old_bytes,
        copy.info.size_bytes,
    )  # fmt: skip
    return True


@dataclass(frozen=True, slots=True)
class _Copy:
    info: SegmentInfo
    base_timestamp: int


def _build_copy(scratch: Path, rewrite: BucketRewrite, index_interval_bytes: int, segment_index_bytes: int) -> _Copy:
    """The local copies, concatenated into one segment under `scratch`, indexes rebuilt."""
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    sources: list[tuple[int, int]] = []
    base = rewrite.base_offset
    try:
        for s in rewrite.local:  # all opened first: FileNotFoundError (see the caller) before a byte is copied
            sources.append((os.open(s.log_path, os.O_RDONLY | os.O_CLOEXEC), s.size_bytes))
        with open(scratch / f"{base:020d}.log", "wb") as out:
            for fd, size in sources:
                position = 0
                while position < size:
                    chunk = os.pread(fd, min(_COPY_CHUNK_BYTES, size - position), position)
                    if not chunk:
                        raise OSError(f"a local segment of offset {base} ends before its {size} bytes")
                    out.write(chunk)
                    position += len(chunk)
    finally:
        for fd, _ in sources:
            os.close(fd)
    segment = LogSegment.load(scratch, base, index_interval_bytes=index_interval_bytes, segment_index_bytes=segment_index_bytes, now_ms=0)
    try:
        cut = segment.recover(TRUST_ALL, offset_gaps=True)  # validated from byte 0, indexes built
        if cut:
            raise OSError(f"the cleaned copies of offsets {base}-{rewrite.last_offset} hold {cut} bytes that are not whole batches")
        segment.flush()
        info = SegmentInfo(
            segment.base_offset, segment.next_offset, segment.size_bytes, segment.max_timestamp,
            segment.log_path, segment.index_path, segment.timeindex_path, False,
        )  # fmt: skip
    finally:
        segment.close()
    return _Copy(info, first_timestamp(info.log_path))


async def _carried_objects(bucket: Any, replaced: Sequence[CommittedSegment]) -> tuple[bytes, bytes | None]:
    """What the copy carries over: the replaced segments' transaction indexes, concatenated
    (`_kept_aborts` drops the entries whose markers the cleaner removed), and the last one's
    producer snapshot."""
    parts = []
    for segment in replaced:
        try:
            parts.append(await bucket.get(segment.txn_index_key))
        except ObjectNotFound:  # uploaded before transaction indexes existed, or none
            pass
    try:
        snapshot: bytes | None = await bucket.get(replaced[-1].producer_snapshot_key)
    except ObjectNotFound:
        snapshot = None
    return b"".join(parts), snapshot


def _kept_aborts(txn_index: bytes, known: Sequence[AbortedTxn], copy: SegmentInfo) -> tuple[bytes, list[int]]:
    """The copy's `.txnindex`: of the aborted transactions the replaced segments' indexes name,
    and those `known` to the leader with a marker in the copy's range (a segment uploaded
    before transaction indexes existed has none), those whose abort marker the copy holds;
    and the marker offsets of the others, which the cleaner removed with the last of their
    transactions' data (rewrite.TransactionMarkers): the store and the leader forget them.
    A transaction index that does not decode is carried as it is."""
    try:
        entries = {a.last_offset: a for a in [*known, *decode_txn_index(txn_index)]}
    except CorruptTxnIndex as exc:
        log.warning("%s: carried as it is: %s", copy.log_path, exc)
        return txn_index, []
    if not entries:
        return txn_index, []
    fd = os.open(copy.log_path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        markers = {h.base_offset for h in scan_batches(fd, 0, copy.size_bytes) if h.is_control}
    finally:
        os.close(fd)
    kept = [entries[offset] for offset in sorted(entries) if offset in markers]
    return encode_txn_index(kept), sorted(offset for offset in entries if offset not in markers)
