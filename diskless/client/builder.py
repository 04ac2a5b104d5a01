"""Building one RecordBatch v2 as records arrive (Kafka's MemoryRecordsBuilder).

The producer appends each record's bytes to the batch body at `send()`, so that the batch is
ready to go the moment it is drained: no list of record objects, no second pass. The bytes
are exactly those of `hot_tier.records.encode_batch` for the same records (a unit test holds
the two together); the layout is documented there and in hot_tier/records/header.py:

    record  = length varint, attributes int8 (0), timestamp_delta varlong,
              offset_delta varint, key_length varint, key, value_length varint, value,
              headers_count varint, headers (key_length varint, key, value_length varint, value)
    batch   = the 61-byte header (base_offset 0: the broker assigns offsets), then the records
              section, compressed as one block unless the codec is none

`build()` fills in the producer id, epoch and base sequence, which are only known when the
batch is drained (sequence numbers follow drain order), and computes the CRC-32C.

Pure; one builder belongs to one producer batch, used by one task.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from crc32c import crc32c

from hot_tier.records import CRC_START, HEADER_BYTES, LOG_OVERHEAD, MAGIC, Compression, compress

_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC = struct.Struct(">I")
_CRC_AT = 17
ATTR_TRANSACTIONAL = 0x10


def _encode_unsigned(raw: int) -> bytes:
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """The zigzag varint of a signed 64-bit value (varint and varlong encode alike)."""
    return _encode_unsigned(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


# Encoded varints of 0..16383: lengths, offset deltas and small timestamp deltas. The zigzag
# form of n >= 0 is 2n: one byte below 64, two below 8192, three up to 16383 (built at import,
# so written out rather than 16384 calls of encode_varint; a unit test compares the two).
_SMALL = tuple(
    [bytes((n << 1,)) for n in range(64)]
    + [bytes((((n << 1) & 0x7F) | 0x80, n >> 6)) for n in range(64, 8192)]
    + [bytes((((n << 1) & 0x7F) | 0x80, ((n >> 6) & 0x7F) | 0x80, n >> 13)) for n in range(8192, 1 << 14)]
)
_SMALL_LIMIT = len(_SMALL)
_NULL = b"\x01"  # varint -1: a null key or value


def varint(value: int) -> bytes:
    return _SMALL[value] if 0 <= value < _SMALL_LIMIT else encode_varint(value)


def record_size_bytes(key: bytes | None, value: bytes | None, headers: tuple[tuple[str, bytes | None], ...]) -> int:
    """An upper bound of a record's encoded size, for buffer accounting and batch limits."""
    size = 21 + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
    for header_key, header_value in headers:
        size += 10 + len(header_key) * 4 + (len(header_value) if header_value is not None else 0)
    return size


class BatchBuilder:
    __slots__ = ("body", "count", "base_timestamp", "max_timestamp")

    def __init__(self) -> None:
        self.body = bytearray()
        self.count = 0
        self.base_timestamp = 0
        self.max_timestamp = 0

    @property
    def size_bytes(self) -> int:
        """The uncompressed size of the batch so far."""
        return HEADER_BYTES + len(self.body)

    def append(
        self, timestamp: int, key: bytes | None, value: bytes | None, headers: tuple[tuple[str, bytes | None], ...] = ()
    ) -> int:
        """Append one record; returns its offset delta (its index in the batch).

        Raises TypeError for a key, value or header that is not bytes or None (or a header key
        that is not str), and then leaves the builder exactly as it was: nothing is written
        before the whole record is encoded.
        """
        index = self.count
        base_timestamp = timestamp if index == 0 else self.base_timestamp
        delta = timestamp - base_timestamp
        small = _SMALL
        if key is None:
            key_length, key = _NULL, b""
        else:
            n = len(key)
            key_length = small[n] if n < _SMALL_LIMIT else encode_varint(n)
        if value is None:
            value_length, value = _NULL, b""
        else:
            n = len(value)
            value_length = small[n] if n < _SMALL_LIMIT else encode_varint(n)
        # One join and one len(): cheaper than adding up the parts' lengths.
        record = b"".join((
            b"\x00",  # attributes
            small[delta] if 0 <= delta < _SMALL_LIMIT else encode_varint(delta),
            small[index] if index < _SMALL_LIMIT else encode_varint(index),
            key_length, key, value_length, value,
            _encode_headers(headers) if headers else b"\x00",
        ))  # fmt: skip
        n = len(record)
        body = self.body
        body += small[n] if n < _SMALL_LIMIT else encode_varint(n)
        body += record
        if index == 0:
            self.base_timestamp = self.max_timestamp = timestamp
        elif timestamp > self.max_timestamp:
            self.max_timestamp = timestamp
        self.count = index + 1
        return index

    def append_many(
        self,
        timestamp: int,
        keys: Sequence[bytes | None] | None,
        values: Sequence[bytes | None],
        start: int,
        stop: int,
        body_limit: int,
        room_bytes: int,
        sticky_bytes: int,
    ) -> tuple[int, int]:
        """Append records `start`, `start + 1`, ... of `values` (and `keys`; None: no keys),
        without headers and all with `timestamp`, as `append()` would one by one; returns (the
        index after the last record appended, the `record_size_bytes` they add up to).

        It stops before `stop`, and before a record that would take the body past `body_limit`
        or the sizes past `room_bytes`, unless that record would be the builder's first (the
        same checks the accumulator makes per record); and after the record that brings the sizes
        to `sticky_bytes` (where the sticky partitioner moves on). Keys and values must be
        bytes or None (the producer checked them): nothing is appended for a record that fails.
        """
        index = self.count
        delta = timestamp - self.base_timestamp if index else 0
        small, limit, encode = _SMALL, _SMALL_LIMIT, encode_varint
        prefix = b"\x00" + (small[delta] if 0 <= delta < limit else encode(delta))  # attributes, timestamp delta
        body_bytes = len(self.body)
        used_bytes = 0
        parts: list[bytes] = []
        append = parts.append
        join = b"".join
        position = start
        if keys is None:
            body_cap, room_cap = body_limit - 21, room_bytes - 21  # less the fixed part of `size`
            first = index
            for position in range(start, stop):
                value = values[position]
                if value is None:
                    n, value_length, value = 0, _NULL, b""
                else:
                    n = len(value)
                    value_length = small[n] if n < limit else encode(n)
                if (body_bytes + n > body_cap or used_bytes + n > room_cap) and (index or used_bytes):
                    break
                record = join((prefix, small[index] if index < limit else encode(index), b"\x01", value_length, value, b"\x00"))
                n = len(record)  # the record: offset delta, a null key, the value, no headers
                length = small[n] if n < limit else encode(n)
                append(length)
                append(record)
                body_bytes += len(length) + n
                used_bytes += 21 + len(value)
                index += 1
                if used_bytes >= sticky_bytes:
                    break
            position = start + index - first
        else:
            for position in range(start, stop):
                key, value = keys[position], values[position]
                size = 21 + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
                if (body_bytes + size > body_limit or used_bytes + size > room_bytes) and (index or used_bytes):
                    break
                if key is None:
                    key_length, key = _NULL, b""
                else:
                    n = len(key)
                    key_length = small[n] if n < limit else encode(n)
                if value is None:
                    value_length, value = _NULL, b""
                else:
                    n = len(value)
                    value_length = small[n] if n < limit else encode(n)
                record = join((prefix, small[index] if index < limit else encode(index), key_length, key, value_length, value, b"\x00"))
                n = len(record)
                length = small[n] if n < limit else encode(n)
                append(length)
                append(record)
                body_bytes += len(length) + n
                used_bytes += size
                index += 1
                if used_bytes >= sticky_bytes:
                    position += 1
                    break
            else:
                position = stop
        if index == self.count:
            return start, 0
        if self.count == 0:
            self.base_timestamp = self.max_timestamp = timestamp
        elif timestamp > self.max_timestamp:
            self.max_timestamp = timestamp
        self.body += join(parts)
        self.count = index
        return position, used_bytes

    def build(
        self,
        *,
        compression: int = Compression.NONE,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        is_transactional: bool = False,
    ) -> bytes:
        """The whole batch, header and CRC included. The builder stays usable for a rebuild."""
        if self.count == 0:
            raise ValueError("a record batch needs at least one record")
        section = compress(compression, self.body) if compression != Compression.NONE else self.body
        out = bytearray(HEADER_BYTES)
        out += section
        attributes = compression | (ATTR_TRANSACTIONAL if is_transactional else 0)
        _HEADER.pack_into(
            out, 0,
            0, len(out) - LOG_OVERHEAD, -1, MAGIC, 0, attributes, self.count - 1,
            self.base_timestamp, self.max_timestamp, producer_id, producer_epoch, base_sequence, self.count,
        )  # fmt: skip
        _CRC.pack_into(out, _CRC_AT, crc32c(memoryview(out)[CRC_START:]))
        return bytes(out)


def _encode_headers(headers: tuple[tuple[str, bytes | None], ...]) -> bytes:
    out = bytearray(varint(len(headers)))
    for header_key, header_value in headers:
        encoded = header_key.encode("utf-8")
        out += varint(len(encoded))
        out += encoded
        if header_value is None:
            out += _NULL
        else:
            out += varint(len(header_value))
            out += header_value
    return bytes(out)
