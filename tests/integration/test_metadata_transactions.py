"""The transaction coordinator's rows in the metadata store (metadata/transactions.py), one
scenario on every backend: written whole, read back exactly, replaced, deleted."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from metadata import CommittedOffset, MetadataStore, open_metadata_store, sqlite_url
from metadata.transactions import COMPLETE_COMMIT, ONGOING, PREPARE_COMMIT, TransactionRecord


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MetadataStore]:
    url = request.getfixturevalue("postgres_database") if request.param == "postgresql" else sqlite_url(tmp_path / "m.db")
    opened = await open_metadata_store(url)
    yield opened
    await opened.close()


async def test_transactions_round_trip(store: MetadataStore) -> None:
    assert await store.list_transactions() == []
    ongoing = TransactionRecord(
        "tx-b", 4000, 3, 60_000, ONGOING,
        partitions=(("orders", 0), ("orders", 2), ("payments", 1)),
        groups=("g1",),
        pending_offsets=(("g1", CommittedOffset("in", 0, 42, 7, "meta\x00", 1_700_000_000_123)), ("g1", CommittedOffset("in", 1, 9, None, "", 5))),
        txn_start_ms=1_700_000_000_000, last_update_ms=1_700_000_000_100,
    )  # fmt: skip
    other = TransactionRecord("tx-a", 4001, 0, 900_000, COMPLETE_COMMIT, last_update_ms=1)
    await store.put_transaction(ongoing)
    await store.put_transaction(other)
    assert await store.list_transactions() == [other, ongoing]
    preparing = TransactionRecord(
        "tx-b", 4000, 3, 60_000, PREPARE_COMMIT, ongoing.partitions, ongoing.groups, ongoing.pending_offsets, ongoing.txn_start_ms, 2
    )
    await store.put_transaction(preparing)
    assert await store.list_transactions() == [other, preparing]
    await store.delete_transaction("tx-a")
    await store.delete_transaction("unknown")
    assert await store.list_transactions() == [preparing]


async def test_a_coordinator_writes_only_at_its_slots_epoch(store: MetadataStore) -> None:
    from metadata import CoordinatorFenced

    await store.create_coordinator_slots(4)
    assert await store.set_coordinator_slots([(2, 1, 0)]) == [1]  # broker 1 holds slot 2 at epoch 1
    first = TransactionRecord("tx", 5000, 0, 60_000, ONGOING, partitions=(("orders", 0),), txn_start_ms=1, last_update_ms=1)
    await store.put_transaction(first, (2, 1))
    assert await store.set_coordinator_slots([(2, 7, 1)]) == [2]  # the slot moves to broker 7
    late = TransactionRecord("tx", 5000, 0, 60_000, PREPARE_COMMIT, first.partitions, txn_start_ms=1, last_update_ms=2)
    with pytest.raises(CoordinatorFenced) as fenced:
        await store.put_transaction(late, (2, 1))  # the old holder, not told yet
    assert (fenced.value.slot, fenced.value.expected_epoch, fenced.value.found_epoch) == (2, 1, 2)
    with pytest.raises(CoordinatorFenced):
        await store.delete_transaction("tx", (2, 1))
    assert await store.list_transactions() == [first]  # nothing of the stale holder landed
    await store.put_transaction(late, (2, 2))  # the new holder writes
    assert await store.list_transactions() == [late]
    with pytest.raises(CoordinatorFenced):
        await store.put_transaction(late, (9, 0))  # no such slot


async def test_states_put_at_once_are_each_written_or_each_fenced(store: MetadataStore) -> None:
    """Many coordinators' writes at once (SQLite commits them together): each lands, except
    the one whose slot moved on, which alone is refused; the same id twice keeps the later."""
    import asyncio

    from metadata import CoordinatorFenced

    await store.create_coordinator_slots(4)
    assert await store.set_coordinator_slots([(0, 1, 0), (1, 1, 0)]) == [1, 1]
    assert await store.set_coordinator_slots([(1, 2, 1)]) == [2]  # slot 1 moved to broker 2
    records = [
        TransactionRecord(f"tx-{i:02d}", 6000 + i, 0, 60_000, ONGOING, partitions=(("orders", i),), txn_start_ms=1, last_update_ms=1)
        for i in range(20)
    ]
    stale = TransactionRecord("tx-stale", 7000, 0, 60_000, ONGOING, txn_start_ms=1, last_update_ms=1)
    again = TransactionRecord("tx-00", 6000, 0, 60_000, PREPARE_COMMIT, (("orders", 0),), txn_start_ms=1, last_update_ms=2)
    results = await asyncio.gather(
        *(store.put_transaction(r, (0, 1)) for r in records), store.put_transaction(stale, (1, 1)), return_exceptions=True
    )
    assert results[:20] == [None] * 20
    assert isinstance(results[20], CoordinatorFenced) and (results[20].slot, results[20].found_epoch) == (1, 2)
    await store.put_transaction(again, (0, 1))
    assert await store.list_transactions() == [again, *records[1:]]


async def test_pending_offset_transactions_of_a_group(store: MetadataStore) -> None:
    """Only rows not idle holding an offset of exactly the group: Ongoing, PrepareCommit,
    PrepareAbort and PrepareEpochFence are read; Empty, CompleteCommit, CompleteAbort and Dead
    are not, even with offsets (which the coordinator never leaves on them); a group whose
    name is a topic's, another group's prefix, or added with no offset committed yet is no match."""
    from metadata.transactions import COMPLETE_ABORT, DEAD, EMPTY, PREPARE_ABORT, PREPARE_EPOCH_FENCE

    def record(transactional_id: str, state: str, *offsets: tuple[str, str, int], groups: tuple[str, ...] = ()) -> TransactionRecord:
        pending = tuple((g, CommittedOffset(topic, partition, 10, None, "", 1)) for g, topic, partition in offsets)
        return TransactionRecord(
            transactional_id, 8000 + len(transactional_id), 0, 60_000, state,
            partitions=tuple(sorted({(t, p) for _, t, p in offsets})),
            groups=tuple(sorted({g for g, _, _ in offsets} | set(groups))),
            pending_offsets=pending, txn_start_ms=1, last_update_ms=1,
        )  # fmt: skip

    group = 'g"1'  # a quote: the JSON text holds it escaped
    records = [
        record("ongoing", ONGOING, (group, "in", 0), ("other", "in", 1)),
        record("ongoing-other-group", ONGOING, ("other", "in", 2)),
        record("ongoing-group-named-as-topic", ONGOING, ("other", group, 0)),
        record("ongoing-group-prefixed", ONGOING, (group + "x", "in", 3), ("x" + group, "in", 4)),
        record("ongoing-no-offset-yet", ONGOING, groups=(group,)),
        record("prepare-commit", PREPARE_COMMIT, (group, "in", 5)),
        record("prepare-abort", PREPARE_ABORT, (group, "in", 6)),
        record("prepare-epoch-fence", PREPARE_EPOCH_FENCE, (group, "in", 7)),
        *(record(state, state, (group, "in", 8)) for state in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT, DEAD)),
    ]
    for r in records:
        await store.put_transaction(r)
    by_id = {r.transactional_id: r for r in records}
    wanted = ["ongoing", "prepare-abort", "prepare-commit", "prepare-epoch-fence"]
    assert await store.list_pending_offset_transactions(group) == [by_id[t] for t in wanted]
    assert [r.transactional_id for r in await store.list_pending_offset_transactions("other")] == [
        "ongoing", "ongoing-group-named-as-topic", "ongoing-other-group"
    ]
    assert await store.list_pending_offset_transactions("g") == []
    assert await store.list_pending_offset_transactions("in") == []
    await store.put_transaction(replace(by_id["prepare-commit"], state=COMPLETE_COMMIT, pending_offsets=()))
    wanted.remove("prepare-commit")
    assert [r.transactional_id for r in await store.list_pending_offset_transactions(group)] == wanted
    assert len(await store.list_transactions()) == len(records)  # every other caller still sees all


async def test_aborted_transactions_per_partition(store: MetadataStore) -> None:
    from metadata import FencedLeaderEpoch

    await store.create_topic("orders", 2, {})
    assert await store.list_aborted_transactions("orders", 0) == []
    await store.put_aborted_transactions("orders", 0, [(7, 10, 15), (8, 12, 20)], delete_below=0, leader_epoch=0)
    await store.put_aborted_transactions("orders", 1, [(9, 0, 3)], delete_below=0, leader_epoch=0)
    await store.put_aborted_transactions("orders", 0, [(8, 12, 20), (7, 30, 31)], delete_below=16, leader_epoch=0)
    assert await store.list_aborted_transactions("orders", 0) == [(8, 12, 20), (7, 30, 31)]
    assert await store.list_aborted_transactions("orders", 1) == [(9, 0, 3)]
    await store.bump_leader_epoch("orders", 0)
    with pytest.raises(FencedLeaderEpoch):
        await store.put_aborted_transactions("orders", 0, [(1, 40, 41)], delete_below=0, leader_epoch=0)
    await store.delete_topic("orders")
    await store.create_topic("orders", 1, {})
    assert await store.list_aborted_transactions("orders", 0) == []
