"""Byte-level tests of hot_tier.records: layout, header view, patching, corruption, codecs, varints."""

from __future__ import annotations

import gzip
import itertools
import struct
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard
from aiokafka.codec import snappy_encode
from aiokafka.record._crc32c import crc as reference_crc32c
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from crc32c import crc32c

from hot_tier.records import (
    HEADER_BYTES,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    BadCrc,
    BadLength,
    BadMagic,
    Compression,
    CorruptBatch,
    Record,
    TruncatedBatch,
    UnsupportedCompression,
    compress,
    decode_batch,
    decode_batches,
    decompress,
    encode_batch,
    iter_headers,
    peek_size,
    read_header,
    set_base_offset,
    set_log_append_time,
)
from hot_tier.records.codecs import XERIAL_MAGIC
from hot_tier.records.varint import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    size_of_varint,
    size_of_varlong,
)

# One record (offset 0, timestamp 1000, key b"k", value b"v"), laid out by hand from
# DefaultRecordBatch.java; the CRC agrees with aiokafka's pure-Python CRC-32C (checked below).
GOLDEN = bytes.fromhex(
    "0000000000000000" "0000003a" "ffffffff" "02" "716a6189"  # base_offset, batch_length 49+9, leader epoch, magic, crc
    "0000" "00000000" "00000000000003e8" "00000000000003e8"  # attributes, last_offset_delta, base/max timestamp
    "ffffffffffffffff" "ffff" "ffffffff" "00000001"  # producer_id, producer_epoch, base_sequence, records_count
    "10" "00" "00" "00" "026b" "0276" "00"  # length 8, attributes, deltas, key b"k", value b"v", no headers
)  # fmt: skip


def _records(base_offset: int = 0, n: int = 3) -> list[Record]:
    return [
        Record(base_offset + i, 1_700_000_000_000 + 7 * i, b"key-%d" % i, b"val-%d" % i * (i + 1), (("h", b"%d" % i),))
        for i in range(n)
    ]


def _recrc(buf: bytearray, position: int = 0) -> None:
    """Recompute the CRC of the batch at `position` after a test has changed its bytes."""
    size = struct.unpack_from(">i", buf, position + 8)[0] + 12
    struct.pack_into(">I", buf, position + 17, crc32c(bytes(buf[position + 21 : position + size])))


def _uncompressed_with(records_section: bytes, records_count: int) -> bytearray:
    """A CRC-valid uncompressed batch around a hand-made records section."""
    buf = bytearray(encode_batch([Record(0, 5, None, None)]))
    del buf[HEADER_BYTES:]
    buf += records_section
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    struct.pack_into(">i", buf, 57, records_count)
    _recrc(buf)
    return buf


# -- layout -------------------------------------------------------------------------------


def test_golden_batch_is_encoded_and_decoded_byte_for_byte():
    assert encode_batch([Record(0, 1000, b"k", b"v")]) == GOLDEN
    assert reference_crc32c(GOLDEN[21:]) == 0x716A6189
    batch = decode_batch(GOLDEN)
    assert batch.records == [Record(0, 1000, b"k", b"v", ())]
    assert batch.header.size_bytes == len(GOLDEN) == 70


def test_uncompressed_batch_matches_aiokafka_builder_byte_for_byte():
    builder = DefaultRecordBatchBuilder(2, 0, 0, 4000, 3, 17, 1 << 20)
    records = [
        Record(0, 1_700_000_000_000, b"k0", b"v0", (("a", b"1"), ("b", None))),
        Record(1, 1_699_999_999_000, None, b"x" * 300, ()),
        Record(2, 1_700_000_500_000, b"", None, (("\u00e9t\u00e9", b""),)),
    ]
    for r in records:
        builder.append(r.offset, r.timestamp, r.key, r.value, list(r.headers))
    theirs = bytes(builder.build())
    ours = encode_batch(records, producer_id=4000, producer_epoch=3, base_sequence=17)
    assert ours == theirs
    assert decode_batch(theirs).records == records


def test_known_aiokafka_batch_decodes_exactly():
    builder = DefaultRecordBatchBuilder(2, 0, 1, 9, 0, 0, 1 << 20)
    builder.append(0, 1000, b"a", b"1", [])
    builder.append(1, 900, None, None, [("k", None), ("k", b"dup")])
    builder.append(5, 2000, b"c" * 200, b"3" * 20000, [])
    batch = decode_batch(bytes(builder.build()))
    assert batch.records == [
        Record(0, 1000, b"a", b"1"),
        Record(1, 900, None, None, (("k", None), ("k", b"dup"))),
        Record(5, 2000, b"c" * 200, b"3" * 20000),
    ]
    h = batch.header
    assert (h.base_offset, h.last_offset_delta, h.records_count) == (0, 5, 3)
    assert (h.base_timestamp, h.max_timestamp) == (1000, 2000)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (9, 0, 0)
    assert h.is_transactional and not h.is_control


def test_header_view_fields():
    buf = encode_batch(
        _records(100, 4),
        base_offset=100,
        compression=Compression.LZ4,
        timestamp_type=TIMESTAMP_LOG_APPEND_TIME,
        producer_id=77,
        producer_epoch=5,
        base_sequence=2_147_483_646,
        partition_leader_epoch=12,
        is_transactional=True,
    )
    h = read_header(buf)
    assert h.position == 0
    assert h.base_offset == 100
    assert h.batch_length == len(buf) - 12
    assert h.size_bytes == len(buf)
    assert h.partition_leader_epoch == 12
    assert h.magic == 2
    assert h.crc == crc32c(buf[21:])
    assert h.attributes == 3 | 0x08 | 0x10
    assert h.codec == Compression.LZ4
    assert h.timestamp_type == TIMESTAMP_LOG_APPEND_TIME
    assert h.is_transactional and not h.is_control
    assert h.last_offset_delta == 3
    assert (h.last_offset, h.next_offset) == (103, 104)
    assert h.base_timestamp == 1_700_000_000_000
    assert h.max_timestamp == 1_700_000_000_021
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (77, 5, 2_147_483_646)
    assert h.has_producer_id
    assert h.last_sequence == (2_147_483_646 + 3) & 0x7FFFFFFF == 1
    assert h.records_count == 4
    assert peek_size(buf) == len(buf)
    assert peek_size(buf[:11]) is None


def test_control_batch_decodes_like_any_other():
    commit_key = struct.pack(">hh", 0, 1)  # version 0, type COMMIT
    marker_value = struct.pack(">hi", 0, 3)  # version 0, coordinator epoch 3
    buf = encode_batch(
        [Record(42, 5000, commit_key, marker_value)],
        base_offset=42,
        producer_id=8,
        producer_epoch=1,
        is_transactional=True,
        is_control=True,
    )
    batch = decode_batch(buf)
    assert batch.header.is_control and batch.header.is_transactional
    assert batch.header.attributes == 0x30
    assert batch.records == [Record(42, 5000, commit_key, marker_value)]


def test_offsets_are_absolute_and_deltas_may_be_sparse():
    records = [Record(1000, 10, b"a", b"1"), Record(1003, 5, b"b", b"2"), Record(1500, -20, None, b"3")]
    batch = decode_batch(encode_batch(records, base_offset=998))
    assert batch.header.base_offset == 998
    assert batch.header.last_offset_delta == 502
    assert batch.header.base_timestamp == 10 and batch.header.max_timestamp == 10
    assert batch.records == records


def test_encode_rejects_bad_input():
    with pytest.raises(ValueError, match="at least one record"):
        encode_batch([])
    with pytest.raises(ValueError, match="strictly increasing"):
        encode_batch([Record(3, 0, None, None), Record(3, 0, None, None)])
    with pytest.raises(ValueError, match="strictly increasing"):
        encode_batch([Record(4, 0, None, None)], base_offset=5)
    with pytest.raises(ValueError, match="signed 32-bit"):
        encode_batch([Record(1 << 31, 0, None, None)])
    with pytest.raises(ValueError, match="out of range"):
        encode_batch([Record(0, 0, None, None)], producer_epoch=1 << 15)
    with pytest.raises(TypeError, match="str"):
        encode_batch([Record(0, 0, "text", None)])  # type: ignore[arg-type]
    with pytest.raises(UnsupportedCompression) as info:
        encode_batch([Record(0, 0, None, None)], compression=6)
    assert info.value.codec == 6


def test_decode_batches_walks_consecutive_batches_of_every_codec():
    buf = b"".join(encode_batch(_records(10 * c, 3), base_offset=10 * c, compression=c) for c in Compression)
    batches = list(decode_batches(buf))
    assert [b.header.codec for b in batches] == list(Compression)
    assert [b.header.position for b in batches] == [h.position for h in iter_headers(buf)]
    for c, batch in zip(Compression, batches, strict=True):
        assert batch.records == _records(10 * c, 3)
    assert list(decode_batches(b"")) == []


def test_decode_from_a_memoryview_and_a_bytearray_at_an_offset():
    first = encode_batch(_records(0, 2))
    second = encode_batch(_records(2, 5), base_offset=2)
    buf = bytearray(first + second)
    assert decode_batch(buf, len(first)).records == _records(2, 5)
    assert decode_batch(memoryview(buf), len(first)).records == _records(2, 5)
    assert decode_batch(bytes(buf), len(first)).records == _records(2, 5)


# -- patching in place ----------------------------------------------------------------------


def test_set_base_offset_keeps_the_crc_valid():
    buf = bytearray(encode_batch(_records(0, 3)))
    crc_before = read_header(buf).crc
    set_base_offset(buf, 0, 5000)
    h = read_header(buf)
    assert h.base_offset == 5000 and h.crc == crc_before
    assert [r.offset for r in decode_batch(buf).records] == [5000, 5001, 5002]


def test_set_base_offset_at_a_position_touches_only_that_batch():
    first = encode_batch(_records(0, 1))
    buf = bytearray(first + encode_batch(_records(0, 2)))
    set_base_offset(buf, len(first), 9)
    assert [h.base_offset for h in iter_headers(buf)] == [0, 9]


@pytest.mark.parametrize("codec", list(Compression))
def test_set_log_append_time_restamps_every_record_and_keeps_the_crc_valid(codec):
    buf = bytearray(encode_batch(_records(0, 3), compression=codec))
    header = read_header(buf)
    assert header.timestamp_type == TIMESTAMP_CREATE_TIME
    set_log_append_time(buf, header, 1_800_000_000_000)
    batch = decode_batch(buf)  # checks the CRC
    assert batch.header.timestamp_type == TIMESTAMP_LOG_APPEND_TIME
    assert batch.header.max_timestamp == 1_800_000_000_000
    assert batch.header.base_timestamp == 1_700_000_000_000
    assert batch.header.codec == codec
    assert [r.timestamp for r in batch.records] == [1_800_000_000_000] * 3
    assert [r.value for r in batch.records] == [r.value for r in _records(0, 3)]


# -- corruption -----------------------------------------------------------------------------

FIRST = encode_batch(_records(0, 2))
SECOND = encode_batch(_records(2, 3), base_offset=2)
AT = len(FIRST)


def test_bad_crc_names_position_and_both_crcs():
    buf = bytearray(FIRST + SECOND)
    buf[AT + HEADER_BYTES + 3] ^= 0x01
    stored = struct.unpack_from(">I", buf, AT + 17)[0]
    with pytest.raises(BadCrc) as info:
        list(decode_batches(buf))
    assert info.value.position == AT
    assert info.value.stored == stored
    assert info.value.computed == crc32c(bytes(buf[AT + 21 :]))
    assert info.value.computed != stored


def test_bad_crc_in_a_header_field_covered_by_it():
    buf = bytearray(FIRST)
    struct.pack_into(">q", buf, 35, 1)  # max_timestamp sits inside the CRC span
    with pytest.raises(BadCrc):
        decode_batch(buf)
    assert decode_batch(buf, check_crc=False).header.max_timestamp == 1


@pytest.mark.parametrize("magic", [0, 1, 3, 0xFF])
@pytest.mark.parametrize("second_bytes", [len(SECOND), 30])  # whole, or cut short inside the header
def test_bad_magic(magic, second_bytes):
    buf = bytearray(FIRST + SECOND[:second_bytes])
    buf[AT + 16] = magic
    with pytest.raises(BadMagic) as info:
        list(decode_batches(buf))
    assert info.value.position == AT
    assert info.value.magic == struct.unpack("b", bytes([magic]))[0]


@pytest.mark.parametrize("cut", [1, 11, 12, 16, 17, 60, 61, 62, len(SECOND) - 1])
def test_truncated_second_batch(cut):
    buf = FIRST + SECOND[:cut]
    needed = HEADER_BYTES if cut < HEADER_BYTES else len(SECOND)
    with pytest.raises(TruncatedBatch) as info:
        list(decode_batches(buf))
    assert (info.value.position, info.value.needed, info.value.available) == (AT, needed, cut)
    with pytest.raises(TruncatedBatch):
        decode_batch(buf, AT)


@pytest.mark.parametrize("batch_length", [-1, 0, 48])
def test_impossible_batch_length(batch_length):
    buf = bytearray(FIRST + SECOND)
    struct.pack_into(">i", buf, AT + 8, batch_length)
    with pytest.raises(BadLength) as info:
        list(decode_batches(buf))
    assert (info.value.position, info.value.batch_length) == (AT, batch_length)


def test_batch_length_longer_than_the_buffer():
    buf = bytearray(FIRST)
    struct.pack_into(">i", buf, 8, len(FIRST) - 12 + 1)
    with pytest.raises(TruncatedBatch) as info:
        decode_batch(buf)
    assert (info.value.needed, info.value.available) == (len(FIRST) + 1, len(FIRST))


def test_batch_length_shorter_than_its_records():
    # A consistent CRC over a batch whose declared length drops the last byte of its records.
    buf = bytearray(FIRST[:-1])
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    _recrc(buf)
    with pytest.raises(CorruptBatch) as info:
        decode_batch(buf)
    assert type(info.value) is CorruptBatch
    assert info.value.position == 0
    assert "record 1" in info.value.reason


def test_batch_length_longer_than_its_records():
    buf = bytearray(FIRST + b"\x00")
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    _recrc(buf)
    with pytest.raises(CorruptBatch) as info:
        list(decode_batches(bytes(SECOND) + bytes(buf)))
    assert info.value.position == len(SECOND)
    assert info.value.reason == "1 bytes left over after the 2 records the header declares"


def _section(*records: bytes) -> bytes:
    return b"".join(encode_varint(len(r)) + r for r in records)


GOOD_RECORD = bytes.fromhex("00 00 00 02 6b 02 76 00")  # attributes, deltas 0, key b"k", value b"v", no headers


@pytest.mark.parametrize(
    ("section", "count", "reason"),
    [
        (_section(GOOD_RECORD), 2, "the records section ends after 1 records, the header declares 2"),
        (_section(GOOD_RECORD), -1, "records count -1 is negative"),
        (_section(GOOD_RECORD) * 2, 1, "bytes left over after the 1 records"),
        (encode_varint(9) + GOOD_RECORD, 1, "record 0 at byte 0 of the records section claims 9 bytes, 8 remain"),
        (encode_varint(3) + b"\x00\x00\x00", 1, "claims 3 bytes"),
        (_section(GOOD_RECORD + b"\x00"), 1, "record 0 declares 9 bytes but its fields take 8"),
        (_section(bytes.fromhex("00 00 00 7e 6b 02 76 00")), 1, "record 0 has key length 63, past the record's end"),
        (_section(bytes.fromhex("00 00 00 7f 6b 02 76 00")), 1, "record 0 has key length -64"),
        (_section(bytes.fromhex("00 00 00 03 6b 02 76 00")), 1, "record 0 has key length -2"),
        (_section(bytes.fromhex("00 00 00 01 05 76 00 00")), 1, "record 0 has value length -3"),
        (_section(bytes.fromhex("00 00 00 01 40 76 00 00")), 1, "record 0 has value length 32, past the record's end"),
        (_section(bytes.fromhex("00 00 00 01 01 01")), 1, "record 0 has headers count -1"),
        (_section(bytes.fromhex("00 00 00 01 01 02 02 ff 00")), 1, "of the records section: 'utf-8' codec"),
        (_section(bytes.fromhex("00 00 00 01 01 02 01 00")), 1, "record 0 has header key length -1"),
        (_section(bytes.fromhex("00 00 00 01 01 02 00 05")), 1, "record 0 has header value length -3"),
        (_section(bytes.fromhex("00 00 00 01 01 04 00 00")), 1, "record 0 ends before its 2 headers do"),
        (_section(b"\x00" + b"\xff" * 10 + b"\x01\x00\x01\x01\x00"), 1, "section: varint is longer than 10 bytes"),
        (_section(b"\x00\x00" + b"\xff" * 5 + b"\x01\x01\x01\x00"), 1, "section: varint is longer than 5 bytes"),
        (_section(GOOD_RECORD) + b"\x80", 2, "record 1 of 2 runs past the end of the records section (10 bytes)"),
        (_section(GOOD_RECORD, GOOD_RECORD) + b"\x80\x80\x80", 3, "record 2 at byte 18 of the records section"),
    ],
)
def test_garbage_in_the_records_section(section, count, reason):
    buf = FIRST + bytes(_uncompressed_with(section, count))
    with pytest.raises(CorruptBatch) as info:
        list(decode_batches(buf))
    assert type(info.value) is CorruptBatch
    assert info.value.position == AT
    assert reason in info.value.reason


def test_records_never_read_into_the_next_batch():
    # The first batch claims 2 records but holds 1; the bytes that follow it are a valid batch.
    buf = bytes(_uncompressed_with(_section(GOOD_RECORD), 2)) + SECOND
    with pytest.raises(CorruptBatch) as info:
        list(decode_batches(buf))
    assert info.value.position == 0
    assert info.value.reason == "the records section ends after 1 records, the header declares 2"


@pytest.mark.parametrize("codec", [c for c in Compression if c != Compression.NONE])
def test_corrupt_compressed_section(codec):
    buf = bytearray(encode_batch(_records(0, 20), compression=codec))
    del buf[-5:]  # a compressed stream that stops short
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    _recrc(buf)
    with pytest.raises(CorruptBatch) as info:
        list(decode_batches(FIRST + bytes(buf)))
    assert info.value.position == AT
    assert info.value.reason.startswith(f"{codec.name.lower()} data does not decompress: ")


@pytest.mark.parametrize("codec", [c for c in Compression if c != Compression.NONE])
def test_compressed_section_with_wrong_records_count(codec):
    buf = bytearray(encode_batch(_records(0, 4), compression=codec))
    struct.pack_into(">i", buf, 57, 3)
    _recrc(buf)
    with pytest.raises(CorruptBatch) as info:
        decode_batch(buf)
    assert "bytes left over after the 3 records" in info.value.reason


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_in_a_batch(codec):
    buf = bytearray(FIRST)
    struct.pack_into(">h", buf, 21, codec)
    _recrc(buf)
    with pytest.raises(UnsupportedCompression) as info:
        decode_batch(buf)
    assert info.value.codec == codec


# -- codecs ---------------------------------------------------------------------------------

PAYLOAD = b"".join(b"record %d of a compressible stream; " % i for i in range(3000))


@pytest.mark.parametrize("codec", list(Compression))
def test_codec_round_trip(codec):
    assert decompress(codec, compress(codec, PAYLOAD)) == PAYLOAD
    assert decompress(codec, compress(codec, b"x")) == b"x"


def test_codecs_write_what_kafka_clients_read():
    assert compress(Compression.GZIP, PAYLOAD)[:2] == b"\x1f\x8b"
    assert zlib.decompress(compress(Compression.GZIP, PAYLOAD), 31) == PAYLOAD
    # raw snappy, as librdkafka writes it
    assert bytes(cramjam.snappy.decompress_raw(compress(Compression.SNAPPY, PAYLOAD))) == PAYLOAD
    # LZ4 frame: magic, FLG = version 01 + independent blocks, no content size or checksum; BD = 64 KiB
    lz4_frame = compress(Compression.LZ4, PAYLOAD)
    assert lz4_frame[:4] == b"\x04\x22\x4d\x18"
    assert lz4_frame[4] == 0x60
    assert lz4_frame[5] == 0x40
    assert zstandard.ZstdDecompressor().decompress(compress(Compression.ZSTD, PAYLOAD)) == PAYLOAD


def test_gzip_and_lz4_read_every_member_or_frame_and_what_others_write():
    assert decompress(Compression.GZIP, gzip.compress(b"first ") + gzip.compress(b"second")) == b"first second"
    linked = lz4.frame.compress(PAYLOAD, block_linked=True, store_size=True, content_checksum=True)
    assert decompress(Compression.LZ4, linked) == PAYLOAD
    assert decompress(Compression.LZ4, linked + linked) == PAYLOAD + PAYLOAD
    with pytest.raises(CorruptBatch, match="lz4 data does not decompress"):
        decompress(Compression.LZ4, compress(Compression.LZ4, PAYLOAD) + b"junk")


def test_zstd_without_content_size_streamed_and_multi_frame():
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(PAYLOAD)
    assert zstandard.frame_content_size(no_size) == -1
    assert decompress(Compression.ZSTD, no_size) == PAYLOAD
    cobj = zstandard.ZstdCompressor().compressobj()
    streamed = b"".join(cobj.compress(PAYLOAD[i : i + 1000]) for i in range(0, len(PAYLOAD), 1000)) + cobj.flush()
    assert zstandard.frame_content_size(streamed) == -1
    assert decompress(Compression.ZSTD, streamed) == PAYLOAD
    assert decompress(Compression.ZSTD, no_size + streamed) == PAYLOAD + PAYLOAD


def test_zstd_truncated_frame():
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(PAYLOAD)
    with pytest.raises(CorruptBatch) as info:
        decompress(Compression.ZSTD, no_size[:-3], position=123)
    assert info.value.position == 123
    assert info.value.reason == "zstd data does not decompress: zstd frame is truncated"


def _xerial(blocks: list[bytes]) -> bytes:
    out = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    for block in blocks:
        raw = bytes(cramjam.snappy.compress_raw(block))
        out += struct.pack(">i", len(raw)) + raw
    return out


def test_xerial_snappy_is_decoded():
    assert decompress(Compression.SNAPPY, _xerial([PAYLOAD[:32768], PAYLOAD[32768:]])) == PAYLOAD
    assert decompress(Compression.SNAPPY, _xerial([b"one"])) == b"one"
    assert decompress(Compression.SNAPPY, _xerial([])) == b""
    java_like = snappy_encode(PAYLOAD, xerial_compatible=True, xerial_blocksize=1000)
    assert decompress(Compression.SNAPPY, java_like) == PAYLOAD


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (XERIAL_MAGIC + b"\x00\x00\x00\x01", "xerial header needs 16 bytes, only 12 present"),
        (_xerial([b"abc"])[:-1], "xerial block at byte 20 claims"),
        (_xerial([b"abc"]) + b"\x00\x00", "xerial block length at byte"),
        (XERIAL_MAGIC + struct.pack(">iii", 1, 1, -5), "claims -5 bytes"),
        (XERIAL_MAGIC + struct.pack(">iii", 1, 1, 3) + b"\xff\xff\xff", "snappy"),
    ],
)
def test_corrupt_xerial_snappy(data, reason):
    with pytest.raises(CorruptBatch) as info:
        decompress(Compression.SNAPPY, data, position=7)
    assert info.value.position == 7
    assert info.value.reason.startswith("snappy data does not decompress: ")
    assert reason in info.value.reason


@pytest.mark.parametrize("codec", [c for c in Compression if c != Compression.NONE])
def test_garbage_does_not_decompress(codec):
    with pytest.raises(CorruptBatch) as info:
        decompress(codec, b"\x00\x01 definitely not compressed \xff" * 3, position=99)
    assert info.value.position == 99


@pytest.mark.parametrize("codec", [c for c in Compression if c != Compression.NONE])
def test_empty_stream_is_corrupt(codec):
    with pytest.raises(CorruptBatch):
        decompress(codec, b"")


def test_unknown_codec():
    for codec, function in itertools.product((5, 7, -1), (compress, decompress)):
        with pytest.raises(UnsupportedCompression):
            function(codec, b"x")


# -- varints --------------------------------------------------------------------------------

VARINTS = [
    (0, "00"), (-1, "01"), (1, "02"), (63, "7e"), (-64, "7f"), (64, "8001"), (-65, "8101"), (8191, "fe7f"),
    (8192, "808001"), (INT32_MAX, "feffffff0f"), (INT32_MIN, "ffffffff0f"),
]  # fmt: skip
VARLONGS = [(1 << 31, "8080808010"), (INT64_MAX, "feffffffffffffffff01"), (INT64_MIN, "ffffffffffffffffff01")]


@pytest.mark.parametrize(
    ("value", "hex_", "is_varint"), [(*v, True) for v in VARINTS] + [(*v, False) for v in VARLONGS]
)
def test_varint_and_varlong_edge_values(value, hex_, is_varint):
    encoded = bytes.fromhex(hex_)
    if is_varint:
        assert encode_varint(value) == encoded
        assert size_of_varint(value) == len(encoded)
        assert decode_varint(b"\xaa" + encoded + b"\xbb", 1) == (value, 1 + len(encoded))
    assert encode_varlong(value) == encoded
    assert size_of_varlong(value) == len(encoded)
    assert decode_varlong(encoded + b"\x00") == (value, len(encoded))


def test_varint_out_of_range_too_long_or_truncated():
    for value in (INT32_MAX + 1, INT32_MIN - 1):
        with pytest.raises(ValueError, match="signed 32-bit"):
            encode_varint(value)
    for value in (INT64_MAX + 1, INT64_MIN - 1):
        with pytest.raises(ValueError, match="signed 64-bit"):
            encode_varlong(value)
    with pytest.raises(ValueError, match="varint is longer than 5 bytes"):
        decode_varint(b"\x80\x80\x80\x80\x80\x00")
    with pytest.raises(ValueError, match="varint is longer than 10 bytes"):
        decode_varlong(b"\x00\x00" + b"\x80" * 10 + b"\x00", 2)
    assert decode_varlong(b"\x00\x00" + b"\x80" * 9 + b"\x00", 2) == (0, 12)
    for data in (b"", b"\x80", b"\x80\x80", b"\x80\x80\x80", b"\xff\xff\xff\xff"):
        with pytest.raises(ValueError, match="runs past the end"):
            decode_varint(data)
        with pytest.raises(ValueError, match="runs past the end"):
            decode_varlong(data)


def test_varint_drops_bits_beyond_32_like_java():
    # Java's readVarint shifts the fifth byte into a 32-bit int: the high bits overflow away.
    assert decode_varint(b"\xfe\xff\xff\xff\x7f") == (INT32_MAX, 5)
    assert decode_varint(b"\xff\xff\xff\xff\x7f") == (INT32_MIN, 5)
    assert decode_varlong(b"\xfe\xff\xff\xff\x7f") == (0x3FFFFFFFF, 5)


def test_forged_sizes_are_rejected_before_allocating():
    # A raw snappy block whose length prefix claims 4 GiB from 6 bytes.
    with pytest.raises(CorruptBatch, match="snappy block claims 4294967295 bytes, impossible from 6"):
        decompress(Compression.SNAPPY, b"\xff\xff\xff\xff\x0f\x00")
    # An lz4 frame header (valid header checksum) claiming 1 GB ahead of a tiny real block.
    header = lz4.frame.LZ4FrameCompressor(block_linked=False).begin(source_size=10**9)
    body = lz4.frame.compress(b"abc" * 100, block_linked=False, store_size=False)[7:]
    with pytest.raises(CorruptBatch, match="lz4 frame claims 1000000000 bytes, impossible"):
        decompress(Compression.LZ4, header + body)


@pytest.mark.parametrize("transactional", [False, True])
def test_peek_transactional_reads_the_flag_read_header_reads(transactional: bool) -> None:
    from hot_tier.records import peek_transactional

    ids = {"producer_id": 7, "producer_epoch": 0, "base_sequence": 0} if transactional else {}
    data = b"\x00" * 5 + encode_batch([Record(0, 1, None, b"v", ())], is_transactional=transactional, **ids)
    assert peek_transactional(data, 5) is read_header(data, 5).is_transactional is transactional
    assert not peek_transactional(data[:27], 5)  # cut before its attributes
    other_magic = bytearray(data)
    other_magic[5 + 16] = 1
    assert not peek_transactional(bytes(other_magic), 5)
