"""read_committed from the bucket alone (spark_reader/committed.py): the last stable offset
from the newest segment's producer snapshot and the write-ahead tail, the aborted
transactions from the segments' transaction indexes and that tail, and the records a task
then returns, against an in-memory bucket."""

from __future__ import annotations

import pytest

from cold_tier.errors import ObjectNotFound
from cold_tier.layout import CommittedSegment
from cold_tier.wal_format import encode_wal_object
from hot_tier.producer_snapshot import ProducerStateEntry, encode_snapshot
from hot_tier.records import Record, encode_batch
from hot_tier.records.transactions import AbortedTxn, encode_marker, encode_txn_index
from spark_reader.committed import MissingTransactionIndex, aborted_transactions, with_last_stable_offset
from spark_reader.decode import RecordBounds
from spark_reader.plan import BucketRange, PartitionLog, SegmentRef
from spark_reader.read import read_bucket_range
from spark_reader.wal import WalBatchRef, WalSlice

P1, P2, P3, PLAIN = 11, 22, 33, -1
WAL_KEY = "wal~/1/00000000000000000001-0123456789abcdef.wal"


class MemoryBucket:
    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        if key not in self.objects:
            raise ObjectNotFound(key)
        return self.objects[key][start:end]


def data(offset: int, producer_id: int) -> bytes:
    """One record at `offset`: transactional unless PLAIN."""
    transactional = producer_id != PLAIN
    batch = bytearray(encode_batch([Record(0, 1_700_000_000_000 + offset, None, b"v%d" % offset)], producer_id=producer_id,
                                   producer_epoch=0 if transactional else -1, base_sequence=offset if transactional else -1,
                                   is_transactional=transactional))  # fmt: skip
    batch[0:8] = offset.to_bytes(8, "big")
    return bytes(batch)


def marker(offset: int, producer_id: int, commit: bool) -> bytes:
    batch = bytearray(encode_marker(producer_id, 0, commit, 0, 1_700_000_000_000 + offset))
    batch[0:8] = offset.to_bytes(8, "big")
    return bytes(batch)


# The segment, offsets 0-5: P1 opens and aborts; P2 and P3 open and stay open past its end.
SEGMENT = [data(0, P1), data(1, PLAIN), marker(2, P1, False), data(3, P2), data(4, PLAIN), data(5, P3)]
# The write-ahead tail, 6-9: P3 aborts; P2 writes again, then commits.
TAIL = [marker(6, P3, False), data(7, PLAIN), data(8, P2), marker(9, P2, True)]


def partition(tail: list[bytes], *, snapshot: bool = True, txn_index: bool = True) -> tuple[MemoryBucket, PartitionLog]:
    bucket = MemoryBucket()
    log = b"".join(SEGMENT)
    segment = CommittedSegment("t", 0, 0, 5, 1_700_000_000_000, 1_700_000_000_005, len(log), 1, "0123456789abcdef")
    bucket.objects[segment.log_key] = log
    bucket.objects[segment.index_key] = b""  # sparse: no entry for so small a segment
    if txn_index:
        bucket.objects[segment.txn_index_key] = encode_txn_index([AbortedTxn(P1, 0, 2)])
    if snapshot:
        open_ones = [ProducerStateEntry(P2, 0, (), 3, 0, -1, 3), ProducerStateEntry(P3, 0, (), 5, 0, -1, 5)]
        bucket.objects[segment.producer_snapshot_key] = encode_snapshot(6, open_ones)
    bucket.objects[WAL_KEY], entries = encode_wal_object([("t", 0, offset, offset, 1, batch) for offset, batch in enumerate(tail, start=6)])
    refs = tuple(WalBatchRef(e.base_offset, e.last_offset, e.position, e.size_bytes) for e in entries)
    wal = (WalSlice(WAL_KEY, refs),) if refs else ()
    return bucket, PartitionLog("t", 0, (segment,), wal=wal)


def read_offsets(bucket: MemoryBucket, log: PartitionLog, start: int, end: int) -> list[int]:
    pieces = (SegmentRef(0, 5, len(b"".join(SEGMENT)), "0123456789abcdef", 1_700_000_000_005), *log.wal)
    task = BucketRange("t", 0, start, end, pieces, aborted_transactions(bucket, log, start, end))
    batches = read_bucket_range(bucket, task, RecordBounds(), include_headers=False, fail_on_data_loss=True)
    return [offset for batch in batches for offset in batch.column("offset").to_pylist()]


def test_every_transaction_ended_the_last_stable_offset_is_the_end() -> None:
    bucket, log = partition(TAIL)
    log = with_last_stable_offset(bucket, log)
    assert (log.last_stable_offset, log.latest) == (10, 10)
    assert log.folded_aborted == (AbortedTxn(P3, 5, 6),)  # began in the segment, the snapshot said
    assert aborted_transactions(bucket, log, 0, 10) == (AbortedTxn(P1, 0, 2), AbortedTxn(P3, 5, 6))
    assert aborted_transactions(bucket, log, 3, 10) == (AbortedTxn(P3, 5, 6),)  # P1's ended before
    # Control records never, aborted transactions' records not, P2's committed ones yes.
    assert read_offsets(bucket, log, 0, 10) == [1, 3, 4, 7, 8]
    assert read_offsets(bucket, log, 5, 10) == [7, 8]


def test_an_open_transaction_holds_the_last_stable_offset_at_its_first_offset() -> None:
    bucket, log = partition(TAIL[:3])  # P2 has not committed yet
    log = with_last_stable_offset(bucket, log)
    assert log.last_stable_offset == 3
    assert aborted_transactions(bucket, log, 0, 3) == (AbortedTxn(P1, 0, 2),)
    assert read_offsets(bucket, log, 0, 3) == [1]
    bucket, log = partition([])  # nothing above the segment: both still open, per its snapshot
    assert with_last_stable_offset(bucket, log).last_stable_offset == 3


def test_without_a_producer_snapshot_the_segment_itself_is_folded() -> None:
    bucket, log = partition(TAIL[:3], snapshot=False)
    log = with_last_stable_offset(bucket, log)
    assert log.last_stable_offset == 3
    assert log.folded_aborted == (AbortedTxn(P1, 0, 2), AbortedTxn(P3, 5, 6))


def test_a_segment_without_a_transaction_index_is_refused_naming_it() -> None:
    bucket, log = partition(TAIL, txn_index=False)
    log = with_last_stable_offset(bucket, log)
    with pytest.raises(MissingTransactionIndex) as missing:
        aborted_transactions(bucket, log, 0, 10)
    assert missing.value.key == log.segments[0].txn_index_key
    assert "read it with kafka.isolation.level=read_uncommitted" in str(missing.value)


def test_a_stream_reads_committed_up_to_the_last_stable_offset(tmp_path) -> None:
    """The streaming reader's triggers: latest is the last stable offset, and each planned
    range carries the aborted transactions it must skip."""
    pytest.importorskip("pyspark")
    from pyspark.sql.datasource import ReadAllAvailable

    from spark_reader.options import parse_options
    from spark_reader.stream import DisklessStreamReader

    bucket, log = partition(TAIL[:3])  # P2 still open from offset 3
    for key, value in bucket.objects.items():
        (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / key).write_bytes(value)
    (tmp_path / log.segments[0].commit_key).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / log.segments[0].commit_key).write_bytes(b"")
    reader = DisklessStreamReader(parse_options(
        {"path": f"file://{tmp_path}", "subscribe": "t", "startingOffsets": "earliest", "kafka.isolation.level": "read_committed"},
        streaming=True,
    ))  # fmt: skip
    start = reader.initialOffset()
    assert start == {"t": {"0": 0}}
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {"t": {"0": 3}}
    (task,) = [p.value for p in reader.partitions(start, end)]
    assert (task.start_offset, task.end_offset, task.aborted) == (0, 3, (AbortedTxn(P1, 0, 2),))


def two_segments(tail: list[bytes], newest_snapshot_at: int) -> tuple[MemoryBucket, PartitionLog]:
    """SEGMENT split in two, 0-3 and 4-5, each with a producer snapshot: the first at its end
    (4: P2 open from 3), the newest at `newest_snapshot_at`, at or after its end (6), as the
    broker uploads the first snapshot it has there; then `tail` from 6."""
    bucket = MemoryBucket()
    segments = []
    for base, last, snapshot_at in ((0, 3, 4), (4, 5, newest_snapshot_at)):
        log = b"".join(SEGMENT[base : last + 1])
        segment = CommittedSegment("t", 0, base, last, 1_700_000_000_000 + base, 1_700_000_000_000 + last, len(log), 1, f"{base:016x}")
        bucket.objects[segment.log_key] = log
        bucket.objects[segment.index_key] = b""
        bucket.objects[segment.txn_index_key] = encode_txn_index([AbortedTxn(P1, 0, 2)] if base == 0 else [])
        # Open at the snapshot's offset: P2 until its commit at 9, P3 (from 5) until its abort at 6.
        open_ones = [ProducerStateEntry(P2, 0, (), 3, 0, -1, 3)] if snapshot_at <= 9 else []
        open_ones += [ProducerStateEntry(P3, 0, (), 5, 0, -1, 5)] if 5 < snapshot_at <= 6 else []
        bucket.objects[segment.producer_snapshot_key] = encode_snapshot(snapshot_at, open_ones)
        segments.append(segment)
    bucket.objects[WAL_KEY], entries = encode_wal_object([("t", 0, offset, offset, 1, batch) for offset, batch in enumerate(tail, start=6)])
    refs = tuple(WalBatchRef(e.base_offset, e.last_offset, e.position, e.size_bytes) for e in entries)
    return bucket, PartitionLog("t", 0, tuple(segments), wal=(WalSlice(WAL_KEY, refs),) if refs else ())


def read_all(bucket: MemoryBucket, log: PartitionLog, start: int, end: int) -> list[int]:
    pieces = (*(SegmentRef(s.base_offset, s.last_offset, s.size_bytes, s.upload_id, s.max_timestamp) for s in log.segments), *log.wal)
    task = BucketRange("t", 0, start, end, pieces, aborted_transactions(bucket, log, start, end))
    return [o for b in read_bucket_range(bucket, task, RecordBounds(), False, True) for o in b.column("offset").to_pylist()]


def test_an_abort_between_the_segments_end_and_a_later_snapshot_is_folded() -> None:
    """The newest snapshot is at 8, after P3's abort marker at 6 (above the segments' end, 6, so
    in no .txnindex): folding from the snapshot's offset missed it and returned P3's record 5."""
    bucket, log = two_segments(TAIL, newest_snapshot_at=8)
    log = with_last_stable_offset(bucket, log)
    assert read_all(bucket, log, 0, 10) == [1, 3, 4, 7, 8]
    assert log.last_stable_offset == 10 and AbortedTxn(P3, 5, 6) in log.folded_aborted
    # P2, open at the segments' end, still holds the last stable offset before its commit:
    # known from the older snapshot at 4, not from its first batch the fold meets (8).
    bucket, log = two_segments(TAIL[:3], newest_snapshot_at=8)
    assert with_last_stable_offset(bucket, log).last_stable_offset == 3
    # The newest snapshot exactly at the segments' end is used as it is.
    bucket, log = two_segments(TAIL, newest_snapshot_at=6)
    log = with_last_stable_offset(bucket, log)
    assert (log.last_stable_offset, log.folded_aborted) == (10, (AbortedTxn(P3, 5, 6),))
    assert read_all(bucket, log, 0, 10) == [1, 3, 4, 7, 8]
