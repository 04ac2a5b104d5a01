"""The transaction coordinator's state machine (txn/coordinator.py), without I/O: every
request decided against the current record, records applied as the shell applies them once
the store has them."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from diskless.broker.txn.coordinator import InitProducerIdDecision, NeedProducerId, TransactionCoordinator
from metadata import CommittedOffset
from metadata.transactions import COMPLETE_ABORT, COMPLETE_COMMIT, EMPTY, ONGOING, PREPARE_ABORT, PREPARE_COMMIT

TID = "tx"


def init(core: TransactionCoordinator, now: int = 0, timeout_ms: int = 60_000, pid: int = -1, epoch: int = -1) -> InitProducerIdDecision:
    decision = core.init_producer_id(TID, timeout_ms, pid, epoch, now)
    if isinstance(decision, NeedProducerId):
        decision = core.init_producer_id(TID, timeout_ms, pid, epoch, now, fresh_producer_id=1000)
    assert isinstance(decision, InitProducerIdDecision)
    if decision.record is not None:
        core.apply(decision.record)
    return decision


def apply(core: TransactionCoordinator, decision):  # type: ignore[no-untyped-def]
    if decision.record is not None:
        core.apply(decision.record)
    return decision.error


def test_first_init_takes_a_fresh_producer_id_at_epoch_0() -> None:
    core = TransactionCoordinator()
    assert isinstance(core.init_producer_id(TID, 60_000, -1, -1, 0), NeedProducerId)
    decision = init(core)
    assert (decision.error, decision.producer_id, decision.producer_epoch) == (ErrorCode.none, 1000, 0)
    assert core.get(TID).state == EMPTY


def test_timeout_out_of_bounds_is_refused() -> None:
    core = TransactionCoordinator(transaction_max_timeout_ms=900_000)
    assert init(core, timeout_ms=900_001).error is ErrorCode.invalid_transaction_timeout
    assert init(core, timeout_ms=0).error is ErrorCode.invalid_transaction_timeout
    assert core.get(TID) is None


def test_commit_cycle_with_offsets() -> None:
    core = TransactionCoordinator()
    init(core)
    assert apply(core, core.add_partitions(TID, 1000, 0, [("a", 0), ("a", 1)], 10)) is ErrorCode.none
    record = core.get(TID)
    assert (record.state, record.partitions, record.txn_start_ms) == (ONGOING, (("a", 0), ("a", 1)), 10)
    assert core.add_partitions(TID, 1000, 0, [("a", 1)], 11).record is None  # already in: no write
    assert core.verify_partition(1000, 0, "a", 1) is ErrorCode.none
    assert core.verify_partition(1000, 0, "b", 0) is ErrorCode.invalid_txn_state
    offsets = [CommittedOffset("in", 0, 5, None, "", 12)]
    assert core.txn_offset_commit(TID, 1000, 0, "g", offsets, 12).error is ErrorCode.invalid_txn_state  # group not added
    assert apply(core, core.add_offsets(TID, 1000, 0, "g", 12)) is ErrorCode.none
    assert apply(core, core.txn_offset_commit(TID, 1000, 0, "g", offsets, 13)) is ErrorCode.none
    assert core.get(TID).pending_offsets == (("g", offsets[0]),)
    assert apply(core, core.end_txn(TID, 1000, 0, True, 20)) is ErrorCode.none
    assert core.get(TID).state == PREPARE_COMMIT
    assert core.add_partitions(TID, 1000, 0, [("a", 2)], 21).error is ErrorCode.concurrent_transactions
    assert core.end_txn(TID, 1000, 0, True, 21).error is ErrorCode.concurrent_transactions
    assert isinstance(init(core, now=21), InitProducerIdDecision) and core.get(TID).state == PREPARE_COMMIT
    core.apply(core.complete(TID, 30))
    record = core.get(TID)
    assert (record.state, record.partitions, record.pending_offsets, record.producer_epoch) == (COMPLETE_COMMIT, (), (), 0)
    assert core.end_txn(TID, 1000, 0, True, 31).error is ErrorCode.none  # a retry of the commit
    assert core.end_txn(TID, 1000, 0, False, 31).error is ErrorCode.invalid_txn_state
    # The next transaction starts from nothing.
    assert apply(core, core.add_partitions(TID, 1000, 0, [("a", 2)], 40)) is ErrorCode.none
    assert (core.get(TID).partitions, core.get(TID).groups, core.get(TID).txn_start_ms) == ((("a", 2),), (), 40)


def test_a_second_init_fences_the_first_producer_and_aborts_its_transaction() -> None:
    core = TransactionCoordinator()
    init(core)
    apply(core, core.add_partitions(TID, 1000, 0, [("a", 0)], 10))
    decision = init(core, now=15)
    assert decision.error is ErrorCode.concurrent_transactions
    record = core.get(TID)
    assert (record.state, record.producer_epoch, record.partitions) == (PREPARE_ABORT, 1, (("a", 0),))
    core.apply(core.complete(TID, 16))
    assert core.get(TID).state == COMPLETE_ABORT
    decision = init(core, now=17)
    assert (decision.error, decision.producer_id, decision.producer_epoch) == (ErrorCode.none, 1000, 2)
    # The old producer (epoch 0) is fenced everywhere.
    assert core.add_partitions(TID, 1000, 0, [("a", 0)], 18).error is ErrorCode.producer_fenced
    assert core.end_txn(TID, 1000, 0, True, 18).error is ErrorCode.producer_fenced
    assert core.add_offsets(TID, 1000, 0, "g", 18).error is ErrorCode.producer_fenced
    assert core.verify_partition(1000, 0, "a", 0) is ErrorCode.invalid_producer_epoch
    assert core.add_partitions(TID, 999, 2, [("a", 0)], 18).error is ErrorCode.invalid_producer_id_mapping
    # KIP-360: naming an old id and epoch is fenced.
    assert init(core, now=19, pid=1000, epoch=0).error is ErrorCode.producer_fenced


def test_abort_and_timeout() -> None:
    core = TransactionCoordinator()
    init(core, timeout_ms=1_000)
    apply(core, core.add_partitions(TID, 1000, 0, [("a", 0)], 100))
    assert core.next_timeout_ms() == 1_100
    assert core.timed_out(1_100) == []
    (expired,) = core.timed_out(1_101)
    assert (expired.state, expired.producer_epoch) == (PREPARE_ABORT, 1)  # the silent producer is fenced
    core.apply(expired)
    assert core.next_timeout_ms() is None
    core.apply(core.complete(TID, 1_200))
    assert core.end_txn(TID, 1000, 0, False, 1_300).error is ErrorCode.producer_fenced
    init(core, now=1_400)
    apply(core, core.add_partitions(TID, 1000, 2, [("a", 0)], 1_500))
    assert apply(core, core.end_txn(TID, 1000, 2, False, 1_600)) is ErrorCode.none
    assert (core.get(TID).state, core.get(TID).producer_epoch) == (PREPARE_ABORT, 2)  # a client's abort bumps nothing


def test_end_without_a_transaction_is_invalid() -> None:
    core = TransactionCoordinator()
    init(core)
    assert core.end_txn(TID, 1000, 0, True, 1).error is ErrorCode.invalid_txn_state
    assert core.end_txn("other", 1000, 0, True, 1).error is ErrorCode.invalid_producer_id_mapping


def test_load_returns_the_transactions_to_finish() -> None:
    core = TransactionCoordinator()
    init(core)
    apply(core, core.add_partitions(TID, 1000, 0, [("a", 0)], 1))
    apply(core, core.end_txn(TID, 1000, 0, True, 2))
    records = core.records()
    fresh = TransactionCoordinator()
    (preparing,) = fresh.load(records)
    assert preparing.state == PREPARE_COMMIT and fresh.verify_partition(1000, 0, "a", 0) is ErrorCode.invalid_txn_state


def test_epoch_exhaustion_moves_to_a_new_producer_id() -> None:
    core = TransactionCoordinator()
    init(core)
    from dataclasses import replace

    core.apply(replace(core.get(TID), producer_epoch=32_766))
    assert isinstance(core.init_producer_id(TID, 60_000, -1, -1, 5), NeedProducerId)
    decision = core.init_producer_id(TID, 60_000, -1, -1, 5, fresh_producer_id=2000)
    assert (decision.producer_id, decision.producer_epoch) == (2000, 0)


def test_list_transactions_filters() -> None:
    core = TransactionCoordinator()
    init(core)
    apply(core, core.add_partitions(TID, 1000, 0, [("a", 0)], 100))
    other = core.init_producer_id("other", 60_000, -1, -1, 0, fresh_producer_id=2000)
    core.apply(other.record)
    assert [r.transactional_id for r in core.list_transactions((), (), -1, 200)[0]] == ["other", TID]
    assert core.list_transactions(("Ongoing", "Nope"), (), -1, 200) == ([core.get(TID)], ["Nope"])
    assert core.list_transactions((), (2000,), -1, 200) == ([core.get("other")], [])
    assert core.list_transactions((), (), 100, 200) == ([core.get(TID)], [])  # open 100 ms
    assert core.list_transactions((), (), 101, 200) == ([], [])


def test_pending_offsets_are_unstable_until_complete() -> None:
    core = TransactionCoordinator()
    init(core)
    apply(core, core.add_offsets(TID, 1000, 0, "g", 1))
    apply(core, core.txn_offset_commit(TID, 1000, 0, "g", [CommittedOffset("in", 2, 5, None, "", 2)], 2))
    assert core.pending_offset_partitions("g") == {("in", 2)}
    assert core.pending_offset_partitions("other") == set()
    apply(core, core.end_txn(TID, 1000, 0, True, 3))
    assert core.pending_offset_partitions("g") == {("in", 2)}  # PrepareCommit: being written
    core.apply(core.complete(TID, 4))
    assert core.pending_offset_partitions("g") == set()


def test_idle_transactional_ids_expire() -> None:
    core = TransactionCoordinator()
    init(core, now=0)
    other = core.init_producer_id("busy", 60_000, -1, -1, 0, fresh_producer_id=2000)
    core.apply(other.record)
    apply(core, core.add_partitions("busy", 2000, 0, [("a", 0)], 10))
    assert core.expired_ids(999, 1_000) == []
    assert core.expired_ids(1_000, 1_000) == [TID]  # an open transaction never expires
    core.forget(TID)
    assert core.get(TID) is None and core.verify_partition(1000, 0, "a", 0) is ErrorCode.invalid_producer_id_mapping
    assert isinstance(core.init_producer_id(TID, 60_000, -1, -1, 2_000), NeedProducerId)  # a new id, as for a new transactional id
