"""The PySpark Python Data Source `diskless`: Spark's Kafka source, read from the bucket.

    from spark_reader import DisklessDataSource
    spark.dataSource.register(DisklessDataSource)
    df = spark.read.format("diskless").option("subscribe", "orders").load("s3://bucket/prefix")

Where each piece runs: `DisklessDataSource` and the readers are built on the driver (in a
Python worker Spark starts for planning) and pickled to the executors, so they hold only
options and a `BucketLocation`, never a client. `partitions()` plans on the driver
(catalogue.py); `read()` runs on an executor and opens its own bucket client (or broker
connection) per task, and yields `pyarrow.RecordBatch`es of the Kafka schema (schema.py).

Filter pushdown is on by default (DisklessPushdownReader), and then Spark insists on the
session conf spark.sql.python.filterPushdown.enabled=true; the option pushDownPredicate=false
gives a reader without it, for sessions where that conf cannot be set.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition

from .bucket import BucketLocation, open_bucket, resolve_location
from .catalogue import plan_read
from .filters import Pushdown, push_filters
from .options import ReadOptions, parse_options
from .plan import BrokerRange, BucketRange, Task
from .read import read_bucket_range
from .schema import spark_ddl


class DisklessDataSource(DataSource):
    """Format "diskless": `load(OBJECT_STORE_URL)` with the options of Spark's Kafka source."""

    @classmethod
    def name(cls) -> str:
        return "diskless"

    def schema(self) -> str:
        value = str(self.options.get("includeHeaders", "false")).strip().lower()
        return spark_ddl(value == "true")

    def reader(self, schema: object) -> DataSourceReader:
        options = parse_options(self.options, streaming=False)
        return DisklessPushdownReader(options) if options.push_down_predicate else DisklessReader(options)

    def streamReader(self, schema: object) -> DataSourceStreamReader:
        from .stream import DisklessStreamReader  # its ReadLimit types need PySpark >= 4.2

        return DisklessStreamReader(parse_options(self.options, streaming=True))


def locate(options: ReadOptions) -> BucketLocation:
    """The bucket of `options`, resolved with the driver's environment."""
    return resolve_location(options.path, options.store_env, os.environ)


class DisklessReader(DataSourceReader):
    """The batch reader without filter pushdown, for pushDownPredicate=false: Spark refuses a
    reader that implements pushFilters (error DATA_SOURCE_PUSHDOWN_DISABLED) in a session
    without spark.sql.python.filterPushdown.enabled=true."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.location = locate(options)
        self.pushdown = Pushdown()

    def partitions(self) -> list[InputPartition]:
        bucket = open_bucket(self.location)
        try:
            tasks = plan_read(bucket, self.options, self.pushdown)
        finally:
            bucket.close()
        return [InputPartition(task) for task in tasks]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_task(partition.value, self.location, self.options, self.pushdown)


class DisklessPushdownReader(DisklessReader):
    """The batch reader with filter pushdown (filters.py), the default."""

    def pushFilters(self, filters: list) -> list:
        self.pushdown, rejected = push_filters(filters, self.pushdown)
        return rejected


def read_task(task: Task | None, location: BucketLocation, options: ReadOptions, pushdown: Pushdown) -> Iterator[pa.RecordBatch]:
    """The records of one task (None: Spark's stand-in when a plan has no tasks)."""
    if isinstance(task, BucketRange):
        bucket = open_bucket(location)
        try:
            yield from read_bucket_range(bucket, task, pushdown.bounds, options.include_headers, options.fail_on_data_loss)
        finally:
            bucket.close()
    elif isinstance(task, BrokerRange):
        from .hot_tail import read_broker_range  # imported here: diskless.wire loads asyncio

        yield from read_broker_range(task, pushdown.bounds, options.include_headers, options.fail_on_data_loss)
