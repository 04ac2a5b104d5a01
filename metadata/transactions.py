"""Transaction coordinator state as the metadata store keeps it (Kafka's TransactionMetadata,
one row per transactional id, the content of a `__transaction_state` record).

A row is written by the transaction coordinator before it acts on a transition: the state
`PrepareCommit` / `PrepareAbort` is durable before the first marker is written, so a
coordinator that restarts (or takes over) finishes the transaction it finds preparing. The
partitions and the offsets committed in the transaction (TxnOffsetCommit, applied to the
group's committed offsets when the transaction commits) travel with the row.

The `offsets` column holds JSON {"groups": [...], "offsets": [...], "last_producer_epoch": n};
a row written before `last_producer_epoch` was kept has none, read as -1 (no previous epoch),
and a reader that does not know the key ignores it, so no schema version is needed for it.

Rows are keyed on the transactional id; partitions are named by topic name (a deleted topic's
markers are skipped by the coordinator).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from .model import CommittedOffset

# Kafka's TransactionState names (DescribeTransactions answers them).
EMPTY = "Empty"
ONGOING = "Ongoing"
PREPARE_COMMIT = "PrepareCommit"
PREPARE_ABORT = "PrepareAbort"
COMPLETE_COMMIT = "CompleteCommit"
COMPLETE_ABORT = "CompleteAbort"
DEAD = "Dead"
PREPARE_EPOCH_FENCE = "PrepareEpochFence"
TRANSACTION_STATES = (EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT, DEAD, PREPARE_EPOCH_FENCE)


@dataclass(frozen=True, slots=True)
class TransactionRecord:
    """One transactional id's state. `partitions` are (topic, partition), sorted; `groups`
    the consumer groups added with AddOffsetsToTxn; `pending_offsets` (group id, offset)
    pairs written by TxnOffsetCommit, visible once the transaction commits.
    `txn_start_ms` is the last transaction's start, -1 before the first one.
    `last_producer_epoch` is Kafka's lastProducerEpoch (KIP-360): the epoch a producer held
    before it bumped its own epoch with InitProducerId naming it, so that a retry of that
    request (its answer lost) gets the current epoch instead of PRODUCER_FENCED; -1 when the
    last bump fenced a producer (a new InitProducerId, a timeout) or there was none. Kafka
    keeps it in memory only; it is persisted here, so a coordinator move keeps it."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: str
    partitions: tuple[tuple[str, int], ...] = ()
    groups: tuple[str, ...] = ()
    pending_offsets: tuple[tuple[str, CommittedOffset], ...] = ()
    txn_start_ms: int = -1
    last_update_ms: int = -1
    last_producer_epoch: int = -1

    def encode_partitions(self) -> str:
        return json.dumps([list(p) for p in self.partitions])

    def encode_offsets(self) -> str:
        return json.dumps({
            "groups": list(self.groups),
            "offsets": [
                [g, o.topic, o.partition, o.offset, o.leader_epoch, o.metadata, o.commit_timestamp_ms]
                for g, o in self.pending_offsets
            ],
            "last_producer_epoch": self.last_producer_epoch,
        })

    @classmethod
    def decode(cls, row: tuple) -> TransactionRecord:  # type: ignore[type-arg]
        """From (transactional_id, producer_id, producer_epoch, timeout_ms, state, partitions
        JSON, offsets JSON, txn_start_ms, last_update_ms)."""
        tid, pid, epoch, timeout_ms, state, partitions, offsets, start_ms, update_ms = row
        parsed = json.loads(offsets)
        return cls(
            tid, pid, epoch, timeout_ms, state,
            tuple((t, p) for t, p in json.loads(partitions)),
            tuple(parsed["groups"]),
            tuple((g, CommittedOffset(t, p, o, e, m, ts)) for g, t, p, o, e, m, ts in parsed["offsets"]),
            start_ms, update_ms, parsed.get("last_producer_epoch", -1),
        )  # fmt: skip

    def row(self) -> tuple:  # type: ignore[type-arg]
        return (
            self.transactional_id, self.producer_id, self.producer_epoch, self.timeout_ms, self.state,
            self.encode_partitions(), self.encode_offsets(), self.txn_start_ms, self.last_update_ms,
        )  # fmt: skip


COLUMNS = "transactional_id, producer_id, producer_epoch, timeout_ms, state, partitions, offsets, txn_start_ms, last_update_ms"
