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
position and the record at fault. Everything here is pure and safe to call from any thread.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from crc32c import crc32c

from .codecs import Compression, compress, decompress
from .errors import CorruptBatch
from .header import (
    ATTR_CODEC_MASK,
    ATTR_CONTROL,
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
from .varint import ZIGZAG_1, decode_varint, decode_varlong, encode_varint, encode_varlong

_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC = struct.Struct(">I")
_CRC_AT = 17
# attributes, timestamp_delta, offset_delta, key_length, value_length, headers_count: 1 byte each at least
_MIN_RECORD_BYTES = 6


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
) -> bytes:
    """Build one batch holding `records`, which must have increasing offsets >= `base_offset`.

    base_timestamp is the first record's timestamp and max_timestamp the largest one (for a
    LogAppendTime batch, pass records stamped with the append time). Raises `ValueError` for an
    empty batch, out-of-order offsets or a field out of its range, and `UnsupportedCompression`
    for an unknown codec.
    """
    records = list(records)
    if not records:
        raise ValueError("a record batch needs at least one record")
    if not 0 <= compression <= ATTR_CODEC_MASK:
        raise ValueError(f"compression codec id {compression} does not fit the attribute bits")
    if timestamp_type not in (TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME):
        raise ValueError(f"timestamp type {timestamp_type} is neither CreateTime (0) nor LogAppendTime (1)")
    base_timestamp = records[0].timestamp
    max_timestamp = base_timestamp
    body = bytearray()
    previous_offset = base_offset - 1
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
            records[-1].offset - base_offset,
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


def decode_batch(buf: bytes | bytearray | memoryview, position: int = 0, *, check_crc: bool = True) -> DecodedBatch:
    """Decode the whole batch at `position` of `buf`, records with absolute offsets.

    Raises a `CorruptBatch` subclass for a bad header, CRC, compressed block or record, and
    `UnsupportedCompression` for a codec id this build does not know.
    """
    header = read_header(buf, position, check_crc=check_crc)
    count = header.records_count
    if count < 0:
        raise CorruptBatch(position, f"records count {count} is negative")
    start = position + HEADER_BYTES
    end = position + header.size_bytes
    codec = header.attributes & ATTR_CODEC_MASK
    if codec != Compression.NONE:
        data = decompress(codec, memoryview(buf)[start:end], position=position)
        start, end = 0, len(data)
    elif type(buf) is bytes:
        data = buf  # slices of bytes are bytes already: no need to copy the section
    else:
        data = bytes(memoryview(buf)[start:end])
        start, end = 0, len(data)
    log_append_time = bool(header.attributes & ATTR_TIMESTAMP_TYPE)
    records = _decode_records(
        data, start, end, count, header.base_offset, header.base_timestamp,
        header.max_timestamp if log_append_time else None, position,
    )  # fmt: skip
    return DecodedBatch(header, records)


def decode_batches(buf: bytes | bytearray | memoryview) -> Iterator[DecodedBatch]:
    """Decode every batch of `buf`, which must hold whole, consecutive batches only."""
    position = 0
    end = len(buf)
    while position < end:
        batch = decode_batch(buf, position)
        yield batch
        position += batch.header.size_bytes


def _decode_records(
    data: bytes,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    fixed_timestamp: int | None,
    position: int,
) -> list[Record]:
    """Decode `count` records from `data[pos:end]`, which they must fill exactly.

    The hot loop of every consumer: one- and two-byte varints (nearly all of them) are
    decoded inline, longer ones through varint.py. `data` may be a whole fetch buffer, so
    every length is checked against the end of its record before it is trusted; a varint
    that strays past the record ends up in the record-length check.
    """
    start = pos
    zz = ZIGZAG_1
    new, set_offset, set_timestamp = _new_record, _set_offset, _set_timestamp
    set_key, set_value, set_headers = _set_key, _set_value, _set_headers
    records: list[Record] = []
    append = records.append
    index = 0
    record_start = pos
    try:
        for index in range(count):
            if pos >= end:
                raise CorruptBatch(
                    position, f"the records section ends after {index} records, the header declares {count}"
                )
            record_start = pos
            b = data[pos]
            if b < 0x80:
                length = zz[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                raw = (b & 0x7F) | (data[pos + 1] << 7)
                length = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                length, pos = decode_varint(data, pos)
            record_end = pos + length
            if length < _MIN_RECORD_BYTES or record_end > end:
                raise CorruptBatch(
                    position,
                    f"record {index} at byte {record_start - start} of the records section claims {length} bytes,"
                    f" {end - pos} remain",
                )
            pos += 1  # attributes: unused
            b = data[pos]
            if b < 0x80:
                timestamp_delta = zz[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                raw = (b & 0x7F) | (data[pos + 1] << 7)
                timestamp_delta = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                timestamp_delta, pos = decode_varlong(data, pos)
            b = data[pos]
            if b < 0x80:
                offset_delta = zz[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                raw = (b & 0x7F) | (data[pos + 1] << 7)
                offset_delta = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                offset_delta, pos = decode_varint(data, pos)

            b = data[pos]
            if b < 0x80:
                size = zz[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                raw = (b & 0x7F) | (data[pos + 1] << 7)
                size = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                size, pos = decode_varint(data, pos)
            if size >= 0:
                if pos + size > record_end:
                    raise CorruptBatch(position, f"record {index} has key length {size}, past the record's end")
                key = data[pos : pos + size]
                pos += size
            elif size == -1:
                key = None
            else:
                raise CorruptBatch(position, f"record {index} has key length {size}")

            b = data[pos]
            if b < 0x80:
                size = zz[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                raw = (b & 0x7F) | (data[pos + 1] << 7)
                size = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                size, pos = decode_varint(data, pos)
            if size >= 0:
                if pos + size > record_end:
                    raise CorruptBatch(position, f"record {index} has value length {size}, past the record's end")
                value = data[pos : pos + size]
                pos += size
            elif size == -1:
                value = None
            else:
                raise CorruptBatch(position, f"record {index} has value length {size}")

            b = data[pos]
            if b == 0:
                headers: tuple[tuple[str, bytes | None], ...] = ()
                pos += 1
            else:
                headers, pos = decode_headers(data, pos, record_end, index, position)

            if pos != record_end:
                raise CorruptBatch(
                    position, f"record {index} declares {length} bytes but its fields take {length + pos - record_end}"
                )
            record = new(Record)
            set_offset(record, base_offset + offset_delta)
            set_timestamp(record, base_timestamp + timestamp_delta if fixed_timestamp is None else fixed_timestamp)
            set_key(record, key)
            set_value(record, value)
            set_headers(record, headers)
            append(record)
    except IndexError:
        raise CorruptBatch(
            position, f"record {index} of {count} runs past the end of the records section ({end - start} bytes)"
        ) from None
    except ValueError as exc:  # an over-long varint, or a header key that is not UTF-8
        at = record_start - start
        raise CorruptBatch(position, f"record {index} at byte {at} of the records section: {exc}") from None
    if pos != end:
        raise CorruptBatch(position, f"{end - pos} bytes left over after the {count} records the header declares")
    return records


def decode_headers(
    data: bytes, pos: int, record_end: int, index: int, position: int
) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    """The headers of record `index` at `pos` (its bytes end at `record_end`), and the position
    after them. Shared with the consumer's decoder in diskless.client.records."""
    zz = ZIGZAG_1
    b = data[pos]
    if b < 0x80:
        count = zz[b]
        pos += 1
    else:
        count, pos = decode_varint(data, pos)
    if count < 0:
        raise CorruptBatch(position, f"record {index} has headers count {count}")
    headers = []
    for _ in range(count):
        if pos >= record_end:
            raise CorruptBatch(position, f"record {index} ends before its {count} headers do")
        b = data[pos]
        if b < 0x80:
            size = zz[b]
            pos += 1
        else:
            size, pos = decode_varint(data, pos)
        if size < 0 or pos + size > record_end:
            raise CorruptBatch(position, f"record {index} has header key length {size}")
        key = data[pos : pos + size].decode("utf-8")
        pos += size
        b = data[pos]
        if b < 0x80:
            size = zz[b]
            pos += 1
        else:
            size, pos = decode_varint(data, pos)
        if size >= 0:
            if pos + size > record_end:
                raise CorruptBatch(position, f"record {index} has header value length {size}, past the record's end")
            value: bytes | None = data[pos : pos + size]
            pos += size
        elif size == -1:
            value = None
        else:
            raise CorruptBatch(position, f"record {index} has header value length {size}")
        headers.append((key, value))
    return tuple(headers), pos
