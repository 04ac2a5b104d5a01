"""A view of a RecordBatch v2 header that never decodes records: the broker's hot path.

Byte layout (Kafka's DefaultRecordBatch, KIP-98), all big-endian:

    offset  size  field
    0       8     base_offset
    8       4     batch_length          bytes after this field (total size = batch_length + 12)
    12      4     partition_leader_epoch
    16      1     magic                 always 2
    17      4     crc                   CRC-32C (Castagnoli) of bytes [21, end of batch)
    21      2     attributes            bits 0-2 codec, 3 timestamp type, 4 transactional,
                                        5 control, 6 delete horizon
    23      4     last_offset_delta
    27      8     base_timestamp        first timestamp; the delete horizon when bit 6 is set
    35      8     max_timestamp
    43      8     producer_id
    51      2     producer_epoch
    53      4     base_sequence
    57      4     records_count
    61      ...   records (compressed as a whole when the codec is not none)

base_offset and partition_leader_epoch sit outside the CRC span, so the broker can assign
offsets without recomputing it. Changing max_timestamp (LogAppendTime) does need a new CRC.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from crc32c import crc32c

from .errors import BadCrc, BadLength, BadMagic, TruncatedBatch

HEADER_BYTES = 61
LOG_OVERHEAD = 12  # base_offset + batch_length: the bytes not counted by batch_length
CRC_START = 21
MAGIC = 2

ATTR_CODEC_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40  # KIP-534: base_timestamp holds when the batch's tombstones may go

TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

# The smallest record (DefaultRecord): length, attributes, timestamp delta, offset delta, key
# length, value length and header count, one byte each (varints of 0 or -1, no key, value or
# header bytes). An uncompressed records section of M bytes holds at most M // 7 records.
MIN_RECORD_BYTES = 7

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET = struct.Struct(">q")
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
_LENGTH_AT = 8
_MAGIC_AT = 16
_ATTRIBUTES_LOW_AT = 22  # attributes, a big-endian int16 at 21: its flag bits are in this byte
_MAX_TIMESTAMP_AT = 35


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The fixed 61-byte header of one batch, plus where it sits in its buffer."""

    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF

    @property
    def codec(self) -> int:
        return self.attributes & ATTR_CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        return TIMESTAMP_LOG_APPEND_TIME if self.attributes & ATTR_TIMESTAMP_TYPE else TIMESTAMP_CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def delete_horizon_ms(self) -> int | None:
        """When the log cleaner may drop this batch's tombstones (or itself, a transaction
        marker): stamped at the cleaning that first kept them (KIP-534), None before."""
        return self.base_timestamp if self.attributes & ATTR_DELETE_HORIZON else None

    @property
    def first_timestamp(self) -> int:
        """The batch's timestamp for segment-level bookkeeping: its first record's, or with a
        delete horizon in that field, its largest (Kafka's first-batch timestamp)."""
        return self.max_timestamp if self.attributes & ATTR_DELETE_HORIZON else self.base_timestamp

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0


def read_header(buf: bytes | bytearray | memoryview, position: int = 0, *, check_crc: bool = True) -> BatchHeader:
    """Read and validate the batch that starts at `position` of `buf`.

    Checks that the whole batch is present, that its length and magic are sane and, unless
    `check_crc` is false, its CRC. Raises a `CorruptBatch` subclass otherwise.
    """
    available = len(buf) - position
    if available < HEADER_BYTES:
        if available >= 17 and buf[position + 16] != MAGIC:
            raise BadMagic(position, (buf[position + 16] ^ 0x80) - 0x80)  # int8, as in the full header
        raise TruncatedBatch(position, HEADER_BYTES, available)
    fields = _HEADER.unpack_from(buf, position)
    batch_length = fields[1]
    if batch_length < HEADER_BYTES - LOG_OVERHEAD:
        raise BadLength(position, batch_length)
    if fields[3] != MAGIC:
        raise BadMagic(position, fields[3])
    size = batch_length + LOG_OVERHEAD
    if size > available:
        raise TruncatedBatch(position, size, available)
    header = BatchHeader(position, *fields)
    if check_crc:
        computed = crc32c(memoryview(buf)[position + CRC_START : position + size])
        if computed != header.crc:
            raise BadCrc(position, header.crc, computed)
    return header


def iter_headers(
    buf: bytes | bytearray | memoryview, *, check_crc: bool = True, start: int = 0, end: int | None = None
) -> Iterator[BatchHeader]:
    """Yield the header of every batch in `buf[start:end]`, which must hold whole batches only."""
    end = len(buf) if end is None else end
    view = memoryview(buf)[:end]
    position = start
    while position < end:
        header = read_header(view, position, check_crc=check_crc)
        yield header
        position += header.size_bytes


def peek_size(buf: bytes | bytearray | memoryview, position: int = 0) -> int | None:
    """The total size of the batch at `position`, or None if fewer than 12 bytes are there."""
    if len(buf) - position < LOG_OVERHEAD:
        return None
    return struct.unpack_from(">i", buf, position + _LENGTH_AT)[0] + LOG_OVERHEAD


def peek_transactional(buf: bytes | bytearray | memoryview, position: int = 0) -> bool:
    """Whether the batch at `position` says it is transactional, from its attributes byte alone
    (no header parsed, nothing checked: bytes that are no v2 batch are False, left to the
    checks of whoever reads them whole)."""
    at = position + _ATTRIBUTES_LOW_AT
    return len(buf) > at and buf[position + _MAGIC_AT] == MAGIC and bool(buf[at] & ATTR_TRANSACTIONAL)


def set_base_offset(buf: bytearray | memoryview, position: int, base_offset: int) -> None:
    """Write `base_offset` into the batch at `position`. Outside the CRC span: no new CRC."""
    _OFFSET.pack_into(buf, position, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, position: int, leader_epoch: int) -> None:
    struct.pack_into(">i", buf, position + 12, leader_epoch)


def set_log_append_time(buf: bytearray | memoryview, header: BatchHeader, timestamp_ms: int) -> None:
    """Stamp the batch as LogAppendTime with `timestamp_ms` and recompute its CRC.

    Kafka sets the timestamp-type attribute and max_timestamp; readers then use max_timestamp
    for every record of the batch and ignore the per-record deltas.
    """
    position = header.position
    _INT16.pack_into(buf, position + CRC_START, header.attributes | ATTR_TIMESTAMP_TYPE)
    _INT64.pack_into(buf, position + _MAX_TIMESTAMP_AT, timestamp_ms)
    crc = crc32c(memoryview(buf)[position + CRC_START : position + header.size_bytes])
    _UINT32.pack_into(buf, position + 17, crc)
