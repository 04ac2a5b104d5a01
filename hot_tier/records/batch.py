"""Encode and decode the records of a RecordBatch v2 (Kafka's DefaultRecordBatch/DefaultRecord).

After the 61-byte header (see header.py) come `records_count` records, compressed as one
block when the codec is not none. Each record is (DefaultRecord.java, KIP-98):

    length             varint    bytes of the record after this field
    attributes         int8      unused, written as 0
    timestamp_delta    varlong   timestamp - batch base_timestamp
    offset_delta       varint    offset - batch base_offset
    key_length         varint    -1 for a null key
    key                bytes
    value_length       varint    -1 for a null value
    value              bytes
    headers_count      varint
    headers            headers_count x (key_length varint >= 0, key utf-8,
                                        value_length varint (-1 for null), value)

Records of a LogAppendTime batch all carry the batch's max_timestamp; their deltas are
ignored. Control batches (transaction markers) decode like any other: the control record is
in the key and value. Decoding checks the CRC, every length against the bytes really there,
and that the records fill the section exactly, and raises `CorruptBatch` naming the batch's
position and the record at fault (decoder.py holds the record decoder itself). Everything here is pure and safe to call from any thread.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from crc32c import crc32c

from .codecs import Compression, compress
from .decoder import iter_record_tuples
from .header import (
    ATTR_CODEC_MASK,
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    CRC_START,
    HEADER_BYTES,
    LOG_OVERHEAD,
    MAGIC,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    BatchHeader,
    read_header,
)
from .varint import encode_varint, encode_varlong

_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC = struct.Struct(">I")
_CRC_AT = 17


@dataclass(frozen=True, slots=True)
class Record:
    """One record with its absolute offset and its timestamp in milliseconds."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    header: BatchHeader
    records: list[Record]


# The decoder builds records through the slot descriptors: the dataclass __init__ of a frozen
# class goes through object.__setattr__ per field and costs twice as much, per record.
_new_record = object.__new__
_set_offset = Record.offset.__set__  # type: ignore[attr-defined]
_set_timestamp = Record.timestamp.__set__  # type: ignore[attr-defined]
_set_key = Record.key.__set__  # type: ignore[attr-defined]
_set_value = Record.value.__set__  # type: ignore[attr-defined]
_set_headers = Record.headers.__set__  # type: ignore[attr-defined]


def encode_batch(
    records: Iterable[Record],
    *,
    base_offset: int = 0,
    compression: int = Compression.NONE,
    timestamp_type: int = TIMESTAMP_CREATE_TIME,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    last_offset: int | None = None,
    empty_timestamp: int | None = None,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """Build one batch holding `records`, which must have increasing offsets >= `base_offset`.

    base_timestamp is the first record's timestamp and max_timestamp the largest one (for a
    LogAppendTime batch, pass records stamped with the append time). Raises `ValueError` for an
    empty batch, out-of-order offsets or a field out of its range, and `UnsupportedCompression`
    for an unknown codec.

    The log cleaner rewrites batches with some records gone: `last_offset` keeps the original
    batch's last offset (Kafka's MemoryRecordsBuilder.overrideLastOffset, so the producer's
    last sequence stays where it was), and with no records left and `empty_timestamp` given
    (the original max timestamp) the batch is Kafka's empty batch (DefaultRecordBatch.
    writeEmptyHeader: no records, uncompressed, both timestamps `empty_timestamp`), which keeps
    a producer's last sequence in the log. With `delete_horizon_ms` (KIP-534) base_timestamp
    is that horizon and the record deltas are taken from it (negative ones too), as Kafka's
    MemoryRecordsBuilder writes a batch whose tombstones the cleaner has kept once.
    """
    records = list(records)
    if not records and (last_offset is None or empty_timestamp is None):
        raise ValueError("a record batch needs at least one record")
    if not records:
        compression = Compression.NONE
    if not 0 <= compression <= ATTR_CODEC_MASK:
        raise ValueError(f"compression codec id {compression} does not fit the attribute bits")
    if timestamp_type not in (TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME):
        raise ValueError(f"timestamp type {timestamp_type} is neither CreateTime (0) nor LogAppendTime (1)")
    first_timestamp = records[0].timestamp if records else empty_timestamp
    base_timestamp = first_timestamp if delete_horizon_ms is None else delete_horizon_ms
    max_timestamp = first_timestamp
    body = bytearray()
    previous_offset = base_offset - 1
    if last_offset is not None and records and last_offset < records[-1].offset:
        raise ValueError(f"last offset {last_offset} is below the last record's offset {records[-1].offset}")
    for record in records:
        if record.offset <= previous_offset:
            raise ValueError(
                f"record offset {record.offset} must be greater than {previous_offset}"
                f" (base_offset {base_offset}, offsets strictly increasing)"
            )
        previous_offset = record.offset
        if record.timestamp > max_timestamp:
            max_timestamp = record.timestamp
        _write_record(body, record, base_offset, base_timestamp)

    attributes = compression
    if timestamp_type == TIMESTAMP_LOG_APPEND_TIME:
        attributes |= ATTR_TIMESTAMP_TYPE
    if is_transactional:
        attributes |= ATTR_TRANSACTIONAL
    if is_control:
        attributes |= ATTR_CONTROL
    if delete_horizon_ms is not None:
        attributes |= ATTR_DELETE_HORIZON
    section = compress(compression, body) if compression != Compression.NONE else body
    out = bytearray(HEADER_BYTES)
    out += section
    try:
        _HEADER.pack_into(
            out,
            0,
            base_offset,
            len(out) - LOG_OVERHEAD,
            partition_leader_epoch,
            MAGIC,
            0,
            attributes,
            (records[-1].offset if last_offset is None else last_offset) - base_offset,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
    except struct.error as exc:
        raise ValueError(f"a batch header field is out of range: {exc}") from exc
    _CRC.pack_into(out, _CRC_AT, crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)


def _write_record(out: bytearray, record: Record, base_offset: int, base_timestamp: int) -> None:
    body = bytearray(b"\x00")  # attributes
    body += encode_varlong(record.timestamp - base_timestamp)
    body += encode_varint(record.offset - base_offset)
    _write_bytes(body, record.key)
    _write_bytes(body, record.value)
    body += encode_varint(len(record.headers))
    for header_key, header_value in record.headers:
        encoded_key = header_key.encode("utf-8")
        body += encode_varint(len(encoded_key))
        body += encoded_key
        _write_bytes(body, header_value)
    out += encode_varint(len(body))
    out += body


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out.append(1)  # zigzag(-1)
    elif isinstance(data, (bytes, bytearray)):
        out += encode_varint(len(data))
        out += data
    else:
        raise TypeError(f"keys, values and header values are bytes or None, not {type(data).__name__}")


def decode_batch(
    buf: bytes | bytearray | memoryview, position: int = 0, *, check_crc: bool = True, max_bytes: int | None = None
) -> DecodedBatch:
    """Decode the whole batch at `position` of `buf`, records with absolute offsets.

    Raises a `CorruptBatch` subclass for a bad header, CRC, compressed block or record,
    `UnsupportedCompression` for a codec id this build does not know, and with `max_bytes`
    `DecompressedTooLarge` for compressed records that decompress to more. The records are decoded
    by decoder.py's `iter_record_tuples`, the one record decoder (the client's too).
    """
    header = read_header(buf, position, check_crc=check_crc)
    new, set_offset, set_timestamp = _new_record, _set_offset, _set_timestamp
    set_key, set_value, set_headers = _set_key, _set_value, _set_headers
    records: list[Record] = []
    append = records.append
    for offset, timestamp, _, key, value, headers in iter_record_tuples(buf, header, max_bytes):
        record = new(Record)
        set_offset(record, offset)
        set_timestamp(record, timestamp)
        set_key(record, key)
        set_value(record, value)
        set_headers(record, headers)
        append(record)
    return DecodedBatch(header, records)


def decode_batches(buf: bytes | bytearray | memoryview) -> Iterator[DecodedBatch]:
    """Decode every batch of `buf`, which must hold whole, consecutive batches only."""
    position = 0
    end = len(buf)
    while position < end:
        batch = decode_batch(buf, position)
        yield batch
        position += batch.header.size_bytes
