"""The one decoder of the records inside a RecordBatch v2: plain tuples, as fast as Python goes.

Each record is Kafka's DefaultRecord (DefaultRecord.java, KIP-98; the layout is in batch.py's
header). `iter_record_tuples(buf, header)` yields, per record of the batch,

    (offset, timestamp, timestamp_type, key, value, headers)

with the absolute offset, the record's timestamp (the batch's max_timestamp for every record of
a LogAppendTime batch, whose deltas Kafka ignores), the batch's timestamp type (0 CreateTime,
1 LogAppendTime), `key` and `value` as bytes or None and `headers` a tuple of
(str, bytes | None) pairs. That is a client's ConsumerRecord without its topic and partition:
`batch.decode_batch` builds `Record`s from the tuples, the client's fetcher `ConsumerRecord`s
(prefixing topic and partition), each in one loop with no list of intermediate objects.

`iter_record_keys(buf, header)` walks the same records for the log cleaner, which decides on
keys alone: it yields (offset, key, value is null) and steps over values and headers by each
record's length, about a third faster than decoding them.

`records_section` finds (and decompresses) the section the records sit in. The records are
decoded in place: `buf` may be a whole fetch buffer, so every length is checked against the
end of its record and of the section before it is trusted, and the records must fill the
section exactly. Any violation raises `CorruptBatch` naming the batch's position and the
record at fault, after the records before it were yielded.

Speed: one- and two-byte varints (nearly every length and delta) are decoded by table lookup
inline, longer ones through varint.py; a null key (one byte, 0x01) and an empty header list
(0x00) take a short path; a record too short to hold its fields is told apart from other
damage only once its fields do not fit (`_bad_record`, off the hot path). Pure and safe to
call from any thread.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeAlias

from .codecs import decompress
from .errors import CorruptBatch
from .header import ATTR_CODEC_MASK, ATTR_TIMESTAMP_TYPE, HEADER_BYTES, BatchHeader
from .varint import ZIGZAG_1, decode_varint, decode_varlong

Headers: TypeAlias = tuple[tuple[str, bytes | None], ...]
RecordTuple: TypeAlias = tuple[int, int, int, bytes | None, bytes | None, Headers]

# attributes, timestamp_delta, offset_delta, key_length, value_length, headers_count: 1 byte each at least
_MIN_RECORD_BYTES = 6
# Zigzag-decoded value of every two-byte varint, by its 14 payload bits (low 7 bits first):
# lengths of 64 to 8191 bytes and deltas of 64 to 8191, the next most common case.
_ZIGZAG_2 = tuple((raw >> 1) ^ -(raw & 1) for raw in range(1 << 14))


def records_section(
    buf: bytes | bytearray | memoryview, header: BatchHeader, max_bytes: int | None = None
) -> tuple[bytes, int, int]:
    """(data, start, end): the records of the batch `header` describes (it sits in `buf` at
    `header.position`) are `data[start:end]`, decompressed if the batch is compressed.

    An uncompressed batch in a `bytes` buffer is not copied. Raises `CorruptBatch` for a
    compressed block that does not decompress, `UnsupportedCompression` for an unknown codec
    and, with `max_bytes` (the produce path's bound), `DecompressedTooLarge` for a compressed
    block that decompresses to more (`codecs.decompress`).
    """
    position = header.position
    start = position + HEADER_BYTES
    end = position + header.size_bytes
    codec = header.attributes & ATTR_CODEC_MASK
    if codec:
        data = decompress(codec, memoryview(buf)[start:end], position=position, max_bytes=max_bytes)
        return data, 0, len(data)
    if type(buf) is bytes:
        return buf, start, end
    data = bytes(memoryview(buf)[start:end])
    return data, 0, len(data)


def iter_record_tuples(
    buf: bytes | bytearray | memoryview, header: BatchHeader, max_bytes: int | None = None
) -> Iterator[RecordTuple]:
    """Yield the records of the batch `header` describes (it sits in `buf` at
    `header.position`; its header and CRC are checked already, by `read_header`) as
    (offset, timestamp, timestamp_type, key, value, headers). `max_bytes` bounds a
    compressed batch's records section, as `records_section`'s."""
    position = header.position
    count = header.records_count
    if count < 0:
        raise CorruptBatch(position, f"records count {count} is negative")
    data, start, end = records_section(buf, header, max_bytes)
    base_offset = header.base_offset
    timestamp_type = 1 if header.attributes & ATTR_TIMESTAMP_TYPE else 0
    base_timestamp = header.base_timestamp
    max_timestamp = header.max_timestamp
    zz, zz2 = ZIGZAG_1, _ZIGZAG_2
    pos = start
    index = 0
    record_start = pos
    try:
        for index in range(count):
            record_start = pos
            b = data[pos]
            if b < 0x80:
                length = zz[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                length = zz2[(b & 0x7F) | (data[pos + 1] << 7)]
                pos += 2
            else:
                length, pos = decode_varint(data, pos)
            record_end = pos + length
            if record_end > end:
                raise _bad_length(record_start, start, end, pos, length, index, count, position)
            pos += 1  # attributes: unused
            b = data[pos]
            if b < 0x80:
                timestamp_delta = zz[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                timestamp_delta = zz2[(b & 0x7F) | (data[pos + 1] << 7)]
                pos += 2
            else:
                timestamp_delta, pos = decode_varlong(data, pos)
            b = data[pos]
            if b < 0x80:
                offset_delta = zz[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                offset_delta = zz2[(b & 0x7F) | (data[pos + 1] << 7)]
                pos += 2
            else:
                offset_delta, pos = decode_varint(data, pos)

            b = data[pos]
            if b == 1:  # zigzag(-1): a null key, the common case
                key = None
                pos += 1
            else:
                if b < 0x80:
                    size = zz[b]
                    pos += 1
                elif data[pos + 1] < 0x80:
                    size = zz2[(b & 0x7F) | (data[pos + 1] << 7)]
                    pos += 2
                else:
                    size, pos = decode_varint(data, pos)
                if 0 <= size <= record_end - pos:
                    key = data[pos : pos + size]
                    pos += size
                elif size == -1:
                    key = None
                elif size >= 0:
                    raise CorruptBatch(position, f"record {index} has key length {size}, past the record's end")
                else:
                    raise CorruptBatch(position, f"record {index} has key length {size}")

            b = data[pos]
            if b < 0x80:
                size = zz[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                size = zz2[(b & 0x7F) | (data[pos + 1] << 7)]
                pos += 2
            else:
                size, pos = decode_varint(data, pos)
            if 0 <= size <= record_end - pos:
                value = data[pos : pos + size]
                pos += size
            elif size == -1:
                value = None
            elif size >= 0:
                raise CorruptBatch(position, f"record {index} has value length {size}, past the record's end")
            else:
                raise CorruptBatch(position, f"record {index} has value length {size}")

            if data[pos] == 0:
                headers: Headers = ()
                pos += 1
            else:
                headers, pos = decode_headers(data, pos, record_end, index, position)

            if pos != record_end:
                raise _bad_record(data, record_start, start, end, index, count, position) or CorruptBatch(
                    position, f"record {index} declares {length} bytes but its fields take {length + pos - record_end}"
                )
            yield (
                base_offset + offset_delta,
                max_timestamp if timestamp_type else base_timestamp + timestamp_delta,
                timestamp_type, key, value, headers,
            )  # fmt: skip
    except IndexError:
        raise _bad_record(data, record_start, start, end, index, count, position) or CorruptBatch(
            position, f"record {index} of {count} runs past the end of the records section ({end - start} bytes)"
        ) from None
    except ValueError as exc:  # an over-long varint, or a header key that is not UTF-8
        at = record_start - start
        raise _bad_record(data, record_start, start, end, index, count, position) or CorruptBatch(
            position, f"record {index} at byte {at} of the records section: {exc}"
        ) from None
    if pos != end:
        raise CorruptBatch(position, f"{end - pos} bytes left over after the {count} records the header declares")


def iter_record_keys(
    buf: bytes | bytearray | memoryview, header: BatchHeader, max_bytes: int | None = None
) -> Iterator[tuple[int, bytes | None, bool]]:
    """(offset, key, value is null) of each record of the batch, as `iter_record_tuples`
    reads them; values and headers are not decoded. Raises CorruptBatch as it does for a
    record that does not fit its section; `max_bytes` as `records_section`'s."""
    position = header.position
    count = header.records_count
    data, start, end = records_section(buf, header, max_bytes)
    base_offset = header.base_offset
    zz, zz2 = ZIGZAG_1, _ZIGZAG_2
    pos = start
    index = 0
    try:
        for index in range(max(0, count)):
            b = data[pos]
            if b < 0x80:
                length = zz[b]
                pos += 1
            else:
                length, pos = decode_varint(data, pos)
            record_end = pos + length
            if length < _MIN_RECORD_BYTES or record_end > end:
                raise CorruptBatch(position, f"record {index} of {count} claims {length} bytes, {end - pos} remain")
            pos += 1  # attributes
            if data[pos] < 0x80:  # timestamp delta: not needed
                pos += 1
            else:
                pos = decode_varlong(data, pos)[1]
            b = data[pos]
            if b < 0x80:
                offset_delta = zz[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                offset_delta = zz2[(b & 0x7F) | (data[pos + 1] << 7)]
                pos += 2
            else:
                offset_delta, pos = decode_varint(data, pos)
            b = data[pos]
            if b == 1:  # zigzag(-1): a null key
                key = None
                pos += 1
            else:
                if b < 0x80:
                    size = zz[b]
                    pos += 1
                else:
                    size, pos = decode_varint(data, pos)
                if not 0 <= size <= record_end - pos:
                    raise CorruptBatch(position, f"record {index} has key length {size}")
                key = data[pos : pos + size]
                pos += size
            yield base_offset + offset_delta, key, data[pos] == 1  # value length zigzag(-1): null
            pos = record_end
    except (IndexError, ValueError):
        raise CorruptBatch(position, f"record {index} of {count} runs past the end of the records section") from None
    if pos != end:
        raise CorruptBatch(position, f"{end - pos} bytes left over after the {count} records the header declares")


def _bad_record(
    data: bytes, record_start: int, start: int, end: int, index: int, count: int, position: int
) -> CorruptBatch | None:
    """The error for record `index` if its length is what is wrong with it, else None: the loop
    above checks only that a record ends inside the section, and finds a too-short record by
    its fields not fitting, so this tells which it was (off the hot path)."""
    if record_start >= end:
        return _bad_length(record_start, start, end, record_start, 0, index, count, position)
    try:
        length, pos = decode_varint(data, record_start)
    except (ValueError, IndexError):
        return None
    if length < _MIN_RECORD_BYTES or pos + length > end:
        return _bad_length(record_start, start, end, pos, length, index, count, position)
    return None


def _bad_length(
    record_start: int, start: int, end: int, pos: int, length: int, index: int, count: int, position: int
) -> CorruptBatch:
    if record_start >= end:
        return CorruptBatch(position, f"the records section ends after {index} records, the header declares {count}")
    return CorruptBatch(
        position,
        f"record {index} at byte {record_start - start} of the records section claims {length} bytes,"
        f" {end - pos} remain",
    )


def decode_headers(data: bytes, pos: int, record_end: int, index: int, position: int) -> tuple[Headers, int]:
    """The headers of record `index` at `pos` (its bytes end at `record_end`), and the position
    after them."""
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
