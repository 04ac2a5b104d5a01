"""`RemoteLogReader`: a partition's history read from the bucket, the way Kafka's remote fetch does.

A read (`read(segments, offset, max_bytes)`) is:

1. the segment for `offset` (remote_scan.segment_for_offset: bisect the catalogue; an offset
   in a gap starts at the next segment's first batch);
2. a byte position at or before the batch holding `offset`: 0 when the offset is at or before
   the segment's base offset, else the segment's .index object (one GET of the whole object,
   parsed and kept in an LRU of `index_cache_entries` indexes) looked up for the last entry
   <= offset;
3. a forward scan of batch headers from there to the first batch whose last offset is >=
   `offset` (remote_scan.peek_batch; records are not decoded), then whole batches up to
   `max_bytes`, or the first alone if larger and `min_one_batch` (KIP-74). One segment per
   call, as Kafka's remote fetch: the next call starts at the next segment. The CRC of every
   returned batch is checked (cheap: CRC-32C runs at ~15 GiB/s), since the bytes come from
   outside the process;
4. prefetch: after serving, the next `prefetch_chunks` chunks after the last one the read
   touched are fetched in the background, continuing into the next segment's first chunks at
   a segment's end, so a sequential consumer finds its next bytes cached instead of waiting
   a request's latency.

All .log bytes go through aligned chunks of `chunk_bytes` ([k*C, (k+1)*C), chunks.py) fetched
with ranged GETs into one LRU bounded by `cache_bytes`. Every GET (chunk or index) runs as
one task registered by its key while in flight: a read that needs a chunk a prefetch is
already fetching awaits that same GET, and concurrent readers of one chunk share one GET.
Prefetches are hints: at most `max_prefetch_in_flight` at once, others are skipped.

Errors: an object that is gone (retention deleted the segment after the caller listed it)
raises `RemoteSegmentMissing(segment, key)`; bytes that cannot be trusted raise
`CorruptSegmentObject`; store failures (`StoreUnavailable`, ...) pass through unchanged.

Counts (`stats`, a `ReaderStats`): each read is a cache hit when it awaited no GET (every chunk
and index it needed was cached), else a miss, so hits + misses = reads returned; lookups of
chunks and of index objects are counted hits or misses the same way (a lookup that joins a GET
already in flight, a prefetch's for instance, is a miss: it waited); GETs are counted by what
started them. Plain integers: the broker's metrics read them at scrape time.

Sharing: one reader serves every partition of a broker, from the tasks of one event loop.
Every call awaits its I/O and holds no lock, so a slow partition never holds up another.
Cached objects are immutable (committed segments are never modified), so there is nothing to
invalidate but segments that were deleted: `forget(segment)`. `close()` cancels the GETs in
flight; reads after it raise `ReaderClosed`.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from hot_tier.records.batch import decode_batch
from hot_tier.records.errors import CorruptBatch
from hot_tier.records.header import iter_headers

from .chunks import LruCache, chunk_of, chunk_span, chunks_covering, join_range, prefetch_targets
from .errors import ObjectNotFound
from .layout import CommittedSegment
from .remote_errors import CorruptSegmentObject, ReaderClosed, RemoteSegmentMissing
from .remote_index import RemoteOffsetIndex, RemoteTimeIndex, parse_offset_index, parse_time_index
from .remote_scan import PEEK_BYTES, BatchPeek, peek_batch, segment_for_offset, take_whole_batches
from .store import ObjectStore

MIB = 1024 * 1024
DEFAULT_CHUNK_BYTES = 4 * MIB
DEFAULT_CACHE_BYTES = 128 * MIB

# In-flight and cache keys: (kind, object key[, chunk]).
_LOG, _INDEX, _TIME_INDEX = "log", "index", "timeindex"


@dataclass(slots=True)
class ReaderStats:
    """What a reader did since it was made; only its event loop's tasks write it."""

    read_hits: int = 0  # reads that awaited no GET
    read_misses: int = 0  # reads that awaited at least one GET (theirs or one in flight)
    chunk_hits: int = 0
    chunk_misses: int = 0
    index_hits: int = 0  # offset and time index objects
    index_misses: int = 0
    chunk_gets: int = 0  # ranged GETs of .log chunks started for a read
    prefetch_gets: int = 0  # ranged GETs of .log chunks started by prefetch
    index_gets: int = 0
    cached_chunk_bytes: int = 0  # set by `RemoteLogReader.stats`
    cached_indexes: int = 0


class _ReadTally:
    """Whether the read in progress (in this task's context) awaited a GET."""

    __slots__ = ("missed",)

    def __init__(self) -> None:
        self.missed = False


_READ: contextvars.ContextVar[_ReadTally | None] = contextvars.ContextVar("remote_read", default=None)


def _missed() -> None:
    tally = _READ.get()
    if tally is not None:
        tally.missed = True


class RemoteLogReader:
    def __init__(
        self,
        store: ObjectStore,
        *,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        prefetch_chunks: int = 2,
        index_cache_entries: int = 1024,
        max_prefetch_in_flight: int = 32,
    ) -> None:
        if chunk_bytes <= 0:
            raise ValueError(f"chunk_bytes must be positive, got {chunk_bytes}")
        if prefetch_chunks < 0 or max_prefetch_in_flight < 0 or cache_bytes < 0 or index_cache_entries < 0:
            raise ValueError("cache sizes and prefetch counts must be >= 0")
        self._store = store
        self._chunk_bytes = chunk_bytes
        self._prefetch_chunks = prefetch_chunks
        self._max_prefetch_in_flight = max_prefetch_in_flight
        self._chunks: LruCache[tuple, bytes] = LruCache(cache_bytes, len)
        self._indexes: LruCache[tuple, Any] = LruCache(index_cache_entries)
        self._in_flight: dict[Hashable, asyncio.Task] = {}
        self._tasks: set[asyncio.Task] = set()
        self._prefetches: set[asyncio.Task] = set()
        self._closed = False
        self._stats = ReaderStats()

    @property
    def chunk_bytes(self) -> int:
        return self._chunk_bytes

    @property
    def stats(self) -> ReaderStats:
        """The counts so far, with the caches' present sizes."""
        self._stats.cached_chunk_bytes = self._chunks.weight
        self._stats.cached_indexes = len(self._indexes)
        return self._stats

    async def __aenter__(self) -> RemoteLogReader:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- reads -----------------------------------------------------------------------------

    async def read(
        self, segments: Sequence[CommittedSegment], offset: int, max_bytes: int, *, min_one_batch: bool = True
    ) -> bytes | None:
        """Whole batches from the one holding `offset` (or the first after it), from one segment.

        `segments` is the partition's catalogue, sorted by base offset. At most `max_bytes`,
        unless `min_one_batch` and the first batch alone is larger: then that batch. None when
        `offset` is at or past the last segment's next offset, or the first batch does not fit
        and not `min_one_batch`. RemoteOffsetOutOfRange below the first segment.
        """
        self._check_open("read")
        tally = _ReadTally()
        token = _READ.set(tally)
        try:
            records = await self._read(segments, offset, max_bytes, min_one_batch)
        finally:
            _READ.reset(token)
        if tally.missed:
            self._stats.read_misses += 1
        else:
            self._stats.read_hits += 1
        return records

    async def _read(self, segments: Sequence[CommittedSegment], offset: int, max_bytes: int, min_one_batch: bool) -> bytes | None:
        at = segment_for_offset(segments, offset)
        if at is None:
            return None
        first: BatchPeek | None = None
        while at < len(segments):
            first = await self._first_batch(segments[at], offset)
            if first is not None:
                break
            at += 1  # the segment ends before `offset` (its commit key overstated it): go on
        if first is None:
            return None
        segment = segments[at]
        if first.size_bytes > max_bytes and not min_one_batch:
            return None
        window_end = min(segment.size_bytes, first.position + max(max_bytes, first.size_bytes))
        window = await self._read_range(segment, first.position, window_end)
        try:
            taken = take_whole_batches(window, max_bytes, min_one_batch=min_one_batch)
            records = bytes(window[:taken])
            for _ in iter_headers(records, check_crc=True):
                pass
        except CorruptBatch as error:
            position = first.position + error.position
            raise CorruptSegmentObject(segment.log_key, f"at position {position}: {error.reason}") from None
        self._prefetch(segments, at, chunk_of(window_end - 1, self._chunk_bytes))
        return records

    async def offset_for_timestamp(
        self, segments: Sequence[CommittedSegment], timestamp: int, *, log_start_offset: int | None = None
    ) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record at or after `log_start_offset` (default: the
        first segment's base offset) whose timestamp is >= `timestamp`, or None.

        Kafka's findOffsetByTimestamp: the first segment whose max timestamp reaches the target;
        its time index gives a starting offset, its offset index a position; headers are
        scanned to the first batch whose max timestamp reaches the target, and only such
        batches are decoded.
        """
        self._check_open("offset_for_timestamp")
        if not segments:
            return None
        start_offset = segments[0].base_offset if log_start_offset is None else log_start_offset
        for segment in segments:
            if segment.max_timestamp < timestamp or segment.last_offset < start_offset:
                continue
            found = await self._find_by_timestamp(segment, timestamp, start_offset)
            if found is not None:
                return found
        return None

    def forget(self, segment: CommittedSegment) -> None:
        """Drop everything cached for `segment` (deleted by retention). GETs of it already in
        flight finish for whoever awaits them, but their results are not cached."""
        keys = {segment.log_key, segment.index_key, segment.time_index_key}
        self._chunks.discard_where(lambda key: key[1] in keys)
        self._indexes.discard_where(lambda key: key[1] in keys)
        for key in [key for key in self._in_flight if key[1] in keys]:  # type: ignore[index]
            del self._in_flight[key]

    async def close(self) -> None:
        """Cancel every GET in flight (prefetches and reads) and drop the caches."""
        self._closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._in_flight.clear()
        self._chunks.clear()
        self._indexes.clear()

    # -- the scan --------------------------------------------------------------------------

    async def _first_batch(self, segment: CommittedSegment, offset: int) -> BatchPeek | None:
        """The first batch of `segment` whose last offset is >= `offset`, or None."""
        position = await self._position_at_or_before(segment, offset)
        while position < segment.size_bytes:
            batch = await self._peek(segment, position)
            if batch.last_offset >= offset:
                return batch
            position = batch.end_position
        return None

    async def _find_by_timestamp(
        self, segment: CommittedSegment, timestamp: int, start_offset: int
    ) -> tuple[int, int] | None:
        indexed = (await self._time_index(segment)).lookup(timestamp)
        position = await self._position_at_or_before(segment, max(indexed.offset, start_offset))
        while position < segment.size_bytes:
            batch = await self._peek(segment, position)
            if batch.max_timestamp >= timestamp and batch.last_offset >= start_offset:
                data = await self._read_range(segment, position, batch.end_position)
                try:
                    records = decode_batch(data, check_crc=True).records
                except CorruptBatch as error:
                    raise CorruptSegmentObject(segment.log_key, f"at position {position}: {error.reason}") from None
                for record in records:
                    if record.timestamp >= timestamp and record.offset >= start_offset:
                        return record.timestamp, record.offset
            position = batch.end_position
        return None

    async def _position_at_or_before(self, segment: CommittedSegment, offset: int) -> int:
        if offset <= segment.base_offset:
            return 0  # no index GET for a read from the segment's start
        return (await self._offset_index(segment)).lookup(offset).position

    async def _peek(self, segment: CommittedSegment, position: int) -> BatchPeek:
        header = await self._read_range(segment, position, min(position + PEEK_BYTES, segment.size_bytes))
        try:
            batch = peek_batch(header, position)
        except CorruptBatch as error:
            raise CorruptSegmentObject(segment.log_key, f"at position {position}: {error.reason}") from None
        if batch.end_position > segment.size_bytes:
            raise CorruptSegmentObject(
                segment.log_key,
                f"the batch at position {position} ({batch.size_bytes} bytes) runs past the end"
                f" ({segment.size_bytes} bytes)",
            )
        return batch

    # -- chunks and indexes ----------------------------------------------------------------

    async def _read_range(self, segment: CommittedSegment, start: int, end: int) -> bytes | memoryview:
        """The bytes [start, end) of the segment's .log, through the chunk cache."""
        chunks = chunks_covering(start, end, self._chunk_bytes)
        parts: list[bytes | None] = [self._chunks.get((_LOG, segment.log_key, chunk)) for chunk in chunks]
        missing = [slot for slot, part in enumerate(parts) if part is None]
        self._stats.chunk_hits += len(parts) - len(missing)
        if missing:
            self._stats.chunk_misses += len(missing)
            _missed()
            fetched = await asyncio.gather(*(self._chunk(segment, chunks[slot]) for slot in missing))
            for slot, data in zip(missing, fetched):
                parts[slot] = data
        return join_range(parts, chunks.start, start, end, self._chunk_bytes)  # type: ignore[arg-type]

    async def _chunk(self, segment: CommittedSegment, chunk: int) -> bytes:
        key = (_LOG, segment.log_key, chunk)
        data = self._chunks.get(key)
        if data is not None:
            return data
        task = self._in_flight.get(key)
        if task is None:
            self._stats.chunk_gets += 1
            task = self._start(key, lambda: self._get_chunk(segment, chunk), self._chunks)
        return await self._join(task, segment)

    async def _get_chunk(self, segment: CommittedSegment, chunk: int) -> bytes:
        start, end = chunk_span(chunk, self._chunk_bytes, segment.size_bytes)
        data = await self._store.get(segment.log_key, start=start, end=end)
        if len(data) != end - start:
            raise CorruptSegmentObject(
                segment.log_key, f"object ends at {start + len(data)}, its commit says {segment.size_bytes} bytes"
            )
        return data

    async def _offset_index(self, segment: CommittedSegment) -> RemoteOffsetIndex:
        key = (_INDEX, segment.index_key)
        index = self._indexes.get(key)
        if self._index_looked_up(index):
            return index

        async def fetch() -> RemoteOffsetIndex:
            return parse_offset_index(segment, await self._store.get(segment.index_key))

        return await self._join(self._in_flight.get(key) or self._start_index_get(key, fetch), segment)

    async def _time_index(self, segment: CommittedSegment) -> RemoteTimeIndex:
        key = (_TIME_INDEX, segment.time_index_key)
        index = self._indexes.get(key)
        if self._index_looked_up(index):
            return index

        async def fetch() -> RemoteTimeIndex:
            return parse_time_index(segment, await self._store.get(segment.time_index_key))

        return await self._join(self._in_flight.get(key) or self._start_index_get(key, fetch), segment)

    def _index_looked_up(self, index: Any) -> bool:
        """Count a lookup in the index cache; True when it was a hit."""
        if index is not None:
            self._stats.index_hits += 1
            return True
        self._stats.index_misses += 1
        _missed()
        return False

    def _start_index_get(self, key: Hashable, fetch: Callable[[], Awaitable[Any]]) -> asyncio.Task:
        self._stats.index_gets += 1
        return self._start(key, fetch, self._indexes)

    def _start(self, key: Hashable, fetch: Callable[[], Awaitable[Any]], cache: LruCache) -> asyncio.Task:
        """Run `fetch` as the one in-flight GET for `key`; its result is cached on success
        unless `forget` detached it meanwhile."""

        async def run() -> Any:
            try:
                value = await fetch()
                if self._in_flight.get(key) is task:
                    cache.put(key, value)
                return value
            finally:
                if self._in_flight.get(key) is task:
                    del self._in_flight[key]

        task = asyncio.get_running_loop().create_task(run())
        self._in_flight[key] = task
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    async def _join(self, task: asyncio.Task, segment: CommittedSegment) -> Any:
        """Await a shared GET. Shielded: a cancelled reader must not cancel a GET that others
        (or the cache) still want."""
        try:
            return await asyncio.shield(task)
        except ObjectNotFound as error:
            raise RemoteSegmentMissing(segment, error.key) from None
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if task.cancelled() and self._closed and (current is None or current.cancelling() == 0):
                raise ReaderClosed("read") from None
            raise

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        self._prefetches.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a failed prefetch nobody awaited is not an error

    # -- prefetch --------------------------------------------------------------------------

    def _prefetch(self, segments: Sequence[CommittedSegment], at: int, last_chunk: int) -> None:
        if self._closed:
            return
        for slot, chunk in prefetch_targets(segments, at, last_chunk, self._prefetch_chunks, self._chunk_bytes):
            if len(self._prefetches) >= self._max_prefetch_in_flight:
                return
            segment = segments[slot]
            key = (_LOG, segment.log_key, chunk)
            if key in self._chunks or key in self._in_flight:
                continue
            self._stats.prefetch_gets += 1
            self._prefetches.add(self._start(key, lambda s=segment, c=chunk: self._get_chunk(s, c), self._chunks))

    def _check_open(self, operation: str) -> None:
        if self._closed:
            raise ReaderClosed(operation)
