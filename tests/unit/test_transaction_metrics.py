"""The transaction coordinator's gauges and counters (metrics.TransactionCoordinatorCollector)
and the admin endpoint's view of its records, from records made by hand."""

from __future__ import annotations

from diskless.broker import metrics
from diskless.broker.admin_http import transaction_states
from diskless.broker.txn.transactions import CoordinatorStats
from metadata.transactions import TransactionRecord


def samples(collector: metrics.TransactionCoordinatorCollector) -> dict[tuple[str, tuple[str, ...]], float]:
    return {(s.name, tuple(s.labels.values())): s.value for family in collector.collect() for s in family.samples}


RECORDS = [
    TransactionRecord("a", 1, 0, 60000, "Ongoing", (("t", 0),), txn_start_ms=10_000),
    TransactionRecord("b", 2, 3, 60000, "PrepareCommit", (("t", 1),), txn_start_ms=4_000),
    TransactionRecord("c", 3, 0, 60000, "CompleteAbort", txn_start_ms=1_000),
    TransactionRecord("d", 4, 0, 60000, "Empty"),
]


def test_open_transactions_their_age_states_and_counts() -> None:
    got = samples(metrics.TransactionCoordinatorCollector(RECORDS, CoordinatorStats(committed=5, aborted=2, timed_out=1), now_ms=14_500))
    assert got == {
        ("diskless_transaction_coordinator_open_transactions", ()): 2.0,
        ("diskless_transaction_coordinator_oldest_open_transaction_age_seconds", ()): 10.5,  # b began first; c, older, is complete
        ("diskless_transaction_coordinator_transactions", ("Empty",)): 1.0,
        ("diskless_transaction_coordinator_transactions", ("Ongoing",)): 1.0,
        ("diskless_transaction_coordinator_transactions", ("PrepareCommit",)): 1.0,
        ("diskless_transaction_coordinator_transactions", ("PrepareAbort",)): 0.0,
        ("diskless_transaction_coordinator_transactions", ("CompleteCommit",)): 0.0,
        ("diskless_transaction_coordinator_transactions", ("CompleteAbort",)): 1.0,
        ("diskless_transaction_coordinator_completed_total", ("committed",)): 5.0,
        ("diskless_transaction_coordinator_completed_total", ("aborted",)): 2.0,
        ("diskless_transaction_coordinator_timed_out_total", ()): 1.0,
    }


def test_no_open_transaction_is_age_zero() -> None:
    got = samples(metrics.TransactionCoordinatorCollector(RECORDS[2:], CoordinatorStats(), now_ms=14_500))
    assert got[("diskless_transaction_coordinator_open_transactions", ())] == 0.0
    assert got[("diskless_transaction_coordinator_oldest_open_transaction_age_seconds", ())] == 0.0


def test_admin_endpoint_view() -> None:
    assert transaction_states(RECORDS[:1] + RECORDS[2:], now_ms=14_500) == [
        {"transactional_id": "a", "producer_id": 1, "producer_epoch": 0, "state": "Ongoing", "timeout_ms": 60000,
         "partitions": [{"topic": "t", "partition": 0}], "groups": [], "transaction_start_ms": 10_000, "age_ms": 4_500},
        {"transactional_id": "c", "producer_id": 3, "producer_epoch": 0, "state": "CompleteAbort", "timeout_ms": 60000,
         "partitions": [], "groups": [], "transaction_start_ms": 1_000, "age_ms": None},
        {"transactional_id": "d", "producer_id": 4, "producer_epoch": 0, "state": "Empty", "timeout_ms": 60000,
         "partitions": [], "groups": [], "transaction_start_ms": None, "age_ms": None},
    ]  # fmt: skip
