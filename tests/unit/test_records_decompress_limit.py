"""Decompression with a bound on the output (hot_tier.records.codecs.decompress's max_bytes),
and the produce paths that decode records with it: compacted topics' key checks and
recompression to a topic's compression.type (64 MiB, PRODUCE_DECOMPRESSED_MAX_BYTES).

A bomb is a few KiB that decompress to a GiB; with the bound, the output stops a step past it
(tracemalloc sees every bytes object and the codecs' output buffers)."""

from __future__ import annotations

import gzip
import struct
import tracemalloc
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard
from crc32c import crc32c

from diskless.broker.compaction.keys import check_keys
from diskless.broker.compression import PRODUCE_DECOMPRESSED_MAX_BYTES, apply_compression_type
from diskless.broker.errors import error_code_for
from hot_tier.records import (
    HEADER_BYTES,
    Compression,
    CorruptBatch,
    DecompressedTooLarge,
    Record,
    compress,
    decode_batch,
    decompress,
    encode_batch,
    iter_record_keys,
    iter_record_tuples,
    read_header,
)
from hot_tier.records.recompress import recompress
from hot_tier.records.varint import encode_varint
from kio.schema.errors import ErrorCode

MiB = 1024 * 1024
COMPRESSED = [c for c in Compression if c != Compression.NONE]
PAYLOAD = b"".join(b"record %06d of the payload; " % i for i in range(4000))  # 120,000 bytes
_HEADER = struct.Struct(">qiibIhiqqqhii")


def streamed_zstd_batch(records_count: int, value_bytes: int, key: bytes | None = b"k") -> bytes:
    """A zstd batch of `records_count` records of `value_bytes` zero bytes each, compressed as it
    is written: the test never holds the decompressed records (a GiB, for the bombs)."""
    cobj = zstandard.ZstdCompressor(level=3).compressobj()
    zeros = bytes(min(value_bytes, MiB))
    key_part = b"\x01" if key is None else encode_varint(len(key)) + key
    parts = []
    for delta in range(records_count):
        body_head = b"\x00" + b"\x00" + encode_varint(delta) + key_part + encode_varint(value_bytes)
        parts.append(cobj.compress(encode_varint(len(body_head) + value_bytes + 1) + body_head))
        for _ in range(value_bytes // len(zeros)):
            parts.append(cobj.compress(zeros))
        parts.append(cobj.compress(zeros[: value_bytes % len(zeros)] + b"\x00"))  # the rest, then no headers
    parts.append(cobj.flush())
    return batch_around(b"".join(parts), Compression.ZSTD, records_count)


def batch_around(section: bytes, codec: int, records_count: int, timestamp: int = 1_700_000_000_000) -> bytes:
    out = bytearray(HEADER_BYTES) + section
    _HEADER.pack_into(out, 0, 0, len(out) - 12, -1, 2, 0, codec, records_count - 1, timestamp, timestamp, -1, -1, -1, records_count)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def bomb(codec: Compression, size_bytes: int) -> bytes:
    """`size_bytes` zero bytes compressed by `codec`, streamed where the codec allows."""
    if codec == Compression.ZSTD:
        cobj = zstandard.ZstdCompressor(level=3).compressobj()
        return b"".join([cobj.compress(bytes(MiB)) for _ in range(size_bytes // MiB)] + [cobj.flush()])
    if codec == Compression.GZIP:
        cobj = zlib.compressobj(9, wbits=31)
        return b"".join([cobj.compress(bytes(MiB)) for _ in range(size_bytes // MiB)] + [cobj.flush()])
    if codec == Compression.LZ4:
        cobj = lz4.frame.LZ4FrameCompressor(block_linked=False)
        return cobj.begin() + b"".join(cobj.compress(bytes(MiB)) for _ in range(size_bytes // MiB)) + cobj.flush()
    return bytes(cramjam.snappy.compress_raw(bytes(size_bytes)))


# --- codecs ---------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name.lower())
def test_the_bound_is_exact(codec: Compression) -> None:
    data = compress(codec, PAYLOAD)
    assert decompress(codec, data, max_bytes=len(PAYLOAD)) == PAYLOAD
    with pytest.raises(DecompressedTooLarge) as info:
        decompress(codec, data, position=321, max_bytes=len(PAYLOAD) - 1)
    name = codec.name.lower()
    assert (info.value.position, info.value.codec, info.value.max_bytes) == (321, name, len(PAYLOAD) - 1)
    assert str(info.value) == (
        f"record batch at position 321: its {name} records section decompresses to more than 119999 bytes, "
        "the limit on a batch's records decompressed whole"
    )


@pytest.mark.parametrize(
    ("codec", "two"),
    [
        (Compression.GZIP, gzip.compress(PAYLOAD) + gzip.compress(PAYLOAD)),
        (Compression.LZ4, lz4.frame.compress(PAYLOAD) + lz4.frame.compress(PAYLOAD)),
        (Compression.ZSTD, zstandard.ZstdCompressor().compress(PAYLOAD) * 2),
        (Compression.SNAPPY, b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + (struct.pack(">i", len(raw := bytes(cramjam.snappy.compress_raw(PAYLOAD)))) + raw) * 2),
    ],
    ids=["gzip-members", "lz4-frames", "zstd-frames", "xerial-blocks"],
)
def test_the_bound_counts_every_member_frame_or_block(codec: Compression, two: bytes) -> None:
    assert decompress(codec, two, max_bytes=2 * len(PAYLOAD)) == PAYLOAD * 2
    with pytest.raises(DecompressedTooLarge):
        decompress(codec, two, max_bytes=2 * len(PAYLOAD) - 1)
    with pytest.raises(DecompressedTooLarge):
        decompress(codec, two, max_bytes=len(PAYLOAD))  # the first alone fits


@pytest.mark.parametrize(
    ("codec", "size_bytes", "peak_bytes"),
    [
        # zstd feeds at least 256 input bytes a step: up to 8 MiB of RLE blocks past a small limit.
        (Compression.ZSTD, 1024 * MiB, 10 * MiB),
        (Compression.GZIP, 64 * MiB, 2 * MiB + MiB // 2),
        (Compression.LZ4, 64 * MiB, 2 * MiB + MiB // 2),
        (Compression.SNAPPY, 64 * MiB, MiB // 2),  # refused by its length prefix: nothing decompressed
    ],
    ids=lambda v: v.name.lower() if isinstance(v, Compression) else str(v),
)
def test_a_bomb_stops_a_step_past_the_bound(codec: Compression, size_bytes: int, peak_bytes: int) -> None:
    data = bomb(codec, size_bytes)
    assert len(data) < size_bytes // 20
    tracemalloc.start()
    try:
        with pytest.raises(DecompressedTooLarge) as info:
            decompress(codec, data, max_bytes=MiB)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.max_bytes == MiB
    assert peak < peak_bytes


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name.lower())
def test_without_a_bound_readers_get_everything(codec: Compression) -> None:
    data = bomb(codec, 8 * MiB)
    assert decompress(codec, data) == bytes(8 * MiB)
    with pytest.raises(DecompressedTooLarge):
        decompress(codec, data, max_bytes=8 * MiB - 1)


def test_a_zstd_frame_cut_short_is_still_corrupt_with_a_bound() -> None:
    data = zstandard.ZstdCompressor(write_content_size=False).compress(PAYLOAD)
    with pytest.raises(CorruptBatch) as info:
        decompress(Compression.ZSTD, data[:-3], max_bytes=MiB)
    assert str(info.value) == "corrupt record batch at position 0: zstd data does not decompress: zstd frame is truncated"


def test_an_lz4_frame_cut_short_is_corrupt() -> None:
    data = compress(Compression.LZ4, PAYLOAD)
    for max_bytes, reason in ((None, "Frame incomplete. LZ4F_decompress returned: 3"), (MiB, "lz4 frame at byte 0 is truncated")):
        with pytest.raises(CorruptBatch) as info:
            decompress(Compression.LZ4, data[:-3], max_bytes=max_bytes)
        assert str(info.value) == f"corrupt record batch at position 0: lz4 data does not decompress: {reason}"


# --- the decoders ---------------------------------------------------------------------------


def test_decoders_pass_the_bound_on() -> None:
    batch = encode_batch([Record(i, 1_700_000_000_000, b"k%d" % i, PAYLOAD) for i in range(3)], compression=Compression.ZSTD)
    header = read_header(batch)
    assert len(list(iter_record_tuples(batch, header, 4 * len(PAYLOAD)))) == 3
    for decode in (
        lambda: list(iter_record_tuples(batch, header, 2 * len(PAYLOAD))),
        lambda: list(iter_record_keys(batch, header, 2 * len(PAYLOAD))),
        lambda: decode_batch(batch, max_bytes=2 * len(PAYLOAD)),
        lambda: recompress(batch, Compression.GZIP, max_bytes=2 * len(PAYLOAD)),
    ):
        with pytest.raises(DecompressedTooLarge):
            decode()
    assert len(list(iter_record_keys(batch, header))) == 3  # no bound: the cleaner's way


# --- produce: compacted topics and compression.type -----------------------------------------


def test_the_produce_bound_is_64_mib_and_answers_message_too_large() -> None:
    assert PRODUCE_DECOMPRESSED_MAX_BYTES == 64 * MiB
    assert error_code_for(DecompressedTooLarge(0, "zstd", 64 * MiB)) is ErrorCode.message_too_large


def test_compacted_key_check_refuses_a_batch_past_64_mib_and_takes_one_below() -> None:
    over = streamed_zstd_batch(1025, 64 * 1024)  # 1025 records of 64 KiB: just over 64 MiB
    with pytest.raises(DecompressedTooLarge) as info:
        check_keys(over, read_header(over), "t", 0)
    assert (info.value.codec, info.value.max_bytes) == ("zstd", 64 * MiB)
    under = streamed_zstd_batch(1000, 64 * 1024)
    check_keys(under, read_header(under), "t", 0)


def test_recompression_refuses_a_batch_past_64_mib() -> None:
    over = streamed_zstd_batch(1, 100 * MiB)  # one record of 100 MiB
    assert len(over) < 10_000
    with pytest.raises(DecompressedTooLarge) as info:
        apply_compression_type(over, "gzip")
    assert (info.value.codec, info.value.max_bytes) == ("zstd", 64 * MiB)
    with pytest.raises(DecompressedTooLarge):
        apply_compression_type(over + encode_batch([Record(1, 0, b"k", b"v")], base_offset=1), "lz4")  # several batches
