"""Spark's Kafka-source options through a real local[2] SparkSession, each compared with the
exact rows (and, where the option is about splitting, the exact Spark partitions and
micro-batches) that Spark's Kafka source documents for it. The buckets and session are
test_spark_read's; the options tested there (assign, includeHeaders, failOnDataLoss, offsets
and timestamps for every partition) are not repeated here.
"""

from __future__ import annotations

import uuid

import pytest

from .test_spark_bucket_writer import NOW_MS, make_batches
from .test_spark_read import (  # noqa: F401 (fixtures)
    Backend,
    expected,
    file_backend,
    first_offset_at,
    read,
    s3,
    s3_backend,
    spark_rows,
)

pyspark = pytest.importorskip("pyspark")


def task_ranges(df) -> list[tuple[int, int, int, int]]:
    """(partition, first offset, last offset, rows) of every Spark partition, sorted."""
    rows = df.selectExpr("spark_partition_id() AS task", "partition", "offset").groupBy("task", "partition").agg(
        {"offset": "min", "*": "count"}
    )  # fmt: skip
    per_task = [(row["partition"], row["min(offset)"], row["count(1)"]) for row in rows.collect()]
    return sorted((partition, first, first + count - 1, count) for partition, first, count in per_task)


def test_max_records_per_partition_caps_every_spark_partition(spark, s3_backend) -> None:
    df = read(spark, s3_backend.url, subscribe="codecs", maxRecordsPerPartition="250")
    # Five partitions of 600 records, each cut into ceil(600 / 250) = 3 pieces of 200.
    assert df.rdd.getNumPartitions() == 15
    assert task_ranges(df) == [(p, first, first + 199, 200) for p in range(5) for first in (0, 200, 400)]
    assert spark_rows(df) == expected(s3_backend.records("codecs"))


def test_max_records_per_partition_then_min_partitions(spark, file_backend) -> None:
    # maxRecordsPerPartition first: 600 -> 2 pieces of 300 per partition, 10 in all; then
    # minPartitions=20 cuts each of those (a share of round(300 / 3000 * 20) = 2) in two.
    df = read(spark, file_backend.url, subscribe="codecs", maxRecordsPerPartition="400", minPartitions="20")
    assert df.rdd.getNumPartitions() == 20
    assert task_ranges(df) == [(p, first, first + 149, 150) for p in range(5) for first in (0, 150, 300, 450)]
    assert spark_rows(df) == expected(file_backend.records("codecs"))
    # With as many ranges as minPartitions asks for, nothing is cut.
    df = read(spark, file_backend.url, subscribe="codecs", minPartitions="5")
    assert task_ranges(df) == [(p, 0, 599, 600) for p in range(5)]


def test_ending_offsets_by_timestamp_ends_each_partition_at_its_own_timestamp(spark, file_backend) -> None:
    starts = {0: NOW_MS + 20_000, 1: NOW_MS + 50_000}
    ends = {0: NOW_MS + 97_000, 1: NOW_MS + 10**9}  # partition 1: after every record, so latest
    df = read(
        spark, file_backend.url, subscribe="jitter",
        startingOffsetsByTimestamp=f'{{"jitter":{{"0":{starts[0]},"1":{starts[1]}}}}}',
        endingOffsetsByTimestamp=f'{{"jitter":{{"0":{ends[0]},"1":{ends[1]}}}}}',
    )  # fmt: skip
    want = []
    for partition in range(2):
        records = file_backend.partitions[("jitter", partition)].records
        first = first_offset_at(records, starts[partition])
        last = first_offset_at(records, ends[partition])
        last = len(records) if last is None else last
        assert first is not None and 0 < first < last
        want += [r for r in records if first <= r.offset < last]
    assert first_offset_at(file_backend.partitions[("jitter", 0)].records, ends[0]) < 240  # a real cut
    assert spark_rows(df) == expected(want)


def test_starting_offsets_by_timestamp_strategy(spark, file_backend) -> None:
    start_ms = NOW_MS + 40_000
    by_timestamp = f'{{"jitter":{{"0":{start_ms},"1":{NOW_MS + 10**9}}}}}'  # partition 1: no record that late
    with pytest.raises(Exception, match=r"jitter-1: no record has a timestamp at or after .*startingOffsetsByTimestampStrategy"):
        read(spark, file_backend.url, subscribe="jitter", startingOffsetsByTimestamp=by_timestamp).collect()
    df = read(
        spark, file_backend.url, subscribe="jitter", startingOffsetsByTimestamp=by_timestamp,
        startingOffsetsByTimestampStrategy="latest",
    )  # fmt: skip
    records = file_backend.partitions[("jitter", 0)].records
    first = first_offset_at(records, start_ms)
    assert first is not None and 0 < first < 240
    assert spark_rows(df) == expected(r for r in records if r.offset >= first)  # partition 1 starts at its end


def test_subscribe_pattern_matches_whole_topic_names(spark, file_backend) -> None:
    df = read(spark, file_backend.url, subscribePattern="jit.*|append.*")
    assert spark_rows(df) == expected(file_backend.records("jitter") + file_backend.records("appendtime"))
    # Java's Pattern.matches, as Spark's Kafka source: "codec" is no prefix match for "codecs".
    assert read(spark, file_backend.url, subscribePattern="codec").count() == 0
    df = read(spark, file_backend.url, subscribePattern="codec[s]", startingOffsets='{"codecs":{"0":595,"1":-2,"2":-2,"3":-2,"4":599}}',
              endingOffsets='{"codecs":{"0":-1,"1":1,"2":0,"3":0,"4":-1}}')  # fmt: skip
    records = file_backend.records("codecs")
    want = [r for r in records if (r.partition == 0 and r.offset >= 595) or (r.partition == 1 and r.offset < 1) or (r.partition == 4 and r.offset == 599)]
    assert spark_rows(df) == expected(want)


def test_max_offsets_per_trigger_shares_each_micro_batch_like_spark(spark, tmp_path) -> None:
    backend = Backend("file", f"file://{tmp_path}/bucket", {}, tmp_path / "work")
    topic = f"trigger-{uuid.uuid4().hex[:8]}"
    backend.write(topic, 0, make_batches(6, 10), segment_bytes=1024)
    backend.write(topic, 1, make_batches(3, 10, first_index=1000), segment_bytes=1024)
    stream = (
        spark.readStream.format("diskless").option("subscribe", topic).option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "30").load(backend.url)
    )  # fmt: skip
    batches: list[list[tuple]] = []
    query = (
        stream.writeStream.foreachBatch(lambda df, batch_id: batches.append(spark_rows(df)))
        .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start()
    )  # fmt: skip
    try:
        assert query.awaitTermination(120), "the query did not finish within 120 s"
        assert query.exception() is None
    finally:
        query.stop()
    # Spark's rateLimit: 30 rows shared in proportion to each partition's backlog, 60 : 30.
    records = backend.records(topic)
    bounds = [(0, 20, 0, 10), (20, 40, 10, 20), (40, 60, 20, 30)]
    assert batches == [
        expected(r for r in records if (r.partition == 0 and a <= r.offset < b) or (r.partition == 1 and c <= r.offset < d))
        for a, b, c, d in bounds
    ]
