"""The Spark reader's vectorised decoder against the reference decoder, hot_tier.records."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from hot_tier.records import (
    TIMESTAMP_LOG_APPEND_TIME,
    BadCrc,
    Compression,
    CorruptBatch,
    Record,
    decode_batch,
    encode_batch,
    set_log_append_time,
    read_header,
)
from spark_reader import decode
from spark_reader.decode import RecordBounds, batches_to_arrow, select_batches
from spark_reader.schema import arrow_schema

EPOCH_MS = 1_700_000_000_000


@pytest.fixture(autouse=True)
def fast_path_only(request, monkeypatch):
    """Valid input must never need the reference decoder: fail if the fast path gives up."""
    if "corrupt" in request.node.name:
        return

    def refuse(*args, **kwargs):
        raise AssertionError("the vectorised decoder fell back to decode_batch on valid input")

    monkeypatch.setattr(decode, "_decode_slowly", refuse)


def expected_rows(buf: bytes, topic: str, partition: int, bounds: RecordBounds, include_headers: bool) -> list[dict]:
    """What the reference decoder says the rows are, in the Arrow batch's to_pylist() form."""
    rows = []
    position = 0
    while position < len(buf):
        decoded = decode_batch(buf, position)
        position += decoded.header.size_bytes
        if decoded.header.is_control:
            continue
        for record in decoded.records:
            micros = record.timestamp * 1000
            if not bounds.start_offset <= record.offset < bounds.end_offset:
                continue
            if not bounds.min_timestamp_us <= micros <= bounds.max_timestamp_us:
                continue
            row = {
                "key": record.key,
                "value": record.value,
                "topic": topic,
                "partition": partition,
                "offset": record.offset,
                "timestamp": micros,
                "timestampType": decoded.header.timestamp_type,
            }
            if include_headers:
                row["headers"] = [{"key": k, "value": v} for k, v in record.headers] or None
            rows.append(row)
    return rows


def decoded_rows(buf: bytes, bounds: RecordBounds, include_headers: bool, topic: str = "t", partition: int = 7) -> list[dict]:
    selection = select_batches(buf, bounds)
    batch = batches_to_arrow(buf, selection.headers, topic, partition, bounds, include_headers)
    if batch is None:
        return []
    assert batch.schema.equals(arrow_schema(include_headers))
    rows = batch.to_pylist()
    for row in rows:
        row["timestamp"] = _micros(row["timestamp"])
    return rows


def _micros(value) -> int:
    import datetime

    return (value - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)) // datetime.timedelta(microseconds=1)


def log_of(*batches: bytes) -> bytes:
    """Batches back to back with contiguous base offsets, as a segment holds them."""
    out = bytearray()
    offset = 0
    for batch in batches:
        batch = bytearray(batch)
        struct.pack_into(">q", batch, 0, offset)
        offset = read_header(batch).next_offset
        out += batch
    return bytes(out)


def records(count: int, *, start_ts: int = EPOCH_MS, key_bytes: int = 5, value_bytes: int = 30, headers: bool = False) -> list[Record]:
    return [
        Record(
            i,
            start_ts + (i * 7919) % 1000 - 500,
            None if i % 5 == 1 else bytes([i % 256]) * key_bytes,
            None if i % 6 == 2 else bytes([(i * 3) % 256]) * value_bytes,
            ((f"h{i}", None if i % 2 else b"v" * i),) if headers and i % 3 else (),
        )
        for i in range(count)
    ]


@pytest.mark.parametrize("codec", list(Compression))
@pytest.mark.parametrize("include_headers", [False, True])
def test_every_codec_decodes_like_the_reference(codec: Compression, include_headers: bool) -> None:
    buf = log_of(
        encode_batch(records(40, headers=True), compression=codec),
        encode_batch(records(3, key_bytes=12, value_bytes=13), compression=codec, timestamp_type=TIMESTAMP_LOG_APPEND_TIME),
        encode_batch(records(25, value_bytes=9000), compression=codec),  # 3-byte record lengths
    )
    bounds = RecordBounds()
    rows = decoded_rows(buf, bounds, include_headers)
    assert rows == expected_rows(buf, "t", 7, bounds, include_headers)
    assert len(rows) == 68


def test_log_append_time_batches_give_every_record_the_batch_max_timestamp() -> None:
    batch = bytearray(encode_batch(records(4)))
    set_log_append_time(batch, read_header(batch), EPOCH_MS + 12345)
    rows = decoded_rows(bytes(batch), RecordBounds(), False)
    assert [(r["timestamp"], r["timestampType"]) for r in rows] == [((EPOCH_MS + 12345) * 1000, 1)] * 4


def test_offset_and_timestamp_bounds_are_exact() -> None:
    buf = log_of(*(encode_batch(records(10, start_ts=EPOCH_MS + 10_000 * b)) for b in range(5)))
    all_rows = decoded_rows(buf, RecordBounds(), False)
    pivot = sorted(r["timestamp"] for r in all_rows)[20]
    for bounds in (
        RecordBounds(13, 37),
        RecordBounds(min_timestamp_us=pivot),
        RecordBounds(min_timestamp_us=pivot + 1),
        RecordBounds(max_timestamp_us=pivot),
        RecordBounds(max_timestamp_us=pivot - 1),
        RecordBounds(5, 45, pivot - 3_000_000, pivot + 1_000),
    ):
        rows = decoded_rows(buf, bounds, False)
        assert rows == expected_rows(buf, "t", 7, bounds, False)
        assert rows == [r for r in all_rows if bounds.start_offset <= r["offset"] < bounds.end_offset
                        and bounds.min_timestamp_us <= r["timestamp"] <= bounds.max_timestamp_us]  # fmt: skip
    assert [r["offset"] for r in decoded_rows(buf, RecordBounds(13, 37), False)] == list(range(13, 37))


def test_selection_skips_batches_outside_the_bounds_and_control_batches() -> None:
    control = encode_batch([Record(0, EPOCH_MS, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")], is_control=True, is_transactional=True)
    buf = log_of(encode_batch(records(10)), control, encode_batch(records(10)), encode_batch(records(10, start_ts=EPOCH_MS + 60_000)))
    selection = select_batches(buf, RecordBounds(3, 12))
    assert [h.base_offset for h in selection.headers] == [0, 11]
    assert selection.reached_end is True and selection.next_offset == 21  # stopped at the batch at 21
    assert selection.consumed_bytes == len(buf) - read_header(buf, selection.consumed_bytes).size_bytes
    selection = select_batches(buf, RecordBounds(0, 40))
    assert [h.base_offset for h in selection.headers] == [0, 11, 21]
    assert selection.reached_end is False and selection.next_offset == 31 and selection.consumed_bytes == len(buf)
    old = RecordBounds(min_timestamp_us=(EPOCH_MS + 59_000) * 1000)
    assert [h.base_offset for h in select_batches(buf, old).headers] == [21]
    assert 10 not in [r["offset"] for r in decoded_rows(buf, RecordBounds(), False)]


def test_a_cut_batch_is_left_for_the_next_chunk() -> None:
    first, second = encode_batch(records(5)), encode_batch(records(5))
    buf = log_of(first, second)
    selection = select_batches(buf[: len(buf) - 10], RecordBounds())
    assert selection.consumed_bytes == len(first)
    assert selection.next_offset == 5


def test_corrupt_crc_is_refused() -> None:
    buf = bytearray(log_of(encode_batch(records(5))))
    buf[-3] ^= 0xFF
    with pytest.raises(BadCrc):
        select_batches(bytes(buf), RecordBounds())


def test_corrupt_record_count_raises_the_reference_error() -> None:
    buf = bytearray(log_of(encode_batch(records(5))))
    struct.pack_into(">i", buf, 57, 6)  # records_count one too many, CRC fixed up
    struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    selection = select_batches(bytes(buf), RecordBounds())
    with pytest.raises(CorruptBatch):
        batches_to_arrow(bytes(buf), selection.headers, "t", 0, RecordBounds(), False)


def kafka_struct_type(include_headers: bool):
    """Spark's Kafka source schema, as its KafkaRecordToRowConverter declares it."""
    from pyspark.sql import types as T

    fields = [
        T.StructField("key", T.BinaryType()),
        T.StructField("value", T.BinaryType()),
        T.StructField("topic", T.StringType()),
        T.StructField("partition", T.IntegerType()),
        T.StructField("offset", T.LongType()),
        T.StructField("timestamp", T.TimestampType()),
        T.StructField("timestampType", T.IntegerType()),
    ]
    if include_headers:
        header = T.StructType([T.StructField("key", T.StringType()), T.StructField("value", T.BinaryType())])
        fields.append(T.StructField("headers", T.ArrayType(header)))
    return T.StructType(fields)


def test_arrow_schema_is_the_one_spark_checks_against() -> None:
    from pyspark.sql.pandas.types import to_arrow_schema

    for include_headers in (False, True):
        expected = to_arrow_schema(kafka_struct_type(include_headers), timezone="UTC")
        assert arrow_schema(include_headers).equals(expected)


record_strategy = st.builds(
    lambda ts, key, value, headers: (ts, key, value, headers),
    st.integers(-(2**40), 2**40),
    st.none() | st.binary(max_size=40),
    st.none() | st.binary(max_size=300),
    st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=2),
)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.lists(record_strategy, min_size=1, max_size=12), st.sampled_from(list(Compression)), st.integers(1, 3)),
        min_size=1,
        max_size=4,
    ),
    st.integers(0, 40),
    st.integers(0, 40),
    st.booleans(),
)
def test_any_batches_decode_like_the_reference(batches, start, length, include_headers) -> None:
    encoded = []
    for batch_records, codec, gap in batches:
        built = [Record(i * gap, ts, key, value, tuple(headers)) for i, (ts, key, value, headers) in enumerate(batch_records)]
        encoded.append(encode_batch(built, compression=codec))
    buf = log_of(*encoded)
    bounds = RecordBounds(start, start + length)
    assert decoded_rows(buf, bounds, include_headers) == expected_rows(buf, "t", 7, bounds, include_headers)
    assert decoded_rows(buf, RecordBounds(), include_headers) == expected_rows(buf, "t", 7, RecordBounds(), include_headers)


def test_topic_and_partition_columns() -> None:
    buf = log_of(encode_batch(records(3)))
    selection = select_batches(buf, RecordBounds())
    batch = batches_to_arrow(buf, selection.headers, "orders.eu-1", 2147483647, RecordBounds(), False)
    assert batch.column("topic").to_pylist() == ["orders.eu-1"] * 3
    assert batch.column("partition").type == pa.int32()
    assert batch.column("partition").to_pylist() == [2147483647] * 3


def test_decoding_does_not_import_pandas() -> None:
    """pa.array() imports pandas on its first call; a fresh Spark Python worker would pay for
    that import before its first row (bench/spark_scan.py --first-row)."""
    import subprocess
    import sys

    code = (
        "import sys; from hot_tier.records import Record, encode_batch, Compression;"
        "from spark_reader.decode import RecordBounds, batches_to_arrow, select_batches;"
        "buf = encode_batch([Record(i, 1_700_000_000_000 + i, b'k', b'v' * i) for i in range(100)], compression=Compression.LZ4);"
        "bounds = RecordBounds(3, 90); selection = select_batches(buf, bounds);"
        "batch = batches_to_arrow(buf, selection.headers, 't', 1, bounds, False);"
        "assert batch.num_rows == 87 and batch.column('offset').to_pylist() == list(range(3, 90)), batch;"
        "print('pandas' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stdout.strip()) == (0, "False"), result.stderr
