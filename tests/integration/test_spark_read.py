"""The `diskless` Spark data source over real buckets: a local directory and moto's S3 server
over HTTP, read by a real local[2] SparkSession (conftest's, one per test process: it takes seconds to start).

The buckets hold real segments (hot_tier.Log files, uploaded with the layout's protocol by
test_spark_bucket_writer.BucketWriter); the expected records are those segments decoded by
the reference decoder. test_spark_broker.py compares with a real Kafka consumer instead.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from pathlib import Path

import pytest

from hot_tier.records import Compression, Record, encode_batch

from .moto_s3 import ACCESS_KEY_ID, SECRET_ACCESS_KEY, moto_s3_server
from .test_spark_bucket_writer import NOW_MS, BucketWriter, ExpectedRecord, WrittenPartition, make_batches

pyspark = pytest.importorskip("pyspark")



@pytest.fixture(scope="module")
def s3():
    with moto_s3_server() as server:
        yield server


class Backend:
    """One bucket and what was written into it."""

    def __init__(self, name: str, url: str, env: dict[str, str], work_dir: Path) -> None:
        self.name = name
        self.url = url
        self.writer = BucketWriter(url, work_dir, env)
        self.partitions: dict[tuple[str, int], WrittenPartition] = {}

    def write(self, topic: str, partition: int, batches: list[bytes], **kwargs) -> WrittenPartition:
        written = self.writer.write_partition(topic, partition, batches, **kwargs)
        self.partitions[(topic, partition)] = written
        return written

    def records(self, topic: str) -> list[ExpectedRecord]:
        return [r for (t, _), written in sorted(self.partitions.items()) if t == topic for r in written.records]


def jitter_batches(partition: int) -> list[bytes]:
    """Timestamps that go back and forth, so that a timestamp bound is not an offset filter."""
    batches = []
    for b in range(24):
        records = [Record(i, NOW_MS + ((b * 10 + i) * 37 % 101) * 1000 + partition, f"k{i}".encode(), f"v{b}-{i}".encode()) for i in range(10)]
        batches.append(encode_batch(records, compression=Compression.LZ4 if b % 2 else Compression.NONE))
    return batches


def fill(backend: Backend) -> Backend:
    for partition, codec in enumerate(Compression):
        backend.write("codecs", partition, make_batches(30, 20, compression=codec, with_headers=True, first_index=partition * 1000), segment_bytes=8 * 1024)
    for partition in range(2):
        backend.write("jitter", partition, jitter_batches(partition), segment_bytes=2 * 1024, index_interval_bytes=256)
    backend.write("appendtime", 0, make_batches(5, 4), log_append_time=True)
    return backend


@pytest.fixture(scope="module")
def file_backend(tmp_path_factory) -> Backend:
    root = tmp_path_factory.mktemp("spark-file")
    return fill(Backend("file", f"file://{root}/bucket", {}, root / "work"))


@pytest.fixture(scope="module")
def s3_backend(s3, tmp_path_factory) -> Backend:
    root = tmp_path_factory.mktemp("spark-s3")
    bucket = s3.create_bucket()
    return fill(Backend("s3", s3.url(bucket, prefix="cluster-a"), s3.env(), root / "work"))


@pytest.fixture(params=["file", "s3"])
def backend(request) -> Backend:
    return request.getfixturevalue(f"{request.param}_backend")


def credentials(url: str) -> dict[str, str]:
    """Credentials as reader options: Spark's Python workers inherit the environment of the
    session's JVM, started once for every module, so the environment is not enough."""
    if not url.startswith("s3://"):
        return {}
    return {"AWS_ACCESS_KEY_ID": ACCESS_KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY}


def read(spark, url: str, **options: str):
    reader = spark.read.format("diskless")
    for name, value in {**credentials(url), **options}.items():
        reader = reader.option(name, value)
    return reader.load(url)


def spark_rows(df) -> list[tuple]:
    """(topic, partition, offset, timestamp µs, timestampType, key, value[, headers]) sorted."""
    columns = ["topic", "partition", "offset", "unix_micros(timestamp) AS ts", "timestampType", "key", "value"]
    if "headers" in df.columns:
        columns.append("headers")
    table = df.selectExpr(*columns).toArrow()
    rows = []
    for row in table.to_pylist():
        values = [row["topic"], row["partition"], row["offset"], row["ts"], row["timestampType"], row["key"], row["value"]]
        if "headers" in row:
            values.append(None if row["headers"] is None else tuple((h["key"], h["value"]) for h in row["headers"]))
        rows.append(tuple(values))
    return sorted(rows, key=lambda r: (r[0], r[1], r[2]))


def expected(records: Iterable[ExpectedRecord], include_headers: bool = False) -> list[tuple]:
    rows = []
    for r in records:
        values = [r.topic, r.partition, r.offset, r.timestamp_ms * 1000, r.timestamp_type, r.key, r.value]
        if include_headers:
            values.append(tuple(r.headers) or None)
        rows.append(tuple(values))
    return sorted(rows, key=lambda row: (row[0], row[1], row[2]))


def test_schema_is_spark_kafka_schema(spark, file_backend) -> None:
    from pyspark.sql import types as T

    header = T.StructType([T.StructField("key", T.StringType()), T.StructField("value", T.BinaryType())])
    base = [
        T.StructField("key", T.BinaryType()), T.StructField("value", T.BinaryType()), T.StructField("topic", T.StringType()),
        T.StructField("partition", T.IntegerType()), T.StructField("offset", T.LongType()),
        T.StructField("timestamp", T.TimestampType()), T.StructField("timestampType", T.IntegerType()),
    ]  # fmt: skip
    assert read(spark, file_backend.url, subscribe="codecs").schema == T.StructType(base)
    with_headers = read(spark, file_backend.url, subscribe="codecs", includeHeaders="true").schema
    assert with_headers == T.StructType([*base, T.StructField("headers", T.ArrayType(header))])


def test_every_record_of_every_codec_is_read_back(spark, backend) -> None:
    df = read(spark, backend.url, subscribe="codecs,appendtime", includeHeaders="true")
    records = backend.records("codecs") + backend.records("appendtime")
    assert len(records) == 5 * 600 + 20
    assert spark_rows(df) == expected(records, include_headers=True)
    assert {r[4] for r in spark_rows(read(spark, backend.url, subscribe="appendtime"))} == {1}


def test_offset_bounds_are_exact(spark, file_backend) -> None:
    df = read(
        spark, file_backend.url, subscribe="codecs",
        startingOffsets='{"codecs":{"0":37,"1":-2,"2":599,"3":600,"4":10}}',
        endingOffsets='{"codecs":{"0":153,"1":90,"2":-1,"3":-1,"4":11}}',
    )  # fmt: skip
    bounds = {0: (37, 153), 1: (0, 90), 2: (599, 600), 3: (600, 600), 4: (10, 11)}
    want = [r for r in file_backend.records("codecs") if bounds[r.partition][0] <= r.offset < bounds[r.partition][1]]
    assert spark_rows(df) == expected(want)
    assert len(want) == 116 + 90 + 1 + 0 + 1


def first_offset_at(records: list[ExpectedRecord], timestamp_ms: int) -> int | None:
    return next((r.offset for r in records if r.timestamp_ms >= timestamp_ms), None)


def test_timestamp_bounds_are_exact(spark, file_backend) -> None:
    backend = file_backend
    start_ms, end_ms = NOW_MS + 40_000, NOW_MS + 99_500
    df = read(spark, backend.url, subscribe="jitter", startingTimestamp=str(start_ms), endingTimestamp=str(end_ms))
    want = []
    for partition in range(2):
        records = backend.partitions[("jitter", partition)].records
        first = first_offset_at(records, start_ms)
        last = first_offset_at(records, end_ms)
        assert first is not None and last is not None and 0 < first < last < 240
        want += [r for r in records if first <= r.offset < last]
    rows = spark_rows(df)
    assert rows == expected(want)
    assert any(row[3] < start_ms * 1000 for row in rows)  # offsets, not a timestamp filter


def test_timestamps_per_partition_and_the_no_match_strategy(spark, file_backend) -> None:
    records = file_backend.partitions[("jitter", 1)].records
    df = read(
        spark, file_backend.url, assign='{"jitter":[1]}',
        startingOffsetsByTimestamp=f'{{"jitter":{{"1":{NOW_MS + 99_000}}}}}',
        endingOffsetsByTimestamp=f'{{"jitter":{{"1":{NOW_MS + 10**9}}}}}',
    )  # fmt: skip
    first = first_offset_at(records, NOW_MS + 99_000)
    assert spark_rows(df) == expected(r for r in records if r.offset >= first)
    beyond = read(spark, file_backend.url, subscribe="jitter", startingTimestamp=str(NOW_MS + 10**9))
    with pytest.raises(Exception, match="NoOffsetForTimestamp|no record has a timestamp"):
        beyond.collect()
    latest = read(spark, file_backend.url, subscribe="jitter", startingTimestamp=str(NOW_MS + 10**9), startingOffsetsByTimestampStrategy="latest")
    assert latest.count() == 0


def test_partial_and_uncommitted_uploads_are_invisible(spark, backend) -> None:
    topic = f"partial-{uuid.uuid4().hex[:8]}"
    committed = backend.write(topic, 0, make_batches(10, 10), segment_bytes=2048)
    # A second upload of the same offsets that never got its commit (the broker died).
    backend.writer.write_partition(topic, 0, make_batches(10, 10, first_index=500), segment_bytes=2048, commit=False)
    keys = [k for k in _listing(backend, topic) if k.endswith(".log")]
    assert len(keys) == 2 * len(committed.segments)
    assert spark_rows(read(spark, backend.url, subscribe=topic)) == expected(committed.records)


def _listing(backend: Backend, topic: str) -> list[str]:
    from spark_reader.bucket import open_bucket, resolve_location

    bucket = open_bucket(resolve_location(backend.url, backend.writer.env, {}))
    return bucket.list_keys(f"{topic}/")


@pytest.mark.parametrize("name, how", [("s3", "log object deleted"), ("file", "segment deleted whole")])
def test_a_missing_segment_fails_or_is_skipped_as_fail_on_data_loss_says(spark, request, name, how) -> None:
    backend = request.getfixturevalue(f"{name}_backend")
    topic = f"lossy-{uuid.uuid4().hex[:8]}"
    written = backend.write(topic, 0, make_batches(12, 10), segment_bytes=2048)
    assert len(written.segments) >= 3
    lost = written.segments[1]
    keys = [lost.log_key] if how == "log object deleted" else [lost.commit_key, lost.log_key, lost.index_key, lost.time_index_key]
    backend.writer.delete(keys)
    with pytest.raises(Exception, match="DataLoss|failOnDataLoss"):
        read(spark, backend.url, subscribe=topic).collect()
    rows = spark_rows(read(spark, backend.url, subscribe=topic, failOnDataLoss="false"))
    assert rows == expected(r for r in written.records if not lost.base_offset <= r.offset <= lost.last_offset)
    # A pushed-down offset filter that avoids the lost segment needs none of it: no failure.
    after = spark_rows(read(spark, backend.url, subscribe=topic, pushDownPredicate="true").where(f"offset > {lost.last_offset}"))
    assert after == expected(r for r in written.records if r.offset > lost.last_offset)


def test_filters_are_pushed_down_exact_and_prune_the_plan(spark, file_backend) -> None:
    from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, LessThan

    from spark_reader.options import parse_options
    from spark_reader.source import DisklessPushdownReader

    t = NOW_MS + 300  # partition 0's record i has timestamp NOW_MS + i
    df = read(spark, file_backend.url, subscribe="codecs", pushDownPredicate="true").where(
        f"partition = 0 AND offset >= 100 AND offset < 420 AND timestamp >= timestamp_millis({t})"
    )
    want = [r for r in file_backend.records("codecs") if r.partition == 0 and 100 <= r.offset < 420 and r.timestamp_ms >= t]
    assert 0 < len(want) < 320
    assert spark_rows(df) == expected(want)

    reader = DisklessPushdownReader(parse_options({"path": file_backend.url, "subscribe": "codecs"}, streaming=False))
    import datetime

    timestamp = datetime.datetime.fromtimestamp(t / 1000, datetime.timezone.utc)
    filters = [EqualTo(("partition",), 0), GreaterThanOrEqual(("offset",), 100), LessThan(("offset",), 420),
               GreaterThanOrEqual(("timestamp",), timestamp), EqualTo(("value",), b"x")]  # fmt: skip
    assert list(reader.pushFilters(filters)) == [filters[-1]]
    tasks = [p.value for p in reader.partitions()]
    segments = file_backend.partitions[("codecs", 0)].segments
    holding = [s for s in segments if s.last_offset >= 100 and s.base_offset < 420 and s.max_timestamp >= t]
    assert len(holding) < len(segments)
    assert [(task.partition, task.start_offset, task.end_offset) for task in tasks] == [(0, 100, 420)]
    assert [s.base_offset for s in tasks[0].segments] == [s.base_offset for s in holding]


def test_without_the_pushdown_conf_only_push_down_predicate_true_is_refused(spark, file_backend) -> None:
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
    try:
        with pytest.raises(Exception, match="filterPushdown.enabled"):
            read(spark, file_backend.url, subscribe="appendtime", pushDownPredicate="true").collect()
        df = read(spark, file_backend.url, subscribe="appendtime").where("offset >= 15")
        assert spark_rows(df) == expected(r for r in file_backend.records("appendtime") if r.offset >= 15)
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")


def test_min_partitions_splits_the_ranges_and_keeps_every_record(spark, s3_backend) -> None:
    df = read(spark, s3_backend.url, subscribe="codecs", minPartitions="15")
    assert df.rdd.getNumPartitions() == 15  # five partitions of 600 records, three pieces each
    assert spark_rows(df) == expected(s3_backend.records("codecs"))


def test_assign_and_subscribe_pattern(spark, file_backend) -> None:
    df = read(spark, file_backend.url, assign='{"codecs":[1,3]}')
    assert spark_rows(df) == expected(r for r in file_backend.records("codecs") if r.partition in (1, 3))
    df = read(spark, file_backend.url, subscribePattern="jit.*|append.*")
    assert {(r[0], r[1]) for r in spark_rows(df)} == {("jitter", 0), ("jitter", 1), ("appendtime", 0)}


def test_the_example_job_counts_orders_per_key_per_hour(spark, file_backend) -> None:
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "examples" / "orders_per_key_per_hour.py"
    spec = importlib.util.spec_from_file_location("orders_per_key_per_hour", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    since_ms = NOW_MS + 2_500
    orders = read(spark, file_backend.url, subscribe="codecs").where(f"timestamp >= timestamp_millis({since_ms})")
    result = example.orders_per_key_per_hour(orders).selectExpr("unix_millis(hour) AS hour", "key", "orders", "bytes").collect()
    want: dict[tuple, list] = {}
    for r in file_backend.records("codecs"):
        if r.timestamp_ms >= since_ms:
            group = want.setdefault((r.timestamp_ms // 3_600_000 * 3_600_000, None if r.key is None else r.key.decode()), [0, None])
            group[0] += 1
            if r.value is not None:  # SUM skips nulls, and is null when all are
                group[1] = (group[1] or 0) + len(r.value)
    assert len(want) > 10
    assert sorted(((row.hour, row.key, row.orders, row.bytes) for row in result), key=str) == sorted(
        ((hour, key, orders, size) for (hour, key), (orders, size) in want.items()), key=str
    )


def test_streaming_picks_up_newly_committed_segments(spark, s3_backend, tmp_path) -> None:
    topic = f"stream-{uuid.uuid4().hex[:8]}"
    first = s3_backend.write(topic, 0, make_batches(6, 10), segment_bytes=1024)
    name = f"q_{uuid.uuid4().hex[:8]}"
    stream = (
        spark.readStream.format("diskless").option("subscribe", topic).option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "25").options(**credentials(s3_backend.url)).load(s3_backend.url)
    )  # fmt: skip
    query = (
        stream.writeStream.format("memory").queryName(name).option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds").start()
    )  # fmt: skip
    try:
        table = f"SELECT offset, key, value FROM {name}"
        _wait_for(lambda: spark.sql(f"SELECT count(*) FROM {name}").first()[0] == 60, query)
        # More segments of the same partition, committed while the query runs.
        more = BucketWriter(s3_backend.url, tmp_path / "work", s3_backend.writer.env)
        _append_segments(more, topic, first, make_batches(4, 10, first_index=60))
        _wait_for(lambda: spark.sql(f"SELECT count(*) FROM {name}").first()[0] == 100, query)
        offsets = sorted(row[0] for row in spark.sql(table).collect())
        assert offsets == list(range(100))
    finally:
        query.stop()


def _append_segments(writer: BucketWriter, topic: str, existing: WrittenPartition, batches: list[bytes]) -> None:
    """Commit further segments continuing `existing`: written at offset 0 locally, so the
    files are renumbered by uploading them as a log that starts at its log end offset."""
    from hot_tier import Log, LogConfig

    directory = writer.work_dir / f"append-{uuid.uuid4().hex[:8]}"
    log = Log.open(directory, LogConfig(segment_bytes=1024, index_interval_bytes=256), NOW_MS, log_start_offset=existing.log_end_offset)
    try:
        for batch in batches:
            log.append(bytearray(batch), NOW_MS)
        log.roll(NOW_MS)
        files = [(s.log_path, s.index_path, s.timeindex_path) for s in log.segments if not s.is_active]
        writer.upload_segment_files(topic, 0, files)
    finally:
        log.close()


def _wait_for(condition, query, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise AssertionError(f"streaming query failed: {query.exception()}")
        if condition():
            return
        query.awaitTermination(0.2)  # returns early only if the query stops
    raise AssertionError(f"condition not met within {timeout_s}s; last progress: {query.lastProgress}")
