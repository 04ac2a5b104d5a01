"""Spark scanning the bucket with the `diskless` data source, beside Spark scanning the same
rows from a Parquet file on local disk.

    python bench/spark_scan.py [--quick] [--records N] [--partitions P] [--codec none|lz4|zstd|...]

The bucket holds real segments (hot_tier.Log files, 8 MiB each, uploaded with the layout's
protocol by tests/integration/test_spark_bucket_writer.py): N records (default 3,000,000;
500,000 with --quick) over P partitions, a 12-byte key from 1,000 distinct ones and a
100-byte value each, in batches of 500 records. It is written twice: to a local directory
(file://) and to moto's S3 server on 127.0.0.1 (s3://, in memory, over HTTP). The Parquet
file holds the same rows (pyarrow's defaults, snappy; one file per partition), on local disk.

Each figure is the best of --rounds (default 3; 2 with --quick) runs of one Spark job that
materialises every column of every row (`write.format("noop")`), in a local[2] session: rows/s
of the whole job, planning included, after warm-up runs (Python workers, the JIT). Sources
take turns within a round; the machine is shared, and the best run is the least disturbed
one. Ratios are diskless / Parquet (the target is 0.5 or more).

"ceiling" is a Python data source that does nothing but hand Spark the Parquet file's Arrow
batches (read by pyarrow, in C++): what any Python data source can reach at most here, since
moving Arrow batches from Python workers into Spark's rows is the larger cost. The last line
is one JSON object with every figure.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="500,000 records, 2 rounds")
    parser.add_argument("--records", type=int, default=None)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--codec", default="none", choices=[c.name.lower() for c in Compression])
    args = parser.parse_args()
    records = args.records or (500_000 if args.quick else 3_000_000)
    rounds = args.rounds or (2 if args.quick else 3)
    warmups = 1 if args.quick else 2
    codec = Compression[args.codec.upper()]
    work = Path(tempfile.mkdtemp(prefix="bench-spark-scan-"))
    try:
        with moto_s3_server() as s3:
            started = time.perf_counter()
            segments = build_segments(work / "segments", records, args.partitions, codec)
            file_url = f"file://{work}/bucket"
            rows = upload(file_url, {}, work, segments)
            s3_url = s3.url(s3.create_bucket(), prefix="bench")
            upload(s3_url, s3.env(), work, segments)
            write_parquet(file_url, work / "parquet")
            print(f"wrote {rows:,} records ({args.codec}) to {file_url}, to moto and to Parquet in {time.perf_counter() - started:.1f} s", flush=True)

            os.environ.update({k: v for k, v in s3.env().items() if k.startswith("AWS_") and "ENDPOINT" not in k})
            spark = session()
            try:
                parquet = str(work / "parquet")

                spark.dataSource.register(ceiling_source())
                sources = {
                    "parquet": spark.read.parquet(parquet),
                    "ceiling": spark.read.format("arrow_files").load(parquet),
                    "file": spark.read.format("diskless").option("subscribe", TOPIC).load(file_url),
                    "s3": spark.read.format("diskless").option("subscribe", TOPIC).load(s3_url),
                }
                for _ in range(warmups):  # Python workers, the JIT, the page cache
                    for df in sources.values():
                        scan(df)
                best = dict.fromkeys(sources, float("inf"))
                for _ in range(rounds):  # sources take turns, so a disturbance hits all alike
                    for name, df in sources.items():
                        best[name] = min(best[name], scan(df))
                figures = {name: rows / seconds for name, seconds in best.items()}
                for name, rate in figures.items():
                    print(f"{name:8s} {rate:>12,.0f} rows/s", flush=True)
            finally:
                spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "records": rows,
        "codec": args.codec,
        "file_rows_s": round(figures["file"]),
        "s3_rows_s": round(figures["s3"]),
        "parquet_rows_s": round(figures["parquet"]),
        "python_source_ceiling_rows_s": round(figures["ceiling"]),
        "ratio": round(figures["file"] / figures["parquet"], 3),
        "s3_ratio": round(figures["s3"] / figures["parquet"], 3),
        "ceiling_ratio": round(figures["ceiling"] / figures["parquet"], 3),
    }
    print(f"diskless/parquet: file {result['ratio']:.2f}, s3 {result['s3_ratio']:.2f}"
          f" (a Python source doing no work of its own: {result['ceiling_ratio']:.2f})")  # fmt: skip
    print(json.dumps(result))


if __name__ == "__main__":
    main()
