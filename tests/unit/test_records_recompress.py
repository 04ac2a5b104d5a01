"""hot_tier.records.recompress: every codec pair keeps records, header fields and attribute
bits, and writes a valid CRC and the codec asked for."""

from __future__ import annotations

import itertools
import struct

import pytest
from crc32c import crc32c

from hot_tier.records import (
    ATTR_CODEC_MASK,
    ATTR_TIMESTAMP_TYPE,
    HEADER_BYTES,
    TIMESTAMP_LOG_APPEND_TIME,
    BadCrc,
    Compression,
    CorruptBatch,
    Record,
    UnsupportedCompression,
    decode_batch,
    decompress,
    encode_batch,
    read_header,
    set_log_append_time,
)
from hot_tier.records.recompress import recompress

BASE_OFFSET = 1000
BASE_TIMESTAMP = 1_700_000_000_000
RECORDS = [
    Record(BASE_OFFSET, BASE_TIMESTAMP, b"key-0", b"value-0" * 50, (("h1", b"v1"), ("h2", None))),
    Record(BASE_OFFSET + 1, BASE_TIMESTAMP - 5, None, b"earlier than the first"),  # negative delta
    Record(BASE_OFFSET + 2, BASE_TIMESTAMP + 86_400_000, b"k", None, (("", b""),)),
    Record(BASE_OFFSET + 3, BASE_TIMESTAMP + 3, b"", b"\x00" * 3000),
]
PRODUCER = {"producer_id": 4242, "producer_epoch": 7, "base_sequence": 123, "partition_leader_epoch": 9}
CODECS = list(Compression)
HEADER_FIELDS_KEPT = (
    "base_offset", "partition_leader_epoch", "magic", "last_offset_delta", "base_timestamp", "max_timestamp",
    "producer_id", "producer_epoch", "base_sequence", "records_count",
)  # fmt: skip


def batch_of(codec: Compression, **fields) -> bytes:
    return encode_batch(RECORDS, base_offset=BASE_OFFSET, compression=codec, **(PRODUCER | fields))


def fix_crc(batch: bytearray) -> None:
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))


def records_section(batch: bytes) -> bytes:
    header = read_header(batch)
    return decompress(header.codec, batch[HEADER_BYTES:])


@pytest.mark.parametrize(("source", "target"), list(itertools.product(CODECS, CODECS)), ids=lambda c: c.name.lower())
def test_every_codec_pair_keeps_records_and_header(source: Compression, target: Compression) -> None:
    original = batch_of(source)
    result = recompress(original, target)
    before, after = read_header(original), read_header(result)  # read_header checks the CRC
    assert after.codec == target
    assert after.attributes & ~ATTR_CODEC_MASK == before.attributes & ~ATTR_CODEC_MASK
    assert after.size_bytes == len(result)
    assert {f: getattr(after, f) for f in HEADER_FIELDS_KEPT} == {f: getattr(before, f) for f in HEADER_FIELDS_KEPT}
    assert decode_batch(result).records == RECORDS
    # Byte for byte the same records (offset and timestamp deltas, attributes, headers).
    assert records_section(result) == records_section(original)
    if source == target:
        assert result == original


@pytest.mark.parametrize("target", CODECS, ids=lambda c: c.name.lower())
def test_the_transactional_bit_is_kept_and_a_delete_horizon_cleared(target: Compression) -> None:
    original = bytearray(batch_of(Compression.LZ4 if target != Compression.LZ4 else Compression.GZIP, is_transactional=True))
    # A producer's batch with the delete-horizon bit (6) set, its CRC fixed: Kafka's LogValidator
    # builds the batch again without a horizon; base_timestamp is the first record's again.
    attributes = struct.unpack_from(">h", original, 21)[0] | 0x40
    struct.pack_into(">h", original, 21, attributes)
    fix_crc(original)
    result = recompress(bytes(original), target)
    header = read_header(result)
    assert header.is_transactional and header.delete_horizon_ms is None
    assert header.attributes == (attributes & ~ATTR_CODEC_MASK & ~0x40) | target
    assert header.base_timestamp == RECORDS[0].timestamp
    assert decode_batch(result).records == RECORDS


@pytest.mark.parametrize("target", [Compression.NONE, Compression.ZSTD], ids=lambda c: c.name.lower())
def test_log_append_time_batch_keeps_its_stamp_and_the_records_deltas(target: Compression) -> None:
    original = bytearray(batch_of(Compression.SNAPPY))
    set_log_append_time(original, read_header(original), BASE_TIMESTAMP + 99)
    result = recompress(bytes(original), target)
    header = read_header(result)
    assert header.timestamp_type == TIMESTAMP_LOG_APPEND_TIME and header.attributes & ATTR_TIMESTAMP_TYPE
    assert (header.max_timestamp, header.base_timestamp) == (BASE_TIMESTAMP + 99, BASE_TIMESTAMP)
    assert [r.timestamp for r in decode_batch(result).records] == [BASE_TIMESTAMP + 99] * len(RECORDS)
    assert records_section(result) == records_section(bytes(original))


def test_a_producer_less_batch_keeps_its_minus_ones() -> None:
    original = encode_batch(RECORDS[:1], base_offset=0, compression=Compression.GZIP)
    header = read_header(recompress(original, Compression.ZSTD))
    assert (header.producer_id, header.producer_epoch, header.base_sequence, header.partition_leader_epoch) == (-1, -1, -1, -1)


def test_an_empty_batch_gets_the_codec_of_an_empty_section() -> None:
    original = bytearray(batch_of(Compression.NONE))
    del original[HEADER_BYTES:]
    struct.pack_into(">i", original, 8, HEADER_BYTES - 12)
    struct.pack_into(">i", original, 57, 0)
    fix_crc(original)
    result = recompress(bytes(original), Compression.ZSTD)
    header = read_header(result)
    assert (header.codec, header.records_count, header.last_offset_delta) == (Compression.ZSTD, 0, read_header(original).last_offset_delta)
    assert records_section(result) == b""


def test_a_corrupt_batch_is_refused_not_given_a_fresh_crc() -> None:
    original = bytearray(batch_of(Compression.LZ4))
    original[-1] ^= 0xFF
    with pytest.raises(BadCrc):
        recompress(bytes(original), Compression.ZSTD)


def test_exactly_one_whole_batch() -> None:
    original = batch_of(Compression.GZIP)
    with pytest.raises(CorruptBatch):
        recompress(original + original, Compression.ZSTD)
    with pytest.raises(CorruptBatch):
        recompress(original[:-1], Compression.ZSTD)


def test_unknown_codec_ids() -> None:
    with pytest.raises(UnsupportedCompression):
        recompress(batch_of(Compression.NONE), 5)
    bad = bytearray(batch_of(Compression.NONE))
    struct.pack_into(">h", bad, 21, 6)  # codec 6 does not exist
    fix_crc(bad)
    with pytest.raises(UnsupportedCompression):
        recompress(bytes(bad), Compression.ZSTD)
