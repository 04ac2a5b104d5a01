"""The byte format of a producer-state snapshot (Kafka's ProducerStateManager snapshot files):
each producer's epoch, its last batches, its last marker's coordinator epoch and its open
transaction, as of `map_end_offset`. The one copy of it: the broker's snapshot files and the
state it publishes (diskless/broker/producer_state.py) and the `.snapshot` objects beside the
segments in the bucket (cold_tier/layout.py), which the Spark reader reads for the open
transactions at a segment's end. Pure, no I/O.

Snapshot, version 2, all integers big-endian and signed unless marked:

    offset  size  field
    0       4     magic             b"DLPS"
    4       2     version           2
    6       4     crc               CRC-32C (Castagnoli), unsigned, of bytes [10, end)
    10      8     map_end_offset    offset after the last batch folded into this state
    18      4     producer_count
    22      ...   producer_count entries, ascending producer_id, each 39 bytes then batches:
                  0   8  producer_id
                  8   2  producer_epoch
                  10  8  last_offset        last offset of its last batch (data or control)
                  18  8  last_timestamp_ms
                  26  4  coordinator_epoch  of the last marker (-1: none seen)
                  30  8  current_txn_first_offset  first offset of its open transaction (-1: none)
                  38  1  batch_count        unsigned, 0..5
                  39  28 * batch_count, oldest first:
                      0   4  first_sequence
                      4   4  last_sequence
                      8   8  first_offset
                      16  4  offset_delta   last_offset - first_offset
                      20  8  timestamp_ms

Version 1 (no coordinator epoch, no open
transaction) is still read, both then -1. A snapshot that fails any check raises
`CorruptProducerSnapshot` (or `UnsupportedProducerSnapshotVersion`): the caller then
rebuilds the state from the log with `rebuild_from_batches`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from crc32c import crc32c

from .records.header import NO_PRODUCER_ID, NO_SEQUENCE

NUM_BATCHES_TO_RETAIN = 5
SNAPSHOT_MAGIC = b"DLPS"
SNAPSHOT_VERSION = 2
_PREAMBLE = struct.Struct(">4shI")  # magic, version, crc
_BODY_HEADER = struct.Struct(">qi")  # map_end_offset, producer_count
_ENTRY = struct.Struct(">qhqqiqB")
_ENTRY_V1 = struct.Struct(">qhqqB")
_BATCH = struct.Struct(">iiqiq")
_CRC_START = _PREAMBLE.size


class ProducerSnapshotError(Exception):
    """A producer-state snapshot that cannot be loaded; rebuild the state from the log."""


class CorruptProducerSnapshot(ProducerSnapshotError):
    def __init__(self, reason: str, position: int) -> None:
        super().__init__(f"corrupt producer-state snapshot at byte {position}: {reason}")
        self.reason = reason
        self.position = position


class UnsupportedProducerSnapshotVersion(ProducerSnapshotError):
    def __init__(self, version: int) -> None:
        super().__init__(f"producer-state snapshot version {version} is not supported (only {SNAPSHOT_VERSION})")
        self.version = version


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int
    batches: tuple[BatchMetadata, ...]  # oldest first, at most NUM_BATCHES_TO_RETAIN
    last_offset: int
    last_timestamp_ms: int
    # The transaction coordinator's epoch in the last marker appended for this producer (-1:
    # none seen): a marker from an older coordinator is refused (Kafka's
    # TRANSACTION_COORDINATOR_FENCED). Kept in snapshots, not rebuilt from the log (a marker
    # folded from the log keeps the last one's).
    coordinator_epoch: int = -1
    # The first offset of the producer's open transaction in this partition (-1: none), as
    # Kafka's snapshot keeps it: a leader whose local log starts inside that transaction
    # still holds the last stable offset at its start.
    current_txn_first_offset: int = -1

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else NO_SEQUENCE


def encode_snapshot(map_end_offset: int, entries: Iterable[ProducerStateEntry]) -> bytes:
    """Snapshot bytes of `entries`, which must be in ascending producer id."""
    entries = list(entries)
    body = bytearray(_BODY_HEADER.pack(map_end_offset, len(entries)))
    for entry in entries:
        body += _ENTRY.pack(
            entry.producer_id, entry.producer_epoch, entry.last_offset, entry.last_timestamp_ms,
            entry.coordinator_epoch, entry.current_txn_first_offset, len(entry.batches),
        )  # fmt: skip
        for b in entry.batches:
            body += _BATCH.pack(b.first_sequence, b.last_sequence, b.first_offset, b.last_offset - b.first_offset, b.timestamp_ms)
    return _PREAMBLE.pack(SNAPSHOT_MAGIC, SNAPSHOT_VERSION, crc32c(body)) + bytes(body)


def decode_snapshot(data: bytes | bytearray | memoryview) -> tuple[int, list[ProducerStateEntry]]:
    """(map_end_offset, entries by producer id); raises a `ProducerSnapshotError` subclass if the bytes are bad."""
    data = bytes(data)
    if len(data) < _PREAMBLE.size + _BODY_HEADER.size:
        raise CorruptProducerSnapshot(f"{len(data)} bytes is shorter than the fixed header", 0)
    magic, version, stored_crc = _PREAMBLE.unpack_from(data, 0)
    if magic != SNAPSHOT_MAGIC:
        raise CorruptProducerSnapshot(f"magic is {magic!r}, expected {SNAPSHOT_MAGIC!r}", 0)
    if version not in (1, SNAPSHOT_VERSION):
        raise UnsupportedProducerSnapshotVersion(version)
    entry_struct = _ENTRY if version == SNAPSHOT_VERSION else _ENTRY_V1
    computed_crc = crc32c(data[_CRC_START:])
    if computed_crc != stored_crc:
        raise CorruptProducerSnapshot(f"CRC-32C is {computed_crc:#010x}, stored {stored_crc:#010x}", 6)
    map_end_offset, producer_count = _BODY_HEADER.unpack_from(data, _CRC_START)
    if producer_count < 0:
        raise CorruptProducerSnapshot(f"negative producer count {producer_count}", 18)
    entries: list[ProducerStateEntry] = []
    position = _CRC_START + _BODY_HEADER.size
    previous_id = NO_PRODUCER_ID
    for _ in range(producer_count):
        if position + entry_struct.size > len(data):
            raise CorruptProducerSnapshot("producer entry runs past the end", position)
        coordinator_epoch = txn_first = -1
        if version == SNAPSHOT_VERSION:
            producer_id, epoch, last_offset, last_timestamp_ms, coordinator_epoch, txn_first, batch_count = _ENTRY.unpack_from(data, position)
        else:
            producer_id, epoch, last_offset, last_timestamp_ms, batch_count = _ENTRY_V1.unpack_from(data, position)
        if producer_id <= previous_id:
            raise CorruptProducerSnapshot(f"producer id {producer_id} out of order", position)
        if batch_count > NUM_BATCHES_TO_RETAIN:
            raise CorruptProducerSnapshot(f"{batch_count} batches, at most {NUM_BATCHES_TO_RETAIN}", position + entry_struct.size - 1)
        position += entry_struct.size
        if position + batch_count * _BATCH.size > len(data):
            raise CorruptProducerSnapshot("batch list runs past the end", position)
        batches = []
        for _ in range(batch_count):
            first_seq, last_seq, first_offset, offset_delta, timestamp_ms = _BATCH.unpack_from(data, position)
            last = first_offset + offset_delta
            batches.append(BatchMetadata(first_seq, last_seq, first_offset, last, timestamp_ms))
            position += _BATCH.size
        entries.append(ProducerStateEntry(producer_id, epoch, tuple(batches), last_offset, last_timestamp_ms, coordinator_epoch, txn_first))
        previous_id = producer_id
    if position != len(data):
        raise CorruptProducerSnapshot(f"{len(data) - position} bytes after the last entry", position)
    return map_end_offset, entries
