"""Record batches (Kafka RecordBatch v2, hot_tier/records/batch.py) -> Arrow columns of the
Kafka schema (schema.py), without building a Python object per record.

The bytes are those of a segment's .log (or of a Fetch response): whole batches back to back,
each a 61-byte header then its records section, compressed as one block. A record is

    length varint | attributes int8 | timestamp_delta varlong | offset_delta varint |
    key_length varint | key | value_length varint | value | headers_count varint | headers

Decoding runs in three steps, so that the per-record work stays in C:

1. `select_batches` reads each header (checking its CRC, and that base offsets, which the CRC
   does not cover, increase and stay in the segment), keeps the batches that can hold a wanted
   row (offset range, and max_timestamp against a timestamp lower bound) and leaves out
   control batches, which Kafka consumers never return either.
2. One Python loop walks the record length prefixes of the kept batches' records sections
   (decompressed and joined into one buffer) and notes where each record's body starts and
   ends. This loop is the only per-record Python code.
3. numpy decodes every other varint of all records at once, column by column, and Arrow
   gathers keys and values with a BinaryView array (one view per value, pointing into the
   buffer) cast to plain binary, a memcpy per value in C++.

Every record must end exactly where its length says, as in `decode_batch`. If any check of
the vectorised path fails, the batches are decoded again with `hot_tier.records.decode_batch`,
which raises the precise `CorruptBatch` (or, should the fast path be wrong, gives the right
records). Pure: bytes in, Arrow out; safe to call from any thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from hot_tier.records import (
    ATTR_CODEC_MASK,
    HEADER_BYTES,
    TIMESTAMP_LOG_APPEND_TIME,
    BatchHeader,
    Compression,
    CorruptBatch,
    decode_batch,
    decompress,
    peek_size,
    read_header,
)
from hot_tier.records.transactions import AbortedRanges
from hot_tier.records.varint import ZIGZAG_1, decode_varint

from .schema import HEADERS_TYPE, TIMESTAMP_TYPE, arrow_schema

NO_LIMIT = 2**63 - 1
MIN_TIMESTAMP_US = -(2**63)
MAX_TIMESTAMP_US = 2**63 - 1
# A record timestamp in ms whose microseconds do not fit an int64 (Spark's own Kafka source
# fails on it too, in Math.multiplyExact).
_MAX_TIMESTAMP_MS = MAX_TIMESTAMP_US // 1000
_INLINE_VIEW_BYTES = 12  # Arrow BinaryView keeps values up to 12 bytes inside the view
_PADDING = bytes(16)  # >= the widest fixed-size gather: a 12-byte inline value, a 10-byte varint
_ZIGZAG_1 = np.array(ZIGZAG_1, np.int64)


@dataclass(frozen=True, slots=True)
class RecordBounds:
    """Which records to return: offsets in [start_offset, end_offset), timestamps (in µs, as
    Spark compares them) in [min_timestamp_us, max_timestamp_us]. Every bound is exact."""

    start_offset: int = 0
    end_offset: int = NO_LIMIT
    min_timestamp_us: int = MIN_TIMESTAMP_US
    max_timestamp_us: int = MAX_TIMESTAMP_US
    aborted: AbortedRanges | None = field(default=None, compare=False)  # read_committed: batches to skip

    @property
    def has_timestamp_bounds(self) -> bool:
        return self.min_timestamp_us != MIN_TIMESTAMP_US or self.max_timestamp_us != MAX_TIMESTAMP_US

    @property
    def min_timestamp_ms(self) -> int:
        """The smallest record timestamp (ms) that can pass the lower bound."""
        return -(-self.min_timestamp_us // 1000)

    def is_empty(self) -> bool:
        return self.start_offset >= self.end_offset or self.min_timestamp_us > self.max_timestamp_us


@dataclass(frozen=True, slots=True)
class Selection:
    """The batches of a buffer worth decoding, and how far the walk got."""

    headers: list[BatchHeader]
    consumed_bytes: int  # whole batches walked; a partial batch at the end is left
    next_offset: int | None  # next_offset of the last batch walked, None if none was
    reached_end: bool  # met a batch at or past bounds.end_offset: nothing later is wanted


def select_batches(
    buf: bytes | memoryview, bounds: RecordBounds, first_base_offset: int = 0, last_offset: int = NO_LIMIT
) -> Selection:
    """Walk the whole batches of `buf`, keeping those that may hold wanted records.

    A batch's base offset is outside its CRC (as in Kafka), so it is checked here: each batch
    must start at or after the previous one's next offset (the first at or after
    `first_base_offset`) and end at or before `last_offset` (a segment's range), else
    CorruptBatch at its position. Without it a bad base offset gives rows twice or ends the
    read early without an error."""
    headers: list[BatchHeader] = []
    position = 0
    total = len(buf)
    next_offset: int | None = None
    min_timestamp_ms = bounds.min_timestamp_ms
    lowest = first_base_offset  # where the next batch may start
    while position < total:
        size = peek_size(buf, position)
        if size is None or position + size > total:
            break  # the rest of this batch is in the next chunk
        header = read_header(buf, position)
        if header.base_offset < lowest or header.last_offset > last_offset:
            raise CorruptBatch(position, _misplaced(header, lowest, last_offset))
        lowest = header.next_offset
        if header.base_offset >= bounds.end_offset:
            return Selection(headers, position, next_offset, True)
        position += header.size_bytes
        next_offset = header.next_offset
        if header.last_offset < bounds.start_offset or header.is_control:
            continue
        if header.is_transactional and bounds.aborted is not None and bounds.aborted.is_aborted(header.producer_id, header.base_offset):
            continue  # an aborted transaction's (read_committed)
        if header.max_timestamp < min_timestamp_ms and bounds.has_timestamp_bounds:
            continue  # every record of the batch is older than the lower bound
        headers.append(header)
    return Selection(headers, position, next_offset, False)


def _misplaced(header: BatchHeader, lowest: int, last_offset: int) -> str:
    offsets = f"the batch's offsets {header.base_offset}-{header.last_offset}"
    if header.base_offset < lowest:
        return f"{offsets} start below {lowest}, where the batch before it ends (or the segment begins)"
    return f"{offsets} end after the segment's last offset {last_offset}"


class _Malformed(Exception):
    """The vectorised path found bytes it cannot trust; decode_batch says exactly why."""


def batches_to_arrow(
    buf: bytes,
    headers: Sequence[BatchHeader],
    topic: str,
    partition: int,
    bounds: RecordBounds,
    include_headers: bool,
) -> pa.RecordBatch | None:
    """The wanted records of the batches `headers` (from `select_batches` over `buf`) as one
    RecordBatch of the Kafka schema, or None if no record passes `bounds`."""
    if not headers:
        return None
    try:
        columns = _decode(buf, headers, bounds, include_headers)
    except (_Malformed, IndexError, ValueError, OverflowError):
        columns = _decode_slowly(buf, headers, bounds, include_headers)
    if columns is None:
        return None
    return _record_batch(columns, topic, partition, include_headers)


@dataclass(slots=True)
class _Columns:
    keys: pa.Array
    values: pa.Array
    offsets: np.ndarray
    timestamps_us: np.ndarray
    timestamp_types: np.ndarray
    headers: pa.Array | None


def _decode(buf: bytes, headers: Sequence[BatchHeader], bounds: RecordBounds, include_headers: bool) -> _Columns | None:
    sections: list[bytes | memoryview] = []
    view = memoryview(buf)
    for header in headers:
        start = header.position + HEADER_BYTES
        end = header.position + header.size_bytes
        codec = header.attributes & ATTR_CODEC_MASK
        if codec == Compression.NONE:
            sections.append(view[start:end])
        else:
            sections.append(decompress(codec, view[start:end], position=header.position))
    # The padding lets every gather below read a fixed number of bytes past any position in
    # the records without a bounds check; positions past the records fail the checks anyway.
    data = b"".join([*sections, _PADDING])
    record_starts = _walk_records(data, headers, sections)
    if len(record_starts) == 0:
        return None
    u8 = np.frombuffer(data, np.uint8)
    lengths, starts = _varints(u8, record_starts)
    if (lengths < 6).any():  # attributes and five varints take a byte each at least
        raise _Malformed
    ends = starts + lengths
    position = starts + 1  # attributes: unused
    timestamp_deltas, position = _varints(u8, position)
    offset_deltas, position = _varints(u8, position)
    key_lengths, position = _varints(u8, position)
    key_starts = position
    position = key_starts + np.maximum(key_lengths, 0)
    value_lengths, position = _varints(u8, position)
    value_starts = position
    position = value_starts + np.maximum(value_lengths, 0)
    header_counts, position = _varints(u8, position)
    if (key_lengths < -1).any() or (value_lengths < -1).any() or (header_counts < 0).any():
        raise _Malformed
    if (position > ends).any():
        raise _Malformed

    batch_index = np.repeat(np.arange(len(headers)), [h.records_count for h in headers])
    base_offsets = np.array([h.base_offset for h in headers], np.int64)
    offsets = base_offsets[batch_index] + offset_deltas
    timestamp_types = np.array([h.timestamp_type for h in headers], np.int32)
    base_timestamps = np.array([h.base_timestamp for h in headers], np.int64)
    max_timestamps = np.array([h.max_timestamp for h in headers], np.int64)
    log_append_time = timestamp_types[batch_index] == TIMESTAMP_LOG_APPEND_TIME
    timestamps_ms = np.where(log_append_time, max_timestamps[batch_index], base_timestamps[batch_index] + timestamp_deltas)
    if (np.abs(timestamps_ms) > _MAX_TIMESTAMP_MS).any():
        raise OverflowError("a record timestamp does not fit Spark's microsecond timestamps")
    timestamps_us = timestamps_ms * 1000

    keep = (offsets >= bounds.start_offset) & (offsets < bounds.end_offset)
    if bounds.has_timestamp_bounds:
        keep &= (timestamps_us >= bounds.min_timestamp_us) & (timestamps_us <= bounds.max_timestamp_us)
    with_headers = np.flatnonzero(header_counts)
    header_lists: list | None = None
    if with_headers.size:
        header_lists, header_ends = _parse_headers(data, position, ends, with_headers, header_counts)
        position = position.copy()
        position[with_headers] = header_ends
    if (position != ends).any():
        raise _Malformed
    if not keep.all():
        chosen = np.flatnonzero(keep)
        if chosen.size == 0:
            return None
        if header_lists is not None:
            header_lists = [header_lists[i] for i in chosen.tolist()]
        offsets, timestamps_us = offsets[chosen], timestamps_us[chosen]
        key_starts, key_lengths = key_starts[chosen], key_lengths[chosen]
        value_starts, value_lengths = value_starts[chosen], value_lengths[chosen]
        batch_index = batch_index[chosen]
    buffer = pa.py_buffer(data)
    header_column = None
    if include_headers:
        if header_lists is None:
            header_column = pa.nulls(len(offsets), HEADERS_TYPE)
        else:
            header_column = pa.array(header_lists, HEADERS_TYPE)
    return _Columns(
        keys=_binary(u8, buffer, key_starts, key_lengths),
        values=_binary(u8, buffer, value_starts, value_lengths),
        offsets=offsets,
        timestamps_us=timestamps_us,
        timestamp_types=timestamp_types[batch_index],
        headers=header_column,
    )


def _step_table() -> list[int]:
    """For the two bytes (b0 | b1 << 8) at a record's start: the record's total size (length
    prefix included) when its length is a one- or two-byte varint of at least 6, else 0."""
    table = [0] * 65536
    for b0 in range(256):
        for b1 in range(256):
            if b0 < 0x80:
                length, prefix = ZIGZAG_1[b0], 1
            elif b1 < 0x80:
                raw = (b0 & 0x7F) | (b1 << 7)
                length, prefix = (raw >> 1) ^ -(raw & 1), 2
            else:
                continue
            if length >= 6:
                table[b0 | (b1 << 8)] = length + prefix
    return table


_RECORD_STEP = _step_table()


def _walk_records(data: bytes, headers: Sequence[BatchHeader], sections: list) -> np.ndarray:
    """Where each record (its length prefix) starts in `data`; checks that each section
    holds exactly its declared record count. The hot loop: one table lookup per record (a
    record is at least 7 bytes, so the two bytes read are always its own)."""
    step_of = _RECORD_STEP
    starts = [0] * sum(header.records_count for header in headers)
    position = 0
    index = 0
    for header, section in zip(headers, sections):
        section_end = position + len(section)
        first, index = index, index + header.records_count
        for slot in range(first, index):
            starts[slot] = position
            step = step_of[data[position] | (data[position + 1] << 8)]
            if step:
                position += step
            else:  # a length of three bytes or more (records of 8 KiB+), or a bad one
                length, position = decode_varint(data, position)
                if length < 6:
                    raise _Malformed
                position += length
        if position != section_end:
            raise _Malformed
    return np.array(starts, np.int64)


def _varints(u8: np.ndarray, position: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zigzag varints (up to 10 bytes, as varlongs) at every `position`: values and the
    positions after them. One- and two-byte varints, nearly all of them, take a few array
    operations; longer ones go through a loop over their remaining bytes. Bits past 64 are
    dropped, as Java does."""
    first = u8[position]
    if int(first.max(initial=0)) < 0x80:
        return _ZIGZAG_1[first], position + 1
    second = u8[position + 1].astype(np.int64)
    continued = first >> 7  # 1 where a second byte follows
    raw = (first & 0x7F).astype(np.int64) | ((second & 0x7F) << 7) * continued
    position = position + 1 + continued
    longer = np.flatnonzero(continued & (second >> 7))
    if longer.size:
        raw = raw.astype(np.uint64)
        more = longer
        shift = 14
        while more.size:
            if shift > 63:
                raise _Malformed
            byte = u8[position[more]]
            raw[more] |= (byte & 0x7F).astype(np.uint64) << np.uint64(shift)
            position[more] += 1
            more = more[byte >= 0x80]
            shift += 7
        return (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64), position
    return (raw >> 1) ^ -(raw & 1), position


def _parse_headers(data: bytes, positions: np.ndarray, ends: np.ndarray, rows: np.ndarray, counts: np.ndarray):
    """Record headers of `rows` (the records with any), in Python: they are rare and small.
    Returns one entry per record (None for a record without headers) and where each of
    `rows` ends. The headers count varint was read already; `positions` is just after it."""
    lists: list = [None] * len(positions)
    header_ends = []
    for row in rows.tolist():
        position = int(positions[row])
        end = int(ends[row])
        pairs = []
        for _ in range(int(counts[row])):
            key_length, position = decode_varint(data, position)
            if key_length < 0 or position + key_length > end:
                raise _Malformed
            key = bytes(data[position : position + key_length]).decode("utf-8")
            position += key_length
            value_length, position = decode_varint(data, position)
            if value_length < -1 or position + value_length > end:
                raise _Malformed
            value = None if value_length < 0 else bytes(data[position : position + value_length])
            position += max(value_length, 0)
            pairs.append({"key": key, "value": value})
        lists[row] = pairs
        header_ends.append(position)
    return lists, np.array(header_ends, np.int64)


def _binary(u8: np.ndarray, buffer: pa.Buffer, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """A binary array of the byte ranges [start, start + length) of `buffer`, null where
    length is -1: BinaryView entries built with numpy (16 bytes each: length, then the value
    itself when at most 12 bytes, else its first 4 bytes, buffer index 0 and its offset), then
    Arrow's cast to binary copies the bytes, in C++."""
    count = len(starts)
    nulls = lengths < 0
    if nulls.any():
        lengths = np.where(nulls, 0, lengths)
    views = np.zeros((count, 4), np.int32)
    views[:, 0] = lengths
    raw = views.view(np.uint8)
    inline = lengths <= _INLINE_VIEW_BYTES
    if inline.all():
        _inline(raw, slice(None), u8, starts, lengths)
    elif not inline.any():
        raw[:, 4:8] = _windows(u8, 4)[starts]
        views[:, 3] = starts
    else:
        rows = np.flatnonzero(inline)
        _inline(raw, rows, u8, starts[rows], lengths[rows])
        rows = np.flatnonzero(~inline)
        raw[rows, 4:8] = _windows(u8, 4)[starts[rows]]
        views[rows, 3] = starts[rows]
    validity = pa.py_buffer(np.packbits(~nulls, bitorder="little")) if nulls.any() else None
    array = pa.Array.from_buffers(pa.binary_view(), count, [validity, pa.py_buffer(views), buffer])
    return array.cast(pa.binary())


def _inline(raw: np.ndarray, rows, u8: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> None:
    """Copy values of at most 12 bytes into their views (bytes 4 to 16), zero-padded."""
    width = int(lengths.max(initial=0))
    if not width:
        return
    gathered = _windows(u8, width)[starts]
    if int(lengths.min()) != width:
        gathered *= np.arange(width) < lengths[:, None]
    raw[rows, 4 : 4 + width] = gathered


def _windows(u8: np.ndarray, width: int) -> np.ndarray:
    """Row i is u8[i:i + width]: a view, so indexing it with positions gathers whole values."""
    return np.lib.stride_tricks.sliding_window_view(u8, width)


def _decode_slowly(buf: bytes, headers: Sequence[BatchHeader], bounds: RecordBounds, include_headers: bool) -> _Columns | None:
    """The reference path: `decode_batch` per batch (raising its CorruptBatch), then filter."""
    keys: list = []
    values: list = []
    offsets: list[int] = []
    timestamps: list[int] = []
    types: list[int] = []
    header_lists: list = []
    for header in headers:
        decoded = decode_batch(buf, header.position)
        for record in decoded.records:
            timestamp_us = record.timestamp * 1000
            if not bounds.start_offset <= record.offset < bounds.end_offset:
                continue
            if not bounds.min_timestamp_us <= timestamp_us <= bounds.max_timestamp_us:
                continue
            keys.append(record.key)
            values.append(record.value)
            offsets.append(record.offset)
            timestamps.append(timestamp_us)
            types.append(header.timestamp_type)
            header_lists.append([{"key": k, "value": v} for k, v in record.headers] or None)
    if not offsets:
        return None
    return _Columns(
        keys=pa.array(keys, pa.binary()),
        values=pa.array(values, pa.binary()),
        offsets=np.array(offsets, np.int64),
        timestamps_us=np.array(timestamps, np.int64),
        timestamp_types=np.array(types, np.int32),
        headers=pa.array(header_lists, HEADERS_TYPE) if include_headers else None,
    )


def _record_batch(columns: _Columns, topic: str, partition: int, include_headers: bool) -> pa.RecordBatch:
    count = len(columns.offsets)
    topic_bytes = topic.encode("utf-8")
    topic_offsets = np.arange(count + 1, dtype=np.int32) * len(topic_bytes)
    arrays = [
        columns.keys,
        columns.values,
        pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(topic_offsets), pa.py_buffer(topic_bytes * count)]),
        _fixed_width(pa.int32(), np.full(count, partition, np.int32)),
        _fixed_width(pa.int64(), columns.offsets.astype(np.int64, copy=False)),
        _fixed_width(TIMESTAMP_TYPE, columns.timestamps_us.astype(np.int64, copy=False)),
        _fixed_width(pa.int32(), columns.timestamp_types.astype(np.int32, copy=False)),
    ]
    if include_headers:
        arrays.append(columns.headers)
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(include_headers))


def _fixed_width(type_: pa.DataType, values: np.ndarray) -> pa.Array:
    """An Arrow array over a numpy array's buffer, with no nulls. Not pa.array(values): on its
    first call pyarrow imports pandas, if installed, to ask whether `values` is a pandas object,
    and on a fresh Python worker that import is most of the time to the first row."""
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(np.ascontiguousarray(values))])
