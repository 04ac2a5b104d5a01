"""Our batches against aiokafka's record module, both ways, for every codec.

aiokafka ships a Cython and a pure-Python implementation of RecordBatch v2; both are checked.
Its builder writes snappy in xerial framing (as the Java client does) and lz4/zstd through
cramjam, so these tests also cover codec output from a second implementation.
"""

from __future__ import annotations

import pytest
from aiokafka.record import default_records as aiokafka_records
from aiokafka.record.memory_records import MemoryRecords

from hot_tier.records import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Compression,
    Record,
    decode_batch,
    decode_batches,
    encode_batch,
    read_header,
    set_base_offset,
    set_log_append_time,
)

READERS = {
    "cython": aiokafka_records.DefaultRecordBatch,
    "python": aiokafka_records._DefaultRecordBatchPy,
}
BUILDERS = {
    "cython": aiokafka_records.DefaultRecordBatchBuilder,
    "python": aiokafka_records._DefaultRecordBatchBuilderPy,
}


def _records(base_offset: int = 0) -> list[Record]:
    """Compressible records covering null, empty and large keys and values, and headers."""
    t = 1_700_000_000_000
    return [
        Record(base_offset, t, b"order-1", b'{"item": "book", "qty": 1}' * 20, (("trace", b"abc"), ("retry", None))),
        Record(base_offset + 1, t - 1500, None, b"tombstone? no, a value with no key " * 10),
        Record(base_offset + 2, t + 60_000, b"", None),
        Record(base_offset + 3, t + 3, b"k" * 300, b"", (("\u00fcnicode-\u2603", b"\x00\xff" * 50),)),
        Record(base_offset + 7, t + 2, b"order-2", bytes(range(256)) * 40, ()),
    ]


def _as_tuples(records) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records]


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("codec", list(Compression))
def test_aiokafka_reads_our_batches(codec, reader):
    records = _records(500)
    buf = encode_batch(
        records,
        base_offset=500,
        compression=codec,
        producer_id=1234,
        producer_epoch=2,
        base_sequence=40,
        partition_leader_epoch=9,
        is_transactional=True,
    )
    batch = READERS[reader](buf)
    assert batch.validate_crc()
    assert batch.magic == 2
    assert batch.compression_type == codec
    assert batch.base_offset == 500
    assert batch.last_offset_delta == 7
    assert batch.next_offset == 508
    assert batch.first_timestamp == 1_700_000_000_000
    assert batch.max_timestamp == 1_700_000_060_000
    assert batch.timestamp_type == TIMESTAMP_CREATE_TIME
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (1234, 2, 40)
    assert batch.is_transactional and not batch.is_control_batch
    assert _as_tuples(batch) == _as_tuples(records)


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("codec", list(Compression))
def test_aiokafka_reads_our_log_append_time_batches(codec, reader):
    records = _records()
    buf = encode_batch(records, compression=codec, timestamp_type=TIMESTAMP_LOG_APPEND_TIME)
    batch = READERS[reader](buf)
    assert batch.validate_crc()
    assert batch.timestamp_type == TIMESTAMP_LOG_APPEND_TIME
    decoded = list(batch)
    assert [r.timestamp for r in decoded] == [1_700_000_060_000] * len(records)
    assert [r.timestamp_type for r in decoded] == [TIMESTAMP_LOG_APPEND_TIME] * len(records)
    assert [(r.offset, r.key, r.value) for r in decoded] == [(r.offset, r.key, r.value) for r in records]


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("codec", list(Compression))
def test_aiokafka_reads_our_batches_stamped_with_a_delete_horizon(codec, reader):
    # The log cleaner's KIP-534 batches: base_timestamp is the horizon, the records' deltas
    # are taken from it (negative here); readers get the records' own timestamps back.
    records = _records(500)
    horizon = 1_700_000_000_000 + 86_400_000
    buf = encode_batch(records, base_offset=500, compression=codec, delete_horizon_ms=horizon)
    header = read_header(buf, 0)
    assert (header.delete_horizon_ms, header.first_timestamp, header.max_timestamp) == (horizon, 1_700_000_060_000, 1_700_000_060_000)
    batch = READERS[reader](buf)
    assert batch.validate_crc()
    assert (batch.first_timestamp, batch.max_timestamp) == (horizon, 1_700_000_060_000)
    assert _as_tuples(batch) == _as_tuples(records)
    assert _as_tuples(decode_batch(buf).records) == _as_tuples(records)


def test_aiokafka_reads_our_control_batch():
    key, value = b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x07"  # ABORT marker, coordinator epoch 7
    buf = encode_batch([Record(3, 99, key, value)], base_offset=3, producer_id=5, producer_epoch=0,
                       is_transactional=True, is_control=True)  # fmt: skip
    batch = aiokafka_records.DefaultRecordBatch(buf)
    assert batch.validate_crc()
    assert batch.is_control_batch and batch.is_transactional
    assert _as_tuples(batch) == [(3, 99, key, value, [])]


def test_aiokafka_memory_records_walks_our_buffer():
    buf = b"".join(
        encode_batch(_records(100 * i), base_offset=100 * i, compression=codec) for i, codec in enumerate(Compression)
    )
    memory = MemoryRecords(buf)
    seen = []
    while memory.has_next():
        batch = memory.next_batch()
        assert batch.validate_crc()
        seen.append((batch.base_offset, batch.compression_type, _as_tuples(batch)))
    assert seen == [(100 * i, codec, _as_tuples(_records(100 * i))) for i, codec in enumerate(Compression)]


def _aiokafka_build(builder_name: str, codec: int, records: list[Record], *, transactional: bool = False) -> bytes:
    builder = BUILDERS[builder_name](2, codec, int(transactional), 77, 4, 1000, 1 << 22)
    for r in records:
        metadata = builder.append(r.offset, r.timestamp, r.key, r.value, list(r.headers))
        assert metadata is not None
    return bytes(builder.build())


@pytest.mark.parametrize("builder", BUILDERS)
@pytest.mark.parametrize("codec", list(Compression))
def test_we_read_aiokafka_batches(codec, builder):
    records = _records()
    buf = _aiokafka_build(builder, codec, records, transactional=True)
    batch = decode_batch(buf)
    # aiokafka falls back to no compression when it does not pay; these records compress well.
    assert batch.header.codec == codec
    assert batch.records == records
    h = batch.header
    assert (h.base_offset, h.last_offset_delta, h.records_count) == (0, 7, 5)
    assert (h.base_timestamp, h.max_timestamp) == (1_700_000_000_000, 1_700_000_060_000)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (77, 4, 1000)
    assert h.partition_leader_epoch == -1
    assert h.is_transactional and not h.is_control
    assert h.timestamp_type == TIMESTAMP_CREATE_TIME


def test_aiokafka_snappy_is_xerial_framed_and_we_read_it():
    buf = _aiokafka_build("cython", Compression.SNAPPY, _records())
    assert buf[61:69] == b"\x82SNAPPY\x00"
    assert decode_batch(buf).records == _records()


@pytest.mark.parametrize("codec", list(Compression))
def test_broker_patches_on_aiokafka_batches_are_read_by_both(codec):
    # What the broker does on produce: assign the base offset and, for LogAppendTime topics,
    # stamp the append time. Both readers must agree on the result.
    buf = bytearray(_aiokafka_build("cython", codec, _records()))
    set_base_offset(buf, 0, 9000)
    set_log_append_time(buf, read_header(buf), 1_750_000_000_000)
    ours = decode_batch(buf)
    assert [r.offset for r in ours.records] == [9000, 9001, 9002, 9003, 9007]
    assert [r.timestamp for r in ours.records] == [1_750_000_000_000] * 5
    theirs = aiokafka_records.DefaultRecordBatch(bytes(buf))
    assert theirs.validate_crc()
    assert _as_tuples(theirs) == _as_tuples(ours.records)


def test_we_read_a_buffer_of_aiokafka_batches():
    buf = b"".join(_aiokafka_build("python", codec, _records()) for codec in Compression)
    batches = list(decode_batches(buf))
    assert [b.header.codec for b in batches] == list(Compression)
    assert all(b.records == _records() for b in batches)
