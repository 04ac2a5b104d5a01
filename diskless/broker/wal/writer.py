"""The write-ahead writer: group commit of every partition's appended batches into the bucket.

Leaders submit each batch they append (already carrying its offsets and leader epoch). The
writer seals what it holds every `wal.commit.interval.ms` (or at once past
`wal.buffer.max.bytes`) into one write-ahead object (cold_tier/wal_format.py), PUTs it, then
commits its batches in the metadata store, conditional on each partition's leader epoch. Only
then are the batches durable: their futures complete and the leaders move their high
watermarks. Several objects may be in flight (`max_in_flight`): their PUTs run side by side,
but each commits only after the object sealed before it has committed (or given up). Out of
order, a crash between two commits would leave the store recording a partition's later batch
without the earlier one, a hole no recovery could fill; in order, what the store records is
always a prefix of what was appended.

Tail latency: a PUT slower than 90% of recent ones is sent a second time, identical
(hedge.py); the first answer wins.

Failures: a PUT or a store commit that fails is retried with backoff, the same object under
the same key (a PUT that landed but whose answer was lost finds its key taken: that is the
object itself). A partition whose leader epoch was fenced is dropped from the commit (its
futures fail with the typed error) and the rest commits; so is a batch of a topic deleted
since (UnknownTopicId: a batch submitted with its topic's id never commits into a topic made
again under the same name, whose partitions start at the same epochs). Submitting past
`wal.max.pending.bytes` not yet durable raises WalBackpressure: produce answers a retriable
error instead of buffering without bound.

Crash: whatever was not committed was never acknowledged to an acks=all producer; start-up
(recovery.py) rebuilds each partition's tail from the committed batches.

Garbage (`collect_garbage`, every few seconds): a committed object goes once none of its
batches is recorded any more (all inside committed segments, or their topics deleted). An
object PUT but never committed (a crash between the PUT and the commit, or a commit fenced
whole) is never recorded: it goes once its key's sealing time is older than
`orphan_grace_ms` and this writer is not still trying to commit it. Each broker collects only
its own node's keys (`wal~/<node>/`): another broker's object may be in the middle of its
commit, however old, while its store is unreachable.

Metrics (metrics.py, `diskless_wal_*`): objects, batches and bytes committed, the time from
submission to durability, retries of each step, fenced batches, pending bytes, deletions.

Only the event-loop task calls this class.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from cold_tier.errors import PreconditionFailed
from cold_tier.health import retry_wait
from cold_tier.layout import new_upload_id
from cold_tier.store import ObjectStore
from cold_tier.wal_format import WAL_PREFIX, encode_wal_object, parse_wal_object_key, wal_object_key
from metadata import MetadataStore, WalBatch
from metadata.errors import FencedLeaderEpoch, UnknownLeaderEpoch, UnknownTopic, UnknownTopicId, UnknownTopicOrPartition, WalBatchConflict

from .. import metrics
from ..errors import WalBackpressure
from .epoch_marks import EpochMarks
from .hedge import HedgePolicy

log = logging.getLogger(__name__)

RETRY_BACKOFF_MS = 50
RETRY_MAX_BACKOFF_MS = 5_000
# What a commit raises for a partition that is no longer this writer's to commit (or whose
# log diverged from the durable one): its batches fail, the rest commit.
_NOT_OURS = (FencedLeaderEpoch, UnknownLeaderEpoch, UnknownTopicOrPartition, UnknownTopic, UnknownTopicId, WalBatchConflict)


@dataclass(frozen=True, slots=True)
class WalSettings:
    commit_interval_ms: int = 5  # wal.commit.interval.ms
    buffer_max_bytes: int = 8 * 2**20  # wal.buffer.max.bytes
    max_pending_bytes: int = 64 * 2**20  # wal.max.pending.bytes
    max_in_flight: int = 4
    orphan_grace_ms: int = 10 * 60_000  # an uncommitted object older than this is garbage


@dataclass(slots=True)
class _Pending:
    topic: str
    partition: int
    base_offset: int
    last_offset: int
    leader_epoch: int
    data: bytes
    done: asyncio.Future[None] = field(repr=False)
    submitted_s: float = 0.0  # time.perf_counter() at submission
    topic_id: uuid.UUID | None = None  # the topic appended to; None: whichever holds the name at the commit

    @property
    def partition_key(self) -> tuple[str, int, uuid.UUID | None]:
        """Which partition of which topic: two topics of one name (deleted, made again) are two."""
        return self.topic, self.partition, self.topic_id


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
        self._keys_in_flight: set[str] = set()  # PUT or about to be, not yet committed or given up
        self._last_commit: asyncio.Future[None] | None = None  # the newest object's commit, done or given up
        self._hedge = HedgePolicy()
        self.objects_committed = 0
        self.epoch_marks = EpochMarks(bucket)  # where each leadership began, for bucket readers
        # This node's objects sealed before then are its earlier processes' (this one holds
        # the data directory they wrote): none commits any more, so those not recorded are
        # garbage at once, not after the grace period (bucket readers would take them).
        self.orphans_final_before_ms: int | None = None

    # --- what leaders call -----------------------------------------------------------------

    def submit(
        self, topic: str, partition: int, leader_epoch: int, base_offset: int, last_offset: int, data: bytes,
        topic_id: uuid.UUID | None = None,
    ) -> asyncio.Future[None]:
        """Queue one appended batch; the future completes when it is durable. `topic_id`: the
        leader's topic, so that the commit is refused if the topic was deleted meanwhile, even
        if made again under its name (WalBatch)."""
        if self._closing:
            raise WalBackpressure(self._pending_bytes, self.settings.max_pending_bytes, "the broker is shutting down")
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._buffer.append(_Pending(topic, partition, base_offset, last_offset, leader_epoch, data, done, time.perf_counter(), topic_id))
        self._buffer_bytes += len(data)
        self._pending_bytes += len(data)
        metrics.WAL_PENDING_BYTES.set(self._pending_bytes)
        self._sealable.set()
        return done

    def check_room(self) -> None:
        """Raise WalBackpressure if too much waits to become durable (before appending)."""
        if self._pending_bytes > self.settings.max_pending_bytes:
            raise WalBackpressure(self._pending_bytes, self.settings.max_pending_bytes, "is the bucket reachable?")

    # --- life cycle ------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="wal-writer")

    async def drain(self, timeout_s: float = 10.0) -> None:
        """Controlled shutdown: return once everything submitted so far is durable (or failed),
        the writer still running."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while (self._buffer or self._uploads) and asyncio.get_running_loop().time() < deadline:
            if self._uploads:
                await asyncio.wait(set(self._uploads), timeout=max(0.0, deadline - asyncio.get_running_loop().time()))
            else:
                self._sealable.set()
                await asyncio.sleep(self.settings.commit_interval_ms / 1000)

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
        await self.epoch_marks.stop()

    # --- group commit ----------------------------------------------------------------------

    async def _run(self) -> None:
        # At most one object per interval, counted from the previous seal, not from the first
        # batch: a batch arriving after a quiet spell is sealed at once (it waits for nothing
        # but its PUT and commit), while under load the interval's batches gather into one
        # object. PUTs per second stay at most 1000 / commit_interval_ms either way (a full
        # buffer, wal.buffer.max.bytes, seals early: that bound is in bytes, not requests).
        interval = self.settings.commit_interval_ms / 1000
        loop = asyncio.get_running_loop()
        last_seal = -interval
        while True:
            await self._sealable.wait()
            self._sealable.clear()
            wait = last_seal + interval - loop.time()
            if wait > 0 and self._buffer_bytes < self.settings.buffer_max_bytes:
                await asyncio.sleep(wait)  # let the interval's batches gather
            if self._buffer:
                await self._slots.acquire()
                last_seal = loop.time()
                self._seal(acquired=True)

    def _seal(self, acquired: bool = False) -> None:
        batch, self._buffer, self._buffer_bytes = self._buffer, [], 0
        previous, self._last_commit = self._last_commit, asyncio.get_running_loop().create_future()
        task = asyncio.create_task(self._upload(batch, acquired, previous, self._last_commit), name="wal-upload")
        self._uploads.add(task)
        task.add_done_callback(self._uploads.discard)

    async def _upload(self, pending: list[_Pending], acquired: bool, previous: asyncio.Future[None] | None, committed: asyncio.Future[None]) -> None:
        key = wal_object_key(self.node_id, self.clock(), new_upload_id())
        self._keys_in_flight.add(key)  # before the PUT: the orphan collector must not take it
        try:
            data, entries = encode_wal_object(
                [(p.topic, p.partition, p.base_offset, p.last_offset, p.leader_epoch, p.data, p.topic_id) for p in pending]
            )
            await self._retrying(f"PUT of write-ahead object {key}", "put", lambda: self._put(key, data))
            if previous is not None:
                await asyncio.wait([previous])  # commits in seal order (module header)
            live = list(zip(pending, entries))
            while live:
                rows = [
                    WalBatch(p.topic, p.partition, p.base_offset, p.last_offset, p.leader_epoch, key, e.position, e.size_bytes, p.topic_id)
                    for p, e in live
                ]
                try:
                    await self._retrying(f"commit of write-ahead object {key}", "commit", lambda: self.store.commit_wal_object(key, rows))
                    break
                except _NOT_OURS as exc:
                    # That partition is no longer ours (or no longer exists): its batches will
                    # never be durable through this broker; the others commit without them.
                    stale = {p.partition_key for p, _ in live if _names(exc, p)}
                    if not stale:  # cannot tell which partition: give up on all rather than loop
                        stale = {p.partition_key for p, _ in live}
                    for p, _ in live:
                        if p.partition_key in stale:
                            metrics.WAL_FENCED_BATCHES.inc()
                            self._finish(p, exc)
                    live = [(p, e) for p, e in live if p.partition_key not in stale]
            for p, _ in live:
                self._finish(p, None)
            if live:
                self.objects_committed += 1
                metrics.WAL_OBJECTS_COMMITTED.inc()
                metrics.WAL_BATCHES_COMMITTED.inc(len(live))
                metrics.WAL_BYTES.inc(len(data))
                metrics.WAL_COMMIT_TIME.observe(time.perf_counter() - pending[0].submitted_s)
        except asyncio.CancelledError:
            for p in pending:
                self._finish(p, WalBackpressure(self._pending_bytes, self.settings.max_pending_bytes, "the broker is shutting down"))
            raise
        finally:
            if not committed.done():
                committed.set_result(None)
            self._keys_in_flight.discard(key)
            if acquired:
                self._slots.release()

    async def _put(self, key: str, data: bytes) -> None:
        """PUT the object; past the hedge delay, a second identical PUT beside it (hedge.py)."""
        started = time.perf_counter()
        delay = self._hedge.delay()
        attempts = [asyncio.ensure_future(self._put_once(key, data))]
        try:
            done, _ = await asyncio.wait(attempts, timeout=delay)
            if not done:
                metrics.WAL_HEDGED_PUTS.inc()
                attempts.append(asyncio.ensure_future(self._put_once(key, data)))
            failure: BaseException | None = None
            for finished in asyncio.as_completed(attempts):
                try:
                    await finished
                    self._hedge.record(time.perf_counter() - started)
                    return
                except Exception as exc:  # the other may still succeed
                    failure = exc
            assert failure is not None
            raise failure
        finally:
            for attempt in attempts:
                attempt.cancel()
            await asyncio.gather(*attempts, return_exceptions=True)

    async def _put_once(self, key: str, data: bytes) -> None:
        try:
            await self.bucket.put(key, data, if_none_match=True)
        except PreconditionFailed:
            pass  # an earlier try (or the hedge) landed: the key is ours, the bytes the same

    async def _retrying(self, what: str, step: str, attempt: Callable[[], object]) -> None:
        backoff = RETRY_BACKOFF_MS
        failures = 0
        while True:
            try:
                await attempt()  # type: ignore[misc]
                if failures:
                    log.info("%s succeeded after %d failed tr%s", what, failures, "y" if failures == 1 else "ies")
                return
            except _NOT_OURS:
                raise
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                metrics.WAL_RETRIES.labels(step).inc()
                failures += 1
                # The first failure of an object's streak is a WARNING, the rest DEBUG: through
                # an outage every object in flight retries every few seconds, and the store
                # itself says once that it does not answer (cold_tier.health).
                log.log(logging.WARNING if failures == 1 else logging.DEBUG, "%s failed (%s); retrying in %d ms", what, exc, backoff)
                # Cut short when the bucket answers again: objects commit in seal order, so one
                # object still sitting out its back-off would hold back every later one.
                await retry_wait(self.bucket, backoff * random.uniform(0.5, 1.0) / 1000)
                backoff = min(backoff * 2, RETRY_MAX_BACKOFF_MS)

    def _finish(self, pending: _Pending, exc: BaseException | None) -> None:
        self._pending_bytes -= len(pending.data)
        metrics.WAL_PENDING_BYTES.set(self._pending_bytes)
        if not pending.done.done():
            if exc is None:
                pending.done.set_result(None)
            else:
                pending.done.set_exception(exc)

    # --- clean-up ----------------------------------------------------------------------------

    async def collect_garbage(self) -> int:
        """Delete committed objects none of whose batches is still needed, then this node's
        objects never committed and older than the grace period; returns how many went."""
        keys = await self.store.list_unreferenced_wal_objects()
        for key in keys:
            await self.bucket.delete(key)  # first: a row without its object would be a lie
            await self.store.delete_wal_object(key)
            metrics.WAL_OBJECTS_DELETED.labels("committed").inc()
        if keys:
            log.info("deleted %d write-ahead object(s) whose batches are all in segments", len(keys))
        return len(keys) + await self._collect_orphans()

    async def _collect_orphans(self) -> int:
        # Candidates: old by the time in their key, and not an upload this writer still runs
        # (a PUT retried for longer than the grace period must still find its object).
        older_than_ms = self.clock() - self.settings.orphan_grace_ms
        if self.orphans_final_before_ms is not None:
            older_than_ms = max(older_than_ms, self.orphans_final_before_ms)
        candidates = []
        for info in await self.bucket.list(f"{WAL_PREFIX}{self.node_id}/"):
            parsed = parse_wal_object_key(info.key)
            if parsed is not None and parsed[1] < older_than_ms and info.key not in self._keys_in_flight:
                candidates.append(info.key)
        if not candidates:
            return 0
        recorded = await self.store.recorded_wal_objects(candidates)
        orphans = [key for key in candidates if key not in recorded]
        if orphans:
            await self.bucket.delete_many(orphans)
            metrics.WAL_OBJECTS_DELETED.labels("orphan").inc(len(orphans))
            log.info("deleted %d write-ahead object(s) PUT but never committed, by an earlier process or over %d ms ago (the oldest %s)",
                     len(orphans), self.settings.orphan_grace_ms, orphans[0])  # fmt: skip
        return len(orphans)


def _names(exc: Exception, pending: _Pending) -> bool:
    """Whether a store error from a commit concerns `pending`'s partition."""
    if isinstance(exc, UnknownTopicId):  # the deleted topic's batches, not those of a topic made again under its name
        return exc.topic_id == pending.topic_id
    topic = getattr(exc, "topic", None) or getattr(exc, "name", None)
    partition = getattr(exc, "partition", None)
    return topic == pending.topic and (partition is None or partition == pending.partition)
