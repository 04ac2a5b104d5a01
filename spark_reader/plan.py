"""Planning a read: from what the bucket's catalogue (and, with a hot tail, the broker) says
about each topic-partition, to the offset range to read and the Spark tasks that read it.

Offsets, as Spark's Kafka source defines them for one partition:

    earliest  the first committed segment's base offset (else the first offset of the
              write-ahead tail; the broker's log start offset when the bucket holds nothing)
    latest    the bucket's log end offset: the end of the write-ahead tail above the committed
              segments (wal.py), else the last committed offset + 1; with the hot tail, the
              broker's high watermark when it is further; read_committed, the last stable
              offset (committed.py)
    range     [start, end), from startingOffsets/endingOffsets (or timestamps) resolved against
              those, then narrowed by pushed-down offset filters

Records of the range below the bucket's log end offset are read from committed segments and,
above them, from write-ahead objects (`BucketRange` tasks, whose pieces are `SegmentRef`s then
`WalSlice`s, contiguous in offsets); the rest, from the broker (`BrokerRange`, one task per
partition). They meet at exactly the bucket's log end offset, so every record is read once.

A range that starts before `earliest`, ends after `latest`, or crosses a hole in the
catalogue (a segment deleted by retention while later ones remain, a missing commit) has lost
records: `DataLoss` with failOnDataLoss=true, else those offsets are skipped, as Spark's Kafka
source does. Splitting follows Spark's KafkaOffsetRangeCalculator: maxRecordsPerPartition
caps each range, then minPartitions divides ranges in proportion to their size; the worker
turns each piece's offsets into byte ranges with the segment's offset index.

Pure: the catalogue and broker offsets come in as values, timestamp lookups as a callable.
Tasks are small frozen dataclasses; they are pickled to Spark's workers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from cold_tier.layout import CommittedSegment
from hot_tier.records.transactions import AbortedTxn

from .decode import RecordBounds
from .errors import DataLoss, InvalidOption, NoOffsetForTimestamp, OffsetRangeInvalid
from .options import (
    EARLIEST,
    LATEST,
    Earliest,
    GlobalTimestamp,
    Latest,
    OffsetSpec,
    PartitionTimestamps,
    SpecificOffsets,
    TopicPartition,
)
from .wal import WalSlice


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """What a worker needs to read one committed segment (its keys follow from these)."""

    base_offset: int
    last_offset: int
    size_bytes: int
    upload_id: str
    max_timestamp: int

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


@dataclass(frozen=True, slots=True)
class BucketRange:
    """One Spark task: offsets [start_offset, end_offset) of a partition, from `segments`:
    committed segments, then slices of write-ahead objects, in offset order; read_committed,
    skipping the batches of `aborted` transactions."""

    topic: str
    partition: int
    start_offset: int
    end_offset: int
    segments: tuple[SegmentRef | WalSlice, ...]
    aborted: tuple[AbortedTxn, ...] = ()


@dataclass(frozen=True, slots=True)
class BrokerRange:
    """One Spark task: offsets [start_offset, end_offset) of a partition, from its leader."""

    topic: str
    partition: int
    start_offset: int
    end_offset: int
    leader: str  # host:port


Task = BucketRange | BrokerRange


@dataclass(frozen=True, slots=True)
class BrokerOffsets:
    log_start_offset: int
    high_watermark: int
    leader: str  # host:port


@dataclass(frozen=True, slots=True)
class PartitionLog:
    """Everything known about one topic-partition when the query is planned."""

    topic: str
    partition: int
    segments: tuple[CommittedSegment, ...]  # the catalogue's winners, in offset order
    broker: BrokerOffsets | None = None
    wal: tuple[WalSlice, ...] = ()  # the write-ahead tail from the segments' end (wal.py)
    last_stable_offset: int | None = None  # read_committed only (committed.py)
    folded_aborted: tuple[AbortedTxn, ...] = ()  # aborts met finding it, from the producer snapshot it starts at

    @property
    def segments_end_offset(self) -> int | None:
        return self.segments[-1].next_offset if self.segments else None

    @property
    def bucket_log_end_offset(self) -> int | None:
        return self.wal[-1].next_offset if self.wal else self.segments_end_offset

    @property
    def earliest(self) -> int | None:
        if self.segments:
            return self.segments[0].base_offset
        if self.wal:
            return self.wal[0].base_offset
        return self.broker.log_start_offset if self.broker is not None else None

    @property
    def latest(self) -> int | None:
        if self.last_stable_offset is not None:
            return self.last_stable_offset
        if self.broker is not None:
            return max(self.broker.high_watermark, self.bucket_log_end_offset or 0)
        return self.bucket_log_end_offset


TimestampLookup = Callable[[PartitionLog, int], int | None]


def resolve_offset(
    spec: OffsetSpec,
    log: PartitionLog,
    *,
    starting: bool,
    lookup: TimestampLookup,
    strategy_latest: bool = False,
) -> int:
    """The offset `spec` names for `log` (which must have an earliest and latest)."""
    tp = (log.topic, log.partition)
    earliest, latest = log.earliest, log.latest
    assert earliest is not None and latest is not None
    if isinstance(spec, Earliest):
        return earliest
    if isinstance(spec, Latest):
        return latest
    if isinstance(spec, SpecificOffsets):
        offset = _required(spec.offsets, tp, "startingOffsets" if starting else "endingOffsets")
        return earliest if offset == EARLIEST else latest if offset == LATEST else offset
    if isinstance(spec, GlobalTimestamp):
        timestamp_ms = spec.timestamp_ms
    else:
        assert isinstance(spec, PartitionTimestamps)
        name = "startingOffsetsByTimestamp" if starting else "endingOffsetsByTimestamp"
        timestamp_ms = _required(spec.timestamps_ms, tp, name)
    found = lookup(log, timestamp_ms)
    if found is not None and found < latest:
        # Kafka's ListOffsets answers only offsets a consumer may fetch: below the last stable
        # offset read_committed (a match above it is no match), below the high watermark else.
        return found
    if starting and not strategy_latest:
        raise NoOffsetForTimestamp(log.topic, log.partition, timestamp_ms)
    return latest  # Spark: an ending timestamp that matches nothing means latest


def _required(values: Mapping[TopicPartition, int], tp: TopicPartition, option: str) -> int:
    if tp not in values:
        raise InvalidOption(
            option, None, f"{tp[0]}-{tp[1]} is read but has no entry: specify every topic-partition (-2 earliest, -1 latest)"
        )
    return values[tp]


def clamp_range(log: PartitionLog, start: int, end: int, bounds: RecordBounds, fail_on_data_loss: bool) -> tuple[int, int]:
    """The range actually read: [start, end) narrowed by pushed-down offset bounds, checked
    against the log's earliest and latest offsets."""
    if start > end:
        raise OffsetRangeInvalid(log.topic, log.partition, start, end)
    start = max(start, bounds.start_offset)
    end = min(end, bounds.end_offset)
    if start >= end:
        return start, start
    earliest, latest = log.earliest, log.latest
    assert earliest is not None and latest is not None
    if start < earliest:
        if fail_on_data_loss:
            raise DataLoss(log.topic, log.partition, start, earliest, "the range starts before the earliest offset")
        start = earliest
    if end > latest:
        if fail_on_data_loss:
            raise DataLoss(log.topic, log.partition, latest, None, f"the range ends at {end}, after the latest offset {latest}")
        end = latest
    return start, max(start, end)


def plan_tasks(
    log: PartitionLog,
    start: int,
    end: int,
    bounds: RecordBounds,
    fail_on_data_loss: bool,
) -> tuple[list[tuple[int, int, tuple[SegmentRef | WalSlice, ...]]], BrokerRange | None]:
    """Split [start, end) of `log` into the bucket's part (runs of contiguous segments, as
    (start, end, segments)) and the broker's part. Holes in the catalogue are data loss."""
    runs: list[tuple[int, int, tuple[SegmentRef | WalSlice, ...]]] = []
    bucket_end = log.bucket_log_end_offset if log.bucket_log_end_offset is not None else start
    if log.broker is None:
        bucket_end = max(bucket_end, end)  # nothing but the bucket: every offset must be in it
    cursor = start
    run_start = start
    run: list[SegmentRef | WalSlice] = []
    min_timestamp_ms = bounds.min_timestamp_ms if bounds.has_timestamp_bounds else None
    for segment in (*log.segments, *log.wal):
        if segment.next_offset <= cursor:
            continue
        if segment.base_offset >= min(end, bucket_end):
            break
        if segment.base_offset > cursor:
            if fail_on_data_loss:
                raise DataLoss(log.topic, log.partition, cursor, segment.base_offset, "no committed segment holds these offsets")
            if run:
                runs.append((run_start, cursor, tuple(run)))
            run, run_start = [], segment.base_offset
        cursor = segment.next_offset
        if isinstance(segment, WalSlice):
            run.append(segment)  # no timestamps in a write-ahead index: never pruned by time
            continue
        if min_timestamp_ms is not None and segment.max_timestamp < min_timestamp_ms:
            continue  # every record of it is older than the timestamp filter
        run.append(_ref(segment))
    read_to = min(end, bucket_end)
    if cursor < read_to:
        if fail_on_data_loss:
            raise DataLoss(log.topic, log.partition, cursor, None, "no committed segment holds these offsets")
        read_to = cursor
    if run:
        runs.append((run_start, min(cursor, read_to), tuple(run)))
    broker = None
    tail_start = max(start, bucket_end)
    if log.broker is not None and tail_start < end:
        broker = BrokerRange(log.topic, log.partition, tail_start, end, log.broker.leader)
    return [(s, e, segments) for s, e, segments in runs if s < e], broker


def split_ranges(
    ranges: Sequence[BucketRange], min_partitions: int | None, max_records_per_partition: int | None
) -> list[BucketRange]:
    """Spark's KafkaOffsetRangeCalculator: cap each range at maxRecordsPerPartition, then, if
    that gives fewer than minPartitions ranges, divide the large ones in proportion to their
    size. A range whose share of minPartitions rounds to at most one piece stays whole, and the
    pieces it takes are left out of the large ranges' sums (Spark's "unsplit ranges"), so the
    count comes out at about minPartitions: sizes 10 and 990 with minPartitions=10 give 1 + 9."""
    pieces: list[BucketRange] = []
    for task in ranges:
        size = task.end_offset - task.start_offset
        parts = 1 if max_records_per_partition is None else -(-size // max_records_per_partition)
        pieces.extend(_divide(task, parts))
    if min_partitions is None or len(pieces) >= min_partitions:
        return pieces
    total = sum(task.end_offset - task.start_offset for task in pieces)
    if total == 0:
        return pieces
    whole = [_part_count(task, total, min_partitions) == 1 for task in pieces]
    split_total = sum(task.end_offset - task.start_offset for task, keep in zip(pieces, whole) if not keep)
    split_min_partitions = max(min_partitions - sum(whole), 1)
    divided: list[BucketRange] = []
    for task, keep in zip(pieces, whole):
        divided.extend([task] if keep else _divide(task, _part_count(task, split_total, split_min_partitions)))
    return divided


def _part_count(task: BucketRange, total: int, min_partitions: int) -> int:
    """Spark's getPartCount: max(round(size / total * minPartitions), 1), Scala's round (half up)."""
    return max(math.floor((task.end_offset - task.start_offset) / total * min_partitions + 0.5), 1)


def _divide(task: BucketRange, parts: int) -> list[BucketRange]:
    parts = max(1, min(parts, task.end_offset - task.start_offset))
    if parts == 1:
        return [task]
    result = []
    remaining = task.end_offset - task.start_offset
    start = task.start_offset
    for part in range(parts):
        size = remaining // (parts - part)  # the last piece takes the rounding
        remaining -= size
        end = start + size
        segments = tuple(s for s in task.segments if s.base_offset < end and s.next_offset > start)
        aborted = tuple(a for a in task.aborted if a.last_offset >= start and a.first_offset < end)
        if segments:
            result.append(BucketRange(task.topic, task.partition, start, end, segments, aborted))
        start = end
    return result


def _ref(segment: CommittedSegment) -> SegmentRef:
    return SegmentRef(segment.base_offset, segment.last_offset, segment.size_bytes, segment.upload_id, segment.max_timestamp)
