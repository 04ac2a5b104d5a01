"""The producer's incremental batch builder writes exactly what encode_batch writes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diskless.client.builder import BatchBuilder, encode_varint, record_size_bytes, varint
from hot_tier.records import Compression, Record, decode_batch, encode_batch

headers_strategy = st.lists(
    st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=8))), max_size=3
).map(tuple)
record_strategy = st.tuples(
    st.integers(min_value=0, max_value=2**40),  # timestamp
    st.one_of(st.none(), st.binary(max_size=40)),
    st.one_of(st.none(), st.binary(max_size=300)),
    headers_strategy,
)


def _build(records, **kwargs) -> bytes:
    builder = BatchBuilder()
    for timestamp, key, value, headers in records:
        builder.append(timestamp, key, value, headers)
    return builder.build(**kwargs)


@settings(max_examples=150)
@given(st.lists(record_strategy, min_size=1, max_size=20), st.sampled_from(list(Compression)))
def test_builder_bytes_equal_encode_batch(records, compression) -> None:
    expected_records = [Record(i, ts, k, v, h) for i, (ts, k, v, h) in enumerate(records)]
    expected = encode_batch(
        expected_records, compression=compression, producer_id=42, producer_epoch=3, base_sequence=1000
    )
    built = _build(records, compression=compression, producer_id=42, producer_epoch=3, base_sequence=1000)
    assert built == expected
    decoded = decode_batch(built)
    assert decoded.records == expected_records
    assert decoded.header.base_sequence == 1000
    assert decoded.header.producer_id == 42


@settings(max_examples=100)
@given(record_strategy)
def test_record_size_bound_is_never_below_the_encoded_size(record) -> None:
    timestamp, key, value, headers = record
    builder = BatchBuilder()
    builder.append(timestamp, key, value, headers)
    assert len(builder.body) <= record_size_bytes(key, value, headers)


def test_large_offset_and_timestamp_deltas_use_long_varints() -> None:
    builder = BatchBuilder()
    for i in range(20000):  # offset deltas past the 16384-entry table
        builder.append(1000 + i * 100000, None, b"v")
    decoded = decode_batch(builder.build())
    assert decoded.records[-1].offset == 19999
    assert decoded.records[-1].timestamp == 1000 + 19999 * 100000
    assert decoded.header.max_timestamp == 1000 + 19999 * 100000


def test_earlier_timestamps_give_negative_deltas() -> None:
    builder = BatchBuilder()
    builder.append(5000, b"k", b"a")
    builder.append(4000, b"k", b"b")
    decoded = decode_batch(builder.build())
    assert [r.timestamp for r in decoded.records] == [5000, 4000]
    assert decoded.header.max_timestamp == 5000


def test_build_of_an_empty_builder_is_refused() -> None:
    with pytest.raises(ValueError):
        BatchBuilder().build()


def test_varints_are_zigzag() -> None:
    assert varint(0) == b"\x00"
    assert varint(1) == b"\x02"
    assert varint(63) == b"\x7e"
    assert varint(64) == b"\x80\x01"
    assert encode_varint(-1) == b"\x01"
    assert varint(300) == encode_varint(300) == b"\xd8\x04"
