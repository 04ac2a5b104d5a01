"""Where each leadership of a partition began, written into the bucket for readers that have
only the bucket (Spark: spark_reader/wal.py rule 2).

A leader that takes a partition at epoch E, whose durable log then ends at O, PUTs the empty
object `T/P/epochs/E-O.epoch` (cold_tier/layout.py). Every acknowledged record lies below O;
a write-ahead batch of a lower epoch that ends at or above O was written by a leader fenced
since, and never acknowledged. Without the mark a reader could only tell so once epoch E
wrote a batch there: an idle partition would show the fenced batches as records (until their
writer collected them, which a dead broker never does), and offsets a reader saw would
change once the new leader wrote.

The first leadership of a partition (epoch 1) fenced nobody and writes no mark. The PUTs run
in the background, a few at once, each retried until the bucket takes it (`if_none_match`:
an answer lost after the PUT landed finds its own object there); opening a partition does not
wait for its mark.
"""

from __future__ import annotations

import asyncio
import logging
import random

from cold_tier.errors import PreconditionFailed
from cold_tier.health import retry_wait
from cold_tier.layout import epoch_key
from cold_tier.store import ObjectStore

log = logging.getLogger(__name__)

CONCURRENCY = 8
RETRY_BACKOFF_MS = 100
RETRY_MAX_BACKOFF_MS = 10_000


class EpochMarks:
    """Owns the queue of marks to write and the tasks writing them; event-loop only."""

    def __init__(self, bucket: ObjectStore, concurrency: int = CONCURRENCY) -> None:
        self.bucket = bucket
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._concurrency = concurrency
        self._workers: list[asyncio.Task[None]] = []
        self.written = 0

    def mark(self, topic: str, partition: int, leader_epoch: int, start_offset: int) -> None:
        """Queue the mark of a leadership taken at `leader_epoch` from `start_offset`."""
        if leader_epoch <= 1:
            return
        self._queue.put_nowait(epoch_key(topic, partition, leader_epoch, start_offset))
        if not self._workers:
            self._workers = [asyncio.create_task(self._work(), name="wal-epoch-marks") for _ in range(self._concurrency)]

    async def join(self) -> None:
        """Wait until every mark queued so far is in the bucket (tests, controlled shutdown)."""
        await self._queue.join()

    async def stop(self) -> None:
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []

    async def _work(self) -> None:
        while True:
            key = await self._queue.get()
            try:
                await self._put(key)
            finally:
                self._queue.task_done()

    async def _put(self, key: str) -> None:
        backoff = RETRY_BACKOFF_MS
        failures = 0
        while True:
            try:
                await self.bucket.put(key, b"", if_none_match=True)
            except PreconditionFailed:
                pass  # there already: this mark, PUT by an earlier try whose answer was lost
            except Exception as exc:
                failures += 1
                log.log(logging.WARNING if failures == 1 else logging.DEBUG, "writing leader epoch mark %s failed (%s); retrying", key, exc)
                await retry_wait(self.bucket, backoff * random.uniform(0.5, 1.0) / 1000)
                backoff = min(backoff * 2, RETRY_MAX_BACKOFF_MS)
                continue
            self.written += 1
            return
