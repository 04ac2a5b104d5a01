"""Produce requests a protocol fuzzer sent, answered over the wire (Produce v9, raw sockets).

Header checks (partition/batch_checks.py, no records decoded): codec bits 5-7 and a records
count an uncompressed section cannot hold are CORRUPT_MESSAGE, any control batch INVALID_RECORD.
Decompression bombs where the broker decodes on produce (compacted topics, a topic's
compression.type) are MESSAGE_TOO_LARGE past 64 MiB of records, and the broker's memory stays
small. In every case nothing is written: the next good batch gets offset 0.
"""

from __future__ import annotations

import dataclasses
import struct
import time
from pathlib import Path

import pytest
import zstandard
from crc32c import crc32c
from kio.schema.errors import ErrorCode

from hot_tier.records import HEADER_BYTES, Compression, Record, decode_batches, encode_batch
from hot_tier.records.varint import encode_varint

from .test_broker_wire import batch, fetch, fetch_result, produce, produce_result

MiB = 1024 * 1024
_HEADER = struct.Struct(">qiibIhiqqqhii")
TOO_LARGE = (
    "record batch at position 0: its zstd records section decompresses to more than 67108864 bytes, "
    "the limit on a batch's records decompressed whole"
)


def patched(good: bytes, *, attributes: int | None = None, records_count: int | None = None) -> bytes:
    """`good` with other attributes or another records count (last offset delta to match, as
    the log wants) and a valid CRC."""
    out = bytearray(good)
    if attributes is not None:
        struct.pack_into(">h", out, 21, attributes)
    if records_count is not None:
        struct.pack_into(">i", out, 23, records_count - 1)
        struct.pack_into(">i", out, 57, records_count)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def streamed_zstd_batch(records_count: int, value_bytes: int) -> bytes:
    """A zstd batch of `records_count` keyed records of `value_bytes` zero bytes, compressed
    as it is written (the test never holds the GiB it decompresses to)."""
    cobj = zstandard.ZstdCompressor(level=3).compressobj()
    zeros = bytes(min(value_bytes, MiB))
    parts = []
    for delta in range(records_count):
        head = b"\x00\x00" + encode_varint(delta) + encode_varint(1) + b"k" + encode_varint(value_bytes)
        parts.append(cobj.compress(encode_varint(len(head) + value_bytes + 1) + head))
        for _ in range(value_bytes // len(zeros)):
            parts.append(cobj.compress(zeros))
        parts.append(cobj.compress(zeros[: value_bytes % len(zeros)] + b"\x00"))  # then no headers
    parts.append(cobj.flush())
    now = int(time.time() * 1000)
    out = bytearray(HEADER_BYTES) + b"".join(parts)
    _HEADER.pack_into(out, 0, 0, len(out) - 12, -1, 2, 0, Compression.ZSTD, records_count - 1, now, now, -1, -1, -1, records_count)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def assert_nothing_written(client, topic: str) -> None:
    good = batch()
    assert produce_result(client.request(produce(topic, good))).base_offset == 0
    fetched = fetch_result(client.request(fetch(topic, 0)))
    assert (fetched.error_code, fetched.high_watermark) == (ErrorCode.none, 1)
    assert [b.records for b in decode_batches(fetched.records)] == [next(decode_batches(good)).records]


# --- header checks ----------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_codec_bits_5_to_7_are_corrupt_message(shared_broker, create_topic, wire, codec: int) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=1)
    client = wire(shared_broker.bootstrap)
    result = produce_result(client.request(produce(topic, patched(batch(), attributes=codec))))
    assert (result.error_code, result.base_offset) == (ErrorCode.corrupt_message, -1)
    assert result.error_message == f"unknown compression codec id {codec}"
    assert_nothing_written(client, topic)


def test_a_records_count_an_uncompressed_section_cannot_hold_is_corrupt_message(shared_broker, create_topic, wire) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=1)
    client = wire(shared_broker.bootstrap)
    one = batch(b"v" * 100)  # one record
    result = produce_result(client.request(produce(topic, patched(one, records_count=2**31 - 1))))
    assert (result.error_code, result.base_offset) == (ErrorCode.corrupt_message, -1)
    assert result.error_message == (
        f"corrupt record batch at position 0: records count 2147483647 cannot fit in {len(one) - HEADER_BYTES} bytes"
    )
    assert_nothing_written(client, topic)  # not 2147483649, where the fuzzer's batch moved it


def test_a_records_count_below_one_was_and_is_corrupt_message(shared_broker, create_topic, wire) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=1)
    client = wire(shared_broker.bootstrap)
    result = produce_result(client.request(produce(topic, patched(batch(), records_count=0))))
    assert (result.error_code, result.base_offset) == (ErrorCode.corrupt_message, -1)
    assert result.error_message == "corrupt record batch at position 0: records count 0 does not match last offset delta -1"
    assert_nothing_written(client, topic)


@pytest.mark.parametrize("attributes", [0x20, 0x30], ids=["control", "transactional-control"])
def test_every_control_batch_from_a_client_is_invalid_record(shared_broker, create_topic, wire, attributes: int) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=1)
    client = wire(shared_broker.bootstrap)
    request = produce(topic, patched(batch(), attributes=attributes))
    if attributes & 0x10:  # a transactional batch comes with its producer's transactional id
        request = dataclasses.replace(request, transactional_id=f"txn-{topic}")
    result = produce_result(client.request(request))
    assert (result.error_code, result.base_offset) == (ErrorCode.invalid_record, -1)
    assert result.error_message == "clients may not write control batches"
    assert_nothing_written(client, topic)


# --- decompression bombs ----------------------------------------------------------------------


def peak_rss_bytes(pid: int) -> int:
    """The process's peak resident set (VmHWM in /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for process {pid}")


def test_zstd_bombs_are_message_too_large_and_the_broker_stays_small(broker, create_topic, wire) -> None:
    """The fuzzer's two bombs: 16,384 records of 64 KiB (1 GiB) to a compacted topic, whose keys
    the broker checks; one record of 1 GiB to a topic that stores gzip, which the broker
    recompresses. Before the bound, the broker peaked at 1.2 and 3.2 GB and stored both."""
    compacted = create_topic(broker.bootstrap, partitions=1, configs={"cleanup.policy": "compact"})
    gzip_topic = create_topic(broker.bootstrap, partitions=1, configs={"compression.type": "gzip"})
    many = streamed_zstd_batch(16_384, 64 * 1024)
    one = streamed_zstd_batch(1, 1024 * MiB)
    assert len(many) < 200_000 and len(one) < 40_000  # far below max.message.bytes (1 MiB)
    client = wire(broker.bootstrap, timeout_s=60.0)
    for topic, bomb in ((compacted, many), (gzip_topic, one)):
        result = produce_result(client.request(produce(topic, bomb)))
        assert (result.error_code, result.base_offset, result.error_message) == (ErrorCode.message_too_large, -1, TOO_LARGE)
    assert peak_rss_bytes(broker.process.pid) < 512 * MiB
    # A batch the broker decodes below the bound is still taken, and nothing of the bombs is there.
    keyed = encode_batch([Record(0, int(time.time() * 1000), b"k", b"v" * 1000)], compression=Compression.ZSTD)
    for topic in (compacted, gzip_topic):
        assert produce_result(client.request(produce(topic, keyed))).base_offset == 0
        assert fetch_result(client.request(fetch(topic, 0))).high_watermark == 1
