"""The broker's metrics, in Prometheus' text format through `prometheus_client`.

Names are Kafka's JMX metrics as the Prometheus JMX exporter translates them
(`kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec,topic=T` becomes
`kafka_server_brokertopicmetrics_messagesin_total{topic="T"}`), so what people read on Kafka
reads the same here; consumer lag uses kafka_exporter's names (`kafka_consumergroup_lag`);
what only Diskless has is named `diskless_*`. Durations are in seconds, as Prometheus wants.

Two kinds, so that no partition state has a second copy:

- Events (counters and histograms) are counted where they happen, in `EVENTS`, process-wide:
  each request by the handler table (`instrument`), bytes and messages per topic by the
  Produce and Fetch wrappers, bucket uploads by the uploader (`observe_remote_copy`) and
  remote reads by the remote log (`observe_remote_fetch`).
- State (gauges) is read at scrape time from the partition leaders and the committed offsets
  by `BrokerStateCollector`: offsets, local and bucket segments and bytes, upload lag, lag of
  consumer groups. The remote reader's own counts (cold_tier keeps plain integers, it cannot
  import this module) are read at scrape time too, by `RemoteReaderCollector`: cache hits and
  misses, GETs.
- Connections and request and response sizes are counted by the TCP shell (network_metrics.py).
- The transaction coordinator's state is read at scrape time by `TransactionCoordinatorCollector`
  from the transactions this broker coordinates (open ones, the oldest one's age, how many in
  each state), with the counts its shell keeps of transactions completed and timed out.
- The log cleaner of compacted topics registers its own in `EVENTS` (compaction/metrics.py):
  counters of what its passes read, wrote and removed, and Kafka's LogCleaner and
  LogCleanerManager gauges read from the running cleaner at scrape time.

Label sets are bounded: API name and version, the topics and partitions of the cluster (a
request naming an unknown topic is not labelled with it), consumer groups with committed
offsets, Kafka error names, exception class names. No client ids.

Only the event-loop task updates these; prometheus_client's locks make a scrape safe anyway.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import time
import types
import typing
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol, TypeVar

from kio.schema.errors import ErrorCode
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from hot_tier.records.header import iter_headers


class PartitionLeader(Protocol):
    """What the collector reads of a partition's leader (partition/leader.py). A Protocol, not
    an import: the leader's own modules count through this one, which must stay below them."""

    topic: str
    index: int
    high_watermark: int
    remote: Any

    @property
    def closed(self) -> bool: ...
    @property
    def tiered(self) -> bool: ...
    @property
    def log_start_offset(self) -> int: ...
    @property
    def local_log_start_offset(self) -> int: ...
    @property
    def log_end_offset(self) -> int: ...
    @property
    def last_stable_offset(self) -> int: ...
    @property
    def local_segments(self) -> tuple[Any, ...]: ...
    def segments_to_upload(self) -> list[Any]: ...

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# A counter's `_created` series doubles every counter's output and no dashboard reads it.
disable_created_metrics()

EVENTS = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=EVENTS)
PlatformCollector(registry=EVENTS)
GCCollector(registry=EVENTS)

# Seconds; a request ends between 100 µs (Metadata) and a fetch's max wait (500 ms by default).
_REQUEST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Seconds; an upload is a few PUTs of up to segment.bytes, a remote read one or more ranged GETs.
_BUCKET_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

# --- kafka.network:type=RequestMetrics -------------------------------------------------------

REQUESTS = Counter(
    "kafka_network_requestmetrics_requests", "Requests handled, per API and version (Kafka's RequestsPerSec).",
    ["request", "version"], registry=EVENTS,
)  # fmt: skip
REQUEST_TIME = Histogram(
    "kafka_network_requestmetrics_totaltime_seconds",
    "Time from a parsed request to its response built, per API (Kafka's TotalTimeMs less the response's send): "
    "includes waits for acks=all and fetch long polls.",
    ["request"], buckets=_REQUEST_BUCKETS, registry=EVENTS,
)  # fmt: skip
REQUEST_THROTTLE_TIME = Histogram(
    "kafka_network_requestmetrics_throttletime_seconds",
    "Throttle time of responses to clients over a client quota, per API (Kafka's ThrottleTimeMs; only throttled responses).",
    ["request"], buckets=_REQUEST_BUCKETS, registry=EVENTS,
)  # fmt: skip
REQUEST_ERRORS = Counter(
    "kafka_network_requestmetrics_errors",
    "Error codes in responses, per API and Kafka error name, NONE included, each partition's counted (Kafka's ErrorsPerSec); "
    "a handler that raised counts as UNKNOWN_SERVER_ERROR.",
    ["request", "error"], registry=EVENTS,
)  # fmt: skip

# --- kafka.server:type=BrokerTopicMetrics ------------------------------------------------------

MESSAGES_IN = Counter("kafka_server_brokertopicmetrics_messagesin", "Records appended by Produce, per topic (Kafka's MessagesInPerSec).", ["topic"], registry=EVENTS)
BYTES_IN = Counter("kafka_server_brokertopicmetrics_bytesin", "Record-batch bytes appended by Produce, per topic (Kafka's BytesInPerSec).", ["topic"], registry=EVENTS)
BYTES_OUT = Counter("kafka_server_brokertopicmetrics_bytesout", "Record-batch bytes sent by Fetch, per topic (Kafka's BytesOutPerSec).", ["topic"], registry=EVENTS)
REMOTE_FETCH_THROTTLED = Counter(
    "diskless_remote_fetch_throttled",
    "Partition reads of a fetch that read nothing from the bucket because remote.log.manager.fetch.max.bytes.per.second "
    "was exceeded (KIP-956), per topic.",
    ["topic"], registry=EVENTS,
)  # fmt: skip

REPLICA_READ_BYTES = Counter(
    "diskless_replica_read_bytes",
    "Record-batch bytes served from the bucket for partitions other brokers lead, as a consumer's preferred read replica (KIP-392), per topic.",
    ["topic"], registry=EVENTS,
)  # fmt: skip
PRODUCE_REQUESTS = Counter(
    "kafka_server_brokertopicmetrics_totalproducerequests", "Produce requests per topic, one per partition written (Kafka's TotalProduceRequestsPerSec).",
    ["topic"], registry=EVENTS,
)  # fmt: skip
FAILED_PRODUCE_REQUESTS = Counter(
    "kafka_server_brokertopicmetrics_failedproducerequests", "Partitions of Produce requests answered with an error (Kafka's FailedProduceRequestsPerSec).",
    ["topic"], registry=EVENTS,
)  # fmt: skip
FETCH_REQUESTS = Counter(
    "kafka_server_brokertopicmetrics_totalfetchrequests", "Fetch requests per topic, one per partition read (Kafka's TotalFetchRequestsPerSec).",
    ["topic"], registry=EVENTS,
)  # fmt: skip
FAILED_FETCH_REQUESTS = Counter(
    "kafka_server_brokertopicmetrics_failedfetchrequests", "Partitions of Fetch requests answered with an error (Kafka's FailedFetchRequestsPerSec).",
    ["topic"], registry=EVENTS,
)  # fmt: skip

# Tiered storage (KIP-405's BrokerTopicMetrics; `kind` is the exception's class name).
REMOTE_COPY_REQUESTS = Counter("kafka_server_brokertopicmetrics_remotecopyrequests", "Segments uploaded to the bucket (Kafka's RemoteCopyRequestsPerSec).", ["topic"], registry=EVENTS)
REMOTE_COPY_BYTES = Counter("kafka_server_brokertopicmetrics_remotecopybytes", "Segment bytes uploaded to the bucket (Kafka's RemoteCopyBytesPerSec).", ["topic"], registry=EVENTS)
REMOTE_COPY_ERRORS = Counter(
    "kafka_server_brokertopicmetrics_remotecopyerrors", "Failed segment uploads, by exception class (Kafka's RemoteCopyErrorsPerSec).", ["topic", "kind"], registry=EVENTS
)
REMOTE_FETCH_REQUESTS = Counter("kafka_server_brokertopicmetrics_remotefetchrequests", "Reads of record bytes from the bucket (Kafka's RemoteFetchRequestsPerSec).", ["topic"], registry=EVENTS)
REMOTE_FETCH_BYTES = Counter("kafka_server_brokertopicmetrics_remotefetchbytes", "Record bytes read from the bucket (Kafka's RemoteFetchBytesPerSec).", ["topic"], registry=EVENTS)
REMOTE_FETCH_ERRORS = Counter(
    "kafka_server_brokertopicmetrics_remotefetcherrors", "Failed reads from the bucket, by exception class (Kafka's RemoteFetchErrorsPerSec).", ["topic", "kind"], registry=EVENTS
)
REMOTE_COPY_TIME = Histogram(
    "diskless_remote_copy_duration_seconds", "Time to upload one segment: catalogue row, data and index objects, commit object, commit.",
    buckets=_BUCKET_BUCKETS, registry=EVENTS,
)  # fmt: skip
REMOTE_FETCH_TIME = Histogram(
    "diskless_remote_fetch_duration_seconds", "Time of one read of record bytes from the bucket (cache hits included).", buckets=_BUCKET_BUCKETS, registry=EVENTS
)

FETCH_SESSIONS = Gauge(
    "kafka_server_fetchsessioncache_numincrementalfetchsessions", "Incremental fetch sessions kept (KIP-227; Kafka's NumIncrementalFetchSessions).",
    registry=EVENTS,
)  # fmt: skip
EVENT_LOOP_LAG = Gauge("diskless_event_loop_lag_seconds", "How late the event loop ran a timer at the last check (every second).", registry=EVENTS)

# --- write-ahead objects (wal/writer.py, wal/recovery.py) ----------------------------------------

# Seconds; a group commit is the interval's wait (5 ms by default) plus one PUT and one store commit.
_WAL_BUCKETS = (0.002, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
WAL_OBJECTS_COMMITTED = Counter(
    "diskless_wal_objects_committed", "Write-ahead objects PUT and committed in the metadata store.", registry=EVENTS
)  # fmt: skip
WAL_BATCHES_COMMITTED = Counter(
    "diskless_wal_batches_committed", "Record batches made durable by write-ahead commits.", registry=EVENTS
)  # fmt: skip
WAL_BYTES = Counter(
    "diskless_wal_bytes", "Bytes of write-ahead objects PUT to the bucket (batches, index and footer).", registry=EVENTS
)  # fmt: skip
WAL_COMMIT_TIME = Histogram(
    "diskless_wal_commit_duration_seconds",
    "Time from a batch's submission to its durability, for the oldest batch of each object: the wait for the "
    "commit interval, the PUT and the store commit (retries included).",
    buckets=_WAL_BUCKETS, registry=EVENTS,
)  # fmt: skip
WAL_RETRIES = Counter(
    "diskless_wal_retries",
    "Failed attempts of a write-ahead step, retried with backoff; `step` is put (the object) or commit (the store).",
    ["step"], registry=EVENTS,
)  # fmt: skip
for _step in ("put", "commit"):  # both steps shown from the start, at 0, for rate() and dashboards
    WAL_RETRIES.labels(_step)
WAL_HEDGED_PUTS = Counter(
    "diskless_wal_hedged_puts",
    "Write-ahead PUTs sent a second time, identical, because the first took longer than 90% of recent ones (wal/hedge.py).",
    registry=EVENTS,
)  # fmt: skip
WAL_FENCED_BATCHES = Counter(
    "diskless_wal_fenced_batches", "Batches dropped from a commit because their partition's leader epoch moved on (or it is gone).",
    registry=EVENTS,
)  # fmt: skip
WAL_PENDING_BYTES = Gauge(
    "diskless_wal_pending_bytes", "Appended batch bytes not yet durable (refused past wal.max.pending.bytes).", registry=EVENTS
)  # fmt: skip
WAL_OBJECTS_DELETED = Counter(
    "diskless_wal_objects_deleted",
    "Write-ahead objects deleted from the bucket; `reason` is committed (every batch inside segments or its topic gone) "
    "or orphan (PUT but never committed, older than the grace period).",
    ["reason"], registry=EVENTS,
)  # fmt: skip
WAL_CORRUPT_BATCHES = Counter(
    "diskless_wal_corrupt_batches",
    "Durable batches that could not be read back from their write-ahead object at recovery (the partition stays offline).",
    ["topic"], registry=EVENTS,
)  # fmt: skip

# --- the handler table ---------------------------------------------------------------------------

Handler = Callable[[Any, Any], Awaitable[Any]]
PRODUCE, FETCH = 0, 1
_NAMES: dict[int, str] = {}


def instrument(handlers: Mapping[int, Handler]) -> dict[int, Handler]:
    """The handler table with each handler timed and counted under its API's Kafka name."""
    return {api_key: _instrumented(api_key, handler) for api_key, handler in handlers.items()}


def _instrumented(api_key: int, handler: Handler) -> Handler:
    @functools.wraps(handler)
    async def handle(broker: Any, request: Any) -> Any:
        name = request_name(api_key, request.body)
        start = time.perf_counter()
        try:
            response = await handler(broker, request)
        except Exception:
            REQUEST_ERRORS.labels(name, "UNKNOWN_SERVER_ERROR").inc()
            raise
        finally:
            REQUESTS.labels(name, str(request.header.api_version)).inc()
            REQUEST_TIME.labels(name).observe(time.perf_counter() - start)
        try:
            _count_response(api_key, name, broker, request.body, response)
        except Exception:  # a metric must never cost a client its answer
            pass
        return response

    return handle


def request_name(api_key: int, body: Any) -> str:
    """Kafka's name of an API ("Produce", "ApiVersions"), as its RequestMetrics label it."""
    name = _NAMES.get(api_key)
    if name is None:
        if body is None:  # ApiVersions of an unsupported version carries no body
            return "ApiVersions" if api_key == 18 else str(api_key)
        name = _NAMES[api_key] = type(body).__name__.removesuffix("Request")
    return name


def _count_response(api_key: int, name: str, broker: Any, body: Any, response: Any) -> None:
    if response is not None:
        for code, count in error_counts(response).items():
            REQUEST_ERRORS.labels(name, code).inc(count)
    if api_key == PRODUCE and body is not None:
        _count_produce(broker.registry.topics, body, response)
    elif api_key == FETCH and response is not None:
        _count_fetch(broker.registry.topics, response)


def _count_produce(topics: Mapping[str, Any], body: Any, response: Any) -> None:
    errors: dict[tuple[str, int], int] = {}
    if response is not None:  # acks=0 has no answer: what was sent is counted as appended
        for topic in response.responses:
            for partition in topic.partition_responses:
                errors[(topic.name, partition.index)] = partition.error_code
    for topic in body.topic_data:
        if topic.name not in topics:  # no label for names a client made up
            continue
        for data in topic.partition_data:
            PRODUCE_REQUESTS.labels(topic.name).inc()
            if errors.get((topic.name, data.index), 0) != 0 or not data.records:
                FAILED_PRODUCE_REQUESTS.labels(topic.name).inc()
                continue
            BYTES_IN.labels(topic.name).inc(len(data.records))
            MESSAGES_IN.labels(topic.name).inc(sum(h.last_offset_delta + 1 for h in iter_headers(data.records, check_crc=False)))


def _count_fetch(topics: Mapping[str, Any], response: Any) -> None:
    """Per topic, one update of each counter for all its partitions in the response (a
    consumer of hundreds of partitions would otherwise pay a label lookup per partition)."""
    for topic in response.responses:
        if topic.topic not in topics:
            continue
        partitions = topic.partitions
        failed = sum(1 for p in partitions if p.error_code != 0)
        sent = sum(len(p.records) for p in partitions if p.error_code == 0 and p.records)
        FETCH_REQUESTS.labels(topic.topic).inc(len(partitions))
        if failed:
            FAILED_FETCH_REQUESTS.labels(topic.topic).inc(failed)
        if sent:
            BYTES_OUT.labels(topic.topic).inc(sent)


@functools.cache
def _walk_plan(entity_type: type) -> tuple[bool, tuple[str, ...]]:
    """Whether a kio entity type has an `error_code`, and its fields that hold tuples of entities."""
    hints = typing.get_type_hints(entity_type)
    nested = []
    for f in dataclasses.fields(entity_type):
        hint = hints.get(f.name)
        optional = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
        for candidate in optional:
            if typing.get_origin(candidate) is tuple and any(dataclasses.is_dataclass(a) for a in typing.get_args(candidate)):
                nested.append(f.name)
                break
    return any(f.name == "error_code" for f in dataclasses.fields(entity_type)), tuple(nested)


def error_counts(entity: Any) -> dict[str, int]:
    """Every `error_code` in a kio response, counted by Kafka's error name (as Kafka's
    AbstractResponse.errorCounts does): the top-level one and each topic's and partition's."""
    counts: dict[str, int] = {}
    stack = [entity]
    while stack:
        item = stack.pop()
        has_error, nested = _walk_plan(type(item))
        if has_error:
            key = _error_name(item.error_code)
            counts[key] = counts.get(key, 0) + 1
        for name in nested:
            stack.extend(getattr(item, name) or ())
    return counts


@functools.cache
def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return str(code)


# --- tiering: one decorator per place where the work happens ------------------------------------

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def observe_remote_copy(upload: F) -> F:
    """Wraps `Uploader._upload(self, leader, segment)`: one segment to the bucket."""

    @functools.wraps(upload)
    async def observed(self: Any, leader: Any, segment: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            result = await upload(self, leader, segment, *args, **kwargs)
        except Exception as exc:
            REMOTE_COPY_ERRORS.labels(leader.topic, type(exc).__name__).inc()
            raise
        REMOTE_COPY_TIME.observe(time.perf_counter() - start)
        REMOTE_COPY_REQUESTS.labels(leader.topic).inc()
        REMOTE_COPY_BYTES.labels(leader.topic).inc(segment.size_bytes)
        return result

    return observed  # type: ignore[return-value]


def observe_remote_fetch(read: F) -> F:
    """Wraps `RemoteLog.read(self, offset, max_bytes, ...)`: record bytes from the bucket."""

    @functools.wraps(read)
    async def observed(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            data = await read(self, *args, **kwargs)
        except Exception as exc:
            REMOTE_FETCH_ERRORS.labels(self.topic, type(exc).__name__).inc()
            raise
        REMOTE_FETCH_TIME.observe(time.perf_counter() - start)
        REMOTE_FETCH_REQUESTS.labels(self.topic).inc()
        if data:
            REMOTE_FETCH_BYTES.labels(self.topic).inc(len(data))
        return data

    return observed  # type: ignore[return-value]


async def watch_event_loop_lag(interval_s: float = 1.0) -> None:
    """Runs until cancelled: how late a timer of `interval_s` fires is the loop's lag."""
    loop = asyncio.get_running_loop()
    while True:
        start = loop.time()
        await asyncio.sleep(interval_s)
        EVENT_LOOP_LAG.set(max(0.0, loop.time() - start - interval_s))


# --- state at scrape time ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class GroupOffset:
    """One committed offset of a consumer group, as the metadata store holds it."""

    group_id: str
    topic: str
    partition: int
    offset: int


def consumer_lag(committed_offset: int, high_watermark: int) -> int:
    """kafka_exporter's and kafka-consumer-groups' lag: what the group has yet to read."""
    return max(0, high_watermark - committed_offset)


class BrokerStateCollector:
    """Gauges computed at scrape time from the leaders (and committed offsets read just before),
    so the partition state has one owner and a scrape sees it as it is."""

    def __init__(self, leaders: Iterable[PartitionLeader], group_offsets: Iterable[GroupOffset], now_s: float) -> None:
        self.leaders = list(leaders)
        self.group_offsets = list(group_offsets)
        self.now_s = now_s

    def collect(self) -> Iterator[Metric]:
        tp = ["topic", "partition"]

        def family(name: str, doc: str, labels: list[str] = tp) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=labels)

        log_start = family("kafka_log_log_logstartoffset", "The first offset served, bucket included (Kafka's Log LogStartOffset).")
        log_end = family("kafka_log_log_logendoffset", "The offset after the last record appended (Kafka's Log LogEndOffset).")
        size = family("kafka_log_log_size", "Bytes of the local segments (Kafka's Log Size).")
        segments = family("kafka_log_log_numlogsegments", "Local segments, the active one included (Kafka's Log NumLogSegments).")
        high_watermark = family("diskless_log_highwatermark", "The offset up to which consumers may read.")
        local_start = family("diskless_log_locallogstartoffset", "The first offset on local disk (Kafka's localLogStartOffset).")
        remote_bytes = family("kafka_server_brokertopicmetrics_remotelogsizebytes", "Bytes of the committed segments in the bucket (Kafka's RemoteLogSizeBytes).")
        remote_segments = family(
            "kafka_server_brokertopicmetrics_remotelogmetadatacount", "Committed segments in the bucket (Kafka's RemoteLogMetadataCount)."
        )
        lag_segments = family(
            "kafka_server_brokertopicmetrics_remotecopylagsegments", "Rolled segments waiting for the bucket (Kafka's RemoteCopyLagSegments)."
        )
        lag_bytes = family("kafka_server_brokertopicmetrics_remotecopylagbytes", "Bytes of rolled segments waiting for the bucket (Kafka's RemoteCopyLagBytes).")
        lag_seconds = family(
            "diskless_remote_copy_lag_seconds", "Age of the oldest segment waiting for the bucket, from its last write (0 when none waits)."
        )
        lso_lag = family(
            "kafka_cluster_partition_laststableoffsetlag",
            "High watermark minus the last stable offset: offsets open transactions hold from read_committed consumers (Kafka's LastStableOffsetLag).",
        )
        leaders = self.leaders
        for leader in leaders:
            if leader.closed:
                continue
            labels = [leader.topic, str(leader.index)]
            local = leader.local_segments
            waiting = leader.segments_to_upload() if leader.tiered else []
            remote = leader.remote.segments
            log_start.add_metric(labels, leader.log_start_offset)
            log_end.add_metric(labels, leader.log_end_offset)
            high_watermark.add_metric(labels, leader.high_watermark)
            local_start.add_metric(labels, leader.local_log_start_offset)
            size.add_metric(labels, sum(s.size_bytes for s in local))
            segments.add_metric(labels, len(local))
            remote_bytes.add_metric(labels, sum(s.size_bytes for s in remote))
            remote_segments.add_metric(labels, len(remote))
            lag_segments.add_metric(labels, len(waiting))
            lag_bytes.add_metric(labels, sum(s.size_bytes for s in waiting))
            lag_seconds.add_metric(labels, _age_s(waiting[0].log_path, self.now_s) if waiting else 0.0)
            lso_lag.add_metric(labels, leader.high_watermark - leader.last_stable_offset)
        yield from (log_start, log_end, high_watermark, local_start, size, segments, remote_bytes, remote_segments, lag_segments, lag_bytes, lag_seconds)
        yield lso_lag

        partitions = family("kafka_server_replicamanager_partitioncount", "Partitions on this broker (Kafka's ReplicaManager PartitionCount).", [])
        partitions.add_metric([], len(leaders))
        leader_count = family("kafka_server_replicamanager_leadercount", "Partitions this broker leads (Kafka's ReplicaManager LeaderCount).", [])
        leader_count.add_metric([], len(leaders))
        yield from (partitions, leader_count)

        by_partition = {(leader.topic, leader.index): leader for leader in leaders}
        group_labels = ["consumergroup", "topic", "partition"]
        current = family("kafka_consumergroup_current_offset", "A consumer group's committed offset (kafka_exporter's name).", group_labels)
        lag = family("kafka_consumergroup_lag", "High watermark minus the group's committed offset (kafka_exporter's name).", group_labels)
        for committed in self.group_offsets:
            labels = [committed.group_id, committed.topic, str(committed.partition)]
            current.add_metric(labels, committed.offset)
            leader = by_partition.get((committed.topic, committed.partition))
            if leader is not None and committed.offset >= 0:
                lag.add_metric(labels, consumer_lag(committed.offset, leader.high_watermark))
        yield from (current, lag)


def _age_s(path: os.PathLike[str], now_s: float) -> float:
    try:
        return max(0.0, now_s - os.stat(path).st_mtime)
    except OSError:  # uploaded and deleted since it was listed
        return 0.0


class RemoteReaderCollector:
    """The broker-wide remote reader's counts (cold_tier.remote_log.ReaderStats), as counters.

    `cache="fetch"`: remote fetches served without waiting for a GET (hits) or not (misses), so
    hits + misses = remote fetches; `cache="chunk"` and `cache="index"`: lookups of .log chunks
    and of index objects (a lookup joining a GET in flight is a miss)."""

    def __init__(self, stats: Any) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        s = self.stats
        hits = CounterMetricFamily("diskless_remote_cache_hits", "Remote-read cache hits, per cache (fetch: whole remote fetches).", labels=["cache"])
        misses = CounterMetricFamily("diskless_remote_cache_misses", "Remote-read cache misses, per cache (fetch: remote fetches that waited for a GET).", labels=["cache"])
        for cache, hit, miss in (("fetch", s.read_hits, s.read_misses), ("chunk", s.chunk_hits, s.chunk_misses), ("index", s.index_hits, s.index_misses)):
            hits.add_metric([cache], hit)
            misses.add_metric([cache], miss)
        gets = CounterMetricFamily(
            "diskless_remote_get_requests", "GETs of segment objects, by what started them: fetch (a .log chunk a read needed), prefetch, index.",
            labels=["purpose"],
        )  # fmt: skip
        for purpose, count in (("fetch", s.chunk_gets), ("prefetch", s.prefetch_gets), ("index", s.index_gets)):
            gets.add_metric([purpose], count)
        cached_bytes = GaugeMetricFamily("diskless_remote_cache_chunk_bytes", "Bytes of .log chunks in the remote-read cache.", value=s.cached_chunk_bytes)
        cached_indexes = GaugeMetricFamily("diskless_remote_cache_indexes", "Index objects in the remote-read cache.", value=s.cached_indexes)
        yield from (hits, misses, gets, cached_bytes, cached_indexes)


class TransactionRecordView(Protocol):
    """What the collector reads of a transactional id's state (metadata.transactions.TransactionRecord)."""

    state: str
    txn_start_ms: int


class TransactionStats(Protocol):
    """The coordinator shell's counts (txn/transactions.py CoordinatorStats)."""

    committed: int
    aborted: int
    timed_out: int


# Kafka's TransactionState names our coordinator moves through (Dead and PrepareEpochFence never).
TRANSACTION_STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort")
OPEN_TRANSACTION_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort")


class TransactionCoordinatorCollector:
    """The transactions this broker coordinates, read at scrape time (Kafka has no coordinator
    gauges for them, hence `diskless_*`): open ones (Ongoing, PrepareCommit, PrepareAbort: they
    hold read_committed consumers back), the oldest open one's age from its start, each
    state's count (every state shown, 0 included), and the shell's counters."""

    def __init__(self, records: Iterable[TransactionRecordView], stats: TransactionStats, now_ms: int) -> None:
        self.records = list(records)
        self.stats = stats
        self.now_ms = now_ms

    def collect(self) -> Iterator[Metric]:
        open_ = [r for r in self.records if r.state in OPEN_TRANSACTION_STATES]
        yield GaugeMetricFamily(
            "diskless_transaction_coordinator_open_transactions",
            "Transactions this broker coordinates that are open (Ongoing, PrepareCommit or PrepareAbort).", value=len(open_),
        )  # fmt: skip
        starts = [r.txn_start_ms for r in open_ if r.txn_start_ms >= 0]
        yield GaugeMetricFamily(
            "diskless_transaction_coordinator_oldest_open_transaction_age_seconds",
            "Time since the oldest open transaction this broker coordinates began (0 when none is open).",
            value=max(0.0, (self.now_ms - min(starts)) / 1000) if starts else 0.0,
        )  # fmt: skip
        by_state = GaugeMetricFamily(
            "diskless_transaction_coordinator_transactions", "Transactional ids this broker coordinates, by the state of their last transaction.",
            labels=["state"],
        )  # fmt: skip
        for state in TRANSACTION_STATES:
            by_state.add_metric([state], sum(1 for r in self.records if r.state == state))
        yield by_state
        completed = CounterMetricFamily(
            "diskless_transaction_coordinator_completed",
            "Transactions this broker completed as coordinator since it started (every marker durable), by result: committed or aborted.",
            labels=["result"],
        )  # fmt: skip
        completed.add_metric(["committed"], self.stats.committed)
        completed.add_metric(["aborted"], self.stats.aborted)
        yield completed
        yield CounterMetricFamily(
            "diskless_transaction_coordinator_timed_out",
            "Transactions this broker aborted because they went silent past their transaction.timeout.ms (counted in aborted too once complete).",
            value=self.stats.timed_out,
        )  # fmt: skip


class _Scrape:
    """What one scrape collects: the process's events, then this broker's state."""

    def __init__(self, collectors: tuple[Any, ...]) -> None:
        self.collectors = collectors

    def collect(self) -> Iterator[Metric]:
        yield from EVENTS.collect()
        for collector in self.collectors:
            yield from collector.collect()


def exposition(*collectors: BrokerStateCollector | RemoteReaderCollector | TransactionCoordinatorCollector) -> bytes:
    """The text format of one scrape: the events, then each collector's state."""
    return generate_latest(_Scrape(collectors))  # type: ignore[arg-type]
