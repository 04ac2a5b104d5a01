"""A compacted topic read as its table: the latest value of each key, as Kafka's log cleaner
would leave it once every tombstone has gone. The bucket keeps a compacted topic's segments
as they were written (the broker compacts its local copies), so a read holds every version;
this is the one step from there to the table.

    from spark_reader.compacted import latest_per_key
    table = latest_per_key(spark.read.format("diskless").option("subscribe", "users").load(url))

PySpark is imported on the call, as everywhere in this package but the data source.
"""

from __future__ import annotations

from typing import Any


def latest_per_key(df: Any, *, keep_tombstones: bool = False) -> Any:
    """Per (topic, partition, key) the record at the highest offset (keys are compacted per
    partition, as Kafka does); keys whose latest record is a tombstone (a null value) are left
    out unless `keep_tombstones`. Records without a key, which a compacted topic refuses, are
    dropped. The columns are the reader's."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    newest_first = Window.partitionBy("topic", "partition", "key").orderBy(F.col("offset").desc())
    latest = df.where(F.col("key").isNotNull()).withColumn("_newest", F.row_number().over(newest_first)).where(F.col("_newest") == 1).drop("_newest")
    return latest if keep_tombstones else latest.where(F.col("value").isNotNull())
