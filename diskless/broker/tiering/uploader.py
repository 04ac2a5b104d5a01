"""The uploader: rolled segments go to the bucket; local copies go once they are safe there.

For each partition of a topic with `remote.storage.enable=true`, in this crash-safe order:

1. a rolled (inactive) local segment at or past the bucket's end offset is catalogued as
   `uploading` (RemoteLog.begin_upload);
2. its `.log`, `.index` and `.timeindex` are uploaded, then the commit object (the bucket's
   own catalogue entry) is written last;
3. the catalogue row becomes `committed` (RemoteLog.commit); only now is the segment part of
   the remote log;
4. the leader deletes local copies of committed segments by `local.retention.ms` /
   `local.retention.bytes`.

A crash between 1 and 3 leaves an `uploading` row that start-up settles (remote_log.py); the
local copy exists in every such case (step 4 waits for 3), so nothing is lost.

Uploads run as one task per partition (segments in order), at most `upload_concurrency` at a
time across partitions; produce never waits for them. If the bucket is unreachable, uploads
retry with backoff, each retry continuing the same upload (same upload id, same row). The
back-off is short (doubling from UPLOAD_BACKOFF_MS to UPLOAD_MAX_BACKOFF_MS) and ends at once
when the store answers again (cold_tier.health.retry_wait: the S3 adapter probes an
unreachable store), so a backlog starts draining, every partition in parallel, as soon as the
bucket is back rather than after a back-off grown over the outage. The first failure of a
streak is a WARNING, later ones DEBUG (the store itself reminds of an outage every 30 s), and
the upload that ends a streak says how many tries it took. Past
`local_disk_limit_bytes` of segments waiting, produce to tiered topics fails with
KAFKA_STORAGE_ERROR (policy.over_disk_limit) instead of filling the disk. A pass every second
(or when woken by a roll or a config change) starts uploads and runs local and remote
retention through each leader.

Only the event-loop task calls this class. It holds no partition state of its own: it asks
each leader what to upload and tells the leader's remote log what landed.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from cold_tier.health import retry_wait
from cold_tier.segments import delete_topic_objects, put_topic_id, upload_committed
from cold_tier.store import ObjectStore
from hot_tier import SegmentInfo
from hot_tier.scan import first_timestamp

from .. import metrics
from ..errors import LocalDiskFull
from . import policy

if TYPE_CHECKING:
    from ..partition import PartitionLeader

log = logging.getLogger(__name__)

UPLOAD_BACKOFF_MS = 200
UPLOAD_MAX_BACKOFF_MS = 2_000
LAG_LOG_INTERVAL_MS = 30_000
PASS_INTERVAL_S = 1.0
STOP_UPLOADS_S = 10.0  # how long a closed leader's upload may take to end before it is cancelled


async def _drain(tasks: list[asyncio.Task[None]], timeout_s: float) -> None:
    """Wait for the upload tasks of closed leaders to end (each finishes the attempt in flight
    and stops: its leader is closed), cancelling those still running after `timeout_s`.
    Cancelled at once, an attempt's PUT already sent could still land in the bucket after
    whatever comes next had looked at it (moto, or S3, completes a request whose client left)."""
    if not tasks:
        return
    _, running = await asyncio.wait(tasks, timeout=timeout_s)
    for task in running:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class Uploader:
    def __init__(
        self,
        bucket: ObjectStore,
        leaders: Callable[[], list[PartitionLeader]],
        clock: Callable[[], int],
        *,
        upload_concurrency: int = 4,
        local_disk_limit_bytes: int = -1,
    ) -> None:
        self.bucket = bucket
        self.leaders = leaders
        self.clock = clock
        self.local_disk_limit_bytes = local_disk_limit_bytes
        self._slots = asyncio.Semaphore(upload_concurrency)
        self._tasks: dict[tuple[str, int], asyncio.Task[None]] = {}
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._last_lag_log_ms = 0
        self._waiting_bytes = 0

    # --- life cycle ----------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="tiering")

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._tasks.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def wake(self) -> None:
        """Something rolled or changed: look for work now rather than at the next tick."""
        self._wakeup.set()

    # --- what leaders tell and ask (partition.leader.UploadSignals) ----------------------

    def rolled(self) -> None:
        self.refresh_lag()
        self.wake()

    def check_disk(self) -> None:
        if policy.over_disk_limit(self._waiting_bytes, self.local_disk_limit_bytes):
            raise LocalDiskFull(self._waiting_bytes, self.local_disk_limit_bytes)

    # --- lag -----------------------------------------------------------------------------

    def lag(self) -> tuple[int, int]:
        """(segments, bytes) rolled but not yet in the bucket, over all tiered partitions."""
        waiting = [s for leader in self.leaders() if leader.tiered for s in leader.segments_to_upload()]
        return len(waiting), sum(s.size_bytes for s in waiting)

    def refresh_lag(self) -> None:
        """Recount what waits for the bucket; lag changes only on a roll or an upload."""
        self._waiting_bytes = self.lag()[1]

    def _log_lag(self, now: int) -> None:
        if now - self._last_lag_log_ms < LAG_LOG_INTERVAL_MS:
            return
        segments, waiting_bytes = self.lag()
        if segments:
            log.info("upload lag: %d segment(s), %d bytes waiting for the bucket", segments, waiting_bytes)
            self._last_lag_log_ms = now

    # --- passes --------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wakeup.wait(), PASS_INTERVAL_S)
            except TimeoutError:
                pass
            self._wakeup.clear()
            try:
                await self._pass()
            except Exception:
                log.exception("tiering pass failed; will retry")

    async def _pass(self) -> None:
        now = self.clock()
        for leader in self.leaders():
            if not leader.tiered or leader.closed:
                continue
            key = (leader.topic, leader.index)
            if leader.segments_ready_to_upload() and (key not in self._tasks or self._tasks[key].done()):
                self._tasks[key] = asyncio.create_task(self._upload_all(leader), name=f"upload-{key[0]}-{key[1]}")
            try:
                leader.drop_uploaded_local_copies(now)
                await leader.enforce_remote_retention(now)
            except Exception as exc:
                # One partition's failing deletion must not stop the partitions after it.
                log.warning("%s-%d: retention failed (%r); will retry", leader.topic, leader.index, exc)
        self.refresh_lag()
        self._log_lag(now)

    # --- uploads -------------------------------------------------------------------------

    async def _upload_all(self, leader: PartitionLeader) -> None:
        backoff = UPLOAD_BACKOFF_MS
        failures = 0  # of the current streak
        while leader.tiered and not leader.closed:
            pending = leader.segments_ready_to_upload()
            if not pending:
                return
            try:
                async with self._slots:
                    await self._upload(leader, pending[0])
                self.refresh_lag()
                if failures:
                    log.info("%s-%d: upload of segment %d succeeded after %d failed tr%s",
                             leader.topic, leader.index, pending[0].base_offset, failures, "y" if failures == 1 else "ies")  # fmt: skip
                backoff, failures = UPLOAD_BACKOFF_MS, 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                log.log(logging.WARNING if failures == 1 else logging.DEBUG,
                        "%s-%d: upload of segment %d failed (%s); retrying in %d ms",
                        leader.topic, leader.index, pending[0].base_offset, exc, backoff)  # fmt: skip
                await retry_wait(self.bucket, backoff * random.uniform(0.5, 1.0) / 1000)
                backoff = min(backoff * 2, UPLOAD_MAX_BACKOFF_MS)
        self._wakeup.set()

    @metrics.observe_remote_copy
    async def _upload(self, leader: PartitionLeader, segment: SegmentInfo) -> None:
        remote = leader.remote
        base_timestamp = await asyncio.to_thread(first_timestamp, segment.log_path)
        committed = await remote.begin_upload(
            base_offset=segment.base_offset, last_offset=segment.next_offset - 1, base_timestamp=base_timestamp,
            max_timestamp=segment.max_timestamp, size_bytes=segment.size_bytes, leader_epoch=leader.leader_epoch,
        )  # fmt: skip
        producers = leader.producer_state_after(committed.next_offset)
        if producers is None:
            log.warning("%s-%d: no producer-state snapshot at the end of segment %d-%d; a leader whose log begins at the "
                        "bucket's end will not know the producers whose last batches are in it",
                        leader.topic, leader.index, committed.base_offset, committed.last_offset)  # fmt: skip
        await upload_committed(
            self.bucket, committed, log_path=segment.log_path, index_path=segment.index_path, timeindex_path=segment.timeindex_path,
            txn_index=leader.txn_index(committed.base_offset, committed.next_offset),
            producer_snapshot=None if producers is None else producers.snapshot(),
        )  # fmt: skip
        await leader.publish_producer_state(producers)
        await leader.record_aborted_transactions(committed.next_offset)
        await remote.commit(committed, leader.leader_epoch)
        await leader.segment_committed()
        log.info("%s-%d: segment %d-%d (%d bytes) is in the bucket", leader.topic, leader.index,
                 committed.base_offset, committed.last_offset, committed.size_bytes)  # fmt: skip
        leader.drop_uploaded_local_copies(self.clock())

    async def stop_uploads(self, keys: Iterable[tuple[str, int]]) -> None:
        """Let the uploads of these partitions end, which are about to open here again (the
        leaders that ran them were closed: a lost session, a new epoch). One left running
        could write its commit object to the bucket after the new leader's `RemoteLog.load`
        found its upload unfinished and deleted its data: a commit object the store does not
        know, of missing data, which readers of the bucket alone (Spark) would take for the
        segment at those offsets."""
        await _drain([self._tasks.pop(key) for key in keys if key in self._tasks], STOP_UPLOADS_S)

    async def name_topic(self, topic: str, topic_id: uuid.UUID) -> None:
        """Write the new topic's id into the bucket (readers of write-ahead objects then leave
        out the batches of an older topic of its name); a failure is logged: readers then take
        every batch of the name, as before topic ids."""
        try:
            await put_topic_id(self.bucket, topic, topic_id)
        except Exception as exc:
            log.warning("could not write the id of topic %s to the bucket: %s", topic, exc)

    async def delete_topic_objects(self, topic: str, leaders: list[PartitionLeader]) -> None:
        """Remove a deleted topic's objects (commits first, so readers stop seeing it at once).

        The topic's uploads end first: one left running would PUT its commit object after the
        LIST below, a commit whose data objects were just deleted.
        """
        await _drain([self._tasks.pop(key) for key in [key for key in self._tasks if key[0] == topic]], STOP_UPLOADS_S)
        for leader in leaders:
            leader.remote.abandon_upload()
        try:
            await delete_topic_objects(self.bucket, topic)
        except Exception as exc:
            log.warning("could not delete the objects of topic %s from the bucket: %s", topic, exc)


