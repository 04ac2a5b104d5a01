"""diskless.broker.partition.batch_checks: what a client's batch header may not say (no
records decoded): an unknown codec, more records than an uncompressed section can hold, the
control bit."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c

from diskless.broker.errors import InvalidRecord, error_code_for
from diskless.broker.partition.batch_checks import check_produced_batch
from hot_tier.records import (
    ATTR_CONTROL,
    HEADER_BYTES,
    MIN_RECORD_BYTES,
    Compression,
    ImpossibleRecordsCount,
    Record,
    UnsupportedCompression,
    encode_batch,
    read_header,
)
from kio.schema.errors import ErrorCode

_ATTRIBUTES_AT = 21
_LAST_OFFSET_DELTA_AT = 23
_RECORDS_COUNT_AT = 57


def patched(batch: bytes, *, attributes: int | None = None, records_count: int | None = None) -> bytes:
    """`batch` with its attributes or records count (and last offset delta, to match) replaced
    and a valid CRC: only the checks under test can refuse it."""
    out = bytearray(batch)
    if attributes is not None:
        struct.pack_into(">h", out, _ATTRIBUTES_AT, attributes)
    if records_count is not None:
        struct.pack_into(">i", out, _RECORDS_COUNT_AT, records_count)
        struct.pack_into(">i", out, _LAST_OFFSET_DELTA_AT, records_count - 1)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def batch_of(count: int = 1, compression: Compression = Compression.NONE, key: bytes | None = b"k", value: bytes | None = b"v") -> bytes:
    return encode_batch([Record(i, 1_700_000_000_000, key, value) for i in range(count)], compression=compression)


@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.name.lower())
def test_a_valid_batch_of_every_codec_passes(codec: Compression) -> None:
    check_produced_batch(read_header(batch_of(3, codec)))


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_codec_bits_5_to_7_are_unsupported_compression(codec: int) -> None:
    header = read_header(patched(batch_of(), attributes=codec))
    with pytest.raises(UnsupportedCompression) as info:
        check_produced_batch(header)
    assert (info.value.codec, str(info.value)) == (codec, f"unknown compression codec id {codec}")
    assert error_code_for(info.value) is ErrorCode.corrupt_message


def test_the_smallest_record_is_seven_bytes() -> None:
    smallest = batch_of(key=None, value=None)
    assert len(smallest) - HEADER_BYTES == MIN_RECORD_BYTES == 7
    check_produced_batch(read_header(smallest))  # one 7-byte record in 7 bytes: fits


def test_a_records_count_that_cannot_fit_the_uncompressed_section_is_refused() -> None:
    one = batch_of(key=None, value=None)  # 7 bytes of records
    header = read_header(patched(one, records_count=2))
    with pytest.raises(ImpossibleRecordsCount) as info:
        check_produced_batch(header)
    assert (info.value.records_count, info.value.records_bytes) == (2, 7)
    assert str(info.value) == "corrupt record batch at position 0: records count 2 cannot fit in 7 bytes"
    assert error_code_for(info.value) is ErrorCode.corrupt_message

    big = batch_of(value=b"x" * 100)  # 1 record in 110 bytes: the count the fuzzer sent
    with pytest.raises(ImpossibleRecordsCount, match=r"^corrupt record batch at position 0: records count 2147483647 cannot fit in 110 bytes$"):
        check_produced_batch(read_header(patched(big, records_count=2**31 - 1)))


def test_a_count_that_fits_passes_here_the_log_checks_it_against_the_records() -> None:
    # 15 records' worth of bytes: 2 could fit, so the header alone cannot tell; 0 or a negative
    # count is the log's to refuse (hot_tier/log.py), as it does today.
    section = len(batch_of(value=b"x" * 100)) - HEADER_BYTES
    for count in (2, section // MIN_RECORD_BYTES, 0, -1):
        check_produced_batch(read_header(patched(batch_of(value=b"x" * 100), records_count=count)))


@pytest.mark.parametrize("codec", [c for c in Compression if c != Compression.NONE], ids=lambda c: c.name.lower())
def test_a_compressed_batchs_count_is_not_judged_by_its_compressed_size(codec: Compression) -> None:
    # 1000 records of 8 bytes compress to far less than 7000 bytes: the count is checked once
    # the records are decoded, not here.
    batch = batch_of(1000, codec, key=None, value=b"v")
    assert len(batch) - HEADER_BYTES < 1000 * MIN_RECORD_BYTES
    check_produced_batch(read_header(batch))


@pytest.mark.parametrize("attributes", [ATTR_CONTROL, ATTR_CONTROL | 0x10], ids=["control", "transactional-control"])
def test_every_control_batch_from_a_client_is_invalid_record(attributes: int) -> None:
    header = read_header(patched(batch_of(), attributes=attributes))
    with pytest.raises(InvalidRecord, match=r"^clients may not write control batches$") as info:
        check_produced_batch(header)
    assert error_code_for(info.value) is ErrorCode.invalid_record
