"""Hypothesis round-trips of RecordBatch v2: encode -> decode gives back exactly what went in.

aiokafka's Cython reader is a second, independent decoder of every batch we write. Damaged
batches must fail with our typed errors and nothing else.
"""

from __future__ import annotations

from aiokafka.record.default_records import DefaultRecordBatch
from aiokafka.record.util import decode_varint as aiokafka_decode_varint
from aiokafka.record.util import encode_varint as aiokafka_encode_varint
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hot_tier.records import (
    LOG_OVERHEAD,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Compression,
    CorruptBatch,
    Record,
    UnsupportedCompression,
    decode_batch,
    decode_batches,
    encode_batch,
    iter_record_keys,
    iter_record_tuples,
    read_header,
)
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

FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)

payloads = st.one_of(
    st.none(),
    st.just(b""),
    st.binary(max_size=40),
    st.binary(min_size=60, max_size=400),  # multi-byte length varints
    st.binary(max_size=8).map(lambda b: b * 500),  # compressible
)
headers = st.lists(
    st.tuples(st.text(max_size=12), st.one_of(st.none(), st.binary(max_size=30))), max_size=4
).map(tuple)
timestamps = st.integers(min_value=-(1 << 40), max_value=1 << 50)


@st.composite
def record_lists(draw, max_records: int = 40) -> tuple[int, list[Record]]:
    base_offset = draw(st.integers(min_value=0, max_value=1 << 62))
    n = draw(st.integers(min_value=1, max_value=max_records))
    gaps = draw(st.lists(st.integers(min_value=1, max_value=100_000), min_size=n, max_size=n))
    first_gap = draw(st.integers(min_value=0, max_value=1000))
    base_timestamp = draw(timestamps)
    records = []
    offset = base_offset + first_gap - gaps[0]
    for gap in gaps:
        offset += gap
        records.append(
            Record(
                offset,
                base_timestamp + draw(st.integers(min_value=-(1 << 35), max_value=1 << 35)),
                draw(payloads),
                draw(payloads),
                draw(headers),
            )
        )
    return base_offset, records


batch_fields = st.fixed_dictionaries(
    {
        "compression": st.sampled_from(list(Compression)),
        "timestamp_type": st.sampled_from([TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME]),
        "producer_id": st.one_of(st.just(-1), st.integers(min_value=0, max_value=INT64_MAX)),
        "producer_epoch": st.integers(min_value=-1, max_value=(1 << 15) - 1),
        "base_sequence": st.integers(min_value=-1, max_value=INT32_MAX),
        "partition_leader_epoch": st.integers(min_value=-1, max_value=INT32_MAX),
        "is_transactional": st.booleans(),
        "is_control": st.booleans(),
    }
)


def _expected(records: list[Record], timestamp_type: int) -> list[Record]:
    if timestamp_type == TIMESTAMP_CREATE_TIME:
        return records
    max_timestamp = max(r.timestamp for r in records)
    return [Record(r.offset, max_timestamp, r.key, r.value, r.headers) for r in records]


@SLOW
@given(record_lists(), batch_fields)
def test_round_trip(offsets_and_records, fields):
    base_offset, records = offsets_and_records
    buf = encode_batch(records, base_offset=base_offset, **fields)
    batch = decode_batch(buf)
    assert batch.records == _expected(records, fields["timestamp_type"])
    h = batch.header
    assert h.size_bytes == len(buf)
    assert h.base_offset == base_offset
    assert h.last_offset == records[-1].offset
    assert h.records_count == len(records)
    assert h.base_timestamp == records[0].timestamp
    assert h.max_timestamp == max(r.timestamp for r in records)
    assert h.codec == fields["compression"]
    assert h.timestamp_type == fields["timestamp_type"]
    assert h.producer_id == fields["producer_id"]
    assert h.producer_epoch == fields["producer_epoch"]
    assert h.base_sequence == fields["base_sequence"]
    assert h.partition_leader_epoch == fields["partition_leader_epoch"]
    assert h.is_transactional == fields["is_transactional"]
    assert h.is_control == fields["is_control"]


@SLOW
@given(record_lists(max_records=15), batch_fields)
def test_aiokafka_decodes_what_we_write(offsets_and_records, fields):
    base_offset, records = offsets_and_records
    buf = encode_batch(records, base_offset=base_offset, **fields)
    theirs = DefaultRecordBatch(buf)
    assert theirs.validate_crc()
    decoded = [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in theirs]
    expected = _expected(records, fields["timestamp_type"])
    assert decoded == [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in expected]


@SLOW
@given(st.lists(st.tuples(record_lists(max_records=5), st.sampled_from(list(Compression))), min_size=1, max_size=6))
def test_consecutive_batches(batches):
    buf = b"".join(encode_batch(records, base_offset=base, compression=c) for (base, records), c in batches)
    decoded = list(decode_batches(buf))
    assert [d.records for d in decoded] == [records for (_, records), _ in batches]


@settings(max_examples=10, deadline=None)
@given(st.integers(min_value=300, max_value=2000), st.sampled_from(list(Compression)))
def test_many_records(n, codec):
    records = [Record(i, 1_000_000 + (i * 7919) % 5000, b"%d" % i, b"v" * (i % 200), ()) for i in range(n)]
    assert decode_batch(encode_batch(records, compression=codec)).records == records


@FAST
@given(record_lists(max_records=4), st.sampled_from(list(Compression)), st.data())
def test_any_truncation_is_a_typed_error(offsets_and_records, codec, data):
    base_offset, records = offsets_and_records
    buf = encode_batch(records, base_offset=base_offset, compression=codec)
    cut = data.draw(st.integers(min_value=0, max_value=len(buf) - 1))
    try:
        list(decode_batches(buf[:cut]))
    except CorruptBatch as exc:
        assert exc.position == 0
    else:
        assert cut == 0


@FAST
@given(record_lists(max_records=4), st.sampled_from(list(Compression)), st.data())
def test_any_damage_inside_the_crc_span_is_caught(offsets_and_records, codec, data):
    base_offset, records = offsets_and_records
    buf = bytearray(encode_batch(records, base_offset=base_offset, compression=codec))
    # Bytes 0-7 (base_offset) and 12-15 (partition_leader_epoch) are outside the CRC on purpose.
    at = data.draw(st.sampled_from([i for i in range(len(buf)) if not (i < 8 or 12 <= i < 16)]))
    buf[at] ^= data.draw(st.integers(min_value=1, max_value=255))
    try:
        decode_batch(buf)
    except CorruptBatch as exc:
        assert exc.position == 0
    else:
        raise AssertionError(f"damage at byte {at} went unnoticed")


@FAST
@given(record_lists(max_records=4), st.sampled_from(list(Compression)), st.data())
def test_garbage_records_fail_only_with_typed_errors(offsets_and_records, codec, data):
    # With the CRC check off, damaged records reach the decoder itself (as a forged CRC would).
    base_offset, records = offsets_and_records
    buf = bytearray(encode_batch(records, base_offset=base_offset, compression=codec))
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        at = data.draw(st.integers(min_value=21, max_value=len(buf) - 1))
        buf[at] = data.draw(st.integers(min_value=0, max_value=255))
    try:
        batch = decode_batch(buf, check_crc=False)
    except (CorruptBatch, UnsupportedCompression):
        return
    assert len(batch.records) == read_header(buf, check_crc=False).records_count
    assert read_header(buf, check_crc=False).size_bytes == len(buf) == batch.header.batch_length + LOG_OVERHEAD


@FAST
@given(st.integers(min_value=INT32_MIN, max_value=INT32_MAX))
def test_varint_round_trip(value):
    encoded = encode_varint(value)
    assert len(encoded) == size_of_varint(value) <= 5
    assert decode_varint(b"\x00" + encoded + b"\x01", 1) == (value, 1 + len(encoded))


@FAST
@given(st.integers(min_value=INT64_MIN, max_value=INT64_MAX))
def test_varlong_round_trip_and_agrees_with_aiokafka(value):
    encoded = encode_varlong(value)
    assert len(encoded) == size_of_varlong(value) <= 10
    assert decode_varlong(encoded) == (value, len(encoded))
    theirs = bytearray()
    aiokafka_encode_varint(value, theirs.append)
    assert bytes(theirs) == encoded
    assert aiokafka_decode_varint(bytearray(encoded), 0) == (value, len(encoded))


@SLOW
@given(record_lists(), batch_fields)
def test_the_key_walk_reads_what_the_decoder_reads(offsets_and_records, fields):
    """iter_record_keys (the log cleaner's) agrees with iter_record_tuples on every record."""
    base_offset, records = offsets_and_records
    buf = encode_batch(records, base_offset=base_offset, **fields)
    header = read_header(buf, 0)
    assert list(iter_record_keys(buf, header)) == [(r[0], r[3], r[4] is None) for r in iter_record_tuples(buf, header)]
