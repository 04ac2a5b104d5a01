"""Zigzag variable-length integers, as Kafka's ByteUtils writes them (KIP-98, protobuf style).

A value is first zigzag-mapped so small magnitudes of either sign stay small
(0 -> 0, -1 -> 1, 1 -> 2, -2 -> 3, ...), then written 7 bits at a time, least significant
group first; the high bit of each byte says another byte follows.

    varint   signed 32-bit value, 1 to 5 bytes   (ByteUtils.writeVarint / readVarint)
    varlong  signed 64-bit value, 1 to 10 bytes  (ByteUtils.writeVarlong / readVarlong)

Decoding follows Java: a varint longer than its maximum size is an error, and bits beyond the
type's width are dropped (Java's int/long arithmetic overflows silently). Decoders raise
`ValueError` on a too-long or truncated varint; the batch decoder turns that into a
`CorruptBatch` that says where.
"""

from __future__ import annotations

from typing import TypeAlias

Buffer: TypeAlias = bytes | bytearray | memoryview

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

VARINT_MAX_BYTES = 5
VARLONG_MAX_BYTES = 10

# Zigzag-decoded value of every one-byte varint: the common case for lengths and deltas.
ZIGZAG_1 = tuple((b >> 1) ^ -(b & 1) for b in range(0x80))


def zigzag(value: int) -> int:
    """Map a signed value to an unsigned one (valid for any width up to 64 bits)."""
    return (value << 1) ^ (value >> 63)


def unzigzag(raw: int) -> int:
    return (raw >> 1) ^ -(raw & 1)


# Encodings of every one-byte varint, shared instead of built per call.
_ONE_BYTE = tuple(bytes((raw,)) for raw in range(0x80))


def _encode(value: int, low: int, high: int, name: str) -> bytes:
    raw = (value << 1) ^ (value >> 63)
    if raw < 0x80:
        return _ONE_BYTE[raw]
    if raw < 0x4000:  # values in [-8192, 8191]: lengths and deltas, mostly
        return bytes(((raw & 0x7F) | 0x80, raw >> 7))
    if not low <= value <= high:
        raise ValueError(f"{name} value {value} is outside the signed {64 if high == INT64_MAX else 32}-bit range")
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """`value` (a signed 32-bit int) as a zigzag varint; ValueError outside that range."""
    return _encode(value, INT32_MIN, INT32_MAX, "varint")


def encode_varlong(value: int) -> bytes:
    """`value` (a signed 64-bit int) as a zigzag varlong; ValueError outside that range."""
    return _encode(value, INT64_MIN, INT64_MAX, "varlong")


def write_varint(out: bytearray, value: int) -> None:
    out += _encode(value, INT32_MIN, INT32_MAX, "varint")


def write_varlong(out: bytearray, value: int) -> None:
    out += _encode(value, INT64_MIN, INT64_MAX, "varlong")


def size_of_varint(value: int) -> int:
    """Bytes `write_varint(value)` takes (ByteUtils.sizeOfVarint)."""
    return max(1, -(-zigzag(value).bit_length() // 7))


def size_of_varlong(value: int) -> int:
    return max(1, -(-zigzag(value).bit_length() // 7))


def _read_tail(buf: Buffer, position: int, raw: int, shift: int, max_bytes: int, width_mask: int) -> tuple[int, int]:
    # The fourth byte on; `raw` holds the low `shift` bits from the first three bytes.
    start = position - shift // 7
    for at in range(position, start + max_bytes):
        b = buf[at]
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            raw &= width_mask
            return (raw >> 1) ^ -(raw & 1), at + 1
        shift += 7
    raise ValueError(f"varint is longer than {max_bytes} bytes")


def _decode(buf: Buffer, position: int, max_bytes: int, width_mask: int) -> tuple[int, int]:
    # Unrolled for up to three bytes (values below 2**20 in magnitude): lengths, deltas.
    try:
        b = buf[position]
        if b < 0x80:
            return ZIGZAG_1[b], position + 1
        raw = b & 0x7F
        b = buf[position + 1]
        if b < 0x80:
            raw |= b << 7
            return (raw >> 1) ^ -(raw & 1), position + 2
        raw |= (b & 0x7F) << 7
        b = buf[position + 2]
        if b < 0x80:
            raw |= b << 14
            return (raw >> 1) ^ -(raw & 1), position + 3
        raw |= (b & 0x7F) << 14
        return _read_tail(buf, position + 3, raw, 21, max_bytes, width_mask)
    except IndexError:
        raise ValueError("varint runs past the end of the buffer") from None


def decode_varint(buf: Buffer, position: int = 0) -> tuple[int, int]:
    """Read a zigzag varint at `position`; return (value, position after it)."""
    return _decode(buf, position, VARINT_MAX_BYTES, 0xFFFFFFFF)


def decode_varlong(buf: Buffer, position: int = 0) -> tuple[int, int]:
    """Read a zigzag varlong at `position`; return (value, position after it)."""
    return _decode(buf, position, VARLONG_MAX_BYTES, 0xFFFFFFFFFFFFFFFF)
