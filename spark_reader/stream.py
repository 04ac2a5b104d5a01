"""`spark.readStream.format("diskless")`: micro-batches over the bucket as it grows.

Offsets are Spark's Kafka source offsets, a JSON object {"topic": {"partition": offset}}:
the next offset to read of every partition. Each trigger lists the bucket's catalogue and its
write-ahead objects again; `latestOffset` is every partition's bucket log end offset, the end
of its acknowledged tail in write-ahead objects above the committed segments (wal.py), so a
record is seen at the first trigger after its acknowledgement, with no broker. It is capped
by maxOffsetsPerTrigger the way Spark's KafkaMicroBatchStream.rateLimit divides it among
partitions. A micro-batch's offsets are read from whatever holds them when it runs (segments
once uploaded, else write-ahead objects): the same records either way, so a restart from a
checkpoint reads each offset exactly once. A partition that appears
later starts at its earliest offset, as in Spark. Trigger.AvailableNow reads up to what was
committed when the query started, then stops.

The stream reader lives in one long-running Python process on the driver, so it may keep
state between calls (the AvailableNow target, the parsed indexes of write-ahead objects, which
never change); `read` runs on executors, as in batch reads, and the indexes are not pickled.
The hot tail (kafka.bootstrap.servers) is for batch queries only.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from .bucket import open_bucket
from .catalogue import load_partition_logs
from .decode import RecordBounds
from .errors import InvalidOption
from .filters import Pushdown
from .options import ReadOptions, TopicPartition
from .plan import BucketRange, PartitionLog, clamp_range, plan_tasks, resolve_offset, split_ranges
from .read import offset_for_timestamp
from .tasks import locate, read_task
from .wal_read import IndexCache

Offsets = dict[TopicPartition, int]


class DisklessStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: ReadOptions) -> None:
        if options.bootstrap_servers:
            raise InvalidOption(
                "kafka.bootstrap.servers", ",".join(options.bootstrap_servers),
                "streaming queries read committed segments only; the hot tail is for batch queries",
            )  # fmt: skip
        self.options = options
        self.location = locate(options)
        self._available_now: Offsets | None = None
        self._wal_indexes: IndexCache = {}

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_wal_indexes"] = {}  # driver-side only: the workers read tasks, not indexes
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def initialOffset(self) -> dict:
        bucket = open_bucket(self.location)
        try:
            logs = self._logs(bucket)
            offsets = {
                (log.topic, log.partition): resolve_offset(
                    self.options.starting, log, starting=True,
                    lookup=lambda log_, timestamp_ms: offset_for_timestamp(bucket, log_, timestamp_ms),
                    strategy_latest=self.options.starting_timestamp_strategy_latest,
                )  # fmt: skip
                for log in logs.values()
            }
        finally:
            bucket.close()
        return encode_offsets(offsets)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = decode_offsets(start)
        logs = self._current_logs()
        # A partition new since `start` begins at its earliest offset.
        first = {**{tp: log.earliest for tp, log in logs.items()}, **begin}
        end = {tp: log.latest for tp, log in logs.items()}
        if self._available_now is not None:
            end = {tp: min(offset, self._available_now.get(tp, first[tp])) for tp, offset in end.items()}
        end = {tp: max(offset, first[tp]) for tp, offset in end.items()}
        for tp, offset in begin.items():
            end.setdefault(tp, offset)  # a partition gone from the bucket stays where it was
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(first, end, limit.max_rows)
        return encode_offsets(end)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = {tp: log.latest for tp, log in self._current_logs().items()}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin, until = decode_offsets(start), decode_offsets(end)
        logs = self._current_logs()
        ranges: list[BucketRange] = []
        for tp, end_offset in sorted(until.items()):
            log = logs.get(tp)
            if log is None or log.earliest is None:
                continue
            start_offset = begin.get(tp, log.earliest)
            if start_offset >= end_offset:
                continue
            first, last = clamp_range(log, start_offset, end_offset, RecordBounds(), self.options.fail_on_data_loss)
            runs, _ = plan_tasks(log, first, last, RecordBounds(), self.options.fail_on_data_loss)
            aborted = self._aborted(log, first, last) if self.options.read_committed and runs else ()
            ranges.extend(BucketRange(log.topic, log.partition, s, e, segments, aborted) for s, e, segments in runs)
        tasks = split_ranges(ranges, self.options.min_partitions, self.options.max_records_per_partition)
        return [InputPartition(task) for task in tasks]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_task(partition.value, self.location, self.options, Pushdown())

    def commit(self, end: dict) -> None:
        pass  # nothing to release: every trigger lists the catalogue afresh

    def _aborted(self, log: PartitionLog, start: int, end: int) -> tuple:
        from .committed import aborted_transactions

        bucket = open_bucket(self.location)
        try:
            return aborted_transactions(bucket, log, start, end)
        finally:
            bucket.close()

    def _logs(self, bucket) -> dict[TopicPartition, PartitionLog]:
        logs = load_partition_logs(bucket, self.options, Pushdown(), use_broker=False, wal_cache=self._wal_indexes)
        return {(log.topic, log.partition): log for log in logs if log.earliest is not None}

    def _current_logs(self) -> dict[TopicPartition, PartitionLog]:
        bucket = open_bucket(self.location)
        try:
            return self._logs(bucket)
        finally:
            bucket.close()


def rate_limit(begin: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int], max_rows: int) -> Offsets:
    """Spark's KafkaMicroBatchStream.rateLimit: `max_rows` shared among partitions in
    proportion to how far each is behind `begin`."""
    sizes = {tp: until - begin[tp] for tp, until in end.items() if tp in begin and until - begin[tp] > 0}
    total = sum(sizes.values())
    if total < 1:
        return dict(end)
    limited = {}
    for tp, until in end.items():
        if tp not in sizes:
            limited[tp] = until
            continue
        share = max_rows * (sizes[tp] / total)
        step = math.ceil(share) if share < 1 else math.floor(share)
        limited[tp] = min(until, begin[tp] + step)
    return limited


def encode_offsets(offsets: Mapping[TopicPartition, int]) -> dict:
    encoded: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        encoded.setdefault(topic, {})[str(partition)] = offset
    return encoded


def decode_offsets(encoded: Mapping) -> Offsets:
    return {
        (topic, int(partition)): int(offset)
        for topic, partitions in encoded.items()
        for partition, offset in partitions.items()
    }
