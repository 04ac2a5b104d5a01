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

With `--bucket`, the same log's segments are also uploaded to moto's S3 server (127.0.0.1,
over HTTP) and catalogued in a SQLite store, as a broker that took the partition over finds
them: no local copy. One pass of compaction/history.py cleans them from the bucket: download,
offset map and cleaned copies, upload of the merged copies, catalogue swap. `bucket_clean_mb_s`
is MB/s of bucket bytes it went through, wall clock, the figure "cleaning from moto's S3".

With `--produce`, a broker (`diskless serve`, embedded defaults) holds a compacted topic of the
same records, kept from cleaning by min.compaction.lag.ms; acks=all produce throughput into a
plain topic (bench/broker.py's producer: lz4, 1 MB batches) is measured alone, then again right
after the lag is set to 0, while the cleaner compacts the topic, and alone again after the pass;
one round per compacted topic (as many as the rounds). A round's ratio is the cleaning window
over the mean of the two alone; `produce_during_cleaning_ratio` is the median of the rounds'. A
pass must end after its cleaning window began (checked).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
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


def bucket_pass(source: Path, root: Path, cleaner: CleanerConfig) -> tuple[float, int, int, int]:
    """(seconds, bucket bytes before, after, segments after) of one history pass over moto."""
    import asyncio

    from cold_tier.remote_log import RemoteLogReader
    from cold_tier.segments import upload_committed
    from cold_tier.url import open_object_store
    from diskless.broker.compaction.history import clean_history
    from diskless.broker.tiering.remote_log import RemoteLog, RemoteStorage
    from metadata import open_metadata_store
    from tests.integration.moto_s3 import moto_s3_server

    with moto_s3_server() as s3:
        url = s3.url(s3.create_bucket(), prefix="bench")

        async def run() -> tuple[float, int, int, int]:
            store = await open_metadata_store(f"sqlite:///{root / 'metadata.db'}")
            bucket = open_object_store(url, env=s3.env())
            reader = RemoteLogReader(bucket)
            try:
                await store.create_topic("bench", 1, {})
                remote = RemoteLog(RemoteStorage(bucket, store, reader), "bench", 0)
                await remote.load(0)
                log = Log.open(source, CONFIG, 0)
                try:
                    for segment in log.segments[:-1]:
                        with open(segment.log_path, "rb") as f:
                            f.seek(27)
                            base_timestamp = int.from_bytes(f.read(8), "big", signed=True)
                        committed = await remote.begin_upload(
                            base_offset=segment.base_offset, last_offset=segment.next_offset - 1, base_timestamp=base_timestamp,
                            max_timestamp=segment.max_timestamp, size_bytes=segment.size_bytes, leader_epoch=0,
                        )  # fmt: skip
                        await upload_committed(bucket, committed, log_path=segment.log_path, index_path=segment.index_path,
                                               timeindex_path=segment.timeindex_path)  # fmt: skip
                        await remote.commit(committed, 0)
                    end = log.log_end_offset
                finally:
                    log.close()
                before = remote.size_bytes
                leader = _TakenOver(remote, root / "partition", end)
                started = time.perf_counter()
                swapped, _ = await clean_history(
                    leader, int(time.time() * 1000), None, map_capacity=cleaner.dedupe_buffer_size // ENTRY_BYTES,
                    throttle=Throttler(cleaner.io_max_bytes_per_second), stop=threading.Event(),
                )  # fmt: skip
                seconds = time.perf_counter() - started
                assert swapped, "the history pass replaced nothing"
                return seconds, before, remote.size_bytes, len(remote.segments)
            finally:
                await reader.close()
                await bucket.close()
                await store.close()

        return asyncio.run(run())


class _TakenOver:
    """What history.py asks of a partition's leader, for a leader with nothing local: its log
    is an empty active segment at the bucket's end."""

    def __init__(self, remote, dir: Path, end: int) -> None:
        from diskless.broker.partition.rules import PartitionRules
        from hot_tier import SegmentInfo

        dir.mkdir(parents=True)
        self.topic, self.index, self.remote, self.dir, self.leader_epoch, self.closed = "bench", 0, remote, dir, 0, False
        self.log_config = CONFIG
        self.cleanable_end_offset = end
        self.log_start_offset = 0
        self.rules = PartitionRules(1048588, False, True, (-1, -1), (-1, -1), compaction=RULES)
        active = dir / f"{end:020d}"
        self.local_segments = (SegmentInfo(end, end, 0, -1, active.with_suffix(".log"), active.with_suffix(".index"),
                                           active.with_suffix(".timeindex"), True),)  # fmt: skip

    def producer_last_offsets(self) -> dict[int, int]:
        return {}

    def aborted_transactions(self, start_offset: int, end_offset: int) -> list[tuple[int, int, int]]:
        return []


def produce_during_cleaning(root: Path, records: int, keys: int, rounds: int) -> dict[str, float]:
    """Produce throughput alone and while the cleaner runs (see the module header)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

    import broker as broker_bench  # bench/broker.py: the broker subprocess and its producer

    root.mkdir()
    server = broker_bench.start_diskless(root, ["--log-cleaner-backoff-ms", "200"])
    try:
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        held = {"cleanup.policy": "compact", "segment.bytes": str(8 * 2**20), "min.compaction.lag.ms": str(10**12)}
        dirty = [f"dirty-{r}" for r in range(rounds)]
        for future in admin.create_topics([NewTopic(t, 1, 1, config=held) for t in dirty]).values():
            future.result(timeout=30)
        producer = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 5, "batch.size": 1_000_000,
                             "queue.buffering.max.messages": 1_000_000})  # fmt: skip
        value = b"v" * 100
        for topic in dirty:
            for i in range(records + 1):  # the last one, a key of its own, stays in the active segment
                while True:
                    try:
                        producer.produce(topic, key=b"key-%06d" % (i % keys) if i < records else b"last", value=value, partition=0)
                        break
                    except BufferError:
                        producer.poll(0.01)
        assert producer.flush(120) == 0
        plain = broker_bench.create_topic(server, 3)
        count = max(300_000, records)  # a window as long as the pass, about

        def window() -> float:
            return count / broker_bench.produce(server, plain, broker_bench.make_value(100), count, "all")

        ratios, alone_rates, during_rates, ends = [], [], [], []
        for topic in dirty:  # each round: a window alone, one while `topic` is cleaned, one alone again
            before = window()
            checkpoint = next((root / "diskless").rglob(f"{topic}-0")) / "cleaner-offset-checkpoint"
            release = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
                ConfigEntry("min.compaction.lag.ms", "0", incremental_operation=AlterConfigOpType.SET)])  # fmt: skip
            admin.incremental_alter_configs([release])[release].result(timeout=30)
            window_start = time.time()
            during = window()
            deadline = time.monotonic() + 300
            while not checkpoint.exists():
                assert time.monotonic() < deadline, "the cleaner did not finish its pass"
                time.sleep(0.2)  # polling a file the broker writes once, with a deadline
            pass_end = checkpoint.stat().st_mtime
            if pass_end < window_start:
                raise RuntimeError("the cleaning pass ended before its cleaning window began: more --records")
            after = window()
            alone = (before + after) / 2
            ratios.append(during / alone)
            alone_rates.append(alone)
            during_rates.append(during)
            ends.append(pass_end - window_start)
            print(f"produce round {len(ratios)}: {before:.0f} records/s alone, {during:.0f} while cleaning, {after:.0f} alone"
                  f" ({ratios[-1]:.2f}); the pass ended {ends[-1]:.1f} s into the cleaning window")  # fmt: skip
        return {"produce_alone_rec_s": round(statistics.median(alone_rates)), "produce_during_cleaning_rec_s": round(statistics.median(during_rates)),
                "produce_during_cleaning_ratio": round(statistics.median(ratios), 2),
                "produce_during_cleaning_ratios": [round(r, 2) for r in ratios],
                "cleaning_pass_ended_s_into_window": round(max(ends), 1)}  # fmt: skip
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller volumes, fewer rounds (under a minute)")
    parser.add_argument("--records", type=int, default=None)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--dedupe-buffer-mib", type=int, default=128)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--bucket", action="store_true", help="also clean the log from moto's S3 (compaction/history.py)")
    parser.add_argument("--produce", action="store_true", help="also measure a broker's produce throughput while it cleans")
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
        if args.bucket:
            seconds, before, after, segments = bucket_pass(source, root / "bucket", cleaner)
            figures |= {"bucket_clean_mb_s": round(before / seconds / 1e6, 1), "bucket_mb_before": round(before / 1e6, 1),
                        "bucket_mb_after": round(after / 1e6, 2), "bucket_segments_after": segments}  # fmt: skip
            print(f"bucket: {seconds:.2f} s, {before / seconds / 1e6:.1f} MB/s, {before / 1e6:.1f} MB -> {after / 1e6:.2f} MB"
                  f" in {segments} segment(s)")  # fmt: skip
        if args.produce:
            produced = produce_during_cleaning(root / "produce", records, args.keys, rounds)
            figures |= produced
            print(f"produce (median of {rounds} rounds): {produced['produce_alone_rec_s']} records/s alone,"
                  f" {produced['produce_during_cleaning_rec_s']} while cleaning, ratio {produced['produce_during_cleaning_ratio']}")  # fmt: skip
        print(json.dumps(figures))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
