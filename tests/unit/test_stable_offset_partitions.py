"""Which partitions of a group OffsetFetch with require_stable (KIP-447) answers
UNSTABLE_OFFSET_COMMIT for, from transaction records as the store holds them
(handlers/commits.pending_offset_partitions): those of open or committing transactions only."""

from __future__ import annotations

from diskless.broker.handlers.commits import pending_offset_partitions
from metadata import CommittedOffset
from metadata.transactions import COMPLETE_COMMIT, EMPTY, ONGOING, PREPARE_ABORT, PREPARE_COMMIT, TransactionRecord


def _record(transactional_id: str, state: str, *offsets: tuple[str, str, int]) -> TransactionRecord:
    pending = tuple((group, CommittedOffset(topic, partition, 10, None, "", 0)) for group, topic, partition in offsets)
    return TransactionRecord(transactional_id, 1, 0, 60_000, state, groups=tuple({g for g, _, _ in offsets}), pending_offsets=pending)


def test_open_and_committing_transactions_hold_their_partitions_of_the_group() -> None:
    records = [
        _record("a", ONGOING, ("g", "t", 0), ("other", "t", 1)),
        _record("b", PREPARE_COMMIT, ("g", "u", 2)),
    ]
    assert pending_offset_partitions(records, "g") == {("t", 0), ("u", 2)}
    assert pending_offset_partitions(records, "other") == {("t", 1)}
    assert pending_offset_partitions(records, "none") == set()


def test_aborting_and_finished_transactions_hold_nothing() -> None:
    records = [_record(str(i), state, ("g", "t", i)) for i, state in enumerate((PREPARE_ABORT, COMPLETE_COMMIT, EMPTY))]
    assert pending_offset_partitions(records, "g") == set()
