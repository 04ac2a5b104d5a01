"""The transaction coordinator's completion (txn/transactions.Transactions._complete) against
stand-ins for the store and the partition leaders: a topic deleted while its transaction
prepared is skipped (the transaction still completes, not preparing for ever), a partition that
exists but has no leader is retried, and a completion started for one record never acts once
another record is current (the slot moved away and back, and the client went on)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from diskless.broker.txn import transactions as transactions_module
from diskless.broker.txn.transactions import Transactions
from metadata.transactions import COMPLETE_ABORT, COMPLETE_COMMIT, ONGOING, PREPARE_ABORT, PREPARE_COMMIT, TransactionRecord

TID, PID = "tx", 1000
DEADLINE_S = 5.0


class Store:
    def __init__(self, records: list[TransactionRecord]) -> None:
        self.records = records  # what list_transactions answers
        self.puts: list[tuple[TransactionRecord, tuple[int, int]]] = []
        self.offsets: list[str] = []

    async def list_transactions(self) -> list[TransactionRecord]:
        return list(self.records)

    async def put_transaction(self, record: TransactionRecord, coordinator: tuple[int, int]) -> None:
        self.puts.append((record, coordinator))

    async def commit_offsets(self, group_id: str, offsets: Any) -> None:
        self.offsets.append(group_id)


class Leader:
    """A partition leader: records the markers appended; `durable` gates until_durable, and
    `failures` makes the first waits fail (the marker not durable: retried)."""

    def __init__(self, markers: list[tuple[str, int, int, int, bool, int]], topic: str, index: int) -> None:
        self.markers, self.topic, self.index = markers, topic, index
        self.durable = asyncio.Event()
        self.durable.set()
        self.failures = 0
        self.offset = 0

    def append_marker(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, now_ms: int) -> int:
        self.markers.append((self.topic, self.index, producer_id, producer_epoch, commit, coordinator_epoch))
        self.offset += 1
        return self.offset

    async def until_durable(self, offset: int) -> None:
        await self.durable.wait()
        if self.failures:
            self.failures -= 1
            raise TimeoutError("not durable")


class Cluster:
    """The coordinator slot (held with an epoch, or not), the leaders and the topics."""

    def __init__(self, store: Store, topics: dict[str, int], find_topic: bool = True) -> None:
        self.epoch: int | None = 5
        self.markers: list[tuple[str, int, int, int, bool, int]] = []
        self.leaders: dict[tuple[str, int], Leader] = {}
        self.topics = topics
        self.lookups: list[str] = []
        self.leader_calls = 0
        self.transactions = Transactions(
            store, self.leader, self.allocate, lambda: 1_000,  # type: ignore[arg-type]
            lambda transactional_id: None if self.epoch is None else (0, self.epoch),
            lambda: frozenset() if self.epoch is None else frozenset({(0, self.epoch)}),
            900_000, find_topic=self.find_topic if find_topic else None,
        )  # fmt: skip

    def leader(self, topic: str, index: int) -> Leader | None:
        self.leader_calls += 1
        return self.leaders.get((topic, index))

    def lead(self, topic: str, index: int) -> Leader:
        leader = self.leaders[(topic, index)] = Leader(self.markers, topic, index)
        return leader

    async def allocate(self) -> int:
        return PID

    async def find_topic(self, name: str) -> Any:
        self.lookups.append(name)
        return None if name not in self.topics else SimpleNamespace(name=name, num_partitions=self.topics[name])


async def until(condition: Callable[[], bool]) -> None:
    async def wait() -> None:
        while not condition():
            await asyncio.sleep(0.001)

    await asyncio.wait_for(wait(), DEADLINE_S)


async def finished(work: Awaitable[Any]) -> Any:
    return await asyncio.wait_for(work, DEADLINE_S)


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transactions_module, "MARKER_RETRY_S", 0.001)


def ongoing(partitions: tuple[tuple[str, int], ...], epoch: int = 0, start_ms: int = 500) -> TransactionRecord:
    return TransactionRecord(TID, PID, epoch, 60_000, ONGOING, partitions, txn_start_ms=start_ms, last_update_ms=start_ms)


async def test_a_deleted_topics_marker_is_dropped_and_the_transaction_completes() -> None:
    store = Store([ongoing((("gone", 0), ("gone", 1), ("kept", 0), ("kept", 3)))])
    cluster = Cluster(store, {"kept": 2})  # "gone" deleted; "kept" has 2 partitions: kept-3 no longer exists either
    cluster.lead("kept", 0)
    txns = cluster.transactions
    assert await txns.ensure_loaded(TID)
    try:
        assert await finished(txns.end_txn(TID, PID, 0, commit=True)) is ErrorCode.none
        assert cluster.markers == [("kept", 0, PID, 0, True, 5)]
        assert txns.core.get(TID).state == COMPLETE_COMMIT  # type: ignore[union-attr]
        assert [r.state for r, _ in store.puts] == [PREPARE_COMMIT, COMPLETE_COMMIT]
        assert txns.stats.committed == 1
        # InitProducerId is no longer told CONCURRENT_TRANSACTIONS
        error, _, epoch = await finished(txns.init_producer_id(TID, 60_000, -1, -1))
        assert (error, epoch) == (ErrorCode.none, 1)
    finally:
        await txns.stop()


async def test_a_partition_whose_topic_exists_but_has_no_leader_is_retried() -> None:
    store = Store([ongoing((("kept", 0),))])
    cluster = Cluster(store, {"kept": 1})
    txns = cluster.transactions
    assert await txns.ensure_loaded(TID)
    try:
        ending = asyncio.ensure_future(txns.end_txn(TID, PID, 0, commit=False))
        await until(lambda: cluster.leader_calls >= 3 and len(cluster.lookups) >= 3)  # several rounds without a leader
        assert txns.core.get(TID).state == PREPARE_ABORT and cluster.markers == []  # type: ignore[union-attr]
        cluster.lead("kept", 0)
        await until(lambda: txns.core.get(TID).state == COMPLETE_ABORT)  # type: ignore[union-attr]
        assert cluster.markers == [("kept", 0, PID, 0, False, 5)]
        await finished(ending)
    finally:
        await txns.stop()


async def test_without_a_topic_lookup_nothing_is_dropped() -> None:
    store = Store([ongoing((("gone", 0),))])
    cluster = Cluster(store, {}, find_topic=False)
    txns = cluster.transactions
    assert await txns.ensure_loaded(TID)
    try:
        ending = asyncio.ensure_future(txns.end_txn(TID, PID, 0, commit=True))
        await until(lambda: cluster.leader_calls >= 5)  # rounds of retries
        assert txns.core.get(TID).state == PREPARE_COMMIT  # type: ignore[union-attr]
        ending.cancel()
    finally:
        await txns.stop()


async def test_a_completion_for_an_older_record_stops_and_the_newer_preparing_one_is_completed() -> None:
    first = TransactionRecord(TID, PID, 0, 60_000, PREPARE_COMMIT, (("a", 0),), ("g",), txn_start_ms=500, last_update_ms=600)
    store = Store([first])
    cluster = Cluster(store, {"a": 1, "b": 1})
    a = cluster.lead("a", 0)
    cluster.lead("b", 0)
    a.durable.clear()
    a.failures = 1  # the old round's marker turns out not durable: the old task would write it again
    txns = cluster.transactions
    assert await txns.ensure_loaded(TID)  # found preparing: its completion starts, and waits on a-0
    await until(lambda: len(cluster.markers) == 1)
    old = txns._completions[TID]
    # The slot goes away; another broker completes `first`; the client runs a new transaction of
    # the same producer epoch and aborts it there; the slot comes back with a new epoch.
    cluster.epoch = None
    assert not await txns.ensure_loaded(TID)
    second = TransactionRecord(TID, PID, 0, 60_000, PREPARE_ABORT, (("b", 0),), txn_start_ms=700, last_update_ms=800)
    store.records = [second]
    cluster.epoch = 6
    try:
        assert await txns.ensure_loaded(TID)
        await until(lambda: txns.core.get(TID).state == COMPLETE_ABORT)  # type: ignore[union-attr]
        a.durable.set()  # the old task, had it survived, would go on now
        await finished(asyncio.wait([old]))
        assert cluster.markers == [("a", 0, PID, 0, True, 5), ("b", 0, PID, 0, False, 6)]
        assert [(r.state, r.partitions, c) for r, c in store.puts] == [(COMPLETE_ABORT, (), (0, 6))]
        assert store.offsets == []  # `first`'s offsets are not written again by this broker
        assert (txns.stats.committed, txns.stats.aborted) == (0, 1)
    finally:
        await txns.stop()


async def test_a_completion_stops_when_its_record_is_replaced_by_one_not_preparing() -> None:
    first = TransactionRecord(TID, PID, 0, 60_000, PREPARE_COMMIT, (("a", 0),), ("g",), txn_start_ms=500, last_update_ms=600)
    store = Store([first])
    cluster = Cluster(store, {"a": 1})
    a = cluster.lead("a", 0)
    a.durable.clear()
    a.failures = 1
    txns = cluster.transactions
    assert await txns.ensure_loaded(TID)
    await until(lambda: len(cluster.markers) == 1)
    task = txns._completions[TID]
    cluster.epoch = None
    assert not await txns.ensure_loaded(TID)
    store.records = [ongoing((("a", 0),), start_ms=700)]  # completed elsewhere; a new transaction is open
    cluster.epoch = 6
    try:
        assert await txns.ensure_loaded(TID)  # nothing preparing: no new completion
        a.durable.set()
        await finished(task)  # stops by itself
        assert cluster.markers == [("a", 0, PID, 0, True, 5)]  # no marker of the old transaction with epoch 6
        assert txns.core.get(TID).state == ONGOING and store.puts == [] and store.offsets == []  # type: ignore[union-attr]
    finally:
        await txns.stop()

