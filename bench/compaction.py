"""Local log cleaning throughput and memory: the log cleaner's pass over a compacted partition.

    python bench/compaction.py [--quick] [--records N] [--keys K] [--dedupe-buffer-mib M] [--dir DIR]

A local log of N records with 100-byte values (10-byte keys, K distinct keys written in
turn, uncompressed producer batches of 100 records, 64 MiB segments, every segment rolled) is
cleaned by one pass of the cleaner's shell, as the broker runs it (compaction/cleaner.py:
offset map over the dirty section, cleaned copies written and fsynced, then swapped in by
Log.replace_segment with indexes rebuilt). Throughput is MB/s (10^6 bytes) of the log read by
the pass, wall clock; then the same pass over a fresh copy under tracemalloc gives the peak of
Python memory it allocated (the map is bounded by log.cleaner.dedupe.buffer.size, 128 MiB by
default, `--dedupe-buffer-mib`; with more keys than it holds a pass cleans as far as its map
covers, `cleaned_to` below the log end). Best of the rounds; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from diskless.broker.compaction.cleaning import Throttler, clean_partition, segment_views  # noqa: E402
from diskless.broker.compaction.config import CleanerConfig, CompactionRules  # noqa: E402
from diskless.broker.compaction.policy import ENTRY_BYTES, plan  # noqa: E402
from hot_tier import Log, LogConfig  # noqa: E402
from hot_tier.records import Record, encode_batch  # noqa: E402

CONFIG = LogConfig(segment_bytes=64 * 2**20, retention_ms=-1)
RULES = CompactionRules(delete=False)
BATCH_RECORDS = 100


def build_log(dir: Path, records: int, keys: int) -> int:
    log = Log.open(dir, CONFIG, 0)
    now = int(time.time() * 1000) - 60_000
    value = b"v" * 100
    offset = 0
    while offset < records:
        batch = [Record(i, now, b"key-%06d" % ((offset + i) % keys), value) for i in range(min(BATCH_RECORDS, records - offset))]
        log.append(bytearray(encode_batch(batch)), 0)
        offset += len(batch)
    log.roll(0)
    size = log.size_bytes
    log.close()
    return size


def one_pass(dir: Path, cleaner: CleanerConfig) -> tuple[float, int, int, int]:
    """(seconds, bytes read, records kept, offset cleaned to) of one cleaning pass and its swaps."""
    log = Log.open(dir, CONFIG, 0)
    try:
        started = time.perf_counter()
        segments = list(log.segments)
        views = segment_views(segments)
        cleaning = plan(views, checkpoint=None, log_start_offset=log.log_start_offset, high_watermark=log.log_end_offset,
                        rules=RULES, now_ms=int(time.time() * 1000))
        result = clean_partition(
            segments, views, cleaning, RULES, map_capacity=cleaner.dedupe_buffer_size // ENTRY_BYTES, producer_last_offsets={},
            now_ms=int(time.time() * 1000), throttle=Throttler(cleaner.io_max_bytes_per_second), stop=threading.Event(),
        )  # fmt: skip
        for base_offset, size_bytes in result.cleaned:
            assert log.replace_segment(base_offset, size_bytes) is not None
        return time.perf_counter() - started, result.stats.bytes_read, result.stats.records_kept, result.end_offset
    finally:
        log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller volumes, fewer rounds (under a minute)")
    parser.add_argument("--records", type=int, default=None)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--dedupe-buffer-mib", type=int, default=128)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    records = args.records or (200_000 if args.quick else 1_000_000)
    rounds = args.rounds or (1 if args.quick else 3)
    cleaner = CleanerConfig(dedupe_buffer_size=args.dedupe_buffer_mib * 2**20)
    root = Path(tempfile.mkdtemp(dir=args.dir, prefix="bench-compaction-"))
    try:
        source = root / "source"
        log_bytes = build_log(source, records, args.keys)
        print(f"log: {records} records of 100 B values, {args.keys} keys, {log_bytes / 1e6:.1f} MB")
        best = None
        for round_ in range(rounds):
            work = root / f"round-{round_}"
            shutil.copytree(source, work)
            seconds, read_bytes, kept, cleaned_to = one_pass(work, cleaner)
            shutil.rmtree(work)
            rate = read_bytes / seconds / 1e6
            print(f"round {round_ + 1}: {seconds:.2f} s, {rate:.1f} MB/s, {kept} records kept, cleaned to offset {cleaned_to}")
            best = rate if best is None else max(best, rate)
        work = root / "traced"
        shutil.copytree(source, work)
        tracemalloc.start()
        one_pass(work, cleaner)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        figures = {
            "clean_mb_s": round(best, 1),
            "records": records,
            "keys": args.keys,
            "log_mb": round(log_bytes / 1e6, 1),
            "cleaned_to": cleaned_to,
            "peak_python_mib": round(peak / 2**20, 1),
            "dedupe_buffer_mib": args.dedupe_buffer_mib,
        }
        print(f"memory: peak {peak / 2**20:.1f} MiB of Python allocations (dedupe buffer {cleaner.dedupe_buffer_size / 2**20:.0f} MiB)")
        print(json.dumps(figures))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
