"""Orders per key per hour, straight from the bucket: a Spark job over the `diskless` source.

    python examples/orders_per_key_per_hour.py OBJECT_STORE_URL [--topic orders]
        [--since 2024-05-01T00:00:00Z] [--bootstrap 127.0.0.1:9092] [--output DIR]

Run it with any Python: without PySpark it starts again with the project's interpreter
(.venv/bin/python). OBJECT_STORE_URL is the URL the broker was given, in the forms the broker
takes (`file:///abs/dir`, or a directory relative to here as `file://./dir`, `file:dir` or a
plain path; `s3://bucket/prefix?endpoint_url=...`, with AWS_* credentials in the environment);
`diskless serve` prints its URL in its ready line. Only rolled segments are in the bucket: with
--bootstrap the records not yet tiered are read from the broker too, so the last hour is
complete. --since becomes a filter on `timestamp`, which the reader pushes down (the job scans
its DataFrame once, so pushDownPredicate=true is safe here): segments older than it are never
fetched. The result (hour, key, orders, bytes) is shown, or written as Parquet with --output,
followed by a line saying how many records were read and from where.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

ROOT = Path(__file__).resolve().parents[1]


def orders_per_key_per_hour(orders):
    """(hour, key, orders, bytes) per record key and hour of the record timestamp (UTC),
    from a DataFrame with the Kafka schema."""
    from pyspark.sql import functions as F

    return (
        orders.groupBy(F.date_trunc("hour", F.col("timestamp")).alias("hour"), F.col("key").cast("string").alias("key"))
        .agg(F.count("*").alias("orders"), F.sum(F.length("value")).alias("bytes"))
        .orderBy("hour", "key")
    )


def object_store_url(url: str, cwd: Path) -> str:
    """`url` as the broker and the reader take it: a local directory as an absolute file://
    URL (relative ones are resolved against `cwd`), anything else unchanged. Raises
    cold_tier's InvalidObjectStoreUrl, with the reason, when the broker would refuse it."""
    from cold_tier.url import parse_object_store_url

    parts = urlsplit(url)
    if parts.scheme == "" or (parts.scheme.lower() == "file" and not (parts.netloc in ("", "localhost") and parts.path.startswith("/"))):
        relative = unquote(parts.netloc + parts.path) if parts.scheme else url
        url = "file://" + quote(str((cwd / relative).resolve()))
    parse_object_store_url(url, env=os.environ)
    return url


def summary(records: int, url: str, topic: str, bootstrap: str | None) -> str:
    """The closing line: how many records were read, from where, and what --bootstrap adds."""
    if bootstrap:
        return f"{records} records of topic {topic!r} read from the bucket at {url} and the tail from the broker at {bootstrap}"
    line = f"{records} records of topic {topic!r} read from the bucket at {url}"
    if records == 0:
        line += " (a topic's records reach the bucket when its segments roll: segment.bytes, segment.ms)"
    return line + "; records not yet tiered are not included: add --bootstrap HOST:PORT to read them from a broker"


def _use_project_python() -> None:
    """Start again under the project's virtual environment when this Python lacks PySpark."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        venv_python = ROOT / ".venv" / "bin" / "python"
        if venv_python.exists() and Path(sys.executable).absolute() != venv_python.absolute():
            os.execv(str(venv_python), [str(venv_python), *sys.argv])
        sys.exit(f"error: PySpark is not installed for {sys.executable}; run `make install` or use {venv_python}")


def main() -> None:
    parser = argparse.ArgumentParser(description="Orders per key per hour, from the bucket.")
    parser.add_argument("url", help="the object-store URL the broker was given")
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--since", help="only records from this time on (ISO 8601, e.g. 2024-05-01T00:00:00Z)")
    parser.add_argument("--bootstrap", help="host:port of a broker, to include records not tiered yet")
    parser.add_argument("--output", help="write Parquet here instead of showing the result")
    args = parser.parse_args()

    _use_project_python()
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # spark_reader and cold_tier, also from a plain checkout
    from cold_tier.errors import InvalidObjectStoreUrl

    try:
        url = object_store_url(args.url, Path.cwd())
    except InvalidObjectStoreUrl as error:
        sys.exit(f"error: {error}")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))  # for Spark's workers
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
    # One scan of `orders` (the result is collected once), so filter pushdown is safe.
    reader = spark.read.format("diskless").option("subscribe", args.topic).option("pushDownPredicate", "true")
    if args.bootstrap:
        reader = reader.option("kafka.bootstrap.servers", args.bootstrap)
    orders = reader.load(url)
    if args.since:
        orders = orders.where(F.col("timestamp") >= F.to_timestamp(F.lit(args.since)))
    result = orders_per_key_per_hour(orders)
    rows = result.collect()  # small: one row per key and hour
    table = spark.createDataFrame(rows, result.schema)
    if args.output:
        table.write.mode("overwrite").parquet(args.output)
        print(f"{len(rows)} rows written to {args.output}")
    else:
        table.show(100, truncate=False)
    print(summary(sum(row["orders"] for row in rows), url, args.topic, args.bootstrap))
    spark.stop()


if __name__ == "__main__":
    main()
