"""Spark scanning the bucket with the `diskless` data source, beside a Python data source
that does no work (the ceiling) and Spark scanning the same rows from Parquet on local disk;
and, with --first-row, the time to the first row of a narrow query on a topic of 1,000
segments.

    python bench/spark_scan.py [--quick] [--records N] [--partitions P] [--codec none,lz4]
    python bench/spark_scan.py --first-row [--segments 1000]

Scan. For each codec of --codec (default none and lz4), the bucket holds real segments
(hot_tier.Log files, 8 MiB each, uploaded with the layout's protocol by
tests/integration/test_spark_bucket_writer.py): N records (default 3,000,000; 500,000 with
--quick) over P partitions, a 12-byte key from 1,000 distinct ones and a 100-byte value each,
in batches of 500 records. It is written twice: to a local directory (file://) and to moto's
S3 server on 127.0.0.1 (s3://, in memory, over HTTP). The Parquet file holds the same rows
(pyarrow's defaults, snappy; one file per partition), on local disk: the rows do not depend on
the codec, so Parquet and the ceiling are measured once.

Each figure is the best of --rounds (default 3; 2 with --quick) runs of one Spark job that
materialises every column of every row (`write.format("noop")`), in a local[2] session: rows/s
of the whole job, planning included, after warm-up runs (Python workers, the JIT). Sources
take turns within a round; the machine is shared, and the best run is the least disturbed
one.

"ceiling" is a Python data source that does nothing but hand Spark the Parquet file's Arrow
batches (read by pyarrow, in C++): what any Python data source can reach at most here, since
moving Arrow batches from Python workers into Spark's rows is the larger cost. Ratios per
codec: diskless / ceiling (the target is 0.9 or more) and diskless / Parquet.

First row (--first-row). A topic of --segments committed segments (2,000 records each, over
two partitions) in a local directory and in moto; for each, a fresh Spark session (the JVM
warmed by a job that starts no Python worker) times
`load()` + `where("partition = 1 AND offset BETWEEN 1000 AND 1999")` up to its first row and
up to all 1,000 rows, with pushDownPredicate=true (planning LISTs partition 1's commit keys and
the write-ahead directory; the task reads one index object and the bytes of those offsets):
"cold" is the session's first query, Spark's start of its Python workers included, "warm" the
best of three after it. "no_pushdown" is the same query read the default way (every segment
read, Spark filters), warm, for comparison. "floor" is a do-nothing Python data source that
takes the filters and yields the 1,000 rows from memory, timed the same way in its own fresh
session: what Spark's own Python workers cost before any source's first row here.

The last line is one JSON object with every figure.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402

from hot_tier import Log, LogConfig  # noqa: E402
from hot_tier.records import Compression, Record, encode_batch  # noqa: E402
from tests.integration.moto_s3 import moto_s3_server  # noqa: E402
from tests.integration.test_spark_bucket_writer import NOW_MS, BucketWriter  # noqa: E402

RECORDS_PER_BATCH = 500
DISTINCT_BATCHES = 64
SEGMENT_BYTES = 8 * 1024 * 1024
TOPIC = "bench"


def batches_for(partition: int, records: int, codec: int) -> list[bytes]:
    """`records` records as batches. DISTINCT_BATCHES batches are encoded and cycled: the log
    gives each its own offsets, so only keys, values and timestamps repeat."""
    templates = []
    for b in range(DISTINCT_BATCHES):
        built = []
        for i in range(RECORDS_PER_BATCH):
            n = b * RECORDS_PER_BATCH + i
            key = f"key-{(n * 7919 + partition) % 1000:08d}".encode()
            value = (f"order {n} of customer {n % 977} " * 5).encode()[:100]
            built.append(Record(i, NOW_MS + n * 10, key, value))
        templates.append(encode_batch(built, compression=codec))
    count = -(-records // RECORDS_PER_BATCH)
    return [templates[i % DISTINCT_BATCHES] for i in range(count)]


def build_segments(work: Path, records: int, partitions: int, codec: int) -> dict[int, list[tuple[Path, Path, Path]]]:
    """Each partition's rolled segment files, written once through hot_tier.Log."""
    files = {}
    for partition in range(partitions):
        log = Log.open(work / f"{TOPIC}-{partition}", LogConfig(segment_bytes=SEGMENT_BYTES, index_interval_bytes=4096), NOW_MS)
        for batch in batches_for(partition, records // partitions, codec):
            log.append(bytearray(batch), NOW_MS)
        log.roll(NOW_MS)
        files[partition] = [(s.log_path, s.index_path, s.timeindex_path) for s in log.segments if not s.is_active]
        log.close()
    return files


def upload(url: str, env: dict[str, str], work: Path, segments: dict[int, list[tuple[Path, Path, Path]]]) -> int:
    writer = BucketWriter(url, work, env)
    return sum(
        writer.upload_segment_files(TOPIC, partition, files, records=False).log_end_offset
        for partition, files in segments.items()
    )


def session():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from spark_reader import DisklessDataSource

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench-spark-scan")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.python.authenticate.socketTimeout", "120s")  # a worker starts slowly on a busy machine
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.driver.memory", "4g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(DisklessDataSource)
    return spark


def write_parquet(url: str, directory: Path) -> None:
    """The same rows as Parquet, one file per partition, decoded by the reader itself
    in-process (no Spark job: a first job pays for starting Python workers)."""
    import pyarrow.parquet as pq

    from spark_reader.bucket import open_bucket, resolve_location
    from spark_reader.catalogue import plan_read
    from spark_reader.filters import Pushdown
    from spark_reader.options import parse_options
    from spark_reader.read import read_bucket_range

    directory.mkdir(parents=True)
    bucket = open_bucket(resolve_location(url, {}, {}))
    for task in plan_read(bucket, parse_options({"path": url, "subscribe": TOPIC}, streaming=False), Pushdown()):
        batches = list(read_bucket_range(bucket, task, Pushdown().bounds, False, True))
        pq.write_table(pa.Table.from_batches(batches), directory / f"part-{task.partition:05d}-{task.start_offset}.parquet")


def ceiling_source():
    """A Python data source that does no work of its own: each task reads one of the Parquet
    files with pyarrow (C++) and yields its batches. What it reaches is the most any Python
    data source can reach here: the cost of moving Arrow batches from Python workers into
    Spark's rows."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class ArrowFilesReader(DataSourceReader):
        def __init__(self, path: str) -> None:
            self.path = path

        def partitions(self):
            return [InputPartition(str(f)) for f in sorted(Path(self.path).glob("*.parquet"))]

        def read(self, partition):
            import pyarrow.parquet as pq

            from spark_reader.schema import arrow_schema

            for batch in pq.ParquetFile(partition.value).iter_batches(batch_size=10_000):
                yield batch.cast(arrow_schema(False))

    class ArrowFilesSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "arrow_files"

        def schema(self) -> str:
            from spark_reader.schema import spark_ddl

            return spark_ddl(False)

        def reader(self, schema):
            return ArrowFilesReader(self.options["path"])

    return ArrowFilesSource


def scan(df) -> float:
    """Seconds to materialise every column of every row (the noop sink writes nothing)."""
    started = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


def scan_figures(args: argparse.Namespace, work: Path) -> dict:
    records = args.records or (500_000 if args.quick else 3_000_000)
    rounds = args.rounds or (2 if args.quick else 3)
    warmups = 1 if args.quick else 2
    codecs = [c.strip().lower() for c in args.codec.split(",") if c.strip()]
    with moto_s3_server() as s3:
        bucket = s3.create_bucket()
        urls: dict[str, tuple[str, str]] = {}
        for codec in codecs:
            started = time.perf_counter()
            segments = build_segments(work / f"segments-{codec}", records, args.partitions, Compression[codec.upper()])
            file_url = f"file://{work}/bucket-{codec}"
            rows = upload(file_url, {}, work, segments)
            s3_url = s3.url(bucket, prefix=f"bench-{codec}")
            upload(s3_url, s3.env(), work, segments)
            shutil.rmtree(work / f"segments-{codec}", ignore_errors=True)
            if not (work / "parquet").exists():  # the same rows whatever the codec
                write_parquet(file_url, work / "parquet")
            urls[codec] = (file_url, s3_url)
            print(f"wrote {rows:,} records ({codec}) to {file_url} and to moto in {time.perf_counter() - started:.1f} s", flush=True)

        os.environ.update({k: v for k, v in s3.env().items() if k.startswith("AWS_") and "ENDPOINT" not in k})
        spark = session()
        try:
            parquet = str(work / "parquet")
            spark.dataSource.register(ceiling_source())
            sources = {
                "parquet": spark.read.parquet(parquet),
                "ceiling": spark.read.format("arrow_files").load(parquet),
            }
            for codec, (file_url, s3_url) in urls.items():
                sources[f"{codec}_file"] = spark.read.format("diskless").option("subscribe", TOPIC).load(file_url)
                sources[f"{codec}_s3"] = spark.read.format("diskless").option("subscribe", TOPIC).load(s3_url)
            for _ in range(warmups):  # Python workers, the JIT, the page cache
                for df in sources.values():
                    scan(df)
            best = dict.fromkeys(sources, float("inf"))
            for _ in range(rounds):  # sources take turns, so a disturbance hits all alike
                for name, df in sources.items():
                    best[name] = min(best[name], scan(df))
            figures = {name: rows / seconds for name, seconds in best.items()}
            for name, rate in figures.items():
                print(f"{name:10s} {rate:>12,.0f} rows/s", flush=True)
        finally:
            spark.stop()
    ceiling, parquet_rate = figures["ceiling"], figures["parquet"]
    result: dict = {
        "records": rows,
        "parquet_rows_s": round(parquet_rate),
        "python_source_ceiling_rows_s": round(ceiling),
        "ceiling_ratio": round(ceiling / parquet_rate, 3),
    }
    for codec in codecs:
        file_rate, s3_rate = figures[f"{codec}_file"], figures[f"{codec}_s3"]
        result[codec] = {
            "file_rows_s": round(file_rate),
            "s3_rows_s": round(s3_rate),
            "file_vs_ceiling": round(file_rate / ceiling, 3),
            "s3_vs_ceiling": round(s3_rate / ceiling, 3),
            "file_vs_parquet": round(file_rate / parquet_rate, 3),
            "s3_vs_parquet": round(s3_rate / parquet_rate, 3),
        }
        print(f"{codec}: diskless/ceiling file {file_rate / ceiling:.2f}, s3 {s3_rate / ceiling:.2f};"
              f" diskless/parquet file {file_rate / parquet_rate:.2f}, s3 {s3_rate / parquet_rate:.2f}")  # fmt: skip
    print(f"the ceiling (a Python source doing no work of its own) / parquet: {ceiling / parquet_rate:.2f}")
    return result


FIRST_ROW_TOPIC = "narrow"
FIRST_ROW_PARTITIONS = 2
FIRST_ROW_RECORDS_PER_SEGMENT = 2_000
FIRST_ROW_QUERY = "partition = 1 AND offset BETWEEN 1000 AND 1999"


def build_small_segments(work: Path, segments: int) -> dict[int, list[tuple[Path, Path, Path]]]:
    """`segments` segments of FIRST_ROW_RECORDS_PER_SEGMENT records, shared among the
    partitions, each rolled by hand so the count is exact."""
    template = batches_for(0, FIRST_ROW_RECORDS_PER_SEGMENT, int(Compression.NONE))
    files = {}
    for partition in range(FIRST_ROW_PARTITIONS):
        count = segments // FIRST_ROW_PARTITIONS + (1 if partition < segments % FIRST_ROW_PARTITIONS else 0)
        log = Log.open(work / f"{FIRST_ROW_TOPIC}-{partition}", LogConfig(segment_bytes=SEGMENT_BYTES, index_interval_bytes=4096), NOW_MS)
        for _ in range(count):
            for batch in template:
                log.append(bytearray(batch), NOW_MS)
            log.roll(NOW_MS)
        files[partition] = [(s.log_path, s.index_path, s.timeindex_path) for s in log.segments if not s.is_active]
        log.close()
        assert len(files[partition]) == count
    return files


def first_row(df_of) -> tuple[float, float]:
    """Seconds from `load()` to the first row of the narrow query, and to its last row; the
    rows are checked, so a fast wrong answer does not count."""
    started = time.perf_counter()
    rows = df_of().where(FIRST_ROW_QUERY).select("partition", "offset").toLocalIterator()
    got = [next(rows)]
    first_s = time.perf_counter() - started
    got.extend(rows)
    all_s = time.perf_counter() - started
    assert sorted((row.partition, row.offset) for row in got) == [(1, o) for o in range(1000, 2000)], "wrong rows"
    return first_s, all_s


def first_row_floor_source():
    """A Python data source that takes the filters (pushFilters, as ours does with
    pushDownPredicate=true) and hands Spark the narrow query's 1,000 rows, built in memory:
    the time to the first row that Spark itself takes here, starting its Python workers
    (one for load(), one for the pushdown and partitions, one for the task) included."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class RowsReader(DataSourceReader):
        def pushFilters(self, filters):
            return []

        def partitions(self):
            return [InputPartition(1)]

        def read(self, partition):
            import array

            import pyarrow as pa

            from spark_reader.schema import arrow_schema

            schema, count = arrow_schema(False), 1000
            offsets = pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(array.array("q", range(1000, 2000)))])
            partitions = pa.Array.from_buffers(pa.int32(), count, [None, pa.py_buffer(array.array("i", [1] * count))])
            columns = [offsets if f.name == "offset" else partitions if f.name == "partition" else pa.nulls(count, f.type) for f in schema]
            yield pa.RecordBatch.from_arrays(columns, schema=schema)

    class RowsSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "narrow_rows"

        def schema(self) -> str:
            from spark_reader.schema import spark_ddl

            return spark_ddl(False)

        def reader(self, schema):
            return RowsReader()

    return RowsSource


def first_row_figures(args: argparse.Namespace, work: Path) -> dict:
    with moto_s3_server() as s3:
        started = time.perf_counter()
        files = build_small_segments(work / "segments", args.segments)
        file_url = f"file://{work}/bucket"
        s3_url = s3.url(s3.create_bucket(), prefix="bench")
        for url, env in ((file_url, {}), (s3_url, s3.env())):
            writer = BucketWriter(url, work, env)
            for partition, segment_files in files.items():
                writer.upload_segment_files(FIRST_ROW_TOPIC, partition, segment_files, records=False)
        print(f"wrote {args.segments:,} segments of {FIRST_ROW_RECORDS_PER_SEGMENT:,} records to {file_url} and to moto"
              f" in {time.perf_counter() - started:.1f} s", flush=True)  # fmt: skip
        os.environ.update({k: v for k, v in s3.env().items() if k.startswith("AWS_") and "ENDPOINT" not in k})
        result: dict = {"segments": args.segments}
        for name, url in (("file", file_url), ("s3", s3_url), ("floor", None)):
            spark = session()  # a fresh SparkContext: its Python workers are not started yet
            try:
                spark.range(1000).selectExpr("sum(id)").collect()  # the JVM's own warm-up; no Python worker
                spark.dataSource.register(first_row_floor_source())

                def narrow(pushdown: str = "true", url: str | None = url):
                    if url is None:
                        return spark.read.format("narrow_rows").load()
                    reader = spark.read.format("diskless").option("subscribe", FIRST_ROW_TOPIC)
                    return reader.option("pushDownPredicate", pushdown).load(url)

                cold_first, cold_all = first_row(narrow)
                warm = [first_row(narrow) for _ in range(3)]
                no_pushdown = first_row(lambda: narrow("false")) if url is not None else None
            finally:
                spark.stop()  # the next session() starts a new SparkContext
            result[name] = {
                "cold_first_row_s": round(cold_first, 3),
                "cold_all_rows_s": round(cold_all, 3),
                "warm_first_row_s": round(min(f for f, _ in warm), 3),
                "warm_all_rows_s": round(min(a for _, a in warm), 3),
            }
            if no_pushdown is not None:
                result[name]["no_pushdown_warm_first_row_s"] = round(no_pushdown[0], 3)
            print(f"{name}: first row cold {cold_first:.2f} s (all {cold_all:.2f} s), warm {result[name]['warm_first_row_s']:.2f} s"
                  + (f"; without pushdown {no_pushdown[0]:.2f} s" if no_pushdown else ""), flush=True)  # fmt: skip
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="500,000 records, 2 rounds")
    parser.add_argument("--records", type=int, default=None)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--codec", default="none,lz4", help="comma-separated: " + ",".join(c.name.lower() for c in Compression))
    parser.add_argument("--first-row", action="store_true", help="time to the first row of a narrow query instead of the scan")
    parser.add_argument("--segments", type=int, default=1000, help="with --first-row: segments in the topic")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-spark-scan-"))
    try:
        result = first_row_figures(args, work) if args.first_row else scan_figures(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
