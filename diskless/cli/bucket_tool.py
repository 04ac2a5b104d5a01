"""`diskless bucket ls|du|verify`: the bucket as a reader with only the bucket sees it (no broker,
no metadata store), by the layout of cold_tier/layout.py.

- `ls [TOPIC]`: per partition, the committed segments (one LIST of the commit objects):
  base and last offset, first and max timestamp, size, leader epoch.
- `du [TOPIC]`: per partition, committed segments and bytes (the .log objects), the bytes of
  every object (indexes and commit objects included), and uncommitted leftovers.
- `verify [TOPIC]`: every committed segment's .log, .index and .timeindex exist; the .log is
  the size its commit says; every batch's CRC-32C holds; batches are contiguous from the
  segment's base offset to its last offset; index entries are well-formed and inside the
  segment; a .txnindex (when the segment has one: segments uploaded before transaction
  indexes have none) holds whole entries whose abort markers are in the segment; a .snapshot
  decodes and ends at or after the segment; segments of a partition are contiguous with each
  other. A progress bar on a
  terminal, one line per problem naming the object, a summary; exit 1 on any problem.

The store is `--object-store URL` (env DISKLESS_OBJECT_STORE), the same URL the broker was
given; by default the embedded bucket of `diskless serve`: file://./diskless-data/bucket.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cold_tier.errors import InvalidSegmentKey
from cold_tier.layout import COMMIT_SUFFIX, CommittedSegment, parse_commit_key, parse_segment_object_key, resolve_overlaps
from cold_tier.store import ObjectInfo, ObjectStore
from cold_tier.url import open_object_store
from hot_tier.index_format import MalformedIndex, check_offset_entries, check_time_entries, decode_offset_entries, decode_time_entries
from hot_tier.producer_snapshot import ProducerSnapshotError, decode_snapshot
from hot_tier.records.header import HEADER_BYTES as BATCH_HEADER_BYTES
from hot_tier.records.header import iter_headers, peek_size
from hot_tier.records.transactions import CorruptTxnIndex, decode_txn_index

from .progress import human_bytes

READ_CHUNK_BYTES = 8 * 2**20  # ranged GETs of a .log object while checking its batches


def add_commands(commands: Any) -> None:
    bucket = commands.add_parser("bucket", help="list, size and verify the segments in the bucket (no broker needed)")
    actions = bucket.add_subparsers(dest="action", required=True, metavar="ACTION")
    ls = actions.add_parser("ls", help="committed segments per partition: offsets, times, sizes")
    du = actions.add_parser("du", help="segments and bytes per partition, and uncommitted leftovers")
    verify = actions.add_parser("verify", help="check every committed segment: objects, sizes, CRCs, contiguous offsets, indexes")
    verify.add_argument("--progress", default="auto", choices=["auto", "on", "off"], help="progress bar on standard error (default: on a terminal)")
    for parser in (ls, du, verify):
        parser.add_argument("topic", nargs="?", help="only this topic")
        parser.add_argument("--object-store", metavar="URL", default=None,
                            help="the bucket, as given to the broker: s3://BUCKET[/PREFIX][?endpoint_url=...] or file:///path "
                            "(env DISKLESS_OBJECT_STORE; default file://./diskless-data/bucket)")  # fmt: skip
    bucket.set_defaults(run_command=run)


def run(args: argparse.Namespace) -> int:
    url = args.object_store or os.environ.get("DISKLESS_OBJECT_STORE") or f"file://{Path('diskless-data/bucket').resolve()}"
    action = {"ls": _ls, "du": _du, "verify": _verify}[args.action]
    try:
        return asyncio.run(action(args, url))
    except KeyboardInterrupt:
        return 130
    except (ValueError, OSError) as exc:
        print(f"diskless bucket {args.action}: {exc}", file=sys.stderr)
        return 2


@dataclass
class Partition:
    """What one LIST shows of a partition: its commits (resolved) and every object's size."""

    topic: str
    index: int
    committed: list[CommittedSegment] = field(default_factory=list)
    objects: dict[str, int] = field(default_factory=dict)  # key -> size in bytes
    bad_commit_keys: list[str] = field(default_factory=list)

    def uncommitted_keys(self) -> list[str]:
        named = {(s.base_offset, s.upload_id) for s in self.committed}
        leftovers = []
        for key in self.objects:
            if key.endswith(COMMIT_SUFFIX):
                continue
            try:
                parsed = parse_segment_object_key(key)
            except InvalidSegmentKey:
                continue
            if (parsed.base_offset, parsed.upload_id) not in named:
                leftovers.append(key)
        return sorted(leftovers)


async def _partitions(store: ObjectStore, topic: str | None) -> list[Partition]:
    infos: list[ObjectInfo] = await store.list(f"{topic}/" if topic else "")
    found: dict[tuple[str, int], Partition] = {}
    commits: dict[tuple[str, int], list[CommittedSegment]] = defaultdict(list)
    for info in infos:
        parts = info.key.split("/")
        if len(parts) < 3 or not parts[1].isdigit():
            continue  # not under <topic>/<partition>/
        key = (parts[0], int(parts[1]))
        partition = found.setdefault(key, Partition(*key))
        partition.objects[info.key] = info.size_bytes
        if info.key.endswith(COMMIT_SUFFIX):
            try:
                commits[key].append(parse_commit_key(info.key))
            except InvalidSegmentKey:
                partition.bad_commit_keys.append(info.key)
    for key, partition in found.items():
        partition.committed = resolve_overlaps(commits[key])
    return [found[key] for key in sorted(found)]


def _time(ms: int) -> str:
    if ms < 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]
    for row in (header, *rows):
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip())


async def _ls(args: argparse.Namespace, url: str) -> int:
    async with open_object_store(url, env=dict(os.environ)) as store:
        partitions = await _partitions(store, args.topic)
    rows = [
        (p.topic, p.index, s.base_offset, s.last_offset, s.last_offset - s.base_offset + 1, _time(s.base_timestamp), _time(s.max_timestamp),
         s.size_bytes, s.leader_epoch, s.upload_id)
        for p in partitions for s in p.committed
    ]  # fmt: skip
    _table(("TOPIC", "PARTITION", "BASE-OFFSET", "LAST-OFFSET", "OFFSETS", "FIRST-TIMESTAMP", "MAX-TIMESTAMP", "BYTES", "EPOCH", "UPLOAD"), rows)
    return 0


async def _du(args: argparse.Namespace, url: str) -> int:
    async with open_object_store(url, env=dict(os.environ)) as store:
        partitions = await _partitions(store, args.topic)
    rows = []
    for p in partitions:
        leftovers = p.uncommitted_keys()
        rows.append((
            p.topic, p.index, len(p.committed), sum(s.size_bytes for s in p.committed), sum(p.objects.values()),
            len(leftovers), sum(p.objects[k] for k in leftovers),
        ))  # fmt: skip
    _table(("TOPIC", "PARTITION", "SEGMENTS", "SEGMENT-BYTES", "OBJECT-BYTES", "UNCOMMITTED-OBJECTS", "UNCOMMITTED-BYTES"), rows)
    print(f"total: {sum(r[2] for r in rows)} segments, {human_bytes(sum(r[3] for r in rows))} of segments, "
          f"{human_bytes(sum(r[4] for r in rows))} in {sum(len(p.objects) for p in partitions)} objects")  # fmt: skip
    return 0


# --- verify ----------------------------------------------------------------------------------


async def _verify(args: argparse.Namespace, url: str) -> int:
    problems: list[str] = []
    async with open_object_store(url, env=dict(os.environ)) as store:
        partitions = await _partitions(store, args.topic)
        segments = [(p, s) for p in partitions for s in p.committed]
        bar = _progress_bar(args.progress, sum(s.size_bytes for _, s in segments))
        checked_bytes = batches = 0
        try:
            for p in partitions:
                problems.extend(f"{key}: commit key does not parse" for key in p.bad_commit_keys)
                for before, after in zip(p.committed, p.committed[1:]):
                    if after.base_offset != before.last_offset + 1:
                        problems.append(f"{after.commit_key}: starts at offset {after.base_offset}, "
                                        f"but the segment before it ends at {before.last_offset}")  # fmt: skip
            for p, segment in segments:
                found, count = await _verify_segment(store, p, segment)
                problems.extend(found)
                batches += count
                checked_bytes += segment.size_bytes
                if bar is not None:
                    bar.update(segment.size_bytes)
        finally:
            if bar is not None:
                bar.close()
    for problem in problems:
        print(f"PROBLEM {problem}")
    verdict = "OK" if not problems else f"{len(problems)} problem(s)"
    print(f"{verdict}: {len(partitions)} partition(s), {len(segments)} segment(s), {batches} batch(es), {human_bytes(checked_bytes)} checked")
    return 1 if problems else 0


def _progress_bar(choice: str, total_bytes: int) -> Any:
    if choice == "off" or (choice == "auto" and not sys.stderr.isatty()):
        return None
    from tqdm import tqdm

    return tqdm(total=total_bytes, unit="B", unit_scale=True, unit_divisor=1024, desc="verify", file=sys.stderr)


async def _verify_segment(store: ObjectStore, partition: Partition, segment: CommittedSegment) -> tuple[list[str], int]:
    problems = []
    for key in (segment.log_key, segment.index_key, segment.time_index_key):
        if key not in partition.objects:
            problems.append(f"{key}: missing (named by {segment.commit_key})")
    if segment.log_key not in partition.objects:
        return problems, 0
    size = partition.objects[segment.log_key]
    if size != segment.size_bytes:
        problems.append(f"{segment.log_key}: {size} bytes, but its commit says {segment.size_bytes}")
        return problems, 0
    batch_problems, batches = await _verify_batches(store, segment)
    problems.extend(batch_problems)
    if segment.index_key in partition.objects:
        problems.extend(await _verify_index(store, segment, segment.index_key, offsets=True))
    if segment.time_index_key in partition.objects:
        problems.extend(await _verify_index(store, segment, segment.time_index_key, offsets=False))
    if segment.txn_index_key in partition.objects:
        problems.extend(_verify_txn_index(segment, await store.get(segment.txn_index_key)))
    if segment.producer_snapshot_key in partition.objects:
        problems.extend(_verify_producer_snapshot(segment, await store.get(segment.producer_snapshot_key)))
    return problems, batches


def _verify_txn_index(segment: CommittedSegment, data: bytes) -> list[str]:
    key = segment.txn_index_key
    try:
        aborted = decode_txn_index(data)
    except CorruptTxnIndex as exc:
        return [f"{key}: {exc}"]
    outside = [a.last_offset for a in aborted if not segment.base_offset <= a.last_offset <= segment.last_offset]
    if outside:
        return [f"{key}: an abort marker at offset {outside[0]}, outside the segment's {segment.base_offset}-{segment.last_offset}"]
    return []


def _verify_producer_snapshot(segment: CommittedSegment, data: bytes) -> list[str]:
    key = segment.producer_snapshot_key
    try:
        map_end_offset, _ = decode_snapshot(data)
    except ProducerSnapshotError as exc:
        return [f"{key}: {exc}"]
    if map_end_offset <= segment.last_offset:
        return [f"{key}: the producer state ends at offset {map_end_offset}, inside the segment it should follow"]
    return []


async def _verify_batches(store: ObjectStore, segment: CommittedSegment) -> tuple[list[str], int]:
    """CRC of every batch and contiguous offsets from base to last, reading in ranged GETs."""
    key, size = segment.log_key, segment.size_bytes
    buffer = bytearray()
    fetched = 0  # bytes of the object read so far; buffer holds [fetched - len(buffer), fetched)
    next_offset = segment.base_offset
    batches = 0
    while True:
        start = fetched - len(buffer)
        if start == size:
            break
        batch_bytes = peek_size(buffer, 0)
        if batch_bytes is not None and batch_bytes < BATCH_HEADER_BYTES:
            return [f"{key}: batch at byte {start} declares {batch_bytes} bytes, less than a batch header"], batches
        if batch_bytes is None or batch_bytes > len(buffer):
            if fetched == size:
                return [f"{key}: a truncated batch at byte {start}"], batches
            end = min(size, fetched + max(READ_CHUNK_BYTES, (batch_bytes or 0) - len(buffer)))
            buffer += await store.get(key, start=fetched, end=end)
            fetched = end
            continue
        try:
            header = next(iter_headers(bytes(buffer[:batch_bytes]), check_crc=True))
        except Exception as exc:  # CorruptBatch and its kinds
            return [f"{key}: batch at byte {start}: {exc}"], batches
        if header.base_offset != next_offset:
            return [f"{key}: batch at byte {start} starts at offset {header.base_offset}, expected {next_offset}"], batches
        next_offset = header.next_offset
        batches += 1
        del buffer[:batch_bytes]
    if next_offset != segment.last_offset + 1:
        return [f"{key}: batches end at offset {next_offset - 1}, but its commit says {segment.last_offset}"], batches
    return [], batches


async def _verify_index(store: ObjectStore, segment: CommittedSegment, key: str, *, offsets: bool) -> list[str]:
    data = await store.get(key)
    try:
        if offsets:
            relative, positions = decode_offset_entries(data)
            check_offset_entries(relative, positions)
            if positions and max(positions) >= segment.size_bytes:
                return [f"{key}: an entry points at byte {max(positions)}, past the segment's {segment.size_bytes} bytes"]
        else:
            timestamps, relative = decode_time_entries(data)
            check_time_entries(timestamps, relative)
        span = segment.last_offset - segment.base_offset
        if relative and max(relative) > span:
            return [f"{key}: an entry names relative offset {max(relative)}, past the segment's last ({span})"]
    except MalformedIndex as exc:
        return [f"{key}: {exc}"]
    return []
