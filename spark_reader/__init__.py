"""A PySpark Data Source over the bucket: Spark's Kafka source, read from committed segments
and the write-ahead objects above them (every acknowledged record, no broker needed).

    from spark_reader import DisklessDataSource
    spark.dataSource.register(DisklessDataSource)
    spark.read.format("diskless").option("subscribe", "orders").load(OBJECT_STORE_URL)

    source          DisklessDataSource, the batch readers
    stream          the streaming reader (readStream)
    tasks           one planned task run on an executor (both readers)
    options         the reader options, parsed once (Spark's Kafka source names)
    filters         filter pushdown on topic, partition, offset, timestamp
    catalogue       planning on the driver: LISTs of commit keys, offset resolution
    plan            the pure planning decisions and the picklable tasks
    read            reading segments on a worker: ranged GETs, index lookups
    wal             the write-ahead tail above the segments, decided from the bucket alone
    wal_read        write-ahead objects: their indexes (driver) and batches (worker)
    decode          record batches -> Arrow columns, vectorised
    segment_index   .index/.timeindex lookups
    bucket          synchronous bucket clients (local directory, minio)
    hot_tail        the not-yet-tiered tail, from a broker, over diskless.wire
    schema          the Kafka schema in Spark DDL and Arrow
    compacted       latest_per_key: a compacted topic read as its table (last value per key)
    errors          every error this package raises

Imports only `hot_tier.records` and the pure parts of `cold_tier` at import time; never
asyncio or the broker (`diskless.wire`, which loads asyncio through kio, only inside the
hot-tail functions). `DisklessDataSource` is loaded on first use, so the pure modules can be
used without importing PySpark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .source import DisklessDataSource

__all__ = ["DisklessDataSource"]


def __getattr__(name: str) -> Any:
    if name == "DisklessDataSource":
        from .source import DisklessDataSource

        return DisklessDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
