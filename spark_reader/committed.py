"""read_committed from the bucket alone (kafka.isolation.level=read_committed): a partition's
last stable offset and the aborted transactions a range must skip, as a read_committed Kafka
consumer gets them from its broker (ListOffsets, and each Fetch's aborted transactions).

What the bucket holds for it (cold_tier/layout.py):
- each committed segment's `.txnindex`: the transactions whose abort marker it holds;
- its `.snapshot`: the producer state at its end, among it each producer's open transaction
  (its first offset), when the broker had one to give.

The last stable offset is found by folding, with hot_tier/records/transactions.py's
`PartitionTxns`, the batch headers from the newest segment snapshot at or below the segments'
end E (the write-ahead tail, and any segment uploaded without a usable snapshot) onto the open
transactions that snapshot names: the first offset of the oldest transaction still open, else
the bucket's log end offset. The fold must start at or below E: an abort marker at or above E
is in no `.txnindex`, so only the fold finds it. A snapshot above E (the broker uploads the
first one it has at or after a segment's end) does not do: a transaction open at E whose
marker lies between E and it is in neither its open transactions nor the fold, and its
records below E would be read committed. An older segment's snapshot is taken instead, and
the segments above it are folded whole (a rare case: a snapshot at the roll failed).
Aborted transactions are the `.txnindex` entries of every segment from the range's start on
(an abort marker may lie beyond the range, even beyond the last stable offset) plus the aborts
the fold met. A transactional batch is then skipped when one of its producer's aborted
transactions spans it (`AbortedRanges`); control batches are never returned.

Requests, per partition read: one GET of the newest `.snapshot` (more while segments have
none, or one above the segments' end), the tail's batches (one ranged GET per write-ahead
slice), and one small GET of `.txnindex` per segment from the start offset on, in parallel.
A segment uploaded before transaction indexes existed has none: `MissingTransactionIndex`
says so, rather than returning its aborted records. Runs on the driver (planning).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from cold_tier.errors import ObjectNotFound
from cold_tier.layout import CommittedSegment
from hot_tier.producer_snapshot import decode_snapshot
from hot_tier.records import read_header
from hot_tier.records.header import BatchHeader, iter_headers
from hot_tier.records.transactions import AbortedTxn, PartitionTxns, decode_txn_index

from .bucket import Bucket
from .errors import SparkReaderError
from .plan import PartitionLog
from .wal import WalSlice

MAX_PARALLEL_GETS = 16


class MissingTransactionIndex(SparkReaderError):
    def __init__(self, key: str) -> None:
        super().__init__(
            f"segment object {key!r} is missing: the segment was uploaded before transaction indexes were written, "
            "so read_committed cannot tell its aborted records; read it with kafka.isolation.level=read_uncommitted"
        )
        self.key = key


def with_last_stable_offset(bucket: Bucket, log: PartitionLog) -> PartitionLog:
    """`log` with its last stable offset and the aborts met folding from the newest snapshot at
    or below the segments' end (unchanged if the bucket holds nothing of the partition)."""
    end = log.bucket_log_end_offset
    if end is None:
        return log
    segments_end = log.segments_end_offset
    txns = PartitionTxns()
    folded_from = log.earliest if log.earliest is not None else 0
    for segment in reversed(log.segments):
        try:
            data = bucket.get(segment.producer_snapshot_key)
        except ObjectNotFound:
            continue
        snapshot_offset, entries = decode_snapshot(data)
        if segments_end is not None and snapshot_offset > segments_end:
            continue  # taken above the segments' end: see the module header
        folded_from = snapshot_offset
        txns.seed_ongoing((e.producer_id, e.current_txn_first_offset) for e in entries if e.current_txn_first_offset >= 0)
        break
    txns.rebuild(_batches_from(bucket, log, folded_from), end)
    return replace(log, last_stable_offset=txns.last_stable_offset(end), folded_aborted=tuple(txns.aborted_between(0, end)))


def aborted_transactions(bucket: Bucket, log: PartitionLog, start: int, end: int) -> tuple[AbortedTxn, ...]:
    """The aborted transactions a read of [start, end) of `log` (`with_last_stable_offset`)
    must skip: those ending at or after `start` and starting before `end`, by marker offset."""
    segments = [s for s in log.segments if s.next_offset > start]
    found = {a.last_offset: a for a in log.folded_aborted}
    with ThreadPoolExecutor(max_workers=max(1, min(MAX_PARALLEL_GETS, len(segments)))) as pool:
        for entries in pool.map(lambda s: _txn_index(bucket, s), segments):
            found.update((a.last_offset, a) for a in entries)
    return tuple(a for _, a in sorted(found.items()) if a.last_offset >= start and a.first_offset < end)


def _txn_index(bucket: Bucket, segment: CommittedSegment) -> list[AbortedTxn]:
    try:
        return decode_txn_index(bucket.get(segment.txn_index_key))
    except ObjectNotFound:
        try:
            bucket.get(segment.log_key, 0, 1)
        except ObjectNotFound:
            return []  # the whole segment went (retention): the reader reports that, not this
        raise MissingTransactionIndex(segment.txn_index_key) from None


def _batches_from(bucket: Bucket, log: PartitionLog, offset: int) -> Iterator[tuple[BatchHeader, memoryview]]:
    """(header, bytes) of every batch at or above `offset`: from the segments that reach it
    (whole objects; only segments uploaded without a snapshot), then the write-ahead tail."""
    for piece in (*log.segments, *log.wal):
        if piece.next_offset <= offset:
            continue
        if isinstance(piece, WalSlice):
            start = piece.start_position
            data = memoryview(bucket.get(piece.key, start, piece.end_position))
            for ref in piece.batches:
                if ref.base_offset >= max(offset, piece.base_offset):  # not a straddling batch's (wal.py rule 1)
                    batch = data[ref.position - start : ref.position - start + ref.size_bytes]
                    yield read_header(batch, 0), batch
            continue
        data = memoryview(bucket.get(piece.log_key))
        for header in iter_headers(data, check_crc=False):
            if header.base_offset >= offset:
                yield header, data  # the header's position is in the whole object
