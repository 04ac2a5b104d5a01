"""Errors raised while reading record batches.

Every error says where (the byte position of the batch in the buffer it was read from) and
why. They describe corrupt *data*; the broker maps them to Kafka's CORRUPT_MESSAGE or
INVALID_RECORD error codes in one table.
"""

from __future__ import annotations


class RecordsError(Exception):
    """Base class of every error in `hot_tier.records`."""


class CorruptBatch(RecordsError):
    """A record batch whose bytes cannot be trusted.

    `position` is the byte position of the batch's first byte in the buffer being read;
    `reason` says what is wrong, in words a person can act on.
    """

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(f"corrupt record batch at position {position}: {reason}")
        self.position = position
        self.reason = reason


class BadMagic(CorruptBatch):
    def __init__(self, position: int, magic: int) -> None:
        super().__init__(position, f"magic byte is {magic}, only magic 2 (RecordBatch v2) is supported")
        self.magic = magic


class BadCrc(CorruptBatch):
    def __init__(self, position: int, stored: int, computed: int) -> None:
        super().__init__(position, f"CRC-32C mismatch: stored {stored:#010x}, computed {computed:#010x}")
        self.stored = stored
        self.computed = computed


class TruncatedBatch(CorruptBatch):
    def __init__(self, position: int, needed: int, available: int) -> None:
        super().__init__(position, f"truncated: needs {needed} bytes, only {available} available")
        self.needed = needed
        self.available = available


class BadLength(CorruptBatch):
    def __init__(self, position: int, batch_length: int) -> None:
        super().__init__(position, f"batch length {batch_length} is impossible")
        self.batch_length = batch_length


class UnsupportedCompression(RecordsError):
    def __init__(self, codec: int) -> None:
        super().__init__(f"unknown compression codec id {codec}")
        self.codec = codec


class ImpossibleRecordsCount(CorruptBatch):
    """An uncompressed batch whose header declares more records than its records section can
    hold: each record takes at least 7 bytes (header.MIN_RECORD_BYTES)."""

    def __init__(self, position: int, records_count: int, records_bytes: int) -> None:
        super().__init__(position, f"records count {records_count} cannot fit in {records_bytes} bytes")
        self.records_count = records_count
        self.records_bytes = records_bytes


class DecompressedTooLarge(RecordsError):
    """A compressed records section that decompresses to more than `max_bytes`, the bound the
    caller set (`codecs.decompress`). The data may be valid: it is refused for its size, and
    only the first `max_bytes` (plus one step of the codec) were ever decompressed."""

    def __init__(self, position: int, codec: str, max_bytes: int) -> None:
        super().__init__(
            f"record batch at position {position}: its {codec} records section decompresses to more than "
            f"{max_bytes} bytes, the limit on a batch's records decompressed whole"
        )
        self.position = position
        self.codec = codec
        self.max_bytes = max_bytes
