"""Reading committed segments from the bucket: the body of a `BucketRange` task on a Spark
worker, and the timestamp lookups planning needs on the driver.

For each segment of a task the reader fetches only what it needs:

    .timeindex  one GET, only with a timestamp lower bound: skips the segment's prefix whose
                records are all older
    .index      one GET, only when the range starts or ends inside the segment: gives the
                byte range of the wanted offsets (segment_index.position_range)
    .log        ranged GETs of at most `chunk_bytes` over that byte range, a few in flight
                ahead of the decoding; a batch cut by a chunk's end is completed by the next GET

Slices of write-ahead objects (the tail above the segments, wal.py) are read by
wal_read.read_wal_slice, one ranged GET each; a slice whose object is gone (the broker deletes
an object once committed segments hold all its batches) is read from the partition's
catalogue as it is now, listed again.

Every batch is checked (length, magic, CRC, and a base offset at or after the previous
batch's next offset and inside the segment's commit range, since the CRC does not cover it)
before it is decoded, and decoding stops at the first batch past the range. A segment whose
objects are gone when read (a compacted copy swapped in after planning, whose replaced data
goes after `file.delete.delay.ms`; an orphan commit whose data is missing) is read, from the
first offset not yet handed to Spark, from what holds those offsets now: the partition's
catalogue listed again (one LIST per task; segments found missing are left out of it, so what
they shadowed wins), then, for offsets no segment holds, the write-ahead objects (one LIST of
`wal~/` and their indexes). Offsets nothing holds (retention deleted them) are `DataLoss`
with failOnDataLoss=true, else skipped with a warning, as Spark's Kafka source skips offsets
that are no longer there. Bytes that fail a check (a bad CRC, a base offset out of place, a .log
shorter than its commit says, a write-ahead batch that is not the one its index names) are
`CorruptSegment` / `CorruptWriteAheadObject`, naming the object, the byte and the offsets read;
with failOnDataLoss=false the rest of that segment or slice is skipped with a warning. Rows
already handed to Spark are right (every batch is checked before it is decoded), so a
corrupt object makes rows missing, never wrong.

Runs on whichever thread Spark gives it; it opens its own bucket client per task.
"""

from __future__ import annotations

import logging
import uuid
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace

import pyarrow as pa

from cold_tier import layout
from cold_tier.errors import ObjectNotFound
from hot_tier.records import CorruptBatch, decode_batch
from hot_tier.records.transactions import AbortedRanges

from .bucket import Bucket
from .decode import MIN_TIMESTAMP_US, RecordBounds, batches_to_arrow, select_batches
from .errors import CorruptSegment, CorruptWriteAheadObject, DataLoss
from .plan import BucketRange, PartitionLog, SegmentRef, plan_tasks
from .segment_index import first_offset_not_older_than, parse_offset_index, parse_time_index, position_range
from .wal import WalCandidate, WalSlice, resolve_wal_tail
from .wal_read import list_epoch_marks, list_wal_candidates, offset_in_wal, read_topic_id, read_wal_slice

log = logging.getLogger(__name__)

CHUNK_BYTES = 8 * 1024 * 1024
GETS_IN_FLIGHT = 3  # ranged GETs of one .log object running ahead of its decoding (_Chunks)
# The most rows in one Arrow batch handed to Spark, which bounds a worker's memory per batch;
# from 10,000 to 100,000 the scan rate hardly changes (bench/spark_scan.py).
ROWS_PER_ARROW_BATCH = 40_000


def read_bucket_range(
    bucket: Bucket,
    task: BucketRange,
    bounds: RecordBounds,
    include_headers: bool,
    fail_on_data_loss: bool,
    chunk_bytes: int = CHUNK_BYTES,
) -> Iterator[pa.RecordBatch]:
    relisted = _Relisted(bucket, task.topic, task.partition, fail_on_data_loss)
    yield from _read_pieces(bucket, task, bounds, include_headers, fail_on_data_loss, chunk_bytes, relisted)


def _read_pieces(
    bucket: Bucket,
    task: BucketRange,
    bounds: RecordBounds,
    include_headers: bool,
    fail_on_data_loss: bool,
    chunk_bytes: int,
    relisted: _Relisted,
) -> Iterator[pa.RecordBatch]:
    aborted = AbortedRanges(task.aborted) if task.aborted else bounds.aborted
    for segment in task.segments:
        start = max(task.start_offset, segment.base_offset, bounds.start_offset)
        end = min(task.end_offset, segment.next_offset, bounds.end_offset)
        if start >= end:
            continue
        segment_bounds = RecordBounds(start, end, bounds.min_timestamp_us, bounds.max_timestamp_us, aborted)
        resume, gone = start, None  # the first offset not yet handed to Spark; the object found missing
        try:
            if isinstance(segment, WalSlice):
                yield from _read_wal(bucket, task, segment, segment_bounds, include_headers, fail_on_data_loss, chunk_bytes, relisted)
                continue
            for batch in _read_segment(bucket, task.topic, task.partition, segment, segment_bounds, include_headers, chunk_bytes):
                yield from _slices(batch)
                if batch.num_rows:
                    resume = batch.column("offset")[-1].as_py() + 1
        except CorruptSegment as corrupt:
            if corrupt.topic is None:
                corrupt = CorruptSegment(corrupt.key, corrupt.position, corrupt.reason, task.topic, task.partition, start)
            if fail_on_data_loss:
                raise corrupt from None
            log.warning("skipping offsets [%d, %d) after %s (failOnDataLoss=false)", start, end, corrupt)
        except CorruptWriteAheadObject as corrupt:
            if fail_on_data_loss:
                raise
            log.warning("skipping offsets [%d, %d) after %s (failOnDataLoss=false)", start, end, corrupt)
        except ObjectNotFound as missing:
            gone = missing.key
        if gone is not None and resume < end:
            # Replaced since planning (a compacted copy swapped in), or an orphan commit whose
            # data never was or is no longer there: read the offsets from what holds them now.
            assert isinstance(segment, SegmentRef)
            relisted.gone.add((segment.base_offset, segment.upload_id))
            moved = replace(segment_bounds, start_offset=resume)
            yield from _read_elsewhere(bucket, task, gone, moved, include_headers, fail_on_data_loss, chunk_bytes, relisted)


class _Relisted:
    """What a task learns of its partition when an object planned is gone: the catalogue as it
    is now (one LIST of its commits, made once per task), the segments found missing since
    (left out of it, so that what they shadowed wins), and, only when segments do not hold
    some offsets, the write-ahead objects (one LIST of `wal~/` and their indexes)."""

    def __init__(self, bucket: Bucket, topic: str, partition: int, fail_on_data_loss: bool) -> None:
        self._bucket, self._topic, self._partition, self._fail_on_data_loss = bucket, topic, partition, fail_on_data_loss
        self._commits: list[layout.CommittedSegment] | None = None
        self._wal: list[WalCandidate] | None = None
        self._epoch_marks: dict[int, int] = {}
        self._topic_id: uuid.UUID | None = None
        self.gone: set[tuple[int, str]] = set()  # (base offset, upload id) of segments whose data is missing

    def segments(self) -> list[layout.CommittedSegment]:
        if self._commits is None:
            keys = self._bucket.list_keys(layout.commits_prefix(self._topic, self._partition))
            self._commits = [layout.parse_commit_key(key) for key in keys if key.endswith(layout.COMMIT_SUFFIX)]
        return layout.resolve_overlaps(s for s in self._commits if (s.base_offset, s.upload_id) not in self.gone)

    def wal_from(self, offset: int) -> tuple[WalSlice, ...]:
        if self._wal is None:
            wanted = (self._topic, self._partition)
            found = list_wal_candidates(self._bucket, lambda topic, partition: (topic, partition) == wanted, self._fail_on_data_loss)
            self._wal = found.get(wanted, [])
            if self._wal:
                self._topic_id = read_topic_id(self._bucket, self._topic)
                self._epoch_marks = list_epoch_marks(self._bucket, self._topic, self._partition, self._topic_id)
        return resolve_wal_tail(self._wal, offset, self._epoch_marks, self._topic_id)


def _read_elsewhere(
    bucket: Bucket,
    task: BucketRange,
    missing_key: str,
    bounds: RecordBounds,
    include_headers: bool,
    fail_on_data_loss: bool,
    chunk_bytes: int,
    relisted: _Relisted,
) -> Iterator[pa.RecordBatch]:
    """Offsets [bounds.start_offset, bounds.end_offset) of a segment whose object `missing_key`
    is gone, from the committed segments listed now and, where none holds them, the write-ahead
    objects; what neither holds was deleted by retention: `DataLoss`, or skipped."""
    pieces: list[SegmentRef | WalSlice] = []
    lost: list[tuple[int, int, int | None]] = []  # (start, end, next available)
    cursor, end = bounds.start_offset, bounds.end_offset

    def fill(to: int) -> None:
        nonlocal cursor
        for slice_ in relisted.wal_from(cursor):
            if slice_.base_offset >= to or slice_.base_offset > cursor:
                break
            pieces.append(slice_)
            cursor = slice_.next_offset
        if cursor < to:
            lost.append((cursor, to, to if to < end else None))
            cursor = to

    for segment in relisted.segments():
        if segment.next_offset <= cursor:
            continue
        if segment.base_offset >= end:
            break
        if segment.base_offset > cursor:
            fill(segment.base_offset)
        pieces.append(SegmentRef(segment.base_offset, segment.last_offset, segment.size_bytes, segment.upload_id, segment.max_timestamp))
        cursor = segment.next_offset
    if cursor < end:
        fill(end)
    for lost_start, lost_end, available in lost:
        if fail_on_data_loss:
            reason = f"the segment object {missing_key!r} is gone (deleted by retention?) and nothing in the bucket holds them now"
            raise DataLoss(task.topic, task.partition, lost_start, available, reason)
        log.warning(
            "%s-%d: skipping offsets [%d, %d): segment object %r is gone (failOnDataLoss=false)",
            task.topic, task.partition, lost_start, lost_end, missing_key,
        )  # fmt: skip
    if pieces:
        found = BucketRange(task.topic, task.partition, bounds.start_offset, end, tuple(pieces))
        yield from _read_pieces(bucket, found, bounds, include_headers, fail_on_data_loss, chunk_bytes, relisted)


def _read_wal(
    bucket: Bucket,
    task: BucketRange,
    slice_: WalSlice,
    bounds: RecordBounds,
    include_headers: bool,
    fail_on_data_loss: bool,
    chunk_bytes: int,
    relisted: _Relisted,
) -> Iterator[pa.RecordBatch]:
    try:
        batch = read_wal_slice(bucket, task.topic, task.partition, slice_, bounds, include_headers)
    except ObjectNotFound:
        # Uploaded into a segment and deleted since planning: read those offsets from there.
        moved = PartitionLog(task.topic, task.partition, tuple(relisted.segments()))
        runs, _ = plan_tasks(moved, bounds.start_offset, bounds.end_offset, bounds, fail_on_data_loss)
        for start, end, pieces in runs:
            yield from _read_pieces(
                bucket, BucketRange(task.topic, task.partition, start, end, pieces), bounds, include_headers, fail_on_data_loss,
                chunk_bytes, relisted,
            )  # fmt: skip
        return
    if batch is not None:
        yield from _slices(batch)


def _read_segment(
    bucket: Bucket, topic: str, partition: int, segment: SegmentRef, bounds: RecordBounds, include_headers: bool, chunk_bytes: int
) -> Iterator[pa.RecordBatch]:
    start_offset = bounds.start_offset
    if bounds.min_timestamp_us != MIN_TIMESTAMP_US:
        key = layout.time_index_key(topic, partition, segment.base_offset, segment.upload_id)
        skip_to = first_offset_not_older_than(parse_time_index(bucket.get(key), segment.base_offset), bounds.min_timestamp_ms)
        if skip_to is not None and skip_to > start_offset:
            start_offset = skip_to
            if start_offset >= bounds.end_offset:
                return
            bounds = replace(bounds, start_offset=start_offset)
    start_position, end_position = 0, segment.size_bytes
    if start_offset > segment.base_offset or bounds.end_offset < segment.next_offset:
        key = layout.index_key(topic, partition, segment.base_offset, segment.upload_id)
        index = parse_offset_index(bucket.get(key), segment.base_offset, segment.size_bytes)
        start_position, end_position = position_range(index, segment.size_bytes, start_offset, bounds.end_offset)
    log_key = layout.log_key(topic, partition, segment.base_offset, segment.upload_id)
    chunks = _Chunks(bucket, log_key, start_position, end_position, chunk_bytes)
    lowest = segment.base_offset  # where the next batch may start (its base offset is outside its CRC)
    try:
        while (window := chunks.next()) is not None:
            try:
                selection = select_batches(window, bounds, lowest, segment.last_offset)
                batch = batches_to_arrow(window, selection.headers, topic, partition, bounds, include_headers)
            except CorruptBatch as error:
                raise chunks.corrupt(error) from error
            if batch is not None:
                yield batch
            if selection.reached_end:
                return
            chunks.consume(selection.consumed_bytes)
            lowest = lowest if selection.next_offset is None else selection.next_offset
        chunks.finish()
    finally:
        chunks.close()


class _Chunks:
    """Windows over bytes [start, end) of a .log object, each ending where a GET of at most
    `chunk_bytes` ended: the caller uses the whole batches of a window, says how many bytes
    that was, and the rest is carried into the next window.

    The GETs run ahead of the decoding, up to GETS_IN_FLIGHT at once on threads of their own
    (the bucket clients may be used from several threads): while one window is decoded, the
    next ones are on their way, so a task waits on the bucket's latency once, not per chunk.
    Their results are taken in order, failures included."""

    def __init__(self, bucket: Bucket, key: str, start: int, end: int, chunk_bytes: int) -> None:
        self._bucket, self._key, self._end, self._chunk_bytes = bucket, key, end, chunk_bytes
        self._requested = start  # where the next GET to start begins
        self._position = start  # of the next GET's bytes to take
        self._window_position = start  # of the window's first byte in the object
        self._window = b""
        self._gets: deque[Future[bytes]] = deque()
        self._pool: ThreadPoolExecutor | None = None

    def next(self) -> bytes | None:
        if self._position >= self._end:
            return None
        self._request_ahead()
        data = self._gets.popleft().result()
        if not data:
            reason = f"the object ends before byte {self._end}, which its commit or index names"
            raise CorruptSegment(self._key, self._position, reason)
        self._position += len(data)
        self._window = self._window + data if self._window else data
        return self._window

    def _request_ahead(self) -> None:
        while len(self._gets) < GETS_IN_FLIGHT and self._requested < self._end:
            stop = min(self._end, self._requested + self._chunk_bytes)
            if self._pool is None:
                self._pool = ThreadPoolExecutor(GETS_IN_FLIGHT, thread_name_prefix="diskless-get")
            self._gets.append(self._pool.submit(self._bucket.get, self._key, self._requested, stop))
            self._requested = stop

    def close(self) -> None:
        """Drop the GETs not taken (a read that stopped early) without waiting for them."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        self._gets.clear()

    def consume(self, consumed_bytes: int) -> None:
        self._window = self._window[consumed_bytes:]
        self._window_position += consumed_bytes

    def corrupt(self, error: CorruptBatch) -> CorruptSegment:
        return CorruptSegment(self._key, self._window_position + error.position, error.reason)

    def finish(self) -> None:
        if self._window:
            raise CorruptSegment(self._key, self._window_position, f"a batch is cut short: {len(self._window)} bytes left over")


def _slices(batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
    if batch.num_rows <= ROWS_PER_ARROW_BATCH:
        yield batch
        return
    for offset in range(0, batch.num_rows, ROWS_PER_ARROW_BATCH):
        yield batch.slice(offset, ROWS_PER_ARROW_BATCH)


def offset_for_timestamp(bucket: Bucket, log_: PartitionLog, timestamp_ms: int) -> int | None:
    """The first offset in the bucket whose record timestamp is >= `timestamp_ms` (Kafka's
    ListOffsets by timestamp), or None if no committed record is that recent. Reads the time
    index, offset index and a few batches of one segment (two, if the first has only control
    records that recent)."""
    for committed in log_.segments:
        if committed.max_timestamp < timestamp_ms:
            continue
        segment = SegmentRef(
            committed.base_offset, committed.last_offset, committed.size_bytes, committed.upload_id, committed.max_timestamp
        )
        found = _offset_in_segment(bucket, log_.topic, log_.partition, segment, timestamp_ms)
        if found is not None:
            return found
    return offset_in_wal(bucket, log_.topic, log_.partition, log_.wal, log_.segments_end_offset or 0, timestamp_ms)


def _offset_in_segment(bucket: Bucket, topic: str, partition: int, segment: SegmentRef, timestamp_ms: int) -> int | None:
    key = layout.time_index_key(topic, partition, segment.base_offset, segment.upload_id)
    start_offset = first_offset_not_older_than(parse_time_index(bucket.get(key), segment.base_offset), timestamp_ms)
    start_offset = segment.base_offset if start_offset is None else min(start_offset, segment.last_offset)
    key = layout.index_key(topic, partition, segment.base_offset, segment.upload_id)
    index = parse_offset_index(bucket.get(key), segment.base_offset, segment.size_bytes)
    position, _ = position_range(index, segment.size_bytes, start_offset, segment.next_offset)
    log_key = layout.log_key(topic, partition, segment.base_offset, segment.upload_id)
    chunks = _Chunks(bucket, log_key, position, segment.size_bytes, CHUNK_BYTES)
    lowest = segment.base_offset
    while (window := chunks.next()) is not None:
        try:
            selection = select_batches(window, RecordBounds(start_offset=start_offset), lowest, segment.last_offset)
            for header in selection.headers:
                if header.max_timestamp < timestamp_ms:
                    continue
                for record in decode_batch(window, header.position).records:
                    if record.offset >= start_offset and record.timestamp >= timestamp_ms:
                        return record.offset
        except CorruptBatch as error:
            raise chunks.corrupt(error) from error
        chunks.consume(selection.consumed_bytes)
        lowest = lowest if selection.next_offset is None else selection.next_offset
    chunks.finish()
    return None
