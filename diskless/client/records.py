"""Decoding the records of a fetched batch straight into `ConsumerRecord`s: the consumer's hot loop.

The layout is Kafka's DefaultRecord (see hot_tier/records/batch.py, whose `decode_batch` is the
reference decoder): per record a length varint, attributes int8, timestamp delta varlong,
offset delta varint, key and value (length varint, -1 for null, then bytes), a header count
and the headers. This loop builds each record as one `ConsumerRecord` tuple, with its topic,
partition and absolute offset: no intermediate record objects, which roughly halves the
consumer's cost per record. One- and two-byte varints (nearly all of them) are decoded by
table lookup inline. Records below `min_offset` are left out. A test holds the result to
`decode_batch` on random batches of every codec.

The batch's header and CRC are checked before (`hot_tier.records.read_header`); this loop
still checks every length against the bytes there and raises `CorruptBatch` when the records
do not fill their section exactly. Pure.
"""

from __future__ import annotations

from hot_tier.records import ATTR_CODEC_MASK, ATTR_TIMESTAMP_TYPE, HEADER_BYTES, BatchHeader, CorruptBatch, decompress
from hot_tier.records.batch import decode_headers
from hot_tier.records.varint import ZIGZAG_1, decode_varint, decode_varlong

from .structs import ConsumerRecord

_tuple_new = tuple.__new__
# Zigzag-decoded value of every two-byte varint, by its 14 payload bits (low 7 bits first):
# lengths of 64 to 8191 bytes and deltas of 64 to 8191, the next most common case.
_ZIGZAG_2 = tuple((raw >> 1) ^ -(raw & 1) for raw in range(1 << 14))


def decode_records(
    buf: bytes, header: BatchHeader, topic: str, partition: int, min_offset: int
) -> list[ConsumerRecord]:
    """The records of the batch `header` describes (it sits in `buf`), from `min_offset` on."""
    position = header.position
    start = position + HEADER_BYTES
    end = position + header.size_bytes
    codec = header.attributes & ATTR_CODEC_MASK
    if codec:
        data = decompress(codec, memoryview(buf)[start:end], position=position)
        start, end = 0, len(data)
    else:
        data = buf
    timestamp_type = 1 if header.attributes & ATTR_TIMESTAMP_TYPE else 0
    fixed_timestamp = header.max_timestamp if timestamp_type else None
    count = header.records_count
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    zz, zz2 = ZIGZAG_1, _ZIGZAG_2
    new, cls = _tuple_new, ConsumerRecord
    out: list[ConsumerRecord] = []
    append = out.append
    pos = start
    index = 0
    try:
        for index in range(count):
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
                raise CorruptBatch(position, f"record {index} claims {length} bytes, {end - pos} remain")
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
            if b < 0x80:
                size = zz[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                size = zz2[(b & 0x7F) | (data[pos + 1] << 7)]
                pos += 2
            else:
                size, pos = decode_varint(data, pos)
            if size >= 0:
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
                size = zz2[(b & 0x7F) | (data[pos + 1] << 7)]
                pos += 2
            else:
                size, pos = decode_varint(data, pos)
            if size >= 0:
                value = data[pos : pos + size]
                pos += size
            elif size == -1:
                value = None
            else:
                raise CorruptBatch(position, f"record {index} has value length {size}")
            if data[pos] == 0:
                headers: tuple[tuple[str, bytes | None], ...] = ()
                pos += 1
            else:
                headers, pos = decode_headers(data, pos, record_end, index, position)
            if pos != record_end:
                raise CorruptBatch(position, f"record {index} declares {length} bytes but its fields take more or less")
            append(new(cls, (
                topic, partition, base_offset + offset_delta, base_timestamp + timestamp_delta,
                timestamp_type, key, value, headers,
            )))  # fmt: skip
    except IndexError:
        raise CorruptBatch(position, f"record {index} of {count} runs past the end of the records section") from None
    except ValueError as exc:  # an over-long varint, or a header key that is not UTF-8
        raise CorruptBatch(position, f"record {index}: {exc}") from None
    if pos != end:
        raise CorruptBatch(position, f"{end - pos} bytes left over after the {count} records the header declares")
    # The rare cases stay out of the loop: a batch that starts before the position, and
    # LogAppendTime, where every record carries the batch's max_timestamp.
    if base_offset < min_offset:
        out = [r for r in out if r[2] >= min_offset]
    if fixed_timestamp is not None:
        out = [new(cls, (*r[:3], fixed_timestamp, *r[4:])) for r in out]
    return out

