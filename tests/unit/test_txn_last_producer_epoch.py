"""The previous producer epoch of a transactional id (KIP-360, Kafka's lastProducerEpoch) in the
sans-IO coordinator (txn/coordinator.py): kept when a producer bumps its own epoch with
InitProducerId, so a retry of that request gets the current epoch; dropped by every bump that
fences (a timeout, an InitProducerId naming no producer), so a fenced producer stays fenced,
as Kafka's TransactionCoordinator with EndTxn before v5."""

from __future__ import annotations

import json

from kio.schema.errors import ErrorCode

from diskless.broker.txn.coordinator import InitProducerIdDecision, NeedProducerId, TransactionCoordinator
from metadata.transactions import COMPLETE_ABORT, EMPTY, ONGOING, PREPARE_ABORT, TransactionRecord

TID = "tx"
PID = 1000


def init(core: TransactionCoordinator, now: int, pid: int = -1, epoch: int = -1, timeout_ms: int = 60_000) -> InitProducerIdDecision:
    decision = core.init_producer_id(TID, timeout_ms, pid, epoch, now)
    if isinstance(decision, NeedProducerId):
        decision = core.init_producer_id(TID, timeout_ms, pid, epoch, now, fresh_producer_id=PID)
    assert isinstance(decision, InitProducerIdDecision)
    if decision.record is not None:
        core.apply(decision.record)
    return decision


def answer(decision: InitProducerIdDecision) -> tuple[ErrorCode, int, int]:
    return decision.error, decision.producer_id, decision.producer_epoch


def run_transaction(core: TransactionCoordinator, epoch: int, now: int, commit: bool = False) -> None:
    added = core.add_partitions(TID, PID, epoch, [("a", 0)], now)
    assert added.error is ErrorCode.none
    core.apply(added.record)
    ended = core.end_txn(TID, PID, epoch, commit, now + 1)
    assert ended.error is ErrorCode.none
    core.apply(ended.record)
    core.apply(core.complete(TID, now + 2))


def timed_out_at_epoch_0(core: TransactionCoordinator) -> None:
    init(core, 0, timeout_ms=1_000)
    core.apply(core.add_partitions(TID, PID, 0, [("a", 0)], 100).record)
    (expired,) = core.timed_out(1_101)
    core.apply(expired)
    core.apply(core.complete(TID, 1_200))
    record = core.get(TID)
    assert (record.state, record.producer_epoch, record.last_producer_epoch) == (COMPLETE_ABORT, 1, -1)


def test_a_producer_whose_transaction_timed_out_is_fenced_as_by_kafka() -> None:
    """Kafka's abortTimedOutTransactions bumps the epoch through prepareFenceProducerEpoch and
    endTransaction sets lastProducerEpoch to -1: neither EndTxn nor InitProducerId with the
    old epoch is a retry; the producer is fenced (librdkafka: fatal _FENCED)."""
    core = TransactionCoordinator()
    timed_out_at_epoch_0(core)
    assert core.end_txn(TID, PID, 0, False, 1_300).error is ErrorCode.producer_fenced
    assert core.end_txn(TID, PID, 0, True, 1_300).error is ErrorCode.producer_fenced
    assert answer(init(core, 1_300, pid=PID, epoch=0)) == (ErrorCode.producer_fenced, -1, -1)
    assert core.add_partitions(TID, PID, 0, [("a", 0)], 1_300).error is ErrorCode.producer_fenced
    # A new producer with the transactional id (naming none) carries on from the fenced epoch.
    assert answer(init(core, 1_400)) == (ErrorCode.none, PID, 2)
    run_transaction(core, 2, 1_500, commit=True)


def test_an_init_finding_the_transaction_ongoing_fences_without_a_previous_epoch() -> None:
    core = TransactionCoordinator()
    init(core, 0)
    core.apply(core.add_partitions(TID, PID, 0, [("a", 0)], 10).record)
    decision = init(core, 20, pid=PID, epoch=0)  # the producer itself, after an abortable error, not aborting first
    assert decision.error is ErrorCode.concurrent_transactions
    assert (core.get(TID).state, core.get(TID).producer_epoch, core.get(TID).last_producer_epoch) == (PREPARE_ABORT, 1, -1)
    core.apply(core.complete(TID, 30))
    assert init(core, 40, pid=PID, epoch=0).error is ErrorCode.producer_fenced  # as Kafka: epoch 1 was never its own


def test_a_producer_bumping_its_own_epoch_keeps_the_one_before_for_a_retry() -> None:
    core = TransactionCoordinator()
    init(core, 0)
    run_transaction(core, 0, 10)  # aborted by the client, as after an abortable error
    assert answer(init(core, 20, pid=PID, epoch=0)) == (ErrorCode.none, PID, 1)
    assert (core.get(TID).producer_epoch, core.get(TID).last_producer_epoch) == (1, 0)
    # The answer was lost: the retry names epoch 0 again and gets epoch 1, not bumped again.
    retried = init(core, 30, pid=PID, epoch=0)
    assert answer(retried) == (ErrorCode.none, PID, 1)
    assert (retried.record.state, retried.record.last_producer_epoch, retried.record.last_update_ms) == (EMPTY, 0, 30)
    run_transaction(core, 1, 40, commit=True)
    # The next bump of its own keeps epoch 1; epoch 0 is now older than the previous one.
    assert answer(init(core, 50, pid=PID, epoch=1)) == (ErrorCode.none, PID, 2)
    assert core.get(TID).last_producer_epoch == 1
    assert answer(init(core, 60, pid=PID, epoch=0)) == (ErrorCode.producer_fenced, -1, -1)
    assert answer(init(core, 60, pid=PID, epoch=1)) == (ErrorCode.none, PID, 2)


def test_the_previous_epoch_is_no_retry_once_another_producer_initialised() -> None:
    core = TransactionCoordinator()
    init(core, 0)
    assert answer(init(core, 10, pid=PID, epoch=0)) == (ErrorCode.none, PID, 1)
    assert answer(init(core, 20)) == (ErrorCode.none, PID, 2)  # a new producer instance: fences epoch 1
    assert core.get(TID).last_producer_epoch == -1
    assert init(core, 30, pid=PID, epoch=1).error is ErrorCode.producer_fenced
    assert init(core, 30, pid=PID, epoch=0).error is ErrorCode.producer_fenced


def test_a_retry_finding_a_transaction_ongoing_aborts_it_as_kafka() -> None:
    """A late duplicate of the bump request, once the producer runs a transaction with the new
    epoch: Kafka fences that transaction (PrepareEpochFence); the retry's sender is then fenced."""
    core = TransactionCoordinator()
    init(core, 0)
    init(core, 10, pid=PID, epoch=0)
    core.apply(core.add_partitions(TID, PID, 1, [("a", 0)], 20).record)
    assert core.get(TID).state == ONGOING
    assert init(core, 30, pid=PID, epoch=0).error is ErrorCode.concurrent_transactions
    assert (core.get(TID).state, core.get(TID).producer_epoch, core.get(TID).last_producer_epoch) == (PREPARE_ABORT, 2, -1)


def test_what_names_another_producer_is_fenced() -> None:
    core = TransactionCoordinator()
    init(core, 0)
    init(core, 10, pid=PID, epoch=0)
    assert init(core, 20, pid=PID + 1, epoch=0).error is ErrorCode.producer_fenced  # another producer id
    assert init(core, 20, pid=PID, epoch=-1).error is ErrorCode.producer_fenced  # no epoch is not the previous one
    assert init(core, 20, pid=PID, epoch=5).error is ErrorCode.producer_fenced  # a newer epoch than any given
    assert (core.get(TID).producer_epoch, core.get(TID).last_producer_epoch) == (1, 0)


def test_a_fenced_epoch_is_fenced_even_while_the_transaction_prepares() -> None:
    core = TransactionCoordinator()
    init(core, 0)
    init(core, 10)  # epoch 1 fences epoch 0
    core.apply(core.add_partitions(TID, PID, 1, [("a", 0)], 20).record)
    core.apply(core.end_txn(TID, PID, 1, True, 30).record)
    assert init(core, 40, pid=PID, epoch=0).error is ErrorCode.producer_fenced
    assert init(core, 40, pid=PID, epoch=1).error is ErrorCode.concurrent_transactions


def test_a_client_abort_and_the_transaction_steps_keep_the_previous_epoch() -> None:
    core = TransactionCoordinator()
    init(core, 0)
    init(core, 10, pid=PID, epoch=0)
    core.apply(core.add_partitions(TID, PID, 1, [("a", 0)], 20).record)
    core.apply(core.add_offsets(TID, PID, 1, "g", 21).record)
    core.apply(core.end_txn(TID, PID, 1, False, 22).record)
    assert (core.get(TID).state, core.get(TID).last_producer_epoch) == (PREPARE_ABORT, 0)
    core.apply(core.complete(TID, 23))
    assert (core.get(TID).state, core.get(TID).producer_epoch, core.get(TID).last_producer_epoch) == (COMPLETE_ABORT, 1, 0)


def test_epoch_exhaustion_moves_to_a_new_producer_id_without_a_previous_epoch() -> None:
    from dataclasses import replace

    core = TransactionCoordinator()
    init(core, 0)
    core.apply(replace(core.get(TID), producer_epoch=32_766, last_producer_epoch=32_765))
    decision = core.init_producer_id(TID, 60_000, PID, 32_766, 5, fresh_producer_id=2000)
    assert answer(decision) == (ErrorCode.none, 2000, 0)
    assert decision.record.last_producer_epoch == -1


def test_the_previous_epoch_survives_the_store_and_a_coordinator_move() -> None:
    core = TransactionCoordinator()
    init(core, 0)
    init(core, 10, pid=PID, epoch=0)
    (row,) = [r.row() for r in core.records()]
    assert json.loads(row[6])["last_producer_epoch"] == 0
    moved = TransactionCoordinator()
    assert moved.load([TransactionRecord.decode(row)]) == []
    decision = moved.init_producer_id(TID, 60_000, PID, 0, 20)
    assert answer(decision) == (ErrorCode.none, PID, 1)


def test_a_row_written_before_the_previous_epoch_was_kept_reads_none() -> None:
    row = ("tx", PID, 3, 60_000, COMPLETE_ABORT, "[]", json.dumps({"groups": [], "offsets": []}), 5, 6)
    record = TransactionRecord.decode(row)
    assert record == TransactionRecord("tx", PID, 3, 60_000, COMPLETE_ABORT, txn_start_ms=5, last_update_ms=6)
    assert record.last_producer_epoch == -1
    assert TransactionRecord.decode(record.row()) == record
