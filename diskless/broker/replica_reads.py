"""Reads from any broker (KIP-392's preferred read replica), from the bucket alone.

Every acknowledged batch is in the bucket: committed segments, then durable write-ahead
batches above them. So any broker can serve a partition it does not lead, up to its durable
end (the leader's high watermark as of its last write-ahead commit), without data copied
between brokers. With `replica.selector.class` set to Kafka's RackAwareReplicaSelector, a
leader answers a consumer whose `client.rack` names another rack with a live broker of that
rack as its preferred read replica (chosen by partition, so a rack's brokers share them), and
no records; the consumer then fetches there. Unset (Kafka's default), only leaders serve.

What a read replica serves: consumers' fetches of partitions led elsewhere whose every
acknowledged batch is in the bucket (tiered, with write-ahead objects: a leader names no
replica for the others). A replica cannot tell an open or aborted transaction from a
committed one, so a leader sends read_committed consumers to a replica only for partitions
that, as far as it saw every batch, never held a transactional one (`known_transaction_free`:
a leader that opened above history only in the bucket cannot vouch for it), and the replica
serves read_committed fetches up to the first transactional or control batch; one starting
there is answered NOT_LEADER_OR_FOLLOWER, and the client goes back to the leader (which by
then has seen that batch, so it serves it itself). Its view of a partition (log start, segments, the write-ahead batches above them)
is read from the metadata store and kept `VIEW_MAX_AGE_S`, shared by every fetch of that
partition; record bytes come through the broker-wide segment reader and ranged GETs of
write-ahead objects. A fetch at the durable end long-polls by re-reading the view. Offsets
below the log start answer OFFSET_OUT_OF_RANGE, after which clients go back to the leader.

Only the event-loop task calls it.
"""

from __future__ import annotations

import asyncio
import struct
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from cold_tier.layout import CommittedSegment, parse_commit_key
from hot_tier.errors import OffsetOutOfRange
from metadata import BrokerRegistration, MetadataStore, WalBatch

from .tiering.remote_log import RemoteStorage

VIEW_MAX_AGE_S = 0.1  # how stale a read replica's view of a partition may be (and its poll interval)
RACK_AWARE_SELECTORS = frozenset({"org.apache.kafka.common.replica.RackAwareReplicaSelector", "RackAwareReplicaSelector", "rack"})


_ATTRIBUTES = struct.Struct(">h")
_TRANSACTIONAL_OR_CONTROL = 0x30  # attribute bits 4 and 5 of a record batch


def transaction_free_prefix(data: bytes | memoryview) -> int:
    """How many bytes of whole batches `data` holds before its first transactional or control batch."""
    position = 0
    while position + 23 <= len(data):
        length = int.from_bytes(data[position + 8 : position + 12], "big")
        (attributes,) = _ATTRIBUTES.unpack_from(data, position + 21)
        if attributes & _TRANSACTIONAL_OR_CONTROL:
            return position
        position += 12 + length
    return min(position, len(data))


def preferred_read_replica(
    brokers: Iterable[BrokerRegistration], me: int, client_rack: str, topic: str, partition: int
) -> int | None:
    """The live broker a consumer in `client_rack` should fetch `topic`-`partition` from, or
    None: serve it here (this broker is in that rack, or no broker is)."""
    in_rack = sorted(b.node_id for b in brokers if b.rack == client_rack)
    if not client_rack or not in_rack or me in in_rack:
        return None
    return in_rack[zlib.crc32(f"{topic}-{partition}".encode()) % len(in_rack)]


@dataclass(frozen=True, slots=True)
class BucketView:
    """What the bucket holds of one partition, as the store recorded it."""

    log_start_offset: int
    segments: tuple[CommittedSegment, ...]
    batches: tuple[WalBatch, ...]  # durable write-ahead batches, contiguous from the segments' end
    read_at: float

    @property
    def remote_end(self) -> int:
        return self.segments[-1].next_offset if self.segments else self.log_start_offset

    @property
    def durable_end(self) -> int:
        return self.batches[-1].last_offset + 1 if self.batches else self.remote_end


def contiguous(batches: Iterable[WalBatch], start: int) -> tuple[WalBatch, ...]:
    """The batches that continue the log from `start`, in offset order, up to the first gap
    (a batch wholly below the next offset is inside a segment already: skipped; the first may
    begin below `start`, the log start having moved into it)."""
    chain: list[WalBatch] = []
    next_offset = start
    for batch in sorted(batches, key=lambda b: b.base_offset):
        if batch.last_offset < next_offset:
            continue
        if batch.base_offset > next_offset or (chain and batch.base_offset != next_offset):
            break
        chain.append(batch)
        next_offset = batch.last_offset + 1
    return tuple(chain)


class BucketReplica:
    def __init__(self, store: MetadataStore, storage: RemoteStorage, clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.storage = storage
        self._clock = clock
        self._views: dict[tuple[str, int], asyncio.Future[BucketView]] = {}

    async def view(self, topic: str, partition: int) -> BucketView:
        """The partition's view, at most VIEW_MAX_AGE_S old; concurrent callers share one read."""
        key = (topic, partition)
        cached = self._views.get(key)
        if cached is not None and (not cached.done() or (cached.exception() is None and self._clock() - cached.result().read_at < VIEW_MAX_AGE_S)):
            return await asyncio.shield(cached)
        future = self._views[key] = asyncio.ensure_future(self._load(topic, partition))
        try:
            return await asyncio.shield(future)
        except Exception:
            if self._views.get(key) is future:
                del self._views[key]
            raise

    async def _load(self, topic: str, partition: int) -> BucketView:
        read_at = self._clock()
        log_start = (await self.store.get_log_start_offsets(topic)).get(partition, 0)
        rows = await self.store.list_remote_segments(topic, partition)
        segments = tuple(parse_commit_key(row.object_key) for row in rows)
        remote_end = segments[-1].next_offset if segments else log_start
        batches = contiguous(await self.store.list_wal_batches(topic, partition, remote_end), remote_end)
        return BucketView(log_start, segments, batches, read_at)

    async def read(self, topic: str, partition: int, offset: int, max_bytes: int, *, min_one_batch: bool) -> tuple[bytes | None, BucketView]:
        """Whole batches from the one holding `offset`, at most `max_bytes` (or the first one
        alone when `min_one_batch`), and the view they were read by; None at the durable end."""
        view = await self.view(topic, partition)
        if offset < view.log_start_offset or offset > view.durable_end:
            raise OffsetOutOfRange(offset, view.log_start_offset, view.durable_end)
        if offset == view.durable_end:
            return None, view
        if offset < view.remote_end:
            return await self.storage.reader.read(list(view.segments), offset, max_bytes, min_one_batch=min_one_batch), view
        return await self._read_batches(view, offset, max_bytes, min_one_batch), view

    async def _read_batches(self, view: BucketView, offset: int, max_bytes: int, min_one_batch: bool) -> bytes | None:
        chosen: list[WalBatch] = []
        size = 0
        for batch in view.batches:
            if batch.last_offset < offset:
                continue
            if size + batch.size_bytes > max_bytes and (chosen or not min_one_batch):
                break
            chosen.append(batch)
            size += batch.size_bytes
        if not chosen:
            return None
        runs: list[list[WalBatch]] = []
        for batch in chosen:  # one ranged GET per object
            if runs and runs[-1][0].object_key == batch.object_key:
                runs[-1].append(batch)
            else:
                runs.append([batch])
        parts = await asyncio.gather(*(self._get_run(run) for run in runs))
        return b"".join(parts)

    async def _get_run(self, run: list[WalBatch]) -> bytes:
        start = min(b.position for b in run)
        end = max(b.position + b.size_bytes for b in run)
        data = await self.storage.bucket.get(run[0].object_key, start=start, end=end)
        return b"".join(bytes(data[b.position - start : b.position - start + b.size_bytes]) for b in run)
