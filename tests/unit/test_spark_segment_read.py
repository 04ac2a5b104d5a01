"""Reading a committed segment from the bucket (spark_reader/read.py) when its bytes lie about
offsets: a batch's base offset is outside its CRC (as in Kafka), so the reader checks that
base offsets increase and stay inside the segment's range, against an in-memory bucket."""

from __future__ import annotations

import logging

import pytest

from cold_tier.layout import CommittedSegment
from hot_tier.records import Record, encode_batch
from spark_reader.decode import RecordBounds
from spark_reader.errors import CorruptSegment
from spark_reader.plan import BucketRange, PartitionLog, SegmentRef, plan_tasks
from spark_reader.read import offset_for_timestamp, read_bucket_range

UPLOAD = "0123456789abcdef"
EPOCH_MS = 1_700_000_000_000


class MemoryBucket:
    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects = objects

    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        return self.objects[key][start:end]


def batch(base: int, count: int) -> bytes:
    data = bytearray(encode_batch([Record(i, EPOCH_MS + base + i, None, b"v%d" % (base + i)) for i in range(count)]))
    data[0:8] = base.to_bytes(8, "big")  # the broker writes it; the CRC does not cover it
    return bytes(data)


def segment_with(second_base_offset: int) -> tuple[MemoryBucket, CommittedSegment, int]:
    """Offsets 0-14 in three batches of five, the second written at `second_base_offset`;
    also where that batch starts in the .log."""
    batches = [batch(0, 5), batch(second_base_offset, 5), batch(10, 5)]
    log_bytes = b"".join(batches)
    segment = CommittedSegment("t", 0, 0, 14, EPOCH_MS, EPOCH_MS + 14, len(log_bytes), 0, UPLOAD)
    objects = {segment.log_key: log_bytes, segment.index_key: b"", segment.time_index_key: b""}
    return MemoryBucket(objects), segment, len(batches[0])


def read(bucket: MemoryBucket, segment: CommittedSegment, start: int, end: int, fail_on_data_loss: bool = True) -> list[int]:
    runs, _ = plan_tasks(PartitionLog("t", 0, (segment,)), start, end, RecordBounds(), fail_on_data_loss)
    tasks = [BucketRange("t", 0, s, e, pieces) for s, e, pieces in runs]
    return [o for task in tasks for b in read_bucket_range(bucket, task, RecordBounds(), False, fail_on_data_loss)
            for o in b.column("offset").to_pylist()]  # fmt: skip


def test_an_intact_segment_reads_every_offset_once() -> None:
    bucket, segment, _ = segment_with(5)
    assert read(bucket, segment, 0, 15) == list(range(15))
    assert read(bucket, segment, 3, 12) == list(range(3, 12))


@pytest.mark.parametrize("base_offset", [5 + 2**40, 1, 12])
def test_a_base_offset_out_of_order_or_outside_the_segment_is_corrupt_at_its_byte(base_offset: int, caplog) -> None:
    """5 + 2**40 used to end the read at offset 4 without an error, 1 to return 1-5 twice."""
    bucket, segment, position = segment_with(base_offset)
    for start, end in ((0, 15), (2, 15), (0, 8)):
        with pytest.raises(CorruptSegment) as corrupt:
            read(bucket, segment, start, end)
        assert (corrupt.value.key, corrupt.value.position) == (segment.log_key, position)
        assert f"{segment.log_key!r} at byte {position} (reading t-0 from offset {start})" in str(corrupt.value)
    with caplog.at_level(logging.WARNING, logger="spark_reader.read"):
        rows = read(bucket, segment, 0, 15, fail_on_data_loss=False)
    assert rows == []  # the segment skipped from the bad batch's window on: missing, never wrong
    assert "failOnDataLoss=false" in caplog.text and segment.log_key in caplog.text


def test_a_timestamp_lookup_refuses_the_same_segment() -> None:
    bucket, segment, position = segment_with(1)
    with pytest.raises(CorruptSegment) as corrupt:
        offset_for_timestamp(bucket, PartitionLog("t", 0, (segment,)), EPOCH_MS + 7)
    assert (corrupt.value.key, corrupt.value.position) == (segment.log_key, position)


def test_segment_ref_is_what_the_reader_checks_against() -> None:
    bucket, segment, _ = segment_with(5)
    task = BucketRange("t", 0, 0, 15, (SegmentRef(0, 9, len(bucket.objects[segment.log_key]), UPLOAD, EPOCH_MS + 14),))
    with pytest.raises(CorruptSegment, match="after the segment's last offset 9"):
        list(read_bucket_range(bucket, task, RecordBounds(), False, True))
