"""A topic's compression.type on produce, as Kafka's LogValidator applies it (sans-IO).

`producer` (Kafka's default) keeps every batch as the producer compressed it: the broker never
decodes records, and this module costs one string comparison. Any other value names the codec
the topic stores (`uncompressed`, `gzip`, `snappy`, `lz4`, `zstd`); a batch of another codec
is recompressed by hot_tier.records.recompress, which keeps offsets deltas, timestamps,
producer id/epoch/sequence and the other attribute bits, and writes a new CRC.

Where it runs: in the partition's append, after the producer's batch passed the header and
max.message.bytes checks, before offsets (and LogAppendTime) are assigned; the recompressed
batch is checked against max.message.bytes again, as Kafka's UnifiedLog.append does when
recompression changed the size. Called by the partition's owner only; pure.

Decoding runs on the event loop and holds a whole batch's records in memory, so the records
a produce makes the broker decompress are bounded: `PRODUCE_DECOMPRESSED_MAX_BYTES` (also
for compacted topics' key checks, compaction/keys.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from hot_tier.records.codecs import Compression
from hot_tier.records.header import ATTR_CODEC_MASK, LOG_OVERHEAD, peek_size
from hot_tier.records.recompress import recompress

PRODUCER = "producer"

# The most bytes of records one produced batch may decompress to where the broker decodes it
# on produce (recompression here, compacted topics' key checks): 64 MiB, 64 times Kafka's
# default max.message.bytes, whatever the topic's (the callers see only the batch). A
# decompression bomb stops there; a legitimate batch that large is refused MESSAGE_TOO_LARGE.
PRODUCE_DECOMPRESSED_MAX_BYTES = 64 * 1024 * 1024

# Kafka's BrokerCompressionType names -> the codec stored; `producer` is not in it.
TARGET_CODECS: Mapping[str, Compression] = {
    "uncompressed": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}

_ATTRIBUTES_LOW_BYTE_AT = 22  # attributes is int16 at 21; the codec bits are in its low byte


class UnknownCompressionType(ValueError):
    def __init__(self, compression_type: str) -> None:
        super().__init__(f"unknown compression.type {compression_type!r}")
        self.compression_type = compression_type


def target_codec(compression_type: str) -> Compression | None:
    """The codec a topic stores, or None for `producer` (keep the producer's)."""
    if compression_type == PRODUCER:
        return None
    try:
        return TARGET_CODECS[compression_type]
    except KeyError:
        raise UnknownCompressionType(compression_type) from None


def apply_compression_type(records: bytes, compression_type: str) -> bytes:
    """The batches of `records` as the topic stores them; `records` itself when nothing changes.

    `records` holds whole batches (a produce request's records for one partition). Raises
    CorruptBatch (bad header, CRC or records of a batch to recompress), UnsupportedCompression
    and UnknownCompressionType, and DecompressedTooLarge (MESSAGE_TOO_LARGE) for a batch to
    recompress whose records decompress to more than PRODUCE_DECOMPRESSED_MAX_BYTES (64 MiB):
    a fixed bound, not one from the topic's max.message.bytes, which bounds the compressed
    batch only; decompression stops there, so a bomb costs at most that much memory.
    """
    if compression_type == PRODUCER:
        return records
    codec = target_codec(compression_type)
    size = peek_size(records)
    if size == len(records) and len(records) > _ATTRIBUTES_LOW_BYTE_AT:  # one batch: the usual case
        if records[_ATTRIBUTES_LOW_BYTE_AT] & ATTR_CODEC_MASK == codec:
            return records
        return recompress(records, codec, max_bytes=PRODUCE_DECOMPRESSED_MAX_BYTES)
    out = bytearray()
    changed = False
    position = 0
    view = memoryview(records)
    while position < len(records):
        size = peek_size(records, position)
        if size is None or size < LOG_OVERHEAD or position + size > len(records):
            return records if not changed else bytes(out + view[position:])  # the append's checks refuse it
        batch = view[position : position + size]
        if size > _ATTRIBUTES_LOW_BYTE_AT and batch[_ATTRIBUTES_LOW_BYTE_AT] & ATTR_CODEC_MASK != codec:
            out += recompress(batch, codec, max_bytes=PRODUCE_DECOMPRESSED_MAX_BYTES)
            changed = True
        else:
            out += batch
        position += size
    return bytes(out) if changed else records
