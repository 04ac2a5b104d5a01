"""Planning on Spark's driver: list the bucket's catalogue (and ask the broker, with a hot
tail), resolve the offset options, and return the tasks (plan.py does the deciding).

Requests to the bucket, per topic read (cold_tier.layout's keys):

    subscribePattern        1 LIST of the root's "directories": the topic names
    any partition selected  1 LIST of `T/P/commits/` per selected partition (assign, or pushed
                            partition filters leaving at most MAX_PARALLEL_REQUESTS partitions:
                            `partition = 1`, IN, BETWEEN), in parallel
    otherwise               1 LIST of `T/` (all pages): partitions and commit keys at once. A
                            LIST page holds 1,000 keys, each upload has 6 (4 before
                            transaction indexes), so a topic whose partitions hold up to 166
                            segments each costs one request per partition or less
    write-ahead tail        1 LIST of `wal~/` and one small GET per write-ahead object: its
                            footer and index (wal_read.py; the streaming reader keeps what it
                            parsed), for every topic at once; wal.py decides the tail above
                            each partition's committed segments
    timestamps              per partition, only for ...Timestamp options: the time index, offset
                            index and one chunk of the .log of the segment the timestamp falls in
                            (or the batches of the write-ahead tail)
    read_committed          per partition: its newest producer snapshot, the write-ahead tail's
                            batches and the transaction index of each segment read
                            (committed.py)

Nothing is read from the segments themselves (read_committed: only from segments uploaded
without a producer snapshot, above the newest one). With `kafka.bootstrap.servers`, one Metadata
request and two ListOffsets per leader add the partitions the bucket does not know yet and
each partition's log start offset and high watermark.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from cold_tier import layout

from .bucket import Bucket
from .committed import aborted_transactions
from .errors import InvalidOption
from .filters import Pushdown
from .options import Assign, PartitionTimestamps, ReadOptions, SpecificOffsets, Subscribe, SubscribePattern, TopicPartition
from .plan import (
    BrokerOffsets,
    BrokerRange,
    BucketRange,
    PartitionLog,
    Task,
    clamp_range,
    plan_tasks,
    resolve_offset,
    split_ranges,
)
from .read import offset_for_timestamp
from .wal import resolve_wal_tail
from .wal_read import IndexCache, list_epoch_marks, list_wal_candidates, read_topic_id

MAX_PARALLEL_REQUESTS = 16
T = TypeVar("T")
R = TypeVar("R")


def load_partition_logs(
    bucket: Bucket, options: ReadOptions, pushdown: Pushdown, *, use_broker: bool = True, wal_cache: IndexCache | None = None
) -> list[PartitionLog]:
    """What the bucket (and the broker) know of every partition the query may read."""
    if pushdown.is_empty:
        return []
    servers = options.bootstrap_servers if use_broker else ()
    selection = options.topics
    broker: dict[TopicPartition, BrokerOffsets] = {}

    def wanted(topic: str, partition: int) -> bool:
        if not (_is_topic(topic) and pushdown.allows_topic(topic) and pushdown.allows_partition(partition)):
            return False
        if isinstance(selection, SubscribePattern):
            return selection.matches(topic)
        if isinstance(selection, Assign):
            return (topic, partition) in selection.partitions
        return topic in selection.topics

    wal = list_wal_candidates(bucket, wanted, options.fail_on_data_loss, wal_cache)
    if isinstance(selection, SubscribePattern):
        listed = [t for t in bucket.list_directories("") if _is_topic(t) and selection.matches(t)]
        topics = sorted(set(listed) | {topic for topic, _ in wal})
    else:
        topics = list(selection.topics)
    if servers:
        from .hot_tail import broker_offsets  # imported here: diskless.wire loads asyncio

        wanted = None if isinstance(selection, SubscribePattern) else [t for t in topics if pushdown.allows_topic(t)]
        broker = broker_offsets(servers, wanted)
        if isinstance(selection, SubscribePattern):
            topics = sorted(set(topics) | {t for t, _ in broker if selection.matches(t)})
    topics = [t for t in topics if pushdown.allows_topic(t) and _is_topic(t)]

    explicit = _explicit_partitions(selection, pushdown)
    jobs: list[tuple[str, int | None]] = []
    for topic in topics:
        if explicit is not None:
            jobs.extend((topic, p) for p in sorted(explicit.get(topic, ())) if pushdown.allows_partition(p))
        else:
            jobs.append((topic, None))
    catalogues: dict[TopicPartition, list[layout.CommittedSegment]] = {}
    for found in _parallel(lambda job: _list_catalogue(bucket, *job), jobs):
        for tp, segments in found.items():
            catalogues.setdefault(tp, []).extend(segments)
    if explicit is None:
        for topic, partition in broker:
            if topic in topics:
                catalogues.setdefault((topic, partition), [])
    else:
        for topic, partition in jobs:
            catalogues.setdefault((topic, partition), [])  # type: ignore[arg-type]
    for tp in wal:
        catalogues.setdefault(tp, [])
    marked = [tp for tp in sorted(wal) if wal[tp]]
    named = sorted({topic for topic, _ in marked})
    topic_ids = dict(zip(named, _parallel(lambda topic: read_topic_id(bucket, topic), named)))
    marks = dict(zip(marked, _parallel(lambda tp: list_epoch_marks(bucket, *tp, topic_ids[tp[0]]), marked)))
    logs = []
    for (topic, partition), segments in sorted(catalogues.items()):
        if not pushdown.allows_partition(partition):
            continue
        if isinstance(selection, Assign) and (topic, partition) not in selection.partitions:
            continue
        resolved = tuple(layout.resolve_overlaps(segments))
        tail = resolve_wal_tail(
            wal.get((topic, partition), ()), resolved[-1].next_offset if resolved else None, marks.get((topic, partition)), topic_ids.get(topic)
        )  # fmt: skip
        logs.append(PartitionLog(topic, partition, resolved, broker.get((topic, partition)), tail))
    if options.read_committed:
        from .committed import with_last_stable_offset

        logs = list(_parallel(lambda log: with_last_stable_offset(bucket, log), logs))
    return logs


def _explicit_partitions(selection: object, pushdown: Pushdown) -> dict[str, set[int]] | None:
    """Partitions per topic when the query names them (assign, or a partition filter giving a
    set); None when every partition of a topic must be discovered."""
    if isinstance(selection, Assign):
        named: dict[str, set[int]] = {}
        for topic, partition in selection.partitions:
            named.setdefault(topic, set()).add(partition)
        return named
    named = pushdown.named_partitions(MAX_PARALLEL_REQUESTS) if isinstance(selection, Subscribe) else None
    if named is not None:
        return {topic: set(named) for topic in selection.topics}
    return None


def _list_catalogue(bucket: Bucket, topic: str, partition: int | None) -> dict[TopicPartition, list[layout.CommittedSegment]]:
    if partition is not None:
        keys = bucket.list_keys(layout.commits_prefix(topic, partition))
    else:
        keys = [key for key in bucket.list_keys(layout.topic_prefix(topic)) if f"/{layout.COMMITS_DIRECTORY}/" in key]
    found: dict[TopicPartition, list[layout.CommittedSegment]] = {}
    for segment in layout.parse_catalogue(keys):
        found.setdefault((segment.topic, segment.partition), []).append(segment)
    return found


def plan_read(bucket: Bucket, options: ReadOptions, pushdown: Pushdown) -> list[Task]:
    """The tasks of a batch query, in topic, partition, offset order."""
    known = load_partition_logs(bucket, options, pushdown)
    for spec, option in ((options.starting, "startingOffsets"), (options.ending, "endingOffsets")):
        _check_named_partitions(spec, {(log.topic, log.partition) for log in known}, pushdown, option)
    logs = [log for log in known if log.earliest is not None]  # a partition with no records yet

    def lookup(log: PartitionLog, timestamp_ms: int) -> int | None:
        found = offset_for_timestamp(bucket, log, timestamp_ms)
        if found is None and log.broker is not None:
            from .hot_tail import broker_offset_for_timestamp

            found = broker_offset_for_timestamp(log.broker.leader, log.topic, log.partition, timestamp_ms)
        return found

    def plan_one(log: PartitionLog) -> tuple[list[BucketRange], BrokerRange | None]:
        start = resolve_offset(options.starting, log, starting=True, lookup=lookup,
                               strategy_latest=options.starting_timestamp_strategy_latest)  # fmt: skip
        end = resolve_offset(options.ending, log, starting=False, lookup=lookup)
        start, end = clamp_range(log, start, end, pushdown.bounds, options.fail_on_data_loss)
        runs, tail = plan_tasks(log, start, end, pushdown.bounds, options.fail_on_data_loss)
        aborted = aborted_transactions(bucket, log, start, end) if options.read_committed and runs else ()
        return [BucketRange(log.topic, log.partition, s, e, segments, aborted) for s, e, segments in runs], tail

    bucket_tasks: list[BucketRange] = []
    broker_tasks: list[BrokerRange] = []
    for ranges, tail in _parallel(plan_one, logs):
        bucket_tasks.extend(ranges)
        if tail is not None:
            broker_tasks.append(tail)
    return [*split_ranges(bucket_tasks, options.min_partitions, options.max_records_per_partition), *broker_tasks]


def _check_named_partitions(spec: object, known: set[TopicPartition], pushdown: Pushdown, option: str) -> None:
    """Spark refuses offsets JSON naming partitions the query does not read (a typo, most
    likely); partitions a pushed-down filter leaves out are not held against it."""
    if isinstance(spec, SpecificOffsets):
        named = spec.offsets
    elif isinstance(spec, PartitionTimestamps):
        named = spec.timestamps_ms
    else:
        return
    unknown = sorted(tp for tp in named if pushdown.allows_topic(tp[0]) and pushdown.allows_partition(tp[1]) and tp not in known)
    if unknown:
        shown = ", ".join(f"{topic}-{partition}" for topic, partition in unknown)
        raise InvalidOption(option, None, f"names partitions that the query does not read: {shown}")


def _parallel(function: Callable[[T], R], items: Sequence[T]) -> Iterable[R]:
    if len(items) <= 1:
        return [function(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_REQUESTS, len(items))) as pool:
        return list(pool.map(function, items))


def _is_topic(name: str) -> bool:
    try:
        layout.topic_prefix(name)
    except ValueError:
        return False
    return True
