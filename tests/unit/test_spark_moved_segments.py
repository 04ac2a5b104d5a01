"""A segment whose data objects are gone when a task reads it (spark_reader/read.py): the
reader lists the partition's catalogue again and reads the offsets from what holds them now
(a compacted copy swapped in after planning, the write-ahead objects an orphan commit
shadowed); only offsets nothing holds are data loss. Against a local-directory bucket."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from cold_tier.layout import CommittedSegment
from cold_tier.wal_format import encode_wal_object, wal_object_key
from hot_tier.records import Record, encode_batch
from spark_reader.bucket import LocalBucket
from spark_reader.catalogue import _list_catalogue
from spark_reader.decode import RecordBounds
from spark_reader.errors import DataLoss
from spark_reader.plan import BucketRange, PartitionLog, plan_tasks
from spark_reader.read import read_bucket_range
from spark_reader.wal import resolve_wal_tail
from spark_reader.wal_read import list_wal_candidates

EPOCH_MS = 1_700_000_000_000


def batch(base: int, count: int, prefix: str = "v", step: int = 1) -> bytes:
    """`count` records from `base`, `step` offsets apart (a compacted copy leaves holes)."""
    records = [Record(i * step, EPOCH_MS + base + i * step, None, f"{prefix}{base + i * step}".encode()) for i in range(count)]
    data = bytearray(encode_batch(records))
    data[0:8] = base.to_bytes(8, "big")  # the broker writes it; the CRC does not cover it
    return bytes(data)


def put(root: Path, key: str, data: bytes) -> None:
    path = root.joinpath(*key.split("/"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def upload(root: Path, base: int, last: int, upload_id: str, batches: list[bytes], epoch: int = 0) -> CommittedSegment:
    log_bytes = b"".join(batches)
    segment = CommittedSegment("t", 0, base, last, EPOCH_MS + base, EPOCH_MS + last, len(log_bytes), epoch, upload_id)
    for key, data in ((segment.log_key, log_bytes), (segment.index_key, b""), (segment.time_index_key, b""), (segment.commit_key, b"")):
        put(root, key, data)  # sparse index: no entries, read from the start
    return segment


def delete(root: Path, *keys: str) -> None:
    for key in keys:
        root.joinpath(*key.split("/")).unlink(missing_ok=True)


def plan(bucket: LocalBucket, start: int, end: int) -> list[BucketRange]:
    segments = tuple(_list_catalogue(bucket, "t", 0).get(("t", 0), ()))
    wal = list_wal_candidates(bucket, lambda topic, partition: True, True).get(("t", 0), ())
    log = PartitionLog("t", 0, segments, wal=resolve_wal_tail(wal, segments[-1].next_offset if segments else None))
    runs, _ = plan_tasks(log, start, end, RecordBounds(), True)
    return [BucketRange("t", 0, s, e, pieces) for s, e, pieces in runs]


def rows(bucket: LocalBucket, tasks: list[BucketRange], fail_on_data_loss: bool = True) -> list[tuple[int, bytes]]:
    found = []
    for task in tasks:
        for arrow in read_bucket_range(bucket, task, RecordBounds(), False, fail_on_data_loss):
            found.extend(zip(arrow.column("offset").to_pylist(), arrow.column("value").to_pylist()))
    return found


def compact(root: Path, replaced: list[CommittedSegment]) -> CommittedSegment:
    """The cleaner's swap: upload a copy of 0-19 keeping every other record, delete the
    replaced commits, then (the grace period over) their data objects."""
    copy = upload(root, 0, 19, "c0", [batch(0, 10, prefix="c", step=2)])
    for segment in replaced:
        delete(root, segment.commit_key, *segment.data_keys)
    return copy


def test_a_segment_compacted_away_after_planning_is_read_from_its_copy(tmp_path: Path) -> None:
    bucket = LocalBucket(tmp_path)
    s1 = upload(tmp_path, 0, 9, "a1", [batch(0, 10)])
    s2 = upload(tmp_path, 10, 19, "a2", [batch(10, 10)])
    upload(tmp_path, 20, 29, "a3", [batch(20, 10)])
    tasks = plan(bucket, 3, 30)
    compact(tmp_path, [s1, s2])
    for fail_on_data_loss in (True, False):
        found = rows(bucket, tasks, fail_on_data_loss)
        assert [o for o, _ in found] == [4, 6, 8, 10, 12, 14, 16, 18, *range(20, 30)]
        assert dict(found)[4] == b"c4" and dict(found)[20] == b"v20"


def test_a_read_split_mid_segment_reads_each_part_from_the_copy(tmp_path: Path) -> None:
    bucket = LocalBucket(tmp_path)
    s1 = upload(tmp_path, 0, 9, "a1", [batch(0, 5), batch(5, 5)])
    s2 = upload(tmp_path, 10, 19, "a2", [batch(10, 10)])
    (task,) = plan(bucket, 0, 20)
    parts = [BucketRange("t", 0, 0, 7, task.segments[:1]), BucketRange("t", 0, 7, 20, task.segments)]
    compact(tmp_path, [s1, s2])
    assert [o for o, _ in rows(bucket, parts)] == list(range(0, 20, 2))


def test_offsets_nothing_holds_any_more_are_still_data_loss(tmp_path: Path, caplog) -> None:
    bucket = LocalBucket(tmp_path)
    s1 = upload(tmp_path, 0, 9, "a1", [batch(0, 10)])
    upload(tmp_path, 10, 19, "a2", [batch(10, 10)])
    tasks = plan(bucket, 0, 20)
    delete(tmp_path, s1.commit_key, *s1.data_keys)  # retention
    with pytest.raises(DataLoss, match="deleted by retention"):
        rows(bucket, tasks)
    with caplog.at_level(logging.WARNING, logger="spark_reader.read"):
        assert [o for o, _ in rows(bucket, tasks, False)] == list(range(10, 20))
    assert "skipping offsets [0, 10)" in caplog.text


def test_a_copy_that_holds_only_part_of_the_offsets_loses_only_the_rest(tmp_path: Path, caplog) -> None:
    bucket = LocalBucket(tmp_path)
    s1 = upload(tmp_path, 0, 9, "a1", [batch(0, 10)])
    upload(tmp_path, 10, 19, "a2", [batch(10, 10)])
    tasks = plan(bucket, 0, 20)
    delete(tmp_path, s1.commit_key, *s1.data_keys)
    upload(tmp_path, 5, 9, "b1", [batch(5, 5, prefix="b")])  # commits from 5 on only
    with pytest.raises(DataLoss) as lost:
        rows(bucket, tasks)
    assert (lost.value.first_missing_offset, lost.value.next_available_offset) == (0, 5)
    with caplog.at_level(logging.WARNING, logger="spark_reader.read"):
        assert [o for o, _ in rows(bucket, tasks, False)] == list(range(5, 20))
    assert "skipping offsets [0, 5)" in caplog.text


def test_an_orphan_commit_does_not_shadow_the_write_ahead_objects_that_hold_its_offsets(tmp_path: Path) -> None:
    """A commit whose data is gone wins the catalogue (a higher epoch) and so ends where the
    write-ahead tail starts; the objects still hold its offsets: they are read from there."""
    bucket = LocalBucket(tmp_path)
    upload(tmp_path, 0, 9, "a1", [batch(0, 10)])
    orphan = upload(tmp_path, 10, 19, "o1", [batch(10, 10)], epoch=1)
    data, _ = encode_wal_object([("t", 0, 10, 19, 1, batch(10, 10, prefix="w")), ("t", 0, 20, 24, 1, batch(20, 5, prefix="w"))])
    put(tmp_path, wal_object_key(1, 1, "0123456789abcdef"), data)
    tasks = plan(bucket, 0, 25)
    delete(tmp_path, *orphan.data_keys)
    found = rows(bucket, tasks)
    assert [o for o, _ in found] == list(range(25))
    assert dict(found)[9] == b"v9" and dict(found)[10] == b"w10" and dict(found)[24] == b"w24"


def test_an_orphan_that_shadowed_a_committed_segment_gives_way_to_it(tmp_path: Path) -> None:
    bucket = LocalBucket(tmp_path)
    upload(tmp_path, 0, 9, "b9", [batch(0, 10)])
    orphan = upload(tmp_path, 0, 9, "a0", [batch(0, 10, prefix="o")])  # the lower upload id wins
    tasks = plan(bucket, 0, 10)
    assert tasks[0].segments[0].upload_id == "a0"
    delete(tmp_path, *orphan.data_keys)
    assert rows(bucket, tasks) == [(o, b"v%d" % o) for o in range(10)]
