"""Idempotent producer state: every decision, expiry, truncation, snapshots and rebuilds."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from kio.schema.errors import ErrorCode

from diskless.broker.producer_state import (
    APPEND,
    BatchMetadata,
    CorruptProducerSnapshot,
    Duplicate,
    InvalidProducerEpoch,
    OutOfOrderSequence,
    ProducerSnapshotError,
    ProducerStateEntry,
    ProducerStateManager,
    UnknownProducer,
    UnsupportedProducerSnapshotVersion,
)
from hot_tier.records.header import ATTR_CONTROL, NO_SEQUENCE, BatchHeader

PID = 1000
INT32_MAX = 2**31 - 1


def header(
    base_offset: int, records: int, producer_id: int = PID, epoch: int = 0, base_sequence: int = 0,
    max_timestamp: int = 1_000, control: bool = False,
) -> BatchHeader:
    return BatchHeader(
        position=0, base_offset=base_offset, batch_length=49, partition_leader_epoch=0, magic=2, crc=0,
        attributes=ATTR_CONTROL if control else 0, last_offset_delta=records - 1, base_timestamp=max_timestamp,
        max_timestamp=max_timestamp, producer_id=producer_id, producer_epoch=epoch,
        base_sequence=base_sequence if producer_id >= 0 else NO_SEQUENCE, records_count=records,
    )


def appended(state: ProducerStateManager, first_seq: int, records: int, first_offset: int, *, epoch: int = 0, ts: int = 1_000) -> None:
    last_seq = (first_seq + records - 1) & INT32_MAX
    assert state.check(PID, epoch, first_seq, last_seq, ts) == APPEND
    state.record(PID, epoch, first_seq, last_seq, first_offset, first_offset + records - 1, ts)


# -- decisions ---------------------------------------------------------------------------------


def test_batches_without_producer_id_are_always_appended() -> None:
    assert ProducerStateManager().check(-1, -1, -1, -1, 0) == APPEND


def test_unknown_producer_is_accepted_at_any_sequence() -> None:
    state = ProducerStateManager()
    assert state.check(PID, 0, 0, 9, 0) == APPEND
    # Kafka 2.5+ no longer answers UNKNOWN_PRODUCER_ID: state lost to retention is forgiven.
    assert state.check(PID, 3, 42, 50, 0) == APPEND


def test_a_producer_id_with_epoch_minus_one_is_accepted_at_any_sequence() -> None:
    """A batch with a producer id but no epoch (-1): as Kafka, no epoch known means any sequence
    (it raised AssertionError: UNKNOWN_SERVER_ERROR to the client)."""
    state = ProducerStateManager()
    assert state.check(PID, -1, 0, 0, 0) == APPEND
    state.record(PID, -1, 0, 0, 0, 0, 0)
    assert state.check(PID, -1, 7, 7, 0) == APPEND


def test_in_a_partition_never_written_a_producer_starts_at_sequence_zero() -> None:
    state = ProducerStateManager()
    assert state.check(PID, 0, 0, 9, 0, partition_empty=True) == APPEND
    # Its batches 0-41 went to an earlier leader and never became durable: taking 42 now would
    # let the client count them as delivered.
    assert state.check(PID, 3, 42, 50, 0, partition_empty=True) == UnknownProducer(PID, 42)
    assert UnknownProducer.error_code is ErrorCode.unknown_producer_id


def test_in_sequence_appends_and_gap_is_out_of_order() -> None:
    state = ProducerStateManager()
    appended(state, 0, 10, 100)
    assert state.check(PID, 0, 10, 14, 0) == APPEND
    assert state.check(PID, 0, 11, 14, 0) == OutOfOrderSequence(PID, 0, 11, 0, 9)
    assert OutOfOrderSequence.error_code is ErrorCode.out_of_order_sequence_number


def test_retry_of_any_of_the_last_five_batches_is_a_duplicate_with_original_offsets() -> None:
    state = ProducerStateManager()
    for i in range(6):  # sequences 0-1, 2-3, ... 10-11 at offsets 100+10i
        appended(state, 2 * i, 2, 100 + 10 * i, ts=1_000 + i)
    for i in range(1, 6):
        assert state.check(PID, 0, 2 * i, 2 * i + 1, 0) == Duplicate(100 + 10 * i, 101 + 10 * i, 1_000 + i)
    # The oldest batch fell out of the window: it is just out of order now.
    assert state.check(PID, 0, 0, 1, 0) == OutOfOrderSequence(PID, 0, 0, 0, 11)
    # A range overlapping a retained batch but not equal to it is not a duplicate.
    assert state.check(PID, 0, 2, 2, 0) == OutOfOrderSequence(PID, 0, 2, 0, 11)
    assert [b.first_sequence for b in state.last_entry(PID).batches] == [2, 4, 6, 8, 10]  # type: ignore[union-attr]


def test_duplicate_takes_precedence_over_sequence_checks() -> None:
    state = ProducerStateManager()
    appended(state, 0, 5, 0)
    appended(state, 5, 5, 5)
    assert state.check(PID, 0, 0, 4, 0) == Duplicate(0, 4, 1_000)


def test_older_epoch_is_invalid_producer_epoch() -> None:
    state = ProducerStateManager()
    appended(state, 0, 3, 0, epoch=5)
    assert state.check(PID, 4, 3, 5, 0) == InvalidProducerEpoch(PID, 4, 5)
    assert state.check(PID, 4, 0, 2, 0) == InvalidProducerEpoch(PID, 4, 5)  # no duplicate across epochs
    assert InvalidProducerEpoch.error_code is ErrorCode.invalid_producer_epoch


def test_new_epoch_must_start_at_sequence_zero() -> None:
    state = ProducerStateManager()
    appended(state, 0, 3, 0, epoch=1)
    assert state.check(PID, 2, 0, 4, 0) == APPEND
    assert state.check(PID, 2, 3, 4, 0) == OutOfOrderSequence(PID, 2, 3, 1, NO_SEQUENCE)


def test_new_epoch_forgets_the_old_batches() -> None:
    state = ProducerStateManager()
    appended(state, 0, 3, 0, epoch=1)
    appended(state, 0, 2, 3, epoch=2)
    assert state.last_entry(PID) == ProducerStateEntry(PID, 2, (BatchMetadata(0, 1, 3, 4, 1_000),), 4, 1_000)
    assert state.check(PID, 2, 2, 3, 0) == APPEND
    assert state.check(PID, 1, 0, 2, 0) == InvalidProducerEpoch(PID, 1, 2)


def test_sequence_wraps_after_int32_max() -> None:
    state = ProducerStateManager()
    state.record(PID, 0, INT32_MAX - 4, INT32_MAX - 2, 0, 2, 1_000)  # a producer far along
    appended(state, INT32_MAX - 1, 3, 3)  # sequences 2147483646, 2147483647, 0
    assert state.last_entry(PID).last_sequence == 0  # type: ignore[union-attr]
    assert state.check(PID, 0, 1, 1, 0) == APPEND
    assert state.check(PID, 0, INT32_MAX - 1, 0, 0) == Duplicate(3, 5, 1_000)
    wrapping = ProducerStateManager()
    wrapping.record(PID, 0, INT32_MAX - 3, INT32_MAX - 2, 0, 1, 1_000)
    appended(wrapping, INT32_MAX - 1, 2, 2)  # ends exactly at Int32 max
    assert wrapping.check(PID, 0, 0, 0, 0) == APPEND


# -- expiry and truncation ---------------------------------------------------------------------


def test_expired_producer_is_unknown_to_check_and_removed_by_expire() -> None:
    state = ProducerStateManager(producer_id_expiration_ms=10_000)
    appended(state, 0, 3, 0, epoch=5, ts=1_000)
    state.record(PID + 1, 0, 0, 0, 3, 3, 5_000)
    assert state.check(PID, 4, 0, 0, 10_999) == InvalidProducerEpoch(PID, 4, 5)
    assert state.check(PID, 4, 0, 0, 11_000) == APPEND
    assert state.expire(10_999) == []
    assert state.expire(11_000) == [PID]
    assert state.producer_ids() == [PID + 1]
    assert state.expire(15_000) == [PID + 1] and len(state) == 0


def test_truncate_drops_batches_at_or_beyond_the_offset() -> None:
    state = ProducerStateManager()
    appended(state, 0, 2, 0, ts=1)  # offsets 0-1
    appended(state, 2, 2, 2, ts=2)  # offsets 2-3
    state.record(PID + 1, 0, 0, 0, 4, 4, 3)  # another producer, offset 4
    state.truncate_to(2)
    assert state.last_entry(PID) == ProducerStateEntry(PID, 0, (BatchMetadata(0, 1, 0, 1, 1),), 1, 1)
    assert state.last_entry(PID + 1) is None
    assert state.map_end_offset == 2
    assert state.check(PID, 0, 2, 3, 0) == APPEND  # the truncated batch can be written again


# -- snapshots ---------------------------------------------------------------------------------


def test_snapshot_bytes_are_exactly_the_documented_layout() -> None:
    state = ProducerStateManager()
    state.record(7, 3, 10, 14, 100, 104, 123_456, transactional=True)
    state.update_map_end_offset(200)
    body = struct.pack(">qi", 200, 1) + struct.pack(">qhqqiqB", 7, 3, 104, 123_456, -1, 100, 1) + struct.pack(">iiqiq", 10, 14, 100, 4, 123_456)
    expected = b"DLPS" + struct.pack(">hI", 2, crc32c(body)) + body
    assert state.snapshot() == expected
    assert len(expected) == 22 + 39 + 28


def test_a_version_1_snapshot_still_loads_without_coordinator_epoch_or_open_transaction() -> None:
    body = struct.pack(">qi", 200, 1) + struct.pack(">qhqqB", 7, 3, 104, 123_456, 1) + struct.pack(">iiqiq", 10, 14, 100, 4, 123_456)
    loaded = ProducerStateManager.from_snapshot(_resealed(body, version=1))
    assert loaded.last_entry(7) == ProducerStateEntry(7, 3, (BatchMetadata(10, 14, 100, 104, 123_456),), 104, 123_456, -1, -1)
    assert loaded.map_end_offset == 200


def test_the_open_transaction_and_the_coordinator_epoch_survive_a_snapshot() -> None:
    state = ProducerStateManager()
    state.record(7, 0, 0, 2, 10, 12, 1, transactional=True)  # opens a transaction at 10
    state.record(7, 0, 3, 4, 15, 16, 2, transactional=True)  # the same transaction
    assert state.last_entry(7).current_txn_first_offset == 10
    state.record_marker(7, 0, 17, 3, coordinator_epoch=4)  # ends it
    assert (state.last_entry(7).current_txn_first_offset, state.last_entry(7).coordinator_epoch) == (-1, 4)
    state.record(7, 0, 5, 5, 20, 20, 4, transactional=True)  # the next one, still open
    state.record(8, 0, 0, 0, 21, 21, 5)  # idempotent only: no transaction
    loaded = ProducerStateManager.from_snapshot(state.snapshot())
    assert (loaded.last_entry(7).current_txn_first_offset, loaded.last_entry(7).coordinator_epoch) == (20, 4)
    assert loaded.last_entry(8).current_txn_first_offset == -1
    assert loaded.check_marker(7, 0, 3) == ErrorCode.transaction_coordinator_fenced  # fenced after a reload too
    loaded.truncate_to(20)  # the open transaction's batches are cut away: nothing is open
    assert loaded.last_entry(7).current_txn_first_offset == -1


def _populated() -> ProducerStateManager:
    state = ProducerStateManager(producer_id_expiration_ms=60_000)
    for i in range(7):
        appended(state, 3 * i, 3, 10 * i, epoch=2, ts=500 + i)
    state.record(5, 0, 0, 0, 80, 80, 900)
    state.record(2**40, 7, INT32_MAX, 1, 81, 83, 901)
    return state


def test_snapshot_round_trip() -> None:
    state = _populated()
    loaded = ProducerStateManager.from_snapshot(state.snapshot(), producer_id_expiration_ms=60_000)
    assert loaded.map_end_offset == state.map_end_offset == 84
    assert loaded.producer_ids() == [5, PID, 2**40]
    for producer_id in loaded.producer_ids():
        assert loaded.last_entry(producer_id) == state.last_entry(producer_id)
    assert loaded.check(PID, 2, 12, 14, 0) == Duplicate(40, 42, 504)
    assert loaded.snapshot() == state.snapshot()
    empty = ProducerStateManager.from_snapshot(ProducerStateManager().snapshot())
    assert (len(empty), empty.map_end_offset) == (0, 0)


def test_every_flipped_byte_and_every_truncation_is_detected() -> None:
    data = _populated().snapshot()
    for position in range(len(data)):
        corrupted = bytearray(data)
        corrupted[position] ^= 0x40
        with pytest.raises(ProducerSnapshotError):
            ProducerStateManager.from_snapshot(corrupted)
    for length in range(len(data)):
        with pytest.raises(CorruptProducerSnapshot):
            ProducerStateManager.from_snapshot(data[:length])


def _resealed(body: bytes, version: int = 1) -> bytes:
    return b"DLPS" + struct.pack(">hI", version, crc32c(body)) + body


def test_structurally_bad_snapshots_with_valid_crc_are_rejected() -> None:
    entry = struct.pack(">qhqqB", 7, 0, 0, 0, 0)
    with pytest.raises(UnsupportedProducerSnapshotVersion) as unsupported:
        ProducerStateManager.from_snapshot(_resealed(struct.pack(">qi", 0, 0), version=3))
    assert unsupported.value.version == 3
    cases = {
        "bytes after the last entry": _resealed(struct.pack(">qi", 0, 0) + b"\x00"),
        "out of order": _resealed(struct.pack(">qi", 0, 2) + entry + entry),
        "at most 5": _resealed(struct.pack(">qi", 0, 1) + struct.pack(">qhqqB", 7, 0, 0, 0, 6) + bytes(6 * 28)),
        "negative producer count": _resealed(struct.pack(">qi", 0, -1)),
        "magic": b"XXXX" + _resealed(struct.pack(">qi", 0, 0))[4:],
    }
    for reason, data in cases.items():
        with pytest.raises(CorruptProducerSnapshot) as corrupt:
            ProducerStateManager.from_snapshot(data)
        assert reason in corrupt.value.reason


# -- rebuilding from the log -------------------------------------------------------------------


def test_rebuild_from_batches_matches_recording_the_same_appends() -> None:
    log = [
        header(0, 3, epoch=0, base_sequence=0, max_timestamp=10),
        header(3, 2, producer_id=-1, max_timestamp=11),  # not idempotent: only moves the end
        header(5, 2, epoch=0, base_sequence=3, max_timestamp=12),
        header(7, 1, producer_id=77, epoch=4, base_sequence=INT32_MAX, max_timestamp=13),
        header(8, 1, epoch=1, control=True, max_timestamp=14),  # a marker bumps PID's epoch
        header(9, 2, epoch=1, base_sequence=0, max_timestamp=15),
    ]
    rebuilt = ProducerStateManager()
    rebuilt.rebuild_from_batches(log)
    assert rebuilt.map_end_offset == 11
    assert rebuilt.last_entry(PID) == ProducerStateEntry(PID, 1, (BatchMetadata(0, 1, 9, 10, 15),), 10, 15)
    assert rebuilt.last_entry(77) == ProducerStateEntry(77, 4, (BatchMetadata(INT32_MAX, INT32_MAX, 7, 7, 13),), 7, 13)
    assert rebuilt.check(PID, 1, 0, 1, 0) == Duplicate(9, 10, 15)
    assert rebuilt.check(77, 4, 0, 0, 0) == APPEND

    # Snapshot part-way, then fold the whole log again: what the snapshot covers is skipped.
    partial = ProducerStateManager()
    partial.rebuild_from_batches(log[:3])
    resumed = ProducerStateManager.from_snapshot(partial.snapshot())
    resumed.rebuild_from_batches(log)
    assert resumed.snapshot() == rebuilt.snapshot()


def test_marker_with_the_same_epoch_keeps_the_batches() -> None:
    state = ProducerStateManager()
    state.rebuild_from_batches([header(0, 2, epoch=3), header(2, 1, epoch=3, control=True, max_timestamp=2_000)])
    entry = state.last_entry(PID)
    assert entry == ProducerStateEntry(PID, 3, (BatchMetadata(0, 1, 0, 1, 1_000),), 2, 2_000)
    assert state.check(PID, 3, 2, 2, 0) == APPEND


def test_markers_from_an_older_coordinator_or_producer_epoch_are_refused() -> None:
    state = ProducerStateManager()
    assert state.check_marker(PID, 0, 0) is None  # unknown producer: nothing to check against
    state.rebuild_from_batches([header(0, 2, epoch=3)])
    assert state.last_entry(PID).coordinator_epoch == -1  # none seen: any coordinator may end it
    assert state.check_marker(PID, 3, 0) is None
    state.record_marker(PID, 3, 2, 2_000, coordinator_epoch=7)
    assert state.last_entry(PID).coordinator_epoch == 7
    assert state.check_marker(PID, 3, 7) is None  # the same coordinator again (a retry)
    assert state.check_marker(PID, 3, 8) is None  # a newer one, after the slot moved
    assert state.check_marker(PID, 3, 6) is ErrorCode.transaction_coordinator_fenced  # a zombie
    assert state.check_marker(PID, 2, 9) is ErrorCode.invalid_producer_epoch  # a fenced producer
    # A marker folded from the log carries no known coordinator epoch: the last one stays, as
    # it does through the producer's next batches, in this epoch or a newer one.
    state.rebuild_from_batches([header(3, 1, epoch=3, control=True, max_timestamp=3_000)])
    assert state.last_entry(PID).coordinator_epoch == 7
    state.record(PID, 3, 2, 2, 4, 4, 4_000)
    state.record(PID, 4, 0, 0, 5, 5, 5_000)
    assert state.last_entry(PID).coordinator_epoch == 7
    assert state.check_marker(PID, 4, 6) is ErrorCode.transaction_coordinator_fenced
    # Kept in snapshots: a restarted leader still fences the zombie.
    assert ProducerStateManager.from_snapshot(state.snapshot()).last_entry(PID).coordinator_epoch == 7
