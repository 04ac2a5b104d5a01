"""Where each leadership of a partition began, written into the bucket for readers that have
only the bucket (Spark: spark_reader/wal.py rule 2).

A leader that takes a partition at epoch E, whose durable log then ends at O, PUTs the empty
object `T/P/epochs/E-O-I.epoch` (cold_tier/layout.py; I the topic's id, so that a mark of a
deleted topic landing late, from any broker, does not apply to one made again under its name). Every acknowledged record lies below O;
a write-ahead batch of a lower epoch that ends at or above O was written by a leader fenced
since, and never acknowledged. Without the mark a reader could only tell so once epoch E
wrote a batch there: an idle partition would show the fenced batches as records (until their
writer collected them, which a dead broker never does), and offsets a reader saw would
change once the new leader wrote.

The first leadership of a partition (epoch 1) fenced nobody and writes no mark. The PUTs run
in the background, a few at once, each retried until the bucket takes it (`if_none_match`:
an answer lost after the PUT landed finds its own object there) or its leader closed;
opening a partition does not wait for its mark, deleting a topic does (before its sweep).
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import Callable

from cold_tier.errors import PreconditionFailed
from cold_tier.health import retry_wait
from cold_tier.layout import epoch_key
from cold_tier.store import ObjectStore

log = logging.getLogger(__name__)

CONCURRENCY = 8
RETRY_BACKOFF_MS = 100
RETRY_MAX_BACKOFF_MS = 10_000


class EpochMarks:
    """Owns the marks being written, a task each (at most `concurrency` PUT at once); event-loop only."""

    def __init__(self, bucket: ObjectStore, concurrency: int = CONCURRENCY) -> None:
        self.bucket = bucket
        self._slots = asyncio.Semaphore(concurrency)
        self._tasks: dict[str, set[asyncio.Task[None]]] = {}  # by topic
        self._putting: set[asyncio.Task[None] | None] = set()  # those in a PUT now
        self.written = 0

    def mark(
        self, topic: str, topic_id: uuid.UUID, partition: int, leader_epoch: int, start_offset: int, wanted: Callable[[], bool]
    ) -> None:
        """Write the mark of a leadership taken at `leader_epoch` from `start_offset`, in the
        background, for as long as `wanted()` (the leader is still open): a mark of a deleted
        topic landing after its objects were swept would truncate a topic made again under
        its name."""
        if leader_epoch <= 1:
            return
        key = epoch_key(topic, partition, leader_epoch, start_offset, topic_id)
        task = asyncio.create_task(self._put(key, wanted), name="wal-epoch-mark")
        tasks = self._tasks.setdefault(topic, set())
        tasks.add(task)
        task.add_done_callback(lambda done: self._forget(topic, done))

    async def drain(self, topic: str | None = None) -> None:
        """Wait for the marks of `topic` (all marks: None) still being written, or in tests.
        After a topic's leaders closed (its objects are swept next): those not in a PUT are
        cancelled (one waiting for a slot or backing off would not notice for a while), the
        PUTs in flight awaited."""
        tasks = [t for name, ts in self._tasks.items() if topic is None or name == topic for t in ts]
        if topic is not None:
            for task in tasks:
                if task not in self._putting:
                    task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def stop(self) -> None:
        tasks = [t for ts in self._tasks.values() for t in ts]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _forget(self, topic: str, task: asyncio.Task[None]) -> None:
        tasks = self._tasks.get(topic)
        if tasks is not None:
            tasks.discard(task)
            if not tasks:
                del self._tasks[topic]

    async def _put(self, key: str, wanted: Callable[[], bool]) -> None:
        backoff = RETRY_BACKOFF_MS
        failures = 0
        async with self._slots:
            while wanted():
                try:
                    await self._put_once(key)
                except Exception as exc:
                    failures += 1
                    log.log(logging.WARNING if failures == 1 else logging.DEBUG, "writing leader epoch mark %s failed (%s); retrying", key, exc)
                    await retry_wait(self.bucket, backoff * random.uniform(0.5, 1.0) / 1000)
                    backoff = min(backoff * 2, RETRY_MAX_BACKOFF_MS)
                    continue
                self.written += 1
                return

    async def _put_once(self, key: str) -> None:
        task = asyncio.current_task()
        self._putting.add(task)
        try:
            await self.bucket.put(key, b"", if_none_match=True)
        except PreconditionFailed:
            pass  # there already: this mark, PUT by an earlier try whose answer was lost
        finally:
            self._putting.discard(task)
