"""diskless.broker.compression: a topic's compression.type applied to a produce's batches."""

from __future__ import annotations

import pytest

from diskless.broker.compression import TARGET_CODECS, UnknownCompressionType, apply_compression_type, target_codec
from diskless.broker.topic_configs import COMPRESSION_TYPES
from hot_tier.records import Compression, CorruptBatch, Record, decode_batches, encode_batch, read_header

RECORDS = [Record(10 + i, 1_700_000_000_000 + i, f"k{i}".encode(), b"v" * 200, (("h", b"x"),)) for i in range(5)]


def batch_of(codec: Compression, base_offset: int = 10) -> bytes:
    records = [Record(r.offset - 10 + base_offset, r.timestamp, r.key, r.value, r.headers) for r in RECORDS]
    return encode_batch(records, base_offset=base_offset, compression=codec, producer_id=3, producer_epoch=1, base_sequence=0)


def test_every_compression_type_but_producer_names_a_codec() -> None:
    assert set(TARGET_CODECS) | {"producer"} == set(COMPRESSION_TYPES)
    assert target_codec("producer") is None
    assert target_codec("uncompressed") is Compression.NONE
    with pytest.raises(UnknownCompressionType):
        target_codec("brotli")


@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.name.lower())
def test_producer_keeps_the_very_same_bytes(codec: Compression) -> None:
    batch = batch_of(codec)
    assert apply_compression_type(batch, "producer") is batch


@pytest.mark.parametrize("compression_type", sorted(TARGET_CODECS))
@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.name.lower())
def test_a_batch_is_stored_with_the_topics_codec(compression_type: str, codec: Compression) -> None:
    batch = batch_of(codec)
    stored = apply_compression_type(batch, compression_type)
    assert read_header(stored).codec == TARGET_CODECS[compression_type]
    assert [b.records for b in decode_batches(stored)] == [RECORDS]
    if TARGET_CODECS[compression_type] == codec:
        assert stored is batch  # nothing to do: no copy either


def test_several_batches_each_recompressed_when_needed() -> None:
    batches = [batch_of(Compression.LZ4, 10), batch_of(Compression.ZSTD, 15), batch_of(Compression.NONE, 20)]
    stored = apply_compression_type(b"".join(batches), "zstd")
    decoded = list(decode_batches(stored))
    assert [d.header.codec for d in decoded] == [Compression.ZSTD] * 3
    assert [d.header.base_offset for d in decoded] == [10, 15, 20]
    assert [r.value for d in decoded for r in d.records] == [b"v" * 200] * 15
    all_zstd = b"".join(batch_of(Compression.ZSTD, base) for base in (10, 15))
    assert apply_compression_type(all_zstd, "zstd") is all_zstd


def test_corrupt_batches_are_refused_or_left_to_the_appends_checks() -> None:
    batch = bytearray(batch_of(Compression.LZ4))
    batch[-1] ^= 0xFF
    with pytest.raises(CorruptBatch):
        apply_compression_type(bytes(batch), "zstd")
    truncated = batch_of(Compression.LZ4)[:-3]
    assert apply_compression_type(truncated, "zstd") is truncated
    with pytest.raises(UnknownCompressionType):
        apply_compression_type(batch_of(Compression.LZ4), "brotli")
