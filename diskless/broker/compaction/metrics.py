"""The log cleaner's metrics, registered in the broker's process-wide registry (metrics.EVENTS).

Names follow metrics.py's rule: Kafka's JMX metrics as the Prometheus JMX exporter translates
them (`kafka.log:type=LogCleaner,name=cleaner-recopy-percent` becomes
`kafka_log_logcleaner_cleaner_recopy_percent`); what only Diskless has is `diskless_log_cleaner_*`.

- Counters, per topic, counted by the cleaner when a pass ends (`observe_cleaning`).
- Gauges, read at scrape time from the running LogCleaner by `LOG_CLEANER`, which the cleaner
  attaches itself to while its task runs. Only the event-loop task updates what they read.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily, Metric

from ..metrics import EVENTS

CLEANINGS = Counter("diskless_log_cleaner_cleanings", "Passes of the log cleaner over a compacted partition, per topic.", ["topic"], registry=EVENTS)
CLEANER_READ_BYTES = Counter(
    "diskless_log_cleaner_read_bytes", "Segment bytes the cleaner's passes went through (the segments they rewrote or found clean), per topic.",
    ["topic"], registry=EVENTS,
)  # fmt: skip
CLEANER_WRITTEN_BYTES = Counter(
    "diskless_log_cleaner_written_bytes", "Bytes the segments those passes went through hold after them, per topic (read minus written: reclaimed).",
    ["topic"], registry=EVENTS,
)  # fmt: skip
CLEANER_READ_RECORDS = Counter("diskless_log_cleaner_read_records", "Records the cleaner's passes went through, per topic.", ["topic"], registry=EVENTS)
CLEANER_REMOVED_RECORDS = Counter(
    "diskless_log_cleaner_removed_records", "Records the cleaner removed: superseded by a newer record of their key, tombstones past "
    "delete.retention.ms, records without a key; per topic.", ["topic"], registry=EVENTS,
)  # fmt: skip
CLEANER_DROPPED_TOMBSTONES = Counter(
    "diskless_log_cleaner_dropped_tombstones", "Tombstones removed once past delete.retention.ms (counted in removed records too), per topic.",
    ["topic"], registry=EVENTS,
)  # fmt: skip

BUCKET_REWRITES = Counter(
    "diskless_log_cleaner_bucket_replaced_segments", "Bucket segments replaced by their cleaned copies (compaction/bucket.py), per topic.",
    ["topic"], registry=EVENTS,
)  # fmt: skip
BUCKET_RECLAIMED_BYTES = Counter(
    "diskless_log_cleaner_bucket_reclaimed_bytes", "Bytes the bucket holds less once replaced segments' objects are gone, per topic.",
    ["topic"], registry=EVENTS,
)  # fmt: skip


def observe_bucket_rewrite(topic: str, replaced: int, reclaimed_bytes: int) -> None:
    BUCKET_REWRITES.labels(topic).inc(replaced)
    BUCKET_RECLAIMED_BYTES.labels(topic).inc(max(0, reclaimed_bytes))


def observe_cleaning(topic: str, stats: Any) -> None:
    """One finished pass of the cleaner over a partition of `topic` (compaction/rewrite.CleanStats)."""
    CLEANINGS.labels(topic).inc()
    CLEANER_READ_BYTES.labels(topic).inc(stats.bytes_read)
    CLEANER_WRITTEN_BYTES.labels(topic).inc(stats.bytes_written)
    CLEANER_READ_RECORDS.labels(topic).inc(stats.records_read)
    CLEANER_REMOVED_RECORDS.labels(topic).inc(stats.records_read - stats.records_kept)
    CLEANER_DROPPED_TOMBSTONES.labels(topic).inc(stats.tombstones_dropped)


class LogCleanerCollector:
    """The log cleaner's gauges at scrape time, from the running LogCleaner (compaction/cleaner.py);
    nothing while none runs (log.cleaner.enable=false, or no thread).

    Kafka's own (integers, as Kafka's gauges compute them), over the passes of the cleaner's
    last round that cleaned something (Kafka: each thread's last pass):
        kafka_log_logcleaner_max_clean_time_secs                 longest pass, whole seconds
        kafka_log_logcleaner_cleaner_recopy_percent              100 * bytes written / bytes read
        kafka_log_logcleaner_max_buffer_utilization_percent      fullest offset map, percent
        kafka_log_logcleanermanager_max_dirty_percent            the dirtiest compacted partition
                                                                 at the last round, percent
        kafka_log_logcleanermanager_time_since_last_run_ms       since the last round began
        kafka_log_logcleanermanager_uncleanable_partitions_count per log directory
    and per partition, as of the last round: diskless_log_cleaner_dirty_ratio."""

    def __init__(self) -> None:
        self.cleaner: Any = None

    def attach(self, cleaner: Any) -> None:
        self.cleaner = cleaner

    def detach(self, cleaner: Any) -> None:
        if self.cleaner is cleaner:
            self.cleaner = None

    def describe(self) -> Iterator[Metric]:
        return iter(())  # the names vary with the cleaner's presence; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        c = self.cleaner
        if c is None:
            return
        passes = c.last_passes
        read = sum(p.stats.bytes_read for p in passes)
        written = sum(p.stats.bytes_written for p in passes)
        gauges = (
            ("kafka_log_logcleaner_max_clean_time_secs", "Duration of the longest pass of the last round, in whole seconds (Kafka's max-clean-time-secs).",
             int(max((p.elapsed_s for p in passes), default=0.0))),
            ("kafka_log_logcleaner_cleaner_recopy_percent", "Bytes written as a percentage of bytes read by the last round's passes (Kafka's cleaner-recopy-percent).",
             int(100 * written / max(read, 1))),
            ("kafka_log_logcleaner_max_buffer_utilization_percent", "Fullest offset map of the last round's passes, percent of its capacity (Kafka's max-buffer-utilization-percent).",
             int(100 * max((p.buffer_utilization for p in passes), default=0.0))),
            ("kafka_log_logcleanermanager_max_dirty_percent", "Dirty ratio of the dirtiest compacted partition at the cleaner's last round, percent (Kafka's max-dirty-percent).",
             int(100 * max(c.dirty_ratios.values(), default=0.0))),
            ("kafka_log_logcleanermanager_time_since_last_run_ms", "Milliseconds since the cleaner's last round began (Kafka's time-since-last-run-ms).",
             0 if c.last_run_ms is None else max(0, c.now_ms() - c.last_run_ms)),
        )  # fmt: skip
        for name, doc, value in gauges:
            yield GaugeMetricFamily(name, doc, value=value)
        uncleanable = GaugeMetricFamily(
            "kafka_log_logcleanermanager_uncleanable_partitions_count",
            "Partitions whose cleaning failed, skipped while this broker leads them (Kafka's uncleanable-partitions-count).", labels=["logDirectory"],
        )  # fmt: skip
        by_dir = {str(d): 0 for d in c.log_dirs()}
        for path in c.uncleanable.values():
            by_dir[str(path)] = by_dir.get(str(path), 0) + 1
        for log_dir, count in sorted(by_dir.items()):
            uncleanable.add_metric([log_dir], count)
        yield uncleanable
        ratio = GaugeMetricFamily(
            "diskless_log_cleaner_dirty_ratio", "Dirty bytes over cleanable bytes of a compacted partition at the cleaner's last round.", labels=["topic", "partition"]
        )
        for (topic, partition), value in sorted(c.dirty_ratios.items()):
            ratio.add_metric([topic, str(partition)], value)
        yield ratio


LOG_CLEANER = LogCleanerCollector()
EVENTS.register(LOG_CLEANER)  # type: ignore[arg-type]
