"""One `diskless` DataFrame reused across queries, the way analysts work (issue K): filtered,
unfiltered, filtered differently, cached, joined with itself, and the same for a streaming
DataFrame started twice. Every query is compared with the exact rows it must return.

Spark 4.3 keeps one planned read per DataFrame on the JVM (PythonDataSourceV2.readInfo) and
lets a filter pushdown replace it, so a reader that pruned by pushed filters would leak them
into every later query of the DataFrame (source.py). These tests run in a session with
spark.sql.python.filterPushdown.enabled=true, where that leak would show.
"""

from __future__ import annotations

import uuid

import pytest

from .test_spark_bucket_writer import NOW_MS, make_batches
from .test_spark_read import Backend, credentials, expected, read, s3, spark_rows  # noqa: F401 (fixtures)

pyspark = pytest.importorskip("pyspark")


@pytest.fixture(scope="module")
def orders(tmp_path_factory) -> Backend:
    """Topic "orders": three partitions of several segments each, on a local-directory bucket."""
    root = tmp_path_factory.mktemp("spark-reuse")
    backend = Backend("file", f"file://{root}/bucket", {}, root / "work")
    for partition in range(3):
        batches = make_batches(20, 10, first_index=partition * 1000, timestamp_step_ms=10)
        backend.write("orders", partition, batches, segment_bytes=4 * 1024, index_interval_bytes=256)
    return backend


def test_one_dataframe_answers_every_query_exactly(spark, orders) -> None:
    records = orders.records("orders")
    assert len(records) == 600 and all(len(orders.partitions[("orders", p)].segments) > 2 for p in range(3))
    everything = expected(records)
    df = read(spark, orders.url, subscribe="orders")

    assert df.count() == 600
    assert spark_rows(df.where("offset < 100")) == expected(r for r in records if r.offset < 100)
    assert df.count() == 600  # the report of issue K: this answered 300
    assert df.toArrow().num_rows == 600
    assert spark_rows(df) == everything
    assert spark_rows(df.where("partition = 1 AND offset >= 150")) == expected(
        r for r in records if r.partition == 1 and r.offset >= 150
    )
    since_ms = NOW_MS + 1000 * 10 + 500
    assert spark_rows(df.where(f"timestamp >= timestamp_millis({since_ms})")) == expected(
        r for r in records if r.timestamp_ms >= since_ms
    )
    # A filter Spark cannot hand to Python (an OR), then none at all.
    assert spark_rows(df.where("key IS NULL OR offset = 0")) == expected(r for r in records if r.key is None or r.offset == 0)
    assert spark_rows(df) == everything
    assert df.where("offset BETWEEN 10 AND 19").count() == 30
    assert df.count() == 600


def test_a_cached_dataframe_and_its_filters_stay_exact(spark, orders) -> None:
    records = orders.records("orders")
    df = read(spark, orders.url, subscribe="orders")
    assert df.where("offset >= 190").count() == 30  # planned before the cache
    cached = df.cache()
    try:
        assert cached.count() == 600
        assert spark_rows(cached) == expected(records)
        assert spark_rows(cached.where("partition = 2 AND offset < 7")) == expected(
            r for r in records if r.partition == 2 and r.offset < 7
        )
        assert spark_rows(df.where("offset >= 195")) == expected(r for r in records if r.offset >= 195)
        assert cached.count() == 600
    finally:
        cached.unpersist(blocking=True)
    assert df.count() == 600


def test_a_dataframe_joined_with_a_filtered_copy_of_itself(spark, orders) -> None:
    records = orders.records("orders")
    df = read(spark, orders.url, subscribe="orders")
    early = df.where("offset < 50").selectExpr("partition", "offset", "value AS early_value")
    late = df.where("offset >= 150").selectExpr("partition", "offset - 150 AS offset", "value AS late_value")
    joined = early.join(late, ["partition", "offset"]).orderBy("partition", "offset").collect()
    by_offset = {(r.partition, r.offset): r.value for r in records}
    assert [(row.partition, row.offset, row.early_value, row.late_value) for row in joined] == [
        (p, o, by_offset[(p, o)], by_offset[(p, o + 150)]) for p in range(3) for o in range(50)
    ]
    # The whole DataFrame joined with one filtered side: every record on the left survives.
    counts = df.groupBy("partition").count().join(df.where("offset < 5").groupBy("partition").count().withColumnRenamed("count", "few"), "partition")
    assert sorted((row.partition, row["count"], row.few) for row in counts.collect()) == [(p, 200, 5) for p in range(3)]


def test_a_streaming_dataframe_started_twice_with_and_without_a_filter(spark, orders, tmp_path) -> None:
    records = orders.records("orders")
    stream = (
        spark.readStream.format("diskless").option("subscribe", "orders").option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "250").options(**credentials(orders.url)).load(orders.url)
    )  # fmt: skip
    results = {}
    for name, query_df, want in [
        ("filtered", stream.where("partition = 0 AND offset >= 120"), [r for r in records if r.partition == 0 and r.offset >= 120]),
        ("unfiltered", stream, records),
        ("refiltered", stream.where("offset < 3"), [r for r in records if r.offset < 3]),
    ]:
        table = f"reuse_{name}_{uuid.uuid4().hex[:8]}"
        query = (
            query_df.writeStream.format("memory").queryName(table)
            .option("checkpointLocation", str(tmp_path / name)).trigger(availableNow=True).start()
        )  # fmt: skip
        try:
            assert query.awaitTermination(120), f"the {name} query did not finish within 120 s"
            assert query.exception() is None
            results[name] = (spark_rows(spark.table(table)), expected(want))
        finally:
            query.stop()
    for name, (got, want) in results.items():
        assert got == want, name
