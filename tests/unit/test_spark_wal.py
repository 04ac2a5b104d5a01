"""The write-ahead tail as Spark's reader decides it from the bucket alone (spark_reader/wal.py),
and the reading of write-ahead objects (wal_read.py) against an in-memory bucket."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from cold_tier.errors import ObjectNotFound
from cold_tier.layout import CommittedSegment, epoch_key, parse_epoch_key, topic_id_key
from cold_tier.wal_format import WalEntry, encode_wal_object, wal_object_key
from hot_tier.records import Record, encode_batch
from spark_reader.decode import RecordBounds
from spark_reader.errors import CorruptWriteAheadObject
from spark_reader.plan import BucketRange, PartitionLog, plan_tasks, split_ranges
from spark_reader.read import read_bucket_range
from spark_reader.wal import WalCandidate, WalSlice, resolve_wal_tail
from spark_reader.wal_read import list_epoch_marks, list_wal_candidates, read_topic_id, read_wal_slice

UPLOAD = "0123456789abcdef"


def candidate(base: int, last: int, epoch: int = 0, sealed_ms: int = 1, key: str | None = None, position: int = 0) -> WalCandidate:
    key = key or wal_object_key(1, sealed_ms, UPLOAD)
    return WalCandidate(key, sealed_ms, UPLOAD, WalEntry("t", 0, base, last, epoch, position, 10))


def offsets(slices: tuple[WalSlice, ...]) -> list[tuple[int, int]]:
    return [(b.base_offset, b.last_offset) for s in slices for b in s.batches]


def test_the_tail_starts_at_the_segments_end_and_stops_at_the_first_gap() -> None:
    found = [candidate(0, 9), candidate(10, 19, sealed_ms=2), candidate(20, 24, sealed_ms=3), candidate(30, 39, sealed_ms=4)]
    assert offsets(resolve_wal_tail(found, None)) == [(0, 9), (10, 19), (20, 24)]
    assert offsets(resolve_wal_tail(found, 10)) == [(10, 19), (20, 24)]
    assert offsets(resolve_wal_tail(found, 15)) == [(10, 19), (20, 24)]  # straddles: read from 15
    assert offsets(resolve_wal_tail(found, 25)) == []
    assert resolve_wal_tail([], 0) == ()


def test_a_higher_epoch_truncates_what_a_fenced_leader_wrote() -> None:
    fenced = [candidate(0, 9, epoch=5), candidate(10, 19, epoch=5), candidate(20, 29, epoch=5), candidate(30, 39, epoch=5)]
    newer = [candidate(10, 14, epoch=6, sealed_ms=0), candidate(15, 21, epoch=6, sealed_ms=0)]  # an older clock: epochs decide
    assert offsets(resolve_wal_tail(fenced + newer, None)) == [(0, 9), (10, 14), (15, 21)]
    # The epoch-5 batch at 30 does not follow on, although nothing of epoch 6 overlaps it.
    aligned = [candidate(10, 19, epoch=6, sealed_ms=0), candidate(20, 29, epoch=6, sealed_ms=0)]
    assert offsets(resolve_wal_tail(fenced + aligned, None)) == [(0, 9), (10, 19), (20, 29)]


def test_an_epoch_mark_truncates_a_fenced_leaders_batches_before_the_new_leader_writes() -> None:
    # Epoch 5's leader wrote 10-39 and was fenced; epoch 6's leader took the partition with the
    # durable log ending at 10 and has written nothing yet: its mark alone leaves 10-39 out.
    fenced = [candidate(0, 9, epoch=5), candidate(10, 19, epoch=5), candidate(20, 29, epoch=5)]
    assert offsets(resolve_wal_tail(fenced, None)) == [(0, 9), (10, 19), (20, 29)]
    assert offsets(resolve_wal_tail(fenced, None, {6: 10})) == [(0, 9)]
    assert offsets(resolve_wal_tail(fenced, 10, {6: 10})) == []
    # A mark of a lower epoch, or of the same one, truncates nothing of epoch 5.
    assert offsets(resolve_wal_tail(fenced, None, {4: 0, 5: 0})) == [(0, 9), (10, 19), (20, 29)]
    # Its batches then follow on from the mark.
    assert offsets(resolve_wal_tail([*fenced, candidate(10, 12, epoch=6, sealed_ms=0)], None, {6: 10})) == [(0, 9), (10, 12)]


def test_batches_of_a_deleted_topic_of_the_same_name_are_left_out() -> None:
    old, new = uuid.UUID(int=7), uuid.UUID(int=8)

    def of(topic_id, base, last, sealed_ms):
        c = candidate(base, last, sealed_ms=sealed_ms)
        return WalCandidate(c.key, c.sealed_ms, c.upload_id, dataclasses.replace(c.entry, topic_id=topic_id))

    # The deleted topic wrote 0-29; the one made again under its name has written 0-9 so far.
    found = [of(old, 0, 9, 1), of(old, 10, 19, 1), of(old, 20, 29, 1), of(new, 0, 4, 5), of(new, 5, 9, 5)]
    assert offsets(resolve_wal_tail(found, None)) == [(0, 4), (5, 9), (10, 19), (20, 29)]  # what a reader without ids took
    assert offsets(resolve_wal_tail(found, None, topic_id=new)) == [(0, 4), (5, 9)]
    # Entries without an id (objects from before topic ids) are taken as they are.
    assert offsets(resolve_wal_tail([candidate(0, 9), of(new, 10, 19, 2)], None, topic_id=new)) == [(0, 9), (10, 19)]
    bucket = MemoryBucket({topic_id_key("t"): str(new).encode()})
    assert (read_topic_id(bucket, "t"), read_topic_id(bucket, "u")) == (new, None)


def test_epoch_marks_are_listed_per_partition_for_the_topic_that_has_the_name() -> None:
    now, deleted = uuid.UUID(int=8), uuid.UUID(int=7)
    bucket = MemoryBucket({
        epoch_key("t", 0, 6, 10, now): b"", epoch_key("t", 0, 9, 250, now): b"", epoch_key("t", 1, 7, 3, now): b"",
        epoch_key("t", 0, 12, 0, deleted): b"",  # a deleted topic's, landed after the sweep
        "t/0/epochs/not-a-mark": b"", "t/0/commits/x": b"",
    })  # fmt: skip
    assert list_epoch_marks(bucket, "t", 0, now) == {6: 10, 9: 250}
    assert list_epoch_marks(bucket, "t", 0) == {6: 10, 9: 250, 12: 0}  # the topic's id unknown: every mark
    assert list_epoch_marks(bucket, "t", 2, now) == {}
    key = epoch_key("t", 0, 6, 10, now)
    assert key == "t/0/epochs/0000000006-00000000000000000010-00000000000000000000000000000008.epoch"
    assert parse_epoch_key(key) == (6, 10, now)


def test_within_an_epoch_the_later_object_wins_shared_offsets() -> None:
    first = [candidate(0, 9, sealed_ms=1), candidate(10, 19, sealed_ms=1)]
    again = [candidate(0, 4, sealed_ms=2), candidate(5, 12, sealed_ms=2)]
    tail = resolve_wal_tail(first + again, None)
    assert offsets(tail) == [(0, 4), (5, 12)]  # 13-19 only in an overlapping loser: the tail ends
    # A resubmitted identical tail: one copy of each offset.
    assert offsets(resolve_wal_tail(first + [candidate(0, 9, sealed_ms=3), candidate(10, 19, sealed_ms=3)], None)) == [(0, 9), (10, 19)]


def test_consecutive_batches_of_one_object_make_one_slice() -> None:
    a, b = wal_object_key(1, 1, UPLOAD), wal_object_key(2, 2, UPLOAD)
    found = [candidate(0, 9, key=a, position=0), candidate(10, 19, key=a, position=30), candidate(20, 29, key=b, sealed_ms=2)]
    tail = resolve_wal_tail(found, None)
    assert [(s.key, s.base_offset, s.next_offset, s.start_position, s.end_position) for s in tail] == [(a, 0, 20, 0, 40), (b, 20, 30, 0, 10)]


def test_plan_reads_segments_then_the_tail_and_latest_is_its_end() -> None:
    segment = CommittedSegment("t", 0, 0, 99, 0, 1000, 1000, 0, "u1")
    tail = resolve_wal_tail([candidate(100, 149), candidate(150, 159, sealed_ms=2)], 100)
    log = PartitionLog("t", 0, (segment,), wal=tail)
    assert (log.earliest, log.latest) == (0, 160)
    runs, broker = plan_tasks(log, 50, 160, RecordBounds(), True)
    assert broker is None
    assert [(s, e, [type(p).__name__ for p in pieces]) for s, e, pieces in runs] == [(50, 160, ["SegmentRef", "WalSlice", "WalSlice"])]
    only_wal = PartitionLog("t", 0, (), wal=resolve_wal_tail([candidate(0, 9)], None))
    assert (only_wal.earliest, only_wal.latest) == (0, 10)


class MemoryBucket:
    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects = objects

    def list_sizes(self, directory: str) -> list[tuple[str, int]]:
        return sorted((k, len(v)) for k, v in self.objects.items() if k.startswith(directory))

    def list_keys(self, directory: str) -> list[str]:
        return [k for k, _ in self.list_sizes(directory)]

    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        if key not in self.objects:
            raise ObjectNotFound(key)
        return self.objects[key][start:end]


def batch(base: int, count: int, prefix: str = "v", first_timestamp_ms: int | None = None) -> bytes:
    first_timestamp_ms = 1_700_000_000_000 + base if first_timestamp_ms is None else first_timestamp_ms
    data = bytearray(encode_batch([Record(i, first_timestamp_ms + i, None, f"{prefix}{base + i}".encode()) for i in range(count)]))
    data[0:8] = base.to_bytes(8, "big")  # the broker writes the base offset; the CRC does not cover it
    return bytes(data)


def wal_object(*batches: tuple[str, int, int, int]) -> bytes:
    data, _ = encode_wal_object([(topic, partition, base, base + count - 1, 0, batch(base, count)) for topic, partition, base, count in batches])
    return data


def test_objects_are_read_back_exactly_and_corruption_names_the_object_and_offset() -> None:
    first, second = wal_object_key(1, 1, UPLOAD), wal_object_key(1, 2, UPLOAD)
    bucket = MemoryBucket({first: wal_object(("t", 0, 0, 5), ("u", 0, 0, 3), ("t", 0, 5, 5)), second: wal_object(("t", 0, 10, 4))})
    found = list_wal_candidates(bucket, lambda topic, partition: topic == "t", True)
    assert list(found) == [("t", 0)]
    tail = resolve_wal_tail(found[("t", 0)], None)
    assert offsets(tail) == [(0, 4), (5, 9), (10, 13)] and len(tail) == 2
    rows = [read_wal_slice(bucket, "t", 0, s, RecordBounds(3, 12), False) for s in tail]
    assert [o for r in rows for o in r.column("offset").to_pylist()] == list(range(3, 12))
    assert rows[1].column("value").to_pylist() == [b"v10", b"v11"]

    broken = bytearray(bucket.objects[first])
    broken[tail[0].batches[1].position + 70] ^= 0xFF  # inside the records of the batch at offset 5
    bucket.objects[first] = bytes(broken)
    with pytest.raises(CorruptWriteAheadObject, match=rf"{first}.*t-0 from offset 5"):
        read_wal_slice(bucket, "t", 0, tail[0], RecordBounds(), False)

    bucket.objects[second] = bucket.objects[second][:-3]  # torn: no footer
    with pytest.raises(CorruptWriteAheadObject, match=second):
        list_wal_candidates(bucket, lambda topic, partition: True, True)
    skipped = list_wal_candidates(bucket, lambda topic, partition: True, False)
    assert offsets(resolve_wal_tail(skipped[("t", 0)], None)) == [(0, 4), (5, 9)]


def test_a_slice_straddling_the_segments_end_yields_only_the_offsets_above_it() -> None:
    """A fenced leader's batch 110-119 (never committed) beside the new leader's segment 0-112:
    offsets 110-112 come from the segment only, once, and 113-119 from the slice."""
    log_bytes = b"".join(batch(base, 10) for base in range(0, 110, 10)) + batch(110, 3)
    segment = CommittedSegment("t", 0, 0, 112, 1_700_000_000_000, 1_700_000_000_112, len(log_bytes), 6, UPLOAD)
    fenced = wal_object_key(1, 1, UPLOAD)
    data, entries = encode_wal_object([("t", 0, 110, 119, 5, batch(110, 10, prefix="x", first_timestamp_ms=1_700_000_001_000))])
    bucket = MemoryBucket({segment.log_key: log_bytes, segment.index_key: b"", fenced: data})  # sparse index: no entry
    tail = resolve_wal_tail([WalCandidate(fenced, 1, UPLOAD, e) for e in entries], segment.next_offset)
    log = PartitionLog("t", 0, (segment,), wal=tail)
    assert (log.earliest, log.latest) == (0, 120)

    def read(start: int, end: int, bounds: RecordBounds | None = None) -> list[tuple[int, bytes]]:
        bounds = bounds or RecordBounds()
        runs, _ = plan_tasks(log, start, end, bounds, True)
        rows = []
        for s, e, pieces in runs:
            for arrow in read_bucket_range(bucket, BucketRange("t", 0, s, e, pieces), bounds, False, True):
                rows.extend(zip(arrow.column("offset").to_pylist(), arrow.column("value").to_pylist()))
        return rows

    rows = read(0, 120)
    assert [o for o, _ in rows] == list(range(120))
    assert offsets(tail) == [(110, 119)] and tail[0].base_offset == 113  # the batch whole, read from 113
    assert dict(rows)[111] == b"v111" and dict(rows)[113] == b"x113"  # 110-112 from the segment
    # Pruned by a timestamp filter, the segment is not in the task: the slice still starts at 113.
    newer = RecordBounds(min_timestamp_us=1_700_000_000_500 * 1000)
    assert [o for o, _ in read(0, 120, newer)] == list(range(113, 120))
    # Split mid-segment, as minPartitions does: each offset once.
    (task,) = [BucketRange("t", 0, s, e, p) for s, e, p in plan_tasks(log, 0, 120, RecordBounds(), True)[0]]
    assert sorted(o for part in split_ranges([task], 4, None) for o in offsets_read(bucket, part)) == list(range(120))


def offsets_read(bucket: MemoryBucket, task: BucketRange) -> list[int]:
    return [o for arrow in read_bucket_range(bucket, task, RecordBounds(), False, True) for o in arrow.column("offset").to_pylist()]
