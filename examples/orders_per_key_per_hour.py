"""Orders per key per hour, straight from the bucket: a Spark job over the `diskless` source.

    python examples/orders_per_key_per_hour.py OBJECT_STORE_URL [--topic orders]
        [--since 2024-05-01T00:00:00Z] [--bootstrap 127.0.0.1:9092] [--output DIR]

OBJECT_STORE_URL is the URL the broker was given (`file:///...` or
`s3://bucket/prefix?endpoint_url=...`, with AWS_* credentials in the environment). With
--bootstrap the records not yet tiered are read from the broker too, so the last hour is
complete. --since becomes a filter on `timestamp`, which the reader pushes down: segments
older than it are never fetched. The result (hour, key, orders, bytes) is shown, or written
as Parquet with --output.
"""

from __future__ import annotations

import argparse
import os
import sys


def orders_per_key_per_hour(orders):
    """(hour, key, orders, bytes) per record key and hour of the record timestamp (UTC),
    from a DataFrame with the Kafka schema."""
    from pyspark.sql import functions as F

    return (
        orders.groupBy(F.date_trunc("hour", F.col("timestamp")).alias("hour"), F.col("key").cast("string").alias("key"))
        .agg(F.count("*").alias("orders"), F.sum(F.length("value")).alias("bytes"))
        .orderBy("hour", "key")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="Orders per key per hour, from the bucket.")
    parser.add_argument("url", help="the object-store URL the broker was given")
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--since", help="only records from this time on (ISO 8601, e.g. 2024-05-01T00:00:00Z)")
    parser.add_argument("--bootstrap", help="host:port of a broker, to include records not tiered yet")
    parser.add_argument("--output", help="write Parquet here instead of showing the result")
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from spark_reader import DisklessDataSource

    spark = (
        SparkSession.builder.appName("orders-per-key-per-hour")
        .config("spark.sql.python.filterPushdown.enabled", "true")  # lets the reader prune by time
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.dataSource.register(DisklessDataSource)
    reader = spark.read.format("diskless").option("subscribe", args.topic)
    if args.bootstrap:
        reader = reader.option("kafka.bootstrap.servers", args.bootstrap)
    orders = reader.load(args.url)
    if args.since:
        orders = orders.where(F.col("timestamp") >= F.to_timestamp(F.lit(args.since)))
    result = orders_per_key_per_hour(orders)
    if args.output:
        result.write.mode("overwrite").parquet(args.output)
    else:
        result.show(100, truncate=False)
    spark.stop()


if __name__ == "__main__":
    main()
