"""Write-ahead objects: the bytes of one group commit of a broker, and their keys. Pure.

A broker gathers the batches appended to all its partitions for a few milliseconds and writes
them as one object, in one PUT (`if_none_match`), before any of them is acknowledged to an
acks=all producer. Key, under the store's root:

    wal~/N/TTTTTTTTTTTTTTTTTTTT-U.wal

    N  node id of the writing broker, decimal
    T  the writer's clock when the object was sealed, ms since the epoch, 20 digits
    U  upload id, 16 hex digits (`layout.new_upload_id`)

`wal~` holds a `~`, which Kafka forbids in topic names, so no topic's keys can collide with it.

Byte layout (all integers big-endian):

    batches   the record batches, byte for byte as appended (base offset and partition leader
              epoch already set), one after another
    index     one entry per batch:
                topic length (2 bytes), topic (UTF-8), [topic id (16)], partition (4),
                base offset (8), last offset (8), leader epoch (4), position of the batch in
                the object (8), size of the batch (4)
              The topic id is there when the length's top bit (0x8000) is set (topic names
              are at most 249 bytes): which topic of that name the batch belongs to, so that a
              reader leaves out a deleted topic's batches once one of its name is made again.
              Objects written before it have no topic ids.
    footer    index position (8), index length (4), entry count (4), CRC-32C of the index (4),
              magic "DLWA" (4)  -- 24 bytes

A reader with only the bucket reads the footer (the last 24 bytes), then the index, then any
batch by its position: every batch carries its own CRC, the index has the footer's. Which
objects are durable is recorded by the metadata store (the commit, fenced on each partition's
leader epoch); a reader without it takes, where two objects hold the same offsets of a
partition, the batch of the higher leader epoch, as `layout.parse_catalogue` does for segments.
"""

from __future__ import annotations

import re
import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from crc32c import crc32c

WAL_PREFIX = "wal~/"
MAGIC = b"DLWA"
FOOTER = struct.Struct(">QIII4s")
FOOTER_BYTES = FOOTER.size
_ENTRY = struct.Struct(">iqqiqi")  # after the topic: partition, base, last, epoch, position, size
_TOPIC_LENGTH = struct.Struct(">H")
_HAS_TOPIC_ID = 0x8000
_KEY = re.compile(r"^wal~/(0|[1-9][0-9]*)/([0-9]{20})-([0-9a-f]{16})\.wal$")


class CorruptWalObject(ValueError):
    """The object's footer or index cannot be trusted (torn, truncated or not a write-ahead object)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"corrupt write-ahead object: {reason}")
        self.reason = reason


@dataclass(frozen=True, slots=True)
class WalEntry:
    """Where one batch of a partition lies in the object: bytes [position, position + size_bytes)."""

    topic: str
    partition: int
    base_offset: int
    last_offset: int
    leader_epoch: int
    position: int
    size_bytes: int
    topic_id: uuid.UUID | None = None  # None in objects written before topic ids


def wal_object_key(node_id: int, sealed_ms: int, upload_id: str) -> str:
    return f"{WAL_PREFIX}{node_id}/{sealed_ms:020d}-{upload_id}.wal"


def parse_wal_object_key(key: str) -> tuple[int, int, str] | None:
    """(node id, sealed ms, upload id) of a write-ahead object's key, or None for other keys."""
    match = _KEY.match(key)
    return None if match is None else (int(match.group(1)), int(match.group(2)), match.group(3))


def encode_wal_object(batches: Sequence[tuple]) -> tuple[bytes, list[WalEntry]]:
    """The object for (topic, partition, base_offset, last_offset, leader_epoch, batch bytes[,
    topic id]) tuples, in that order, and the entries its index holds."""
    parts: list[bytes | memoryview] = []
    entries: list[WalEntry] = []
    position = 0
    for topic, partition, base_offset, last_offset, leader_epoch, data, *topic_id in batches:
        entries.append(WalEntry(topic, partition, base_offset, last_offset, leader_epoch, position, len(data), *topic_id))
        parts.append(data)
        position += len(data)
    index = b"".join(
        _TOPIC_LENGTH.pack(len(name := e.topic.encode()) | (0 if e.topic_id is None else _HAS_TOPIC_ID)) + name
        + (b"" if e.topic_id is None else e.topic_id.bytes)
        + _ENTRY.pack(e.partition, e.base_offset, e.last_offset, e.leader_epoch, e.position, e.size_bytes)
        for e in entries
    )  # fmt: skip
    footer = FOOTER.pack(position, len(index), len(entries), crc32c(index), MAGIC)
    return b"".join([*parts, index, footer]), entries


def decode_footer(footer: bytes) -> tuple[int, int, int, int]:
    """(index position, index length, entry count, index CRC) from the last FOOTER_BYTES."""
    if len(footer) != FOOTER_BYTES:
        raise CorruptWalObject(f"footer is {len(footer)} bytes, not {FOOTER_BYTES}")
    index_position, index_length, count, crc, magic = FOOTER.unpack(footer)
    if magic != MAGIC:
        raise CorruptWalObject(f"magic {magic!r} is not {MAGIC!r}")
    return index_position, index_length, count, crc


def decode_index(index: bytes, count: int, crc: int) -> list[WalEntry]:
    if crc32c(index) != crc:
        raise CorruptWalObject("index CRC mismatch")
    entries = []
    position = 0
    try:
        for _ in range(count):
            (length,) = _TOPIC_LENGTH.unpack_from(index, position)
            has_id, length = length & _HAS_TOPIC_ID, length & ~_HAS_TOPIC_ID
            topic = index[position + 2 : position + 2 + length].decode()
            position += 2 + length
            topic_id = None
            if has_id:
                if position + 16 > len(index):
                    raise CorruptWalObject(f"index entry {len(entries)}: its topic id is cut short")
                topic_id = uuid.UUID(bytes=bytes(index[position : position + 16]))
                position += 16
            entries.append(WalEntry(topic, *_ENTRY.unpack_from(index, position), topic_id))
            position += _ENTRY.size
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptWalObject(f"index entry {len(entries)}: {exc}") from exc
    if position != len(index):
        raise CorruptWalObject(f"index holds {len(index) - position} bytes past its {count} entries")
    return entries


def decode_wal_object(data: bytes) -> list[WalEntry]:
    """The entries of a whole object, checked against its length."""
    index_position, index_length, count, crc = decode_footer(data[-FOOTER_BYTES:])
    if index_position + index_length + FOOTER_BYTES != len(data):
        raise CorruptWalObject(f"index at {index_position} of {index_length} bytes does not end at the footer")
    entries = decode_index(data[index_position : index_position + index_length], count, crc)
    for e in entries:
        if e.position < 0 or e.size_bytes <= 0 or e.position + e.size_bytes > index_position:
            raise CorruptWalObject(f"batch of {e.topic}-{e.partition} at {e.position} lies outside the batches")
    return entries
