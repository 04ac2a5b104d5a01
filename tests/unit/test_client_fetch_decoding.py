"""Turning fetched record bytes into consumer records: positions, partial batches, control
batches, aborted transactions, every codec and corrupt data."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c

from diskless.client.errors import CorruptRecordError
from diskless.client.fetcher import CompletedFetch, whole_batches
from diskless.client.structs import TopicPartition
from diskless.client.subscription import PartitionState
from hot_tier.records import Compression, Record, encode_batch

TP = TopicPartition("t", 0)


def batch(base: int, count: int, *, compression: int = 0, **kwargs) -> bytes:
    records = [Record(base + i, 1000 + base + i, b"k%d" % (base + i), b"v%d" % (base + i)) for i in range(count)]
    return encode_batch(records, base_offset=base, compression=compression, **kwargs)


def take_all(fetch: CompletedFetch, state: PartitionState, limit: int = 1000):
    out = []
    while True:
        got = fetch.take(limit, state, check_crc=True)
        if not got:
            return out
        out += got


def test_whole_batches_stops_before_a_partial_batch() -> None:
    data = batch(0, 3) + batch(3, 2)
    assert whole_batches(data) == (len(data), 5)
    cut = data[:-7]
    assert whole_batches(cut) == (len(batch(0, 3)), 3)
    assert whole_batches(data[:30]) == (0, None)
    assert whole_batches(b"") == (0, None)


@pytest.mark.parametrize("compression", list(Compression))
def test_records_below_the_position_are_skipped_for_every_codec(compression) -> None:
    data = batch(10, 5, compression=compression) + batch(15, 5, compression=compression)
    state = PartitionState(position=12, fetch_offset=12)
    fetch = CompletedFetch(TP, state.epoch, data, len(data), None)
    records = take_all(fetch, state)
    assert [r.offset for r in records] == list(range(12, 20))
    assert records[0].key == b"k12" and records[0].value == b"v12" and records[0].timestamp == 1012
    assert (records[0].topic, records[0].partition, records[0].timestamp_type) == ("t", 0, 0)
    assert state.position == 20 and fetch.exhausted


def test_take_honours_the_limit_and_resumes_where_it_stopped() -> None:
    data = batch(0, 10)
    state = PartitionState(position=0, fetch_offset=0)
    fetch = CompletedFetch(TP, 0, data, len(data), None)
    first = fetch.take(4, state, check_crc=True)
    assert [r.offset for r in first] == [0, 1, 2, 3] and state.position == 4
    rest = take_all(fetch, state)
    assert [r.offset for r in rest] == list(range(4, 10))


def test_control_batches_are_skipped_and_move_the_position() -> None:
    marker = encode_batch([Record(5, 0, b"\x00\x00\x00\x00", b"\x00\x00")], base_offset=5, is_control=True,
                          is_transactional=True, producer_id=9, producer_epoch=0)  # fmt: skip
    data = batch(0, 5) + marker + batch(6, 2)
    state = PartitionState(position=0, fetch_offset=0)
    records = take_all(CompletedFetch(TP, 0, data, len(data), None), state)
    assert [r.offset for r in records] == [0, 1, 2, 3, 4, 6, 7]
    assert state.position == 8


def test_aborted_transactions_are_dropped_with_read_committed() -> None:
    aborted = batch(0, 3, is_transactional=True, producer_id=7, producer_epoch=0, base_sequence=0)
    marker = encode_batch([Record(3, 0, b"\x00\x00\x00\x00", b"\x00\x00")], base_offset=3, is_control=True,
                          is_transactional=True, producer_id=7, producer_epoch=0)  # fmt: skip
    later = batch(4, 2, is_transactional=True, producer_id=7, producer_epoch=0, base_sequence=3)
    data = aborted + marker + later
    state = PartitionState(position=0, fetch_offset=0)
    records = take_all(CompletedFetch(TP, 0, data, len(data), [(0, 7)]), state)
    assert [r.offset for r in records] == [4, 5]  # the marker closed the aborted transaction
    assert state.position == 6


def test_a_producer_commits_then_aborts_then_commits() -> None:
    """One transactional producer's committed, aborted and committed transactions in a row:
    the commit marker before the aborted transaction does not end it."""

    def marker(offset: int) -> bytes:
        return encode_batch([Record(offset, 0, b"\x00\x00\x00\x01", b"\x00\x00")], base_offset=offset, is_control=True,
                            is_transactional=True, producer_id=7, producer_epoch=0)  # fmt: skip

    data = b"".join((
        batch(0, 2, is_transactional=True, producer_id=7, producer_epoch=0, base_sequence=0), marker(2),
        batch(3, 2, is_transactional=True, producer_id=7, producer_epoch=0, base_sequence=2), marker(5),
        batch(6, 2, is_transactional=True, producer_id=7, producer_epoch=0, base_sequence=4), marker(8),
    ))  # fmt: skip
    state = PartitionState(position=0, fetch_offset=0)
    records = take_all(CompletedFetch(TP, 0, data, len(data), [(3, 7)]), state)
    assert [r.offset for r in records] == [0, 1, 6, 7]
    assert state.position == 9


def test_a_fetch_that_starts_at_an_abort_marker_keeps_the_next_committed_transaction() -> None:
    """The broker still lists the aborted transaction whose marker the fetch starts at; the
    marker must consume that entry, or it would mark the producer's next (committed)
    transaction in the same answer as aborted."""

    def marker(offset: int, kind: int) -> bytes:  # kind 0 = abort, 1 = commit
        return encode_batch([Record(offset, 0, b"\x00\x00\x00" + bytes([kind]), b"\x00\x00")], base_offset=offset,
                            is_control=True, is_transactional=True, producer_id=7, producer_epoch=0)  # fmt: skip

    data = marker(3, 0) + batch(4, 2, is_transactional=True, producer_id=7, producer_epoch=0, base_sequence=3) + marker(6, 1)
    state = PartitionState(position=3, fetch_offset=3)
    records = take_all(CompletedFetch(TP, 0, data, len(data), [(0, 7)]), state)
    assert [r.offset for r in records] == [4, 5]
    assert state.position == 7


def test_a_batch_whose_last_records_were_compacted_away_still_advances_the_position() -> None:
    records = [Record(0, 1, None, b"a"), Record(1, 1, None, b"b")]
    data = bytearray(encode_batch(records, base_offset=0))
    # Pretend compaction removed offsets 2-4: last_offset_delta says 4, only two records remain.
    struct.pack_into(">i", data, 23, 4)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    state = PartitionState(position=0, fetch_offset=0)
    got = take_all(CompletedFetch(TP, 0, bytes(data), len(data), None), state)
    assert [r.offset for r in got] == [0, 1]
    assert state.position == 5


def test_a_corrupt_batch_is_reported_and_stops_the_partition() -> None:
    good = batch(0, 2)
    bad = bytearray(batch(2, 2))
    bad[-1] ^= 0xFF
    data = good + bytes(bad)
    state = PartitionState(position=0, fetch_offset=0)
    fetch = CompletedFetch(TP, 0, data, len(data), None)
    records = take_all(fetch, state)
    assert [r.offset for r in records] == [0, 1]
    assert isinstance(fetch.error, CorruptRecordError)
    assert fetch.error.offset == 2 and fetch.error.partition == 0
    assert state.position == 2
