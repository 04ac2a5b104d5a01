"""The write-ahead writer: group commit of every partition's appended batches into the bucket.

Leaders submit each batch they append (already carrying its offsets and leader epoch). The
writer seals what it holds every `wal.commit.interval.ms` (or at once past
`wal.buffer.max.bytes`) into one write-ahead object (cold_tier/wal_format.py), PUTs it, then
commits its batches in the metadata store, conditional on each partition's leader epoch. Only
then are the batches durable: their futures complete and the leaders move their high
watermarks. Several objects may be in flight (`max_in_flight`); each partition's leader moves
its high watermark over the prefix of its batches that is durable, so commits landing out of
order never expose a gap.

Failures: a PUT or a store commit that fails is retried with backoff, the same object under
the same key (a PUT that landed but whose answer was lost finds its key taken: that is the
object itself). A partition whose leader epoch was fenced is dropped from the commit (its
futures fail with the typed error) and the rest commits. Submitting past
`wal.max.pending.bytes` not yet durable raises WalBackpressure: produce answers a retriable
error instead of buffering without bound.

Crash: whatever was not committed was never acknowledged to an acks=all producer; start-up
(recovery.py) rebuilds each partition's tail from the committed batches. Objects whose
batches are all inside committed segments are deleted by `collect_garbage`.

Only the event-loop task calls this class.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from cold_tier.errors import PreconditionFailed
from cold_tier.layout import new_upload_id
from cold_tier.store import ObjectStore
from cold_tier.wal_format import encode_wal_object, wal_object_key
from metadata import MetadataStore, WalBatch
from metadata.errors import FencedLeaderEpoch, UnknownLeaderEpoch, UnknownTopic, UnknownTopicOrPartition

from ..errors import WalBackpressure

log = logging.getLogger(__name__)

RETRY_BACKOFF_MS = 50
RETRY_MAX_BACKOFF_MS = 5_000


@dataclass(frozen=True, slots=True)
class WalSettings:
    commit_interval_ms: int = 5  # wal.commit.interval.ms
    buffer_max_bytes: int = 8 * 2**20  # wal.buffer.max.bytes
    max_pending_bytes: int = 64 * 2**20  # wal.max.pending.bytes
    max_in_flight: int = 4


@dataclass(slots=True)
class _Pending:
    topic: str
    partition: int
    base_offset: int
    last_offset: int
    leader_epoch: int
    data: bytes
    done: asyncio.Future[None] = field(repr=False)


class WalWriter:
    def __init__(self, bucket: ObjectStore, store: MetadataStore, node_id: int, clock: Callable[[], int], settings: WalSettings) -> None:
        self.bucket = bucket
        self.store = store
        self.node_id = node_id
        self.clock = clock
        self.settings = settings
        self._buffer: list[_Pending] = []
        self._buffer_bytes = 0
        self._pending_bytes = 0  # submitted, not yet durable (or failed)
        self._sealable = asyncio.Event()
        self._slots = asyncio.Semaphore(settings.max_in_flight)
        self._uploads: set[asyncio.Task[None]] = set()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.objects_committed = 0

    # --- what leaders call -----------------------------------------------------------------

    def submit(self, topic: str, partition: int, leader_epoch: int, base_offset: int, last_offset: int, data: bytes) -> asyncio.Future[None]:
        """Queue one appended batch; the future completes when it is durable."""
        if self._closing:
            raise WalBackpressure(self._pending_bytes, self.settings.max_pending_bytes, "the broker is shutting down")
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._buffer.append(_Pending(topic, partition, base_offset, last_offset, leader_epoch, data, done))
        self._buffer_bytes += len(data)
        self._pending_bytes += len(data)
        self._sealable.set()
        return done

    def check_room(self) -> None:
        """Raise WalBackpressure if too much waits to become durable (before appending)."""
        if self._pending_bytes > self.settings.max_pending_bytes:
            raise WalBackpressure(self._pending_bytes, self.settings.max_pending_bytes, "is the bucket reachable?")

    # --- life cycle ------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="wal-writer")

    async def stop(self) -> None:
        """Seal and commit what is buffered, wait for the uploads in flight, then stop."""
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._buffer:
            self._seal()
        if self._uploads:
            await asyncio.wait(set(self._uploads), timeout=10)
        for task in list(self._uploads):
            task.cancel()
        await asyncio.gather(*self._uploads, return_exceptions=True)

    # --- group commit ----------------------------------------------------------------------

    async def _run(self) -> None:
        interval = self.settings.commit_interval_ms / 1000
        while True:
            await self._sealable.wait()
            self._sealable.clear()
            if self._buffer_bytes < self.settings.buffer_max_bytes:
                await asyncio.sleep(interval)  # let the interval's batches gather
            if self._buffer:
                await self._slots.acquire()
                self._seal(acquired=True)

    def _seal(self, acquired: bool = False) -> None:
        batch, self._buffer, self._buffer_bytes = self._buffer, [], 0
        task = asyncio.create_task(self._upload(batch, acquired), name="wal-upload")
        self._uploads.add(task)
        task.add_done_callback(self._uploads.discard)

    async def _upload(self, pending: list[_Pending], acquired: bool) -> None:
        try:
            data, entries = encode_wal_object([(p.topic, p.partition, p.base_offset, p.last_offset, p.leader_epoch, p.data) for p in pending])
            key = wal_object_key(self.node_id, self.clock(), new_upload_id())
            await self._retrying(f"PUT of write-ahead object {key}", lambda: self._put(key, data))
            live = list(zip(pending, entries))
            while live:
                rows = [WalBatch(p.topic, p.partition, p.base_offset, p.last_offset, p.leader_epoch, key, e.position, e.size_bytes) for p, e in live]
                try:
                    await self._retrying(f"commit of write-ahead object {key}", lambda: self.store.commit_wal_object(key, rows))
                    break
                except (FencedLeaderEpoch, UnknownLeaderEpoch, UnknownTopicOrPartition, UnknownTopic) as exc:
                    # That partition is no longer ours (or no longer exists): its batches will
                    # never be durable through this broker; the others commit without them.
                    stale = {(p.topic, p.partition) for p, _ in live if _names(exc, p)}
                    for p, _ in live:
                        if (p.topic, p.partition) in stale:
                            self._finish(p, exc)
                    live = [(p, e) for p, e in live if (p.topic, p.partition) not in stale]
            for p, _ in live:
                self._finish(p, None)
            self.objects_committed += 1
        except asyncio.CancelledError:
            for p in pending:
                self._finish(p, WalBackpressure(self._pending_bytes, self.settings.max_pending_bytes, "the broker is shutting down"))
            raise
        finally:
            if acquired:
                self._slots.release()

    async def _put(self, key: str, data: bytes) -> None:
        try:
            await self.bucket.put(key, data, if_none_match=True)
        except PreconditionFailed:
            pass  # an earlier try landed and its answer was lost: the key is ours, the bytes the same

    async def _retrying(self, what: str, attempt: Callable[[], object]) -> None:
        backoff = RETRY_BACKOFF_MS
        while True:
            try:
                await attempt()  # type: ignore[misc]
                return
            except (FencedLeaderEpoch, UnknownLeaderEpoch, UnknownTopicOrPartition, UnknownTopic):
                raise
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("%s failed (%s); retrying in %d ms", what, exc, backoff)
                await asyncio.sleep(backoff * random.uniform(0.5, 1.0) / 1000)
                backoff = min(backoff * 2, RETRY_MAX_BACKOFF_MS)

    def _finish(self, pending: _Pending, exc: BaseException | None) -> None:
        self._pending_bytes -= len(pending.data)
        if not pending.done.done():
            if exc is None:
                pending.done.set_result(None)
            else:
                pending.done.set_exception(exc)

    # --- clean-up ----------------------------------------------------------------------------

    async def collect_garbage(self) -> int:
        """Delete committed objects none of whose batches is still needed; returns how many."""
        keys = await self.store.list_unreferenced_wal_objects()
        for key in keys:
            await self.bucket.delete(key)
            await self.store.delete_wal_object(key)
        if keys:
            log.info("deleted %d write-ahead object(s) whose batches are all in segments", len(keys))
        return len(keys)


def _names(exc: Exception, pending: _Pending) -> bool:
    """Whether a store error from a commit concerns `pending`'s partition."""
    topic = getattr(exc, "topic", None) or getattr(exc, "name", None)
    partition = getattr(exc, "partition", None)
    return topic == pending.topic and (partition is None or partition == pending.partition)
