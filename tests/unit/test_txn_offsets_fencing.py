"""A committing transaction's offsets are written conditional on its coordinator slot
(txn/transactions.Transactions._complete): with the (slot, epoch) the broker holds, and once
the store fences that write, the completion stops there (no CompleteCommit; the slot's next
holder finishes it), against the stand-ins of test_txn_completion."""

from __future__ import annotations

import asyncio
from typing import Any

from metadata import CommittedOffset, CoordinatorFenced
from metadata.transactions import COMPLETE_COMMIT, PREPARE_COMMIT, TransactionRecord

from .test_txn_completion import PID, TID, Cluster, Store, finished, quick_retries, until  # noqa: F401 (fixture)

PENDING = (("g", CommittedOffset("a", 0, 42, None, "", 600)),)


class FencingStore(Store):
    """Records each offsets write with its coordinator; refuses them while `fenced`."""

    def __init__(self, records: list[TransactionRecord]) -> None:
        super().__init__(records)
        self.fenced = False
        self.written: list[tuple[str, Any, tuple[int, int] | None]] = []

    async def commit_offsets(self, group_id: str, offsets: Any, coordinator: tuple[int, int] | None = None) -> None:
        if self.fenced:
            assert coordinator is not None
            raise CoordinatorFenced(coordinator[0], coordinator[1], coordinator[1] + 1)
        self.written.append((group_id, list(offsets), coordinator))


def preparing() -> TransactionRecord:
    return TransactionRecord(TID, PID, 0, 60_000, PREPARE_COMMIT, (("a", 0),), ("g",), PENDING, txn_start_ms=500, last_update_ms=600)


async def test_offsets_are_written_with_the_transactions_coordinator_slot() -> None:
    store = FencingStore([preparing()])
    cluster = Cluster(store, {"a": 1})
    cluster.lead("a", 0)
    txns = cluster.transactions
    try:
        assert await txns.ensure_loaded(TID)
        await until(lambda: txns.core.get(TID).state == COMPLETE_COMMIT)  # type: ignore[union-attr]
        assert store.written == [("g", [PENDING[0][1]], (0, 5))]
    finally:
        await txns.stop()


async def test_a_fenced_offsets_write_stops_the_completion() -> None:
    store = FencingStore([preparing()])
    store.fenced = True  # the slot moved on in the store; this broker's view has not caught up
    cluster = Cluster(store, {"a": 1})
    cluster.lead("a", 0)
    txns = cluster.transactions
    try:
        assert await txns.ensure_loaded(TID)
        await finished(asyncio.wait([txns._completions[TID]]))
        assert txns._completions[TID].exception() is None
        assert store.written == [] and store.puts == []
        assert txns.core.get(TID).state == PREPARE_COMMIT  # type: ignore[union-attr]
    finally:
        await txns.stop()
