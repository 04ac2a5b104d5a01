"""The consumer's record decoder agrees with hot_tier's reference decoder, and refuses garbage."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diskless.client.errors import RecordDeserializationError
from diskless.client.records import deserialize, iter_records
from diskless.client.structs import ConsumerRecord
from hot_tier.records import Compression, CorruptBatch, Record, decode_batch, encode_batch, read_header

record_lists = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=2**42),
        st.one_of(st.none(), st.binary(max_size=300)),
        st.one_of(st.none(), st.binary(max_size=9000)),
        st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=6))), max_size=2).map(tuple),
        st.integers(min_value=1, max_value=200),  # offset gap: deltas of one and two varint bytes
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(record_lists, st.sampled_from(list(Compression)), st.integers(min_value=0, max_value=10**12), st.booleans())
def test_iter_records_matches_decode_batch(specs, compression, base_offset, log_append_time) -> None:
    records, offset = [], base_offset
    for timestamp, key, value, headers, gap in specs:
        records.append(Record(offset, timestamp, key, value, headers))
        offset += gap
    data = b"junk" + encode_batch(records, base_offset=base_offset, compression=compression,
                                  timestamp_type=1 if log_append_time else 0)  # fmt: skip
    header = read_header(data, 4)
    reference = decode_batch(data, 4).records
    middle = reference[len(reference) // 2].offset
    for min_offset in (0, middle):
        got = list(iter_records(data, header, "t", 7, min_offset))
        expected = [
            ConsumerRecord("t", 7, r.offset, r.timestamp, 1 if log_append_time else 0, r.key, r.value, r.headers)
            for r in reference
            if r.offset >= min_offset
        ]
        assert got == expected


def test_a_record_length_past_the_section_is_corrupt() -> None:
    data = bytearray(encode_batch([Record(0, 0, b"k", b"value")]))
    data[61] = 0x7E  # record length 63: more than the section holds
    with pytest.raises(CorruptBatch):
        list(iter_records(bytes(data), read_header(data, check_crc=False), "t", 0, 0))


def test_leftover_bytes_after_the_declared_records_are_corrupt() -> None:
    one = encode_batch([Record(0, 0, b"k", b"a"), Record(1, 0, b"k", b"b")])
    data = bytearray(one)
    data[57:61] = (1).to_bytes(4, "big")  # the header now claims one record; two are there
    with pytest.raises(CorruptBatch):
        list(iter_records(bytes(data), read_header(data, check_crc=False), "t", 0, 0))


def test_deserialize_stops_at_the_first_record_that_fails_and_names_it() -> None:
    records = [ConsumerRecord("t", 3, offset, 0, 0, b"k", value) for offset, value in ((10, b"1"), (11, b"2"), (12, b"x"), (13, b"4"))]
    good, error = deserialize(records, None, int)
    assert [(r.offset, r.key, r.value) for r in good] == [(10, b"k", 1), (11, b"k", 2)]
    assert isinstance(error, RecordDeserializationError)
    assert (error.topic, error.partition, error.offset, error.part) == ("t", 3, 12, "value")
    assert isinstance(error.__cause__, ValueError)
    good, error = deserialize(records, lambda key: key.decode(), None)
    assert error is None and [r.key for r in good] == ["k"] * 4 and good[0].value == b"1"
    good, error = deserialize(records[:1], int, None)
    assert good == [] and error is not None and (error.offset, error.part) == (10, "key")
