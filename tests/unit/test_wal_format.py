"""Write-ahead objects: bytes round-trip exactly, keys parse back, damage is detected."""

from __future__ import annotations

import uuid

import pytest
from crc32c import crc32c

from cold_tier.wal_format import (
    FOOTER_BYTES,
    CorruptWalObject,
    WalEntry,
    decode_footer,
    decode_index,
    decode_wal_object,
    encode_wal_object,
    parse_wal_object_key,
    wal_object_key,
)

BATCHES = [("orders", 0, 0, 9, 3, b"a" * 100), ("orders", 1, 40, 41, 3, b"b" * 7), ("pay.ments-x", 2, 5, 5, 0, b"c")]


def test_round_trip() -> None:
    data, entries = encode_wal_object(BATCHES)
    assert entries == [
        WalEntry("orders", 0, 0, 9, 3, 0, 100),
        WalEntry("orders", 1, 40, 41, 3, 100, 7),
        WalEntry("pay.ments-x", 2, 5, 5, 0, 107, 1),
    ]
    assert decode_wal_object(data) == entries
    for entry, (*_, payload) in zip(entries, BATCHES):
        assert data[entry.position : entry.position + entry.size_bytes] == payload
    # A reader with only the bucket: the footer first, then the index.
    index_position, index_length, count, crc = decode_footer(data[-FOOTER_BYTES:])
    assert (index_position, count) == (108, 3)
    assert decode_index(data[index_position : index_position + index_length], count, crc) == entries


def test_entries_carry_their_topics_id_beside_entries_without_one() -> None:
    first, second = uuid.UUID(int=1), uuid.UUID("9b2f8a52-58f1-4c2e-9d5e-0d5f7a1c3b11")
    batches = [("orders", 0, 0, 9, 3, b"a" * 100, first), ("orders", 0, 10, 10, 3, b"b"), ("x" * 249, 2, 5, 5, 0, b"c", second)]
    data, entries = encode_wal_object(batches)
    assert [e.topic_id for e in entries] == [first, None, second]
    assert decode_wal_object(data) == entries
    index_position, index_length, count, crc = decode_footer(data[-FOOTER_BYTES:])
    index = data[index_position : index_position + index_length]
    assert decode_index(index, count, crc) == entries
    # An index whose last id is cut short (its CRC made to match) is refused, not misread.
    short = index[: 2 + 6 + 16 + 36 + 2 + 6 + 36 + 2 + 249 + 8]
    with pytest.raises(CorruptWalObject, match="topic id is cut short"):
        decode_index(short, 3, crc32c(short))


def test_keys() -> None:
    key = wal_object_key(3, 1_700_000_000_123, "0123456789abcdef")
    assert key == "wal~/3/00000001700000000123-0123456789abcdef.wal"
    assert parse_wal_object_key(key) == (3, 1_700_000_000_123, "0123456789abcdef")
    assert parse_wal_object_key("orders/0/00000000000000000000-0123456789abcdef.log") is None


@pytest.mark.parametrize("cut", [1, FOOTER_BYTES, FOOTER_BYTES + 3])
def test_a_torn_object_is_refused(cut: int) -> None:
    data, _ = encode_wal_object(BATCHES)
    with pytest.raises(CorruptWalObject):
        decode_wal_object(data[:-cut])


def test_a_flipped_index_byte_is_refused() -> None:
    data, _ = encode_wal_object(BATCHES)
    damaged = bytearray(data)
    damaged[110] ^= 0x01  # inside the index
    with pytest.raises(CorruptWalObject, match="CRC"):
        decode_wal_object(bytes(damaged))
