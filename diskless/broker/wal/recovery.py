"""Recovery of a partition's tail from write-ahead objects, at start-up, before it serves.

The durable log is the committed segments plus the committed write-ahead batches above them
(the metadata store records both). The local log may hold less (its disk was lost, or a torn
tail was cut after a crash) or more (batches appended but not yet durable when the broker
stopped: acknowledged to acks=1 producers only). Recovery brings the local log up to the
durable end from the bucket, byte for byte and at the same offsets, and reports the durable
end, the high watermark the partition starts from; what the local log holds beyond it is
submitted to the writer again by the leader.

Every batch read back is checked: its CRC by the log's append validation, its offsets against
the store's record. A batch that cannot be read or does not match is logged (ERROR, with the
partition, its offsets, the object key and the reason), counted
(`diskless_wal_corrupt_batches_total{topic}`) and stops the recovery of that partition:
CorruptWalBatch propagates, so the partition does not serve a log with a hole and is not
written above it. This is what Kafka does with a log directory it cannot read (the partitions
in it go offline; KAFKA_STORAGE_ERROR, retriable, to clients) rather than what it does with a
torn local tail (truncate): these batches were acknowledged, and only the bucket has them.
The local log keeps what was appended before the unreadable batch; nothing is truncated, so
a repaired object (or a restored one) lets the next start-up finish the recovery.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from itertools import groupby

from cold_tier.store import ObjectStore
from hot_tier import Log
from metadata import MetadataStore, WalBatch

from .. import metrics
from ..errors import CorruptWalBatch

log = logging.getLogger(__name__)

RECOVERY_GETS_IN_FLIGHT = 16  # ranged GETs of write-ahead objects in flight per partition being rebuilt


async def recover_tail(
    log_: Log, store: MetadataStore, bucket: ObjectStore, topic: str, index: int, remote_end_offset: int, now_ms: int,
    on_truncate: Callable[[int], None] = lambda end: None, stored: bool = True,
) -> int:
    """Append to `log_` the durable batches it lacks; return the durable end offset.
    `on_truncate(end)` is told where the local log was cut before the appends (-1: all of it).
    `stored=False`: the store is known to hold no write-ahead batch of the partition."""
    batches = await store.list_wal_batches(topic, index, remote_end_offset) if stored else []
    durable_end = max(remote_end_offset, batches[-1].next_offset if batches else 0)
    local_end = log_.log_end_offset
    missing = [b for b in batches if b.last_offset >= local_end]
    if not missing:
        return durable_end
    first = missing[0]
    if first.base_offset < local_end:
        # The local log ends inside a durable batch: a torn write cut after a crash.
        log.warning("%s-%d: local log ends at %d inside durable batch %d-%d; rebuilding from %d",
                    topic, index, local_end, first.base_offset, first.last_offset, first.base_offset)  # fmt: skip
        log_.truncate_to(first.base_offset)
        on_truncate(first.base_offset)
    elif first.base_offset > local_end:
        log.error("%s-%d: local log ends at %d but the first durable batch above it starts at %d; continuing from there",
                  topic, index, local_end, first.base_offset)  # fmt: skip
        log_.truncate_fully_and_start_at(first.base_offset)
        on_truncate(-1)
    appended = 0
    runs = [list(group) for _, group in groupby(missing, key=lambda b: b.object_key)]
    # The ranged GETs run ahead of the appends, a window of them at a time (each costs a
    # request's latency to the bucket, and memory holds only the window); the batches are
    # appended in offset order as their bytes arrive.

    def fetch(run: list[WalBatch]) -> asyncio.Future[bytes]:
        start, end = min(b.position for b in run), max(b.position + b.size_bytes for b in run)
        return asyncio.ensure_future(bucket.get(run[0].object_key, start=start, end=end))

    fetches = [fetch(run) for run in runs[:RECOVERY_GETS_IN_FLIGHT]]
    try:
        for number, run in enumerate(runs):
            if number + RECOVERY_GETS_IN_FLIGHT < len(runs):
                fetches.append(fetch(runs[number + RECOVERY_GETS_IN_FLIGHT]))
            start = min(b.position for b in run)
            try:
                data = await fetches[number]
            except Exception as exc:
                _report(run[0], run[-1], durable_end, f"cannot be read: {exc}")
                raise CorruptWalBatch(topic, index, run[0].base_offset, run[0].object_key, f"cannot be read: {exc}") from exc
            for batch in run:
                try:
                    _append(log_, batch, data[batch.position - start : batch.position - start + batch.size_bytes], now_ms)
                except CorruptWalBatch as exc:
                    _report(batch, batch, durable_end, str(exc.__cause__ or exc))
                    raise
                appended += 1
    finally:
        for pending in fetches:
            pending.cancel()
        await asyncio.gather(*fetches, return_exceptions=True)
    log.info("%s-%d: rebuilt %d batch(es) from write-ahead objects; the log ends at %d",
             topic, index, appended, log_.log_end_offset)  # fmt: skip
    return durable_end


def _report(first: WalBatch, last: WalBatch, durable_end: int, reason: str) -> None:
    metrics.WAL_CORRUPT_BATCHES.labels(first.topic).inc()
    log.error(
        "%s-%d: durable batch(es) at offsets %d-%d in write-ahead object %s (bytes %d-%d) %s; the partition stays "
        "offline rather than serve a log with a hole (durable end %d); repair or restore the object and restart",
        first.topic, first.partition, first.base_offset, last.last_offset, first.object_key, first.position,
        last.position + last.size_bytes, reason, durable_end,
    )  # fmt: skip


def _append(log_: Log, batch: WalBatch, data: bytes, now_ms: int) -> None:
    if len(data) != batch.size_bytes:
        raise CorruptWalBatch(batch.topic, batch.partition, batch.base_offset, batch.object_key, f"holds {len(data)} of {batch.size_bytes} bytes")
    try:
        info = log_.append(bytearray(data), now_ms, leader_epoch=batch.leader_epoch, keep_offsets=True)
    except Exception as exc:  # CorruptBatch and friends: the bytes are not the batch recorded
        raise CorruptWalBatch(batch.topic, batch.partition, batch.base_offset, batch.object_key, str(exc)) from exc
    if (info.first_offset, info.last_offset) != (batch.base_offset, batch.last_offset):
        raise CorruptWalBatch(
            batch.topic, batch.partition, batch.base_offset, batch.object_key,
            f"holds offsets {info.first_offset}-{info.last_offset}, the store recorded {batch.base_offset}-{batch.last_offset}",
        )  # fmt: skip
