"""Write-ahead objects in the bucket, read by Spark: their indexes on the driver, their batches
on the workers. The decisions are wal.py's; this module does the requests.

Requests (cold_tier/wal_format.py's layout):

    planning  1 LIST of `wal~/` (keys and sizes), then per object not seen before 1 ranged GET
              of its last SUFFIX_BYTES (footer and, nearly always, the whole index; a larger
              index costs a second GET), up to MAX_PARALLEL_REQUESTS at once. The streaming
              reader keeps the parsed indexes of the objects still listed (objects never change).
              Per partition with write-ahead batches, 1 LIST of its epoch marks (`list_epoch_marks`);
              per topic with write-ahead batches, 1 GET of its id (`read_topic_id`).
    reading   1 ranged GET per `WalSlice`: the span of its batches in the object.

Every batch read is checked against its index entry (size, base and last offset) and its
own CRC before it is decoded; what fails is `CorruptWriteAheadObject`, naming the object, the
byte and the offset. An object listed at planning and gone when read was deleted by the
broker once committed segments held all its batches: the slice is read from those segments
instead (read.py). Runs on any thread; opens no client of its own.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa

from cold_tier import layout
from cold_tier.errors import ObjectNotFound
from cold_tier.wal_format import (
    FOOTER_BYTES,
    WAL_PREFIX,
    CorruptWalObject,
    WalEntry,
    decode_footer,
    decode_index,
    parse_wal_object_key,
)
from hot_tier.records import CorruptBatch, decode_batch, read_header

from .bucket import Bucket
from .decode import RecordBounds, batches_to_arrow, select_batches
from .errors import CorruptWriteAheadObject
from .wal import WalCandidate, WalSlice

log = logging.getLogger(__name__)

SUFFIX_BYTES = 64 * 1024
MAX_PARALLEL_REQUESTS = 16
TopicPartition = tuple[str, int]
# Parsed indexes by object key; None marks an object skipped as corrupt (failOnDataLoss=false).
IndexCache = MutableMapping[str, "list[WalEntry] | None"]


def list_wal_candidates(
    bucket: Bucket,
    wanted: Callable[[str, int], bool],
    fail_on_data_loss: bool,
    cache: IndexCache | None = None,
) -> dict[TopicPartition, list[WalCandidate]]:
    """The index entries of every write-ahead object in the bucket, for the partitions
    `wanted` accepts. `cache` (optional) keeps parsed indexes between calls; entries of
    objects no longer listed are dropped from it."""
    objects = []
    for key, size in bucket.list_sizes(WAL_PREFIX):
        parsed = parse_wal_object_key(key)
        if parsed is not None:
            objects.append((key, size, parsed[1], parsed[2]))
    if cache is not None:
        for gone in set(cache) - {key for key, *_ in objects}:
            del cache[gone]
    missing = [(key, size) for key, size, *_ in objects if cache is None or key not in cache]

    def load(item: tuple[str, int]) -> tuple[str, list[WalEntry] | None]:
        key, size = item
        try:
            return key, read_wal_index(bucket, key, size)
        except ObjectNotFound:
            return key, []  # deleted since the LIST: segments hold all its batches
        except CorruptWriteAheadObject as error:
            if fail_on_data_loss:
                raise
            log.warning("skipping %s (failOnDataLoss=false)", error)
            return key, None

    loaded = dict(_parallel(load, missing))
    if cache is not None:
        cache.update(loaded)
    found: dict[TopicPartition, list[WalCandidate]] = {}
    for key, _, sealed_ms, upload_id in objects:
        entries = loaded[key] if key in loaded else cache[key] if cache is not None else None
        for entry in entries or ():
            if wanted(entry.topic, entry.partition):
                found.setdefault((entry.topic, entry.partition), []).append(WalCandidate(key, sealed_ms, upload_id, entry))
    return found


def read_topic_id(bucket: Bucket, topic: str) -> uuid.UUID | None:
    """The id of the topic that has the name now (wal.py rule 0), None if the bucket does not
    say (a topic made before topic ids were written, or the object unreadable)."""
    try:
        return uuid.UUID(bucket.get(layout.topic_id_key(topic)).decode())
    except (ObjectNotFound, ValueError, UnicodeDecodeError):
        return None


def list_epoch_marks(bucket: Bucket, topic: str, partition: int, topic_id: uuid.UUID | None = None) -> dict[int, int]:
    """The partition's leader epoch marks: leader epoch -> the offset it began at (wal.py rule
    2); with `topic_id`, those of that topic only (not of a deleted one of the name)."""
    marks: dict[int, int] = {}
    for key in bucket.list_keys(layout.epochs_prefix(topic, partition)):
        parsed = layout.parse_epoch_key(key)
        if parsed is not None and (topic_id is None or parsed[2] == topic_id):
            marks[parsed[0]] = min(parsed[1], marks.get(parsed[0], parsed[1]))
    return marks


def read_wal_index(bucket: Bucket, key: str, size_bytes: int) -> list[WalEntry]:
    """The index entries of the object `key` of `size_bytes` (as listed), checked."""
    if size_bytes < FOOTER_BYTES:
        raise CorruptWriteAheadObject(key, None, f"{size_bytes} bytes is shorter than the {FOOTER_BYTES}-byte footer")
    tail_start = max(0, size_bytes - SUFFIX_BYTES)
    tail = bucket.get(key, tail_start, size_bytes)
    if len(tail) != size_bytes - tail_start:
        raise CorruptWriteAheadObject(key, tail_start + len(tail), f"the object ends before its listed size {size_bytes}")
    try:
        index_position, index_length, count, crc = decode_footer(tail[-FOOTER_BYTES:])
        if index_position + index_length + FOOTER_BYTES != size_bytes:
            raise CorruptWalObject(f"index at {index_position} of {index_length} bytes does not end at the footer")
        if index_position >= tail_start:
            index = tail[index_position - tail_start : len(tail) - FOOTER_BYTES]
        else:
            index = bucket.get(key, index_position, size_bytes - FOOTER_BYTES)
        entries = decode_index(index, count, crc)
    except CorruptWalObject as error:
        raise CorruptWriteAheadObject(key, size_bytes - FOOTER_BYTES, error.reason) from None
    for e in entries:
        if e.position < 0 or e.size_bytes <= 0 or e.position + e.size_bytes > index_position:
            raise CorruptWriteAheadObject(
                key, e.position, "the index places the batch outside the object's batches", e.topic, e.partition, e.base_offset
            )
    return entries


def read_wal_slice(
    bucket: Bucket, topic: str, partition: int, slice_: WalSlice, bounds: RecordBounds, include_headers: bool
) -> pa.RecordBatch | None:
    """The records of `slice_` within `bounds`, or None if none is wanted. Raises
    ObjectNotFound if the object is gone (read.py then reads the segments that replaced it)."""
    start, end = slice_.start_position, slice_.end_position
    data = bucket.get(slice_.key, start, end)
    if len(data) != end - start:
        first = slice_.batches[0]
        raise CorruptWriteAheadObject(
            slice_.key, start + len(data), f"the object ends before byte {end}, which its index names", topic, partition, first.base_offset
        )  # fmt: skip
    view = memoryview(data)
    parts = []
    buffer_positions = []  # where each batch starts in the joined buffer
    joined = 0
    for ref in slice_.batches:
        part = view[ref.position - start : ref.position - start + ref.size_bytes]
        try:
            header = read_header(part, 0)
        except CorruptBatch as error:
            raise CorruptWriteAheadObject(slice_.key, ref.position + error.position, error.reason, topic, partition, ref.base_offset) from None
        if (header.size_bytes, header.base_offset, header.last_offset) != (ref.size_bytes, ref.base_offset, ref.last_offset):
            reason = (
                f"holds a batch of offsets {header.base_offset}-{header.last_offset} ({header.size_bytes} bytes)"
                f" where its index names {ref.base_offset}-{ref.last_offset} ({ref.size_bytes} bytes)"
            )
            raise CorruptWriteAheadObject(slice_.key, ref.position, reason, topic, partition, ref.base_offset)
        parts.append(part)
        buffer_positions.append(joined)
        joined += ref.size_bytes
    buffer = b"".join(parts)
    try:
        selection = select_batches(buffer, bounds)
        return batches_to_arrow(buffer, selection.headers, topic, partition, bounds, include_headers)
    except CorruptBatch as error:
        ref = slice_.batches[max(0, _slot(buffer_positions, error.position))]
        raise CorruptWriteAheadObject(slice_.key, ref.position, error.reason, topic, partition, ref.base_offset) from None


def offset_in_wal(
    bucket: Bucket, topic: str, partition: int, slices: Iterable[WalSlice], start_offset: int, timestamp_ms: int
) -> int | None:
    """The first offset from `start_offset` in `slices` whose record timestamp is >=
    `timestamp_ms`, or None."""
    for slice_ in slices:
        data = bucket.get(slice_.key, slice_.start_position, slice_.end_position)
        for ref in slice_.batches:
            position = ref.position - slice_.start_position
            try:
                header = read_header(data, position)
                if header.max_timestamp < timestamp_ms or header.is_control:
                    continue
                for record in decode_batch(data, position).records:
                    if record.offset >= start_offset and record.timestamp >= timestamp_ms:
                        return record.offset
            except CorruptBatch as error:
                raise CorruptWriteAheadObject(slice_.key, ref.position, error.reason, topic, partition, ref.base_offset) from None
    return None


def _slot(starts: list[int], position: int) -> int:
    import bisect

    return bisect.bisect_right(starts, position) - 1


def _parallel(function, items: list) -> Iterator:
    if len(items) <= 1:
        return iter([function(item) for item in items])
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_REQUESTS, len(items))) as pool:
        return iter(list(pool.map(function, items)))
