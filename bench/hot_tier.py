"""Append and read throughput of the local log, beside raw sequential writes of the same bytes.

    python bench/hot_tier.py [--quick] [--dir DIR] [--rounds N]

For 16 KiB and 1 MiB batches: Log.append of whole batches (CRC check, offset assignment,
index entries, one write call each), then one fsync; and a raw loop of os.write of the same
bytes, in the same chunks, to a file on the same disk, then one fsync. Neither fsyncs per
write (the log's default flush policy). Then a consumer-style sequential read of the log
through Log.read (1 MiB max_bytes) and FileSlice.read_bytes. Raw and append run in pairs,
alternating which goes first; each figure is the best round of its side, and the median of
the per-round ratios is printed beside the ratio of bests. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hot_tier import Log, LogConfig  # noqa: E402
from hot_tier.records import Record, encode_batch, iter_headers  # noqa: E402

MIB = 1024 * 1024


def make_batch(size_bytes: int) -> bytearray:
    """One producer batch of about `size_bytes` (a single record of random bytes)."""
    probe = encode_batch([Record(0, 1_700_000_000_000, None, b"")])
    value = os.urandom(size_bytes - len(probe) - 4)
    return bytearray(encode_batch([Record(0, 1_700_000_000_000, None, value)]))


def raw_write(path: Path, chunk: bytearray, count: int) -> float:
    start = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    try:
        view = memoryview(chunk)
        for _ in range(count):
            written = os.write(fd, view)
            while written < len(view):
                written += os.write(fd, view[written:])
        os.fsync(fd)
    finally:
        os.close(fd)
    elapsed = time.perf_counter() - start
    path.unlink()
    return elapsed


def log_append(dir: Path, batch: bytearray, count: int) -> tuple[float, Log]:
    log = Log.open(dir, LogConfig(), now_ms=0)
    append = log.append
    start = time.perf_counter()
    for i in range(count):
        append(batch, i)  # the same buffer each time: append rewrites its base offset
    log.flush()
    return time.perf_counter() - start, log


def sequential_read(log: Log, max_bytes: int) -> tuple[float, int]:
    start = time.perf_counter()
    offset, total = log.log_start_offset, 0
    while (piece := log.read(offset, max_bytes)) is not None:
        data = piece.read_bytes()
        total += len(data)
        for header in iter_headers(data, check_crc=False):
            offset = header.next_offset
    return time.perf_counter() - start, total


def median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller volumes, fewer rounds (under a minute)")
    parser.add_argument("--dir", type=Path, default=None, help="directory on the disk to measure (default: temp)")
    parser.add_argument("--rounds", type=int, default=None, help="raw/append pairs per batch size")
    args = parser.parse_args()
    rounds = args.rounds or (3 if args.quick else 7)
    volume = {"16k": (64 if args.quick else 256) * MIB, "1m": (256 if args.quick else 512) * MIB}
    root = Path(tempfile.mkdtemp(prefix="bench-hot-tier-", dir=args.dir))
    rates: dict[str, list[float]] = {}

    def record(name: str, value: float) -> None:
        rates.setdefault(name, []).append(value)

    try:
        for label, size in (("16k", 16 * 1024), ("1m", MIB)):
            batch = make_batch(size)
            count = volume[label] // len(batch)
            mib = count * len(batch) / MIB
            # Unmeasured: the first write of this much data makes the kernel reclaim page
            # cache for it, and would penalise whichever side ran first.
            raw_write(root / "warmup.bin", batch, count)
            for round_number in range(rounds):
                # Alternate which goes first (the disk drifts on a shared host); each side
                # deletes its file before the other runs, so neither writes beside the other's.
                def log_side() -> tuple[float, float]:
                    append_s, log = log_append(root / f"bench-{label}", batch, count)
                    read_s, read_bytes = sequential_read(log, MIB)
                    assert read_bytes == count * len(batch)
                    log.delete()
                    return append_s, read_s

                if round_number % 2 == 0:
                    raw_s = raw_write(root / "raw.bin", batch, count)
                    append_s, read_s = log_side()
                else:
                    append_s, read_s = log_side()
                    raw_s = raw_write(root / "raw.bin", batch, count)
                record(f"raw_{label}", mib / raw_s)
                record(f"append_{label}", mib / append_s)
                record(f"batches_{label}", count / append_s)
                record(f"ratio_{label}", raw_s / append_s)
                record(f"read_{label}", mib / read_s)
                print(
                    f"{label:>3} batches ({len(batch)} B) x {count}, round {round_number + 1}/{rounds}:"
                    f" raw write {mib / raw_s:7.1f} MiB/s | log append {mib / append_s:7.1f} MiB/s"
                    f" ({count / append_s:6.0f} batches/s, {raw_s / append_s:4.0%} of raw)"
                    f" | log read {mib / read_s:7.1f} MiB/s",
                    flush=True,
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)

    # Page-cache writes on this shared virtual disk stall at random (a 0.2 s loop sometimes
    # takes 2 s, raw or log alike), so figures are the best round of each side: a stall can
    # only slow a round down. The median of the per-round ratios is reported beside it.
    figures = {
        "append_16k_mib_s": round(max(rates["append_16k"]), 1),
        "append_16k_batches_s": round(max(rates["batches_16k"])),
        "append_1m_mib_s": round(max(rates["append_1m"]), 1),
        "append_1m_batches_s": round(max(rates["batches_1m"])),
        "raw_mib_s": round(max(rates["raw_1m"]), 1),
        "raw_16k_mib_s": round(max(rates["raw_16k"]), 1),
        "ratio_1m": round(max(rates["append_1m"]) / max(rates["raw_1m"]), 3),
        "ratio_16k": round(max(rates["append_16k"]) / max(rates["raw_16k"]), 3),
        "ratio_1m_median_of_rounds": round(median(rates["ratio_1m"]), 3),
        "ratio_16k_median_of_rounds": round(median(rates["ratio_16k"]), 3),
        "read_mib_s": round(max(rates["read_1m"]), 1),
        "read_16k_mib_s": round(max(rates["read_16k"]), 1),
    }
    print()
    print(f"best round of each side over {rounds} rounds (median of per-round ratios in brackets)")
    print(
        f"1 MiB batches : append {figures['append_1m_mib_s']} MiB/s ({figures['append_1m_batches_s']} batches/s),"
        f" raw write {figures['raw_mib_s']} MiB/s, ratio {figures['ratio_1m']:.0%}"
        f" ({figures['ratio_1m_median_of_rounds']:.0%}), target >= 80%"
    )
    print(
        f"16 KiB batches: append {figures['append_16k_mib_s']} MiB/s ({figures['append_16k_batches_s']} batches/s),"
        f" raw write {figures['raw_16k_mib_s']} MiB/s, ratio {figures['ratio_16k']:.0%}"
        f" ({figures['ratio_16k_median_of_rounds']:.0%})"
    )
    print(
        f"sequential read from the page cache, 1 MiB fetches: {figures['read_mib_s']} MiB/s (1 MiB batches),"
        f" {figures['read_16k_mib_s']} MiB/s (16 KiB batches)"
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
