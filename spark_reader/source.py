"""The PySpark Python Data Source `diskless`: Spark's Kafka source, read from the bucket.

    from spark_reader import DisklessDataSource
    spark.dataSource.register(DisklessDataSource)
    df = spark.read.format("diskless").option("subscribe", "orders").load("s3://bucket/prefix")

Where each piece runs: `DisklessDataSource` and the readers are built on the driver (in a
Python worker Spark starts for planning) and pickled to the executors, so they hold only
options and a `BucketLocation`, never a client. `partitions()` plans on the driver
(catalogue.py); `read()` runs on an executor and opens its own bucket client (or broker
connection) per task, and yields `pyarrow.RecordBatch`es of the Kafka schema (schema.py).

Filters are evaluated by Spark by default (DisklessReader), and every query of a DataFrame
gets exactly its rows. Filter pushdown (DisklessPushdownReader) is opt-in, with the option
pushDownPredicate=true and the session conf spark.sql.python.filterPushdown.enabled=true,
because Spark 4.3 cannot scope a pushed-down plan to one scan: the partitions and read
function that `pushFilters` plans are stored on the JVM's PythonDataSourceV2, which every scan
of one DataFrame shares (PythonScanBuilder.pushFilters -> ds.setReadInfo), and a later scan
that pushes nothing (no filter, or none Spark can hand to Python: `df.count()` after
`df.where("offset < 100").count()`, `df.cache()`, the unfiltered side of a self-join) reuses
the last pushed plan instead of planning its own. Whatever a reader prunes there leaks into
the other queries (issue K); with nothing pushed, the plan Spark keeps is the whole selection
of the options, right for every query. Upstream Spark keeps the read info on the scan builder
instead; until the Spark we run does, pushDownPredicate=true is only right for a DataFrame
that is scanned once (one action, no self-join, no cache).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition

from .options import ReadOptions, parse_options
from .schema import spark_ddl

if TYPE_CHECKING:
    import pyarrow as pa

# Planning and reading (catalogue, tasks, filters and what they import: hot_tier.records,
# cold_tier.layout, numpy) are imported where they are used, not here: Spark starts a Python
# worker just to call schema() at load(), and one per worker module after it, each importing
# this module afresh; a worker that only needs the schema need not pay for them.


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


class DisklessReader(DataSourceReader):
    """The batch reader, the default: no filter pushdown (see the module header), so it runs in
    any session, and Spark's conf spark.sql.python.filterPushdown.enabled does not matter (a
    reader that implements pushFilters fails with DATA_SOURCE_PUSHDOWN_DISABLED without it).
    Its plan depends on the options alone, so the one plan Spark keeps per DataFrame is right
    for every query of it."""

    def __init__(self, options: ReadOptions) -> None:
        from .filters import Pushdown
        from .tasks import locate

        self.options = options
        self.location = locate(options)
        self.pushdown = Pushdown()

    def partitions(self) -> list[InputPartition]:
        from .bucket import open_bucket
        from .catalogue import plan_read

        bucket = open_bucket(self.location)
        try:
            tasks = plan_read(bucket, self.options, self.pushdown)
        finally:
            bucket.close()
        return [InputPartition(task) for task in tasks]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from .tasks import read_task

        return read_task(partition.value, self.location, self.options, self.pushdown)


class DisklessPushdownReader(DisklessReader):
    """The batch reader with filter pushdown (filters.py), for pushDownPredicate=true: only for
    a DataFrame scanned once (module header). Spark makes a fresh reader for each pushdown, but
    the pushdown is computed from `filters` alone all the same, never folded into an earlier
    one, so the reader's state is a function of this call's filters."""

    def pushFilters(self, filters: list) -> list:
        from .filters import Pushdown, push_filters

        self.pushdown, rejected = push_filters(filters, Pushdown())
        return rejected

