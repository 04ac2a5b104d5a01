"""Tiering: rolled segments go to the bucket; local copies go once they are safe there.

For each partition of a topic with `remote.storage.enable=true`, in this crash-safe order:

1. a rolled (inactive) local segment at or past the bucket's end offset is registered in the
   metadata catalogue as `uploading`;
2. its `.log`, `.index` and `.timeindex` are uploaded, then the commit object (the bucket's
   own catalogue entry) is written last;
3. the catalogue row becomes `committed`; only now is the segment part of the remote log;
4. local copies of committed segments are deleted by `local.retention.ms` /
   `local.retention.bytes` (-2: `retention.ms` / `retention.bytes`).

A crash between 1 and 3 leaves an `uploading` row: at start-up it is committed if its commit
object exists, else its objects are deleted. The local copy still exists in every such case
(step 4 waits for 3), so nothing is lost. Remote retention (`retention.ms`,
`retention.bytes` over the whole log) marks a segment `deleting`, deletes the commit object,
then the data, then the row; the log start offset moves with it.

Uploads run as one task per partition (segments in order), at most `upload_concurrency` at a
time across partitions; produce never waits for them. If the bucket is unreachable, uploads
retry with backoff, each retry continuing the same upload (same upload id, same catalogue
row), so failed tries leave neither rows nor objects behind; past `local_disk_limit_bytes`
of segments waiting, produce to tiered topics fails with KAFKA_STORAGE_ERROR instead of
filling the disk.

Only the event-loop task calls this class.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import struct
import uuid
from collections.abc import Callable

from cold_tier.layout import CommittedSegment, new_upload_id, parse_commit_key
from cold_tier.remote_log import RemoteLogReader
from cold_tier.segments import delete_segment, delete_topic_objects, upload_segment
from cold_tier.store import ObjectStore
from hot_tier import SegmentInfo
from metadata import MetadataStore, RemoteSegment, RemoteSegmentState

from .errors import LocalDiskFull
from .partition import Partition

log = logging.getLogger(__name__)

UPLOAD_BACKOFF_MS = 200
UPLOAD_MAX_BACKOFF_MS = 30_000
LAG_LOG_INTERVAL_MS = 30_000


class Tiering:
    def __init__(
        self,
        bucket: ObjectStore,
        store: MetadataStore,
        partitions: Callable[[], list[Partition]],
        clock: Callable[[], int],
        *,
        upload_concurrency: int = 4,
        local_disk_limit_bytes: int = -1,
    ) -> None:
        self.bucket = bucket
        self.store = store
        self.partitions = partitions
        self.clock = clock
        # 8 MiB ranged GETs, 32 MiB read ahead: per-request latency to S3 is tens of ms.
        self.reader = RemoteLogReader(bucket, chunk_bytes=8 * 2**20, prefetch_chunks=4, cache_bytes=256 * 2**20)
        self.local_disk_limit_bytes = local_disk_limit_bytes
        self._slots = asyncio.Semaphore(upload_concurrency)
        self._uploaders: dict[tuple[str, int], asyncio.Task[None]] = {}
        # The upload each partition has catalogued as `uploading` and not yet committed: a
        # retry continues it (same upload id, same row) instead of leaving a row and partial
        # objects behind per failed try, and a commit object that landed is not duplicated.
        self._attempts: dict[tuple[uuid.UUID, int], CommittedSegment] = {}
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._last_lag_log_ms = 0
        self._waiting_bytes = 0

    # --- start-up ------------------------------------------------------------------------

    async def load(self, partition: Partition) -> None:
        """Read the partition's committed catalogue; settle uploads a crash left half done."""
        topic, index = partition.topic, partition.index
        rows = await self.store.list_remote_segments(topic, index, states=tuple(RemoteSegmentState))
        for row in rows:
            if row.state == RemoteSegmentState.UPLOADING:
                segment = parse_commit_key(row.object_key)
                if await self.bucket.head(segment.commit_key) is not None:
                    await self.store.commit_remote_segment(topic, index, row.base_offset, row.object_key, leader_epoch=partition.leader_epoch)
                    log.info("%s-%d: upload of segment %d was committed before a crash; kept", topic, index, row.base_offset)
                else:
                    await self._forget(partition, row, segment)
                    log.info("%s-%d: removed the unfinished upload of segment %d", topic, index, row.base_offset)
            elif row.state == RemoteSegmentState.DELETING:
                await self._forget(partition, row, parse_commit_key(row.object_key))
        committed = await self.store.list_remote_segments(topic, index)
        partition.remote = [parse_commit_key(row.object_key) for row in committed]
        if partition.remote and partition.log.log_end_offset < partition.remote[-1].next_offset:
            # The local disk lost data the bucket has (e.g. a new disk): the hot tier
            # continues after the last committed segment.
            end = partition.remote[-1].next_offset
            log.warning("%s-%d: local log ends at %d but the bucket holds up to %d; continuing from the bucket",
                        topic, index, partition.log.log_end_offset, end)
            partition.log.truncate_fully_and_start_at(end)

    async def _forget(self, partition: Partition, row: RemoteSegment, segment: CommittedSegment) -> None:
        await delete_segment(self.bucket, segment)
        if row.state != RemoteSegmentState.DELETING:
            await self.store.mark_remote_segment_deleting(row.topic, row.partition, row.base_offset, row.object_key, leader_epoch=partition.leader_epoch)
        await self.store.remove_remote_segment(row.topic, row.partition, row.base_offset, row.object_key, leader_epoch=partition.leader_epoch)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="tiering")

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._uploaders.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.reader.close()

    def wake(self) -> None:
        """Something rolled or changed: look for work now rather than at the next tick."""
        self._wakeup.set()

    # --- the loop ------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wakeup.wait(), 1.0)
            except TimeoutError:
                pass
            self._wakeup.clear()
            try:
                await self._pass()
            except Exception:
                log.exception("tiering pass failed; will retry")

    async def _pass(self) -> None:
        now = self.clock()
        for partition in self.partitions():
            if not partition.tiered:
                continue
            key = (partition.topic, partition.index)
            if self.pending(partition) and (key not in self._uploaders or self._uploaders[key].done()):
                self._uploaders[key] = asyncio.create_task(self._upload_all(partition), name=f"upload-{key[0]}-{key[1]}")
            try:
                self._delete_local(partition, now)
                await self._delete_remote(partition, now)
            except Exception as exc:
                # One partition's failing deletion must not stop the partitions after it.
                log.warning("%s-%d: retention failed (%r); will retry", partition.topic, partition.index, exc)
        self.refresh_lag()
        self._log_lag(now)

    def pending(self, partition: Partition) -> list[SegmentInfo]:
        end = partition.remote[-1].next_offset if partition.remote else 0
        return [s for s in partition.log.segments if not s.is_active and s.base_offset >= end and s.size_bytes > 0]

    def lag(self) -> tuple[int, int]:
        """(segments, bytes) rolled but not yet in the bucket, over all tiered partitions."""
        waiting = [s for p in self.partitions() if p.tiered for s in self.pending(p)]
        return len(waiting), sum(s.size_bytes for s in waiting)

    def refresh_lag(self) -> None:
        """Recount what waits for the bucket; lag changes only on a roll or an upload."""
        self._waiting_bytes = self.lag()[1]

    def check_disk(self, partition: Partition) -> None:
        """Refuse a produce to a tiered partition once too much waits for the bucket."""
        if self.local_disk_limit_bytes >= 0 and partition.tiered and self._waiting_bytes > self.local_disk_limit_bytes:
            raise LocalDiskFull(self._waiting_bytes, self.local_disk_limit_bytes)

    def _log_lag(self, now: int) -> None:
        if now - self._last_lag_log_ms < LAG_LOG_INTERVAL_MS:
            return
        segments, waiting_bytes = self.lag()
        if segments:
            log.info("upload lag: %d segment(s), %d bytes waiting for the bucket", segments, waiting_bytes)
            self._last_lag_log_ms = now

    # --- uploads -------------------------------------------------------------------------

    async def _upload_all(self, partition: Partition) -> None:
        backoff = UPLOAD_BACKOFF_MS
        while partition.tiered and not partition.log.closed:
            pending = self.pending(partition)
            if not pending:
                return
            try:
                async with self._slots:
                    await self._upload(partition, pending[0])
                self.refresh_lag()
                backoff = UPLOAD_BACKOFF_MS
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("%s-%d: upload of segment %d failed (%s); retrying in %d ms",
                            partition.topic, partition.index, pending[0].base_offset, exc, backoff)
                await asyncio.sleep(backoff * random.uniform(0.5, 1.0) / 1000)
                backoff = min(backoff * 2, UPLOAD_MAX_BACKOFF_MS)
        self._wakeup.set()

    async def _upload(self, partition: Partition, segment: SegmentInfo) -> None:
        key = (partition.topic_id, partition.index)  # not the name: a topic may be re-created
        committed = self._attempts.get(key)
        if committed is None or (committed.base_offset, committed.size_bytes) != (segment.base_offset, segment.size_bytes):
            base_timestamp = await asyncio.to_thread(_first_base_timestamp, segment)
            committed = CommittedSegment(
                topic=partition.topic,
                partition=partition.index,
                base_offset=segment.base_offset,
                last_offset=segment.next_offset - 1,
                base_timestamp=base_timestamp,
                max_timestamp=segment.max_timestamp,
                size_bytes=segment.size_bytes,
                leader_epoch=partition.leader_epoch,
                upload_id=new_upload_id(),
            )
            await self.store.add_remote_segment(RemoteSegment(
                topic=committed.topic, partition=committed.partition, base_offset=committed.base_offset,
                last_offset=committed.last_offset, base_timestamp=base_timestamp, max_timestamp=committed.max_timestamp,
                size_bytes=committed.size_bytes, leader_epoch=committed.leader_epoch, object_key=committed.commit_key,
            ))  # fmt: skip
            self._attempts[key] = committed
        await upload_segment(
            self.bucket, topic=committed.topic, partition=committed.partition,
            log_path=segment.log_path, index_path=segment.index_path, timeindex_path=segment.timeindex_path,
            base_offset=committed.base_offset, last_offset=committed.last_offset, base_timestamp=committed.base_timestamp,
            max_timestamp=committed.max_timestamp, size_bytes=committed.size_bytes, leader_epoch=committed.leader_epoch,
            upload_id=committed.upload_id,
        )
        await self.store.commit_remote_segment(partition.topic, partition.index, committed.base_offset, committed.commit_key, leader_epoch=partition.leader_epoch)
        del self._attempts[key]
        partition.remote.append(committed)
        log.info("%s-%d: segment %d-%d (%d bytes) is in the bucket", partition.topic, partition.index,
                 committed.base_offset, committed.last_offset, committed.size_bytes)
        self._delete_local(partition, self.clock())

    # --- retention -----------------------------------------------------------------------

    def _delete_local(self, partition: Partition, now: int) -> None:
        """Drop local copies of committed segments by local.retention.ms / .bytes."""
        if not partition.remote:
            return
        uploaded_end = partition.remote[-1].next_offset
        retention_ms, retention_bytes = partition.local_retention
        candidates = [s for s in partition.log.segments if not s.is_active and s.next_offset <= uploaded_end]
        local_bytes = sum(s.size_bytes for s in partition.log.segments)
        target = None
        for segment in candidates:
            expired = retention_ms >= 0 and segment.max_timestamp < now - retention_ms
            oversized = retention_bytes >= 0 and local_bytes - segment.size_bytes >= retention_bytes
            if not (expired or oversized):
                break
            target = segment.next_offset
            local_bytes -= segment.size_bytes
        if target is not None:
            deleted = partition.log.delete_segments_to(target)
            if deleted:
                log.info("%s-%d: deleted %d local segment(s) now in the bucket; local log starts at %d",
                         partition.topic, partition.index, len(deleted), partition.log.log_start_offset)

    async def _delete_remote(self, partition: Partition, now: int) -> None:
        """retention.ms / retention.bytes over the whole log, oldest remote segments first."""
        retention_ms, retention_bytes = partition.retention
        total = sum(s.size_bytes for s in partition.remote) + sum(s.size_bytes for s in self.pending(partition))
        total += sum(s.size_bytes for s in partition.log.segments if s.is_active)
        doomed = []
        for segment in partition.remote:
            below_start = segment.next_offset <= partition.deleted_below
            expired = retention_ms >= 0 and segment.max_timestamp < now - retention_ms
            oversized = retention_bytes >= 0 and total - segment.size_bytes >= retention_bytes
            if not (below_start or expired or oversized):
                break
            doomed.append(segment)
            total -= segment.size_bytes
        for segment in doomed:
            await self.delete_remote_segment(partition, segment)

    async def delete_remote_segment(self, partition: Partition, segment: CommittedSegment) -> None:
        topic, index = partition.topic, partition.index
        await self.store.mark_remote_segment_deleting(topic, index, segment.base_offset, segment.commit_key, leader_epoch=partition.leader_epoch)
        partition.remote.remove(segment)
        partition.deleted_below = max(partition.deleted_below, segment.next_offset)
        self.reader.forget(segment)
        await delete_segment(self.bucket, segment)
        await self.store.remove_remote_segment(topic, index, segment.base_offset, segment.commit_key, leader_epoch=partition.leader_epoch)
        await self.store.set_log_start_offset(topic, index, partition.log_start_offset)
        log.info("%s-%d: retention deleted segment %d-%d from the bucket; log start offset is %d",
                 topic, index, segment.base_offset, segment.last_offset, partition.log_start_offset)

    async def delete_topic_objects(self, topic: str) -> None:
        """Remove a deleted topic's objects (commits first, so readers stop seeing it at once).

        The topic's uploads are cancelled and awaited first: one left running would PUT its
        commit object after the LIST below, a commit whose data objects were just deleted.
        """
        uploads = [key for key in self._uploaders if key[0] == topic]
        tasks = [self._uploaders.pop(key) for key in uploads]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for key in [key for key, attempt in self._attempts.items() if attempt.topic == topic]:
            del self._attempts[key]
        try:
            await delete_topic_objects(self.bucket, topic)
        except Exception as exc:
            log.warning("could not delete the objects of topic %s from the bucket: %s", topic, exc)

    # --- reads ---------------------------------------------------------------------------

    async def read(self, partition: Partition, offset: int, max_bytes: int, *, min_one_batch: bool) -> bytes | None:
        return await self.reader.read(list(partition.remote), offset, max_bytes, min_one_batch=min_one_batch)

    async def offset_for_timestamp(self, partition: Partition, timestamp: int) -> tuple[int, int] | None:
        return await self.reader.offset_for_timestamp(list(partition.remote), timestamp, log_start_offset=partition.log_start_offset)


_BASE_TIMESTAMP = struct.Struct(">q")
_BASE_TIMESTAMP_AT = 27  # in the first batch's header (see hot_tier.records.header)


def _first_base_timestamp(segment: SegmentInfo) -> int:
    fd = os.open(segment.log_path, os.O_RDONLY)
    try:
        return _BASE_TIMESTAMP.unpack(os.pread(fd, 8, _BASE_TIMESTAMP_AT))[0]
    finally:
        os.close(fd)
