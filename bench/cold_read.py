"""Streaming history that lives only in the bucket: RemoteLogReader beside raw GETs of the same objects.

    python bench/cold_read.py [--quick] [--total-mib N] [--chunk-mib C] [--max-bytes B] [--rounds R]

Writes ~1 GiB (256 MiB with --quick) of 256 KiB batches with hot_tier's Log into 32 MiB
segments (--segment-mib), uploads them with cold_tier.segments.upload_segment to two buckets (a local
directory, file://, and moto's S3 server on 127.0.0.1 over HTTP, s3://), and deletes the
local log. Then, per bucket:

- reader: a consumer-style sequential read from offset 0 through RemoteLogReader.read
  (max_bytes 1 MiB, Kafka's max.partition.fetch.bytes; 8 MiB chunks, 4 prefetched, as the broker; a fresh
  reader each round, so nothing starts cached), CRC of every batch checked;
- raw: the same .log objects read whole, one after another: for S3 with aiobotocore
  `get_object` straight (no cold_tier code), for the directory with plain file reads;
- raw ranged: the same objects in sequential ranged GETs of the reader's chunk size (the
  reader's request pattern without its prefetch, caching, scanning and CRC checks).

moto serves a ranged GET by copying the whole object out of its store under a per-object
lock, so on moto a ranged GET of a 32 MiB object costs about as much as a whole one and the
ranged figures are far below the whole-object ones; real S3 and MinIO charge by the range.
Compare `s3_ranged_ratio` for the reader's own overhead over moto.

Each figure is the best of --rounds (default 3; 2 with --quick); ratios are reader / raw.
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiobotocore.session import AioSession  # noqa: E402

from cold_tier.layout import CommittedSegment  # noqa: E402
from cold_tier.remote_log import RemoteLogReader  # noqa: E402
from cold_tier.segments import list_catalogue, upload_segment  # noqa: E402
from cold_tier.url import open_object_store  # noqa: E402
from hot_tier import Log, LogConfig  # noqa: E402
from hot_tier.records import Record, encode_batch, iter_headers, read_header  # noqa: E402
from tests.integration.moto_s3 import ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY, moto_s3_server  # noqa: E402

MIB = 1024 * 1024
BATCH_BYTES = 256 * 1024
TOPIC = "bench"
NOW_MS = 1_700_000_000_000


def write_log(directory: Path, total_bytes: int, segment_bytes: int) -> Log:
    """A rolled local log of `total_bytes` in 256 KiB batches of 16 records of random bytes."""
    value_bytes = (BATCH_BYTES - 61) // 16 - 16
    records = [Record(i, NOW_MS + i, None, os.urandom(value_bytes)) for i in range(16)]
    batch = bytearray(encode_batch(records))
    log = Log.open(directory, LogConfig(segment_bytes=segment_bytes), NOW_MS)
    for _ in range(total_bytes // len(batch)):
        log.append(batch, NOW_MS)  # the same buffer each time: append rewrites its base offset
    log.roll(NOW_MS)
    return log


async def upload_log(store, log: Log) -> list[CommittedSegment]:
    gate = asyncio.Semaphore(4)

    async def upload(info) -> None:
        with open(info.log_path, "rb") as file:
            first = read_header(file.read(BATCH_BYTES + 4096), 0, check_crc=False)
        async with gate:
            await upload_segment(
                store, topic=TOPIC, partition=0, log_path=info.log_path, index_path=info.index_path,
                timeindex_path=info.timeindex_path, base_offset=info.base_offset,
                last_offset=info.next_offset - 1, base_timestamp=first.base_timestamp,
                max_timestamp=info.max_timestamp, size_bytes=info.size_bytes, leader_epoch=0,
            )  # fmt: skip

    await asyncio.gather(*(upload(info) for info in log.segments if not info.is_active and info.size_bytes))
    return await list_catalogue(store, TOPIC, 0)


async def reader_round(
    store, catalogue: list[CommittedSegment], chunk_bytes: int, max_bytes: int, prefetch_chunks: int
) -> tuple[float, int]:
    async with RemoteLogReader(store, chunk_bytes=chunk_bytes, prefetch_chunks=prefetch_chunks) as reader:
        start = time.perf_counter()
        offset, total = 0, 0
        while (records := await reader.read(catalogue, offset, max_bytes)) is not None:
            total += len(records)
            for header in iter_headers(records, check_crc=False):
                offset = header.next_offset
        return time.perf_counter() - start, total


def chunk_ranges(size_bytes: int, chunk_bytes: int) -> list[tuple[int, int]]:
    return [(start, min(start + chunk_bytes, size_bytes)) for start in range(0, size_bytes, chunk_bytes)]


async def raw_s3_round(
    endpoint_url: str, bucket: str, objects: list[tuple[str, int]], chunk_bytes: int | None
) -> tuple[float, int]:
    """GET each object whole (chunk_bytes None) or in sequential ranged GETs of chunk_bytes."""
    session = AioSession()
    async with session.create_client(
        "s3", endpoint_url=endpoint_url, region_name=REGION,
        aws_access_key_id=ACCESS_KEY_ID, aws_secret_access_key=SECRET_ACCESS_KEY,
    ) as client:  # fmt: skip
        start = time.perf_counter()
        total = 0
        for key, size_bytes in objects:
            ranges = [(0, size_bytes)] if chunk_bytes is None else chunk_ranges(size_bytes, chunk_bytes)
            for first, end in ranges:
                extra = {} if chunk_bytes is None else {"Range": f"bytes={first}-{end - 1}"}
                response = await client.get_object(Bucket=bucket, Key=key, **extra)
                async with response["Body"] as body:
                    total += len(await body.read())
        return time.perf_counter() - start, total


def raw_file_round(root: Path, objects: list[tuple[str, int]], chunk_bytes: int | None) -> tuple[float, int]:
    start = time.perf_counter()
    total = 0
    for key, size_bytes in objects:
        ranges = [(0, size_bytes)] if chunk_bytes is None else chunk_ranges(size_bytes, chunk_bytes)
        with open(root / key, "rb") as file:
            for first, end in ranges:
                total += len(os.pread(file.fileno(), end - first, first))
    return time.perf_counter() - start, total


def best_mib_s(rounds: list[tuple[float, int]], expected_bytes: int) -> float:
    for _, total in rounds:
        if total != expected_bytes:
            raise SystemExit(f"a round read {total} bytes, expected {expected_bytes}")
    return expected_bytes / MIB / min(elapsed for elapsed, _ in rounds)


async def bench(args: argparse.Namespace, work: Path) -> dict[str, float]:
    total_bytes = args.total_mib * MIB
    started = time.perf_counter()
    log = write_log(work / "log", total_bytes, args.segment_mib * MIB)
    elapsed = time.perf_counter() - started
    print(f"wrote {log.size_bytes / MIB:.0f} MiB in {len(log.segments) - 1} segments in {elapsed:.1f} s", flush=True)
    result: dict[str, float] = {"total_mib": round(log.size_bytes / MIB, 1)}
    with moto_s3_server() as s3:
        bucket = s3.create_bucket()
        stores = {
            "local": ((work / "bucket").as_uri(), {}),
            "s3": (s3.url(bucket), s3.env()),
        }
        for name, (url, env) in stores.items():
            async with open_object_store(url, env=env) as store:
                started = time.perf_counter()
                catalogue = await upload_log(store, log)
                elapsed = time.perf_counter() - started
                print(f"{name}: uploaded {len(catalogue)} segments in {elapsed:.1f} s", flush=True)
        log.close()
        shutil.rmtree(work / "log")  # from here on the history lives only in the buckets
        for name, (url, env) in stores.items():
            async with open_object_store(url, env=env) as store:
                catalogue = await list_catalogue(store, TOPIC, 0)
                expected = sum(segment.size_bytes for segment in catalogue)
                # upload ids differ per bucket
                objects = [(segment.log_key, segment.size_bytes) for segment in catalogue]
                chunk_bytes = args.chunk_mib * MIB
                rounds: dict[str, list[tuple[float, int]]] = {"reader": [], "raw": [], "ranged": []}
                for _ in range(args.rounds):
                    rounds["reader"].append(await reader_round(store, catalogue, chunk_bytes, args.max_bytes, args.prefetch_chunks))
                    for kind, chunking in (("raw", None), ("ranged", chunk_bytes)):
                        if name == "s3":
                            rounds[kind].append(await raw_s3_round(s3.endpoint_url, bucket, objects, chunking))
                        else:
                            root = work / "bucket"
                            rounds[kind].append(await asyncio.to_thread(raw_file_round, root, objects, chunking))
            mib_s = {kind: best_mib_s(figures, expected) for kind, figures in rounds.items()}
            print(
                f"{name}: reader {mib_s['reader']:.0f} MiB/s; raw whole-object GETs {mib_s['raw']:.0f} MiB/s"
                f" (ratio {mib_s['reader'] / mib_s['raw']:.2f}); raw sequential {args.chunk_mib} MiB ranged GETs"
                f" {mib_s['ranged']:.0f} MiB/s (ratio {mib_s['reader'] / mib_s['ranged']:.2f})",
                flush=True,
            )
            result[f"{name}_mib_s"] = round(mib_s["reader"], 1)
            result[f"{name}_raw_mib_s"] = round(mib_s["raw"], 1)
            result[f"{name}_ratio"] = round(mib_s["reader"] / mib_s["raw"], 3)
            result[f"{name}_raw_ranged_mib_s"] = round(mib_s["ranged"], 1)
            result[f"{name}_ranged_ratio"] = round(mib_s["reader"] / mib_s["ranged"], 3)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="256 MiB, 2 rounds")
    parser.add_argument("--total-mib", type=int, default=None, help="history to write (default 1024; 256 with --quick)")
    parser.add_argument("--segment-mib", type=int, default=32, help="segment.bytes of the written log")
    parser.add_argument("--chunk-mib", type=int, default=8, help="RemoteLogReader chunk size (the broker uses 8)")
    parser.add_argument("--prefetch-chunks", type=int, default=4, help="chunks read ahead (the broker uses 4)")
    parser.add_argument("--max-bytes", type=int, default=MIB, help="max_bytes of each read (a fetch)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per figure (default 3; 2 with --quick)")
    args = parser.parse_args()
    args.total_mib = args.total_mib or (256 if args.quick else 1024)
    args.rounds = args.rounds or (2 if args.quick else 3)
    with tempfile.TemporaryDirectory(prefix="cold-read-") as work:
        result = asyncio.run(bench(args, Path(work)))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
