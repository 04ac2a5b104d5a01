"""`RemoteLog`: one partition's committed segments in the bucket, its catalogue rows, its reads.

The catalogue is a list of `CommittedSegment`s in offset order, contiguous, mirrored by rows
of the metadata store. Its one writer is this object, called by the partition's leader (and,
for an upload in progress, by the uploader through the leader's remote log); every store write
carries the leader epoch the caller holds, so a broker that lost leadership is fenced.

Row life cycle, crash-safe in this order (see uploader.py for the objects):
`uploading` (before the first object is written) -> `committed` (after the commit object) ->
`deleting` (retention; before the commit object is deleted) -> removed (after the data). A
crash leaves `uploading` rows (committed at start-up if their commit object exists, else their
objects and rows go) and `deleting` rows (finished at start-up); `load` settles both.

Reads go through the broker-wide `RemoteLogReader` (cold_tier): chunk cache and prefetch are
shared by every partition. Only the event-loop task calls a RemoteLog.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cold_tier.layout import CommittedSegment, new_upload_id, parse_commit_key
from cold_tier.remote_log import RemoteLogReader
from cold_tier.segments import delete_segment
from cold_tier.store import ObjectStore
from metadata import InvalidRemoteSegmentTransition, MetadataStore, RemoteSegment, RemoteSegmentState

from .. import metrics

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RemoteStorage:
    """What every partition's remote log shares: the bucket, the catalogue's store, the reader."""

    bucket: ObjectStore
    store: MetadataStore
    reader: RemoteLogReader


class RemoteLog:
    def __init__(self, storage: RemoteStorage, topic: str, index: int) -> None:
        self._storage = storage
        self.topic = topic
        self.index = index
        self._segments: list[CommittedSegment] = []
        # The upload catalogued as `uploading` and not yet committed: a retry continues it
        # (same upload id, same row) instead of leaving a row and partial objects per try.
        self._upload: CommittedSegment | None = None
        # Segments a rewrite replaced (compaction/bucket.py), with when their data objects go:
        # readers that found them before the swap finish on them until then.
        self._replaced: list[tuple[int, CommittedSegment]] = []

    @property
    def storage(self) -> RemoteStorage:
        return self._storage

    @property
    def segments(self) -> tuple[CommittedSegment, ...]:
        return tuple(self._segments)

    @property
    def start_offset(self) -> int | None:
        return self._segments[0].base_offset if self._segments else None

    @property
    def end_offset(self) -> int:
        """The offset after the last committed segment (0 when the bucket holds nothing)."""
        return self._segments[-1].next_offset if self._segments else 0

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self._segments)

    # --- start-up ------------------------------------------------------------------------

    async def load(self, leader_epoch: int, *, deleting_data_at_ms: int | None = None) -> None:
        """Read the committed catalogue; settle uploads and deletions a crash left half done.
        With `deleting_data_at_ms` (a compacted topic: the row may be a segment a rewrite
        replaced, which readers in flight may still be reading), a `deleting` row loses its
        commit object now and its data objects then (`collect_replaced`), as after the swap."""
        store, bucket = self._storage.store, self._storage.bucket
        rows = await store.list_remote_segments(self.topic, self.index, states=tuple(RemoteSegmentState))
        settled = True
        replaced: list[tuple[int, CommittedSegment]] = []
        committed_ranges = [(r.base_offset, r.last_offset) for r in rows if r.state == RemoteSegmentState.COMMITTED]
        for row in rows:
            if row.state == RemoteSegmentState.COMMITTED:
                continue
            settled = False
            if row.state == RemoteSegmentState.UPLOADING:
                segment = parse_commit_key(row.object_key)
                if any(base <= row.last_offset and row.base_offset <= last for base, last in committed_ranges):
                    # A rewrite whose swap never happened (uploads start at the bucket's end):
                    # the segments it was to replace are still the catalogue.
                    await self._forget(row, segment, leader_epoch)
                    log.info("%s-%d: removed the unfinished rewrite of segment %d", self.topic, self.index, row.base_offset)
                elif await bucket.head(segment.commit_key) is not None:
                    await store.commit_remote_segment(self.topic, self.index, row.base_offset, row.object_key, leader_epoch=leader_epoch)
                    log.info("%s-%d: upload of segment %d was committed before a crash; kept", self.topic, self.index, row.base_offset)
                else:
                    await self._forget(row, segment, leader_epoch)
                    log.info("%s-%d: removed the unfinished upload of segment %d", self.topic, self.index, row.base_offset)
            elif row.state == RemoteSegmentState.DELETING and deleting_data_at_ms is not None:
                replaced.append((deleting_data_at_ms, parse_commit_key(row.object_key)))
            elif row.state == RemoteSegmentState.DELETING:
                await self._forget(row, parse_commit_key(row.object_key), leader_epoch)
        if replaced:  # their commit objects go now, in one request (their data objects wait)
            await bucket.delete_many([segment.commit_key for _, segment in replaced])
        committed = [r for r in rows if r.state == RemoteSegmentState.COMMITTED] if settled else await store.list_remote_segments(self.topic, self.index)
        self._segments = [parse_commit_key(row.object_key) for row in committed]
        self._replaced = replaced  # every other `deleting` row was settled above

    async def _forget(self, row: RemoteSegment, segment: CommittedSegment, leader_epoch: int) -> None:
        store = self._storage.store
        await delete_segment(self._storage.bucket, segment)
        if row.state != RemoteSegmentState.DELETING:
            await store.mark_remote_segment_deleting(row.topic, row.partition, row.base_offset, row.object_key, leader_epoch=leader_epoch)
        await store.remove_remote_segment(row.topic, row.partition, row.base_offset, row.object_key, leader_epoch=leader_epoch)

    # --- uploads -------------------------------------------------------------------------

    async def begin_upload(
        self, *, base_offset: int, last_offset: int, base_timestamp: int, max_timestamp: int, size_bytes: int, leader_epoch: int
    ) -> CommittedSegment:
        """The descriptor of an upload of this range, catalogued as `uploading` before any object
        is written; the same one again while that upload is unfinished (a retry)."""
        attempt = self._upload
        if attempt is not None and (attempt.base_offset, attempt.size_bytes) == (base_offset, size_bytes):
            return attempt
        attempt = self._descriptor(base_offset, last_offset, base_timestamp, max_timestamp, size_bytes, leader_epoch)
        await self._storage.store.add_remote_segment(_row(attempt))
        self._upload = attempt
        return attempt

    async def commit(self, segment: CommittedSegment, leader_epoch: int) -> None:
        """The upload's commit object is in the bucket: the segment joins the remote log.

        The store's commit is not idempotent, and its answer can be lost after it took effect
        (a timeout, a dropped connection): the uploader's retry then finds the row committed
        already. Under this upload's own key (its upload id is unique, and the store checks
        the epoch fence before the state) that is this very commit, done: the retry succeeds.
        Raised instead, it retried forever, and the partition's uploads stopped behind it."""
        try:
            await self._storage.store.commit_remote_segment(self.topic, self.index, segment.base_offset, segment.commit_key, leader_epoch=leader_epoch)
        except InvalidRemoteSegmentTransition as exc:
            if not _committed_already(exc, segment):
                raise
            log.info("%s-%d: segment %d was committed by an earlier try whose answer was lost", self.topic, self.index, segment.base_offset)
        self._upload = None
        self._segments.append(segment)

    def abandon_upload(self) -> None:
        """The topic is going away: forget the unfinished upload (its row goes with the topic)."""
        self._upload = None

    # --- rewrites (compaction/bucket.py) ---------------------------------------------------

    async def begin_rewrite(
        self, *, base_offset: int, last_offset: int, base_timestamp: int, max_timestamp: int, size_bytes: int, leader_epoch: int
    ) -> CommittedSegment:
        """The descriptor of a copy that is to replace committed segments, catalogued as
        `uploading` before any object is written (a crash leaves a row `load` removes)."""
        segment = self._descriptor(base_offset, last_offset, base_timestamp, max_timestamp, size_bytes, leader_epoch)
        await self._storage.store.add_remote_segment(_row(segment))
        return segment

    def _descriptor(
        self, base_offset: int, last_offset: int, base_timestamp: int, max_timestamp: int, size_bytes: int, leader_epoch: int
    ) -> CommittedSegment:
        """A new upload of this partition's range: a fresh upload id names its objects."""
        return CommittedSegment(
            topic=self.topic, partition=self.index, base_offset=base_offset, last_offset=last_offset,
            base_timestamp=base_timestamp, max_timestamp=max_timestamp, size_bytes=size_bytes,
            leader_epoch=leader_epoch, upload_id=new_upload_id(),
        )  # fmt: skip

    async def replace(
        self, segment: CommittedSegment, replaced: list[CommittedSegment], leader_epoch: int, *, delete_at_ms: int,
        forget_aborted: Sequence[int] = (), on_swap: Callable[[], None] | None = None,
    ) -> None:
        """The copy's commit object is in the bucket: it takes the place of `replaced` in one
        fenced store write, which also forgets the aborted transactions whose markers the copy
        no longer holds (`forget_aborted`, their marker offsets). `on_swap` runs in the same
        event-loop step as the catalogue's change. Their commit objects go at once (a bucket
        reader's LIST finds the copy alone), their data objects at `delete_at_ms`
        (`collect_replaced`)."""
        await self._storage.store.replace_remote_segments(
            self.topic, self.index, segment.base_offset, segment.commit_key,
            [(s.base_offset, s.commit_key) for s in replaced], leader_epoch=leader_epoch, forget_aborted=forget_aborted,
        )  # fmt: skip
        gone = {s.commit_key for s in replaced}
        self._segments = sorted([s for s in self._segments if s.commit_key not in gone] + [segment], key=lambda s: s.base_offset)
        if on_swap is not None:
            on_swap()
        for old in replaced:
            self._storage.reader.forget(old)
            self._replaced.append((delete_at_ms, old))
        try:
            await self._storage.bucket.delete_many([s.commit_key for s in replaced])
        except Exception as exc:  # collect_replaced deletes them again with the data
            log.warning("%s-%d: deleting replaced commit objects failed (%s); retried later", self.topic, self.index, exc)

    async def abandon_rewrite(self, segment: CommittedSegment, leader_epoch: int) -> None:
        """A rewrite that failed: its objects and its row go if the store still has it
        `uploading`. If the swap took place after all (its answer was lost), the committed
        segments are read again from the store, which is the truth; the replaced ones, now
        `deleting`, are left to the next load (an upload in flight must not be settled)."""
        rows = await self._storage.store.list_remote_segments(self.topic, self.index, states=tuple(RemoteSegmentState))
        state = next((row.state for row in rows if row.object_key == segment.commit_key), None)
        if state == RemoteSegmentState.UPLOADING:
            await self._forget(_row(segment), segment, leader_epoch)
        elif state == RemoteSegmentState.COMMITTED:
            self._segments = [parse_commit_key(row.object_key) for row in rows if row.state == RemoteSegmentState.COMMITTED]

    async def collect_replaced(self, now_ms: int, leader_epoch: int) -> int:
        """Delete the objects and rows of replaced segments whose grace period is over."""
        due = [(at, s) for at, s in self._replaced if at <= now_ms]
        for entry in due:
            segment = entry[1]
            await delete_segment(self._storage.bucket, segment)
            await self._storage.store.remove_remote_segment(self.topic, self.index, segment.base_offset, segment.commit_key, leader_epoch=leader_epoch)
            self._replaced.remove(entry)
        return len(due)

    # --- retention -----------------------------------------------------------------------

    async def delete_oldest(self, leader_epoch: int) -> CommittedSegment:
        """Retention: the oldest segment leaves the catalogue (readers stop seeing it at once),
        then its objects and its row go."""
        segment = self._segments[0]
        store = self._storage.store
        await store.mark_remote_segment_deleting(self.topic, self.index, segment.base_offset, segment.commit_key, leader_epoch=leader_epoch)
        self._segments.pop(0)
        self._storage.reader.forget(segment)
        await delete_segment(self._storage.bucket, segment)
        await store.remove_remote_segment(self.topic, self.index, segment.base_offset, segment.commit_key, leader_epoch=leader_epoch)
        return segment

    # --- reads ---------------------------------------------------------------------------

    @metrics.observe_remote_fetch
    async def read(self, offset: int, max_bytes: int, *, min_one_batch: bool) -> bytes | memoryview | None:
        return await self._storage.reader.read(list(self._segments), offset, max_bytes, min_one_batch=min_one_batch)

    async def offset_for_timestamp(self, timestamp: int, log_start_offset: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record at or after `timestamp`, or None."""
        return await self._storage.reader.offset_for_timestamp(list(self._segments), timestamp, log_start_offset=log_start_offset)

    def max_timestamp(self) -> int | None:
        """The largest max timestamp of a bucket segment, or None if the bucket holds none."""
        return max((s.max_timestamp for s in self._segments), default=None)

    def may_hold_timestamp(self, timestamp: int) -> bool:
        """CreateTime timestamps need not grow with offsets: any segment may hold the target."""
        return any(s.max_timestamp >= timestamp for s in self._segments)


def _committed_already(exc: InvalidRemoteSegmentTransition, segment: CommittedSegment) -> bool:
    """The refused commit found this segment's own row (same base offset, same commit key)
    committed: an earlier commit of it took effect."""
    return (
        (exc.topic, exc.partition, exc.base_offset, exc.object_key) == (segment.topic, segment.partition, segment.base_offset, segment.commit_key)
        and exc.state == RemoteSegmentState.COMMITTED
        and exc.target == RemoteSegmentState.COMMITTED
    )


def _row(segment: CommittedSegment) -> RemoteSegment:
    """The catalogue row of an upload: the same descriptor, found by its commit key."""
    return RemoteSegment(**segment.descriptor_fields(), object_key=segment.commit_key)
