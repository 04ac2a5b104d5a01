"""A partition's transactions (hot_tier/records/transactions.py): markers, the last stable offset,
aborted transactions for a fetch range, and the rebuild from batches."""

from __future__ import annotations

import pickle
import struct

import pytest

from hot_tier.records import Record, encode_batch, read_header
from hot_tier.records.header import iter_headers

from hot_tier.records.transactions import (
    ABORT, COMMIT, AbortedRanges, AbortedTxn, CorruptTxnIndex, PartitionTxns, decode_txn_index, encode_marker, encode_txn_index,
    marker_type, trim_to,
)  # fmt: skip


def test_marker_layout() -> None:
    data = encode_marker(7, 3, True, 5, 1_000)
    header = read_header(data)
    assert (header.is_control, header.is_transactional, header.producer_id, header.producer_epoch, header.base_sequence) == (True, True, 7, 3, -1)
    assert header.records_count == 1
    assert marker_type(data, header) == COMMIT
    assert marker_type(encode_marker(7, 3, False, 5, 1_000), header) == ABORT
    # key: version 0, type 1; value: version 0, coordinator epoch 5 (Kafka's EndTransactionMarker)
    assert data.endswith(b"\x08\x00\x00\x00\x01\x0c\x00\x00\x00\x00\x00\x05\x00")


def test_last_stable_offset_waits_for_durable_markers() -> None:
    txns = PartitionTxns()
    assert txns.last_stable_offset(10) == 10
    txns.on_data(1, 10)
    txns.on_data(1, 12)  # the first offset stays
    txns.on_data(2, 11)
    assert txns.last_stable_offset(13) == 10
    txns.on_marker(1, 13, True, 0)
    assert txns.last_stable_offset(13) == 10  # marker 13 not durable yet
    assert txns.last_stable_offset(14) == 11  # producer 2 still open
    txns.on_marker(2, 14, False, 0)
    assert txns.last_stable_offset(14) == 11
    assert txns.last_stable_offset(15) == 15
    assert txns.aborted_between(0, 15) == [AbortedTxn(2, 11, 14)]
    assert txns.aborted_between(15, 20) == []
    assert txns.aborted_between(0, 11) == []  # starts at the end of the range
    txns.on_marker(3, 15, False, 0)  # no open transaction of producer 3 here: nothing
    assert txns.aborted_between(0, 100) == [AbortedTxn(2, 11, 14)]
    txns.forget_below(15)
    assert txns.aborted_between(0, 100) == []


def test_rebuild_from_the_log() -> None:
    def data(pid: int, offset: int) -> bytes:
        return encode_batch([Record(offset, 1, b"k", b"v")], base_offset=offset, producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=True)

    def marker(pid: int, offset: int, commit: bool) -> bytes:
        b = bytearray(encode_marker(pid, 0, commit, 0, 1))
        b[0:8] = offset.to_bytes(8, "big")
        return bytes(b)

    log = data(1, 0) + data(2, 1) + marker(1, 2, False) + encode_batch([Record(3, 1, b"k", b"v")], base_offset=3) + data(2, 4)
    batches = [log[h.position : h.position + h.size_bytes] for h in iter_headers(log, check_crc=False)]
    txns = PartitionTxns()
    txns.rebuild(((read_header(b), b) for b in batches), 5)
    assert txns.aborted_between(0, 5) == [AbortedTxn(1, 0, 2)]
    assert txns.last_stable_offset(5) == 1


def test_trim_to_whole_batches_below_an_offset() -> None:
    log = b"".join(encode_batch([Record(o, 1, None, b"v"), Record(o + 1, 1, None, b"w")], base_offset=o) for o in (0, 2, 4))
    assert trim_to(log, 6) == log
    trimmed = trim_to(log, 4)
    assert [h.base_offset for h in iter_headers(trimmed)] == [0, 2]
    assert [h.base_offset for h in iter_headers(trim_to(log, 3))] == [0, 2]  # the batch holding 3 starts below it
    assert trim_to(log, 0) is None


def test_aborted_transactions_recorded_once_and_merged_back() -> None:
    txns = PartitionTxns()
    txns.on_data(1, 0)
    txns.on_marker(1, 5, False, 0)
    txns.on_data(2, 6)
    txns.on_marker(2, 9, False, 0)
    assert txns.unrecorded(6) == [(1, 0, 5)]
    txns.recorded(6)
    assert txns.unrecorded(6) == []
    assert txns.unrecorded(20) == [(2, 6, 9)]
    # After a restart: the store's entries (the segment's local copy is gone) and the local tail's.
    reopened = PartitionTxns()
    reopened.on_data(2, 6)
    reopened.on_marker(2, 9, False, 0)
    reopened.merge_aborted([(1, 0, 5), (2, 6, 9)])
    assert reopened.aborted_between(0, 20) == [AbortedTxn(1, 0, 5), AbortedTxn(2, 6, 9)]
    assert reopened.unrecorded(20) == []


def test_an_open_transaction_older_than_the_local_log_is_seeded_from_the_producer_state() -> None:
    # The local log starts at 20, inside producer 1's transaction that began at 12 (its first
    # batches only in the bucket); the producer state's snapshot knows where it began.
    txns = PartitionTxns()
    txns.seed_ongoing([(1, 12)])  # before the fold
    txns.on_data(1, 20)  # its later batch, the only one the local fold sees
    txns.on_data(2, 22)  # a transaction wholly local
    assert txns.transaction_free is False
    assert txns.ongoing_first_offset(1) == 12
    assert txns.last_stable_offset(30) == 12
    txns.on_marker(1, 30, False, 0)  # aborted: the whole transaction, from 12
    assert txns.last_stable_offset(31) == 22
    assert txns.aborted_between(0, 31) == [AbortedTxn(1, 12, 30)]
    seeded = PartitionTxns()
    seeded.seed_ongoing([(3, 5)])  # no local batch of it at all
    assert seeded.last_stable_offset(40) == 5


def test_transaction_index_bytes_are_kafkas_layout() -> None:
    aborted = [AbortedTxn(7, 10, 15), AbortedTxn(2**40, 3, 20)]
    data = encode_txn_index(aborted)
    assert data == struct.pack(">hqqqq", 0, 7, 10, 15, 16) + struct.pack(">hqqqq", 0, 2**40, 3, 20, 21)
    assert decode_txn_index(data) == aborted
    assert decode_txn_index(b"") == []
    for bad in (data[:-1], struct.pack(">hqqqq", 1, 7, 10, 15, 16), struct.pack(">hqqqq", 0, 7, 16, 15, 16)):
        with pytest.raises(CorruptTxnIndex):
            decode_txn_index(bad)


def test_aborted_ranges_span_first_offset_to_marker_per_producer() -> None:
    ranges = AbortedRanges([AbortedTxn(1, 10, 20), AbortedTxn(1, 30, 35), AbortedTxn(2, 0, 100)])
    assert [o for o in range(0, 40) if ranges.is_aborted(1, o)] == [*range(10, 20), *range(30, 35)]
    assert ranges.is_aborted(2, 99) and not ranges.is_aborted(2, 100)
    assert not ranges.is_aborted(3, 15)
    assert bool(ranges) and not AbortedRanges([])
    copied = pickle.loads(pickle.dumps(ranges))  # travels to Spark's executors
    assert [o for o in range(0, 40) if copied.is_aborted(1, o)] == [*range(10, 20), *range(30, 35)]


def test_a_segments_index_holds_the_aborts_whose_marker_it_holds() -> None:
    txns = PartitionTxns()
    txns.on_data(1, 0)
    txns.on_marker(1, 5, False, 0)
    txns.on_data(2, 3)
    txns.on_marker(2, 9, False, 0)
    txns.on_data(3, 6)
    txns.on_marker(3, 12, True, 0)  # committed: not in any index
    assert txns.aborted_with_markers_in(0, 8) == [AbortedTxn(1, 0, 5)]
    assert txns.aborted_with_markers_in(8, 20) == [AbortedTxn(2, 3, 9)]


def test_store_entries_whose_marker_the_cleaned_local_log_lost_are_left_out() -> None:
    def data(pid: int, offset: int) -> bytes:
        return encode_batch([Record(offset, 1, b"k", b"v")], base_offset=offset, producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=True)

    def marker(pid: int, offset: int) -> bytes:
        b = bytearray(encode_marker(pid, 0, False, 0, 1))
        b[0:8] = offset.to_bytes(8, "big")
        return bytes(b)

    # The local log [10, 30): producer 2's abort marker at 20 is still there; producer 3's at 25
    # was removed by the cleaner with its data (the bucket's copy not yet rewritten).
    log = data(2, 12) + marker(2, 20)
    batches = [log[h.position : h.position + h.size_bytes] for h in iter_headers(log, check_crc=False)]
    txns = PartitionTxns()
    txns.rebuild(((read_header(b), b) for b in batches), 30)
    txns.merge_aborted([(1, 0, 5), (2, 12, 20), (3, 22, 25)], local=(10, 30))
    assert txns.aborted_between(0, 30) == [AbortedTxn(1, 0, 5), AbortedTxn(2, 12, 20)]
    assert txns.recorded_end == 26  # the store holds all three
    txns.forget_aborted([20])
    assert txns.aborted_between(0, 30) == [AbortedTxn(1, 0, 5)]
