"""Log compaction of compacted topics (cleanup.policy=compact): Kafka's log cleaner.

- `config`   the broker's log.cleaner.* settings and a topic's compaction configs, parsed once.
- `policy`   sans-IO: which segments to clean (dirty ratio, compaction lags, never the active
             segment) and the key -> last offset map within the dedupe buffer.
- `rewrite`  sans-IO: one batch filtered against the map, re-encoded with its base offset.
- `cleaner`  the shell: rewrites a partition's local segments with a crash-safe swap, and the
             broker's background task that runs it under the I/O rate limit.
- `metrics`  its counters and Kafka's LogCleaner / LogCleanerManager gauges on /metrics.
"""
