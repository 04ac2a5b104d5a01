"""A bucket of real segments for the Spark reader's tests and benchmark, and tests of it.

Until the broker tiers segments itself, `BucketWriter` plays its part: record batches from
`hot_tier.records.encode_batch` are appended through `hot_tier.Log` (so offsets, indexes and
time indexes are exactly what a broker writes), rolled, and uploaded with the `cold_tier`
store under `cold_tier.layout` keys: .log, .index and .timeindex first, the commit object
last with if_none_match, as the layout's protocol says. `upload_segment_files` does the same
for segment files a real broker wrote (tests/integration/test_spark_broker.py).

This module is imported by the other test_spark_* modules and by bench/spark_scan.py.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cold_tier import layout
from cold_tier.url import open_object_store
from hot_tier import Log, LogConfig
from hot_tier.records import Record, decode_batches, encode_batch, iter_headers

NOW_MS = 1_700_000_000_000


@dataclass(frozen=True)
class ExpectedRecord:
    """A record as Spark's Kafka source shows it (timestamp still in ms)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass
class WrittenPartition:
    topic: str
    partition: int
    segments: list[layout.CommittedSegment] = field(default_factory=list)
    records: list[ExpectedRecord] = field(default_factory=list)

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset if self.segments else 0


class BucketWriter:
    """Writes partitions of real segments into the bucket at `url` (store env in `env`)."""

    def __init__(self, url: str, work_dir: Path, env: Mapping[str, str] | None = None) -> None:
        self.url = url
        self.env = dict(env or {})
        self.work_dir = work_dir

    def write_partition(
        self,
        topic: str,
        partition: int,
        batches: Sequence[bytes],
        *,
        segment_bytes: int = 64 * 1024,
        index_interval_bytes: int = 1024,
        leader_epoch: int = 0,
        log_append_time: bool = False,
        commit: bool = True,
    ) -> WrittenPartition:
        """Append `batches` (their base offsets are reassigned) to a fresh local log, roll it,
        upload every segment; returns the committed segments and the records they hold."""
        directory = self.work_dir / f"{topic}-{partition}-{len(list(self.work_dir.glob('*')))}"
        config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=index_interval_bytes)
        log = Log.open(directory, config, NOW_MS)
        try:
            for batch in batches:
                log.append(bytearray(batch), NOW_MS, log_append_time=log_append_time)
            log.roll(NOW_MS)
            segments = [s for s in log.segments if not s.is_active]
            files = [(s.log_path, s.index_path, s.timeindex_path) for s in segments]
            written = asyncio.run(self._upload(topic, partition, files, leader_epoch, commit))
        finally:
            log.close()
            shutil.rmtree(directory, ignore_errors=True)
        return written

    def upload_segment_files(
        self, topic: str, partition: int, files: Iterable[tuple[Path, Path, Path]], *, leader_epoch: int = 0, records: bool = True
    ) -> WrittenPartition:
        """Upload rolled segments (paths of .log, .index, .timeindex), in order; `records`
        False leaves WrittenPartition.records empty (decoding millions takes a while)."""
        return asyncio.run(self._upload(topic, partition, list(files), leader_epoch, True, records))

    async def _upload(
        self, topic: str, partition: int, files: list[tuple[Path, Path, Path]], leader_epoch: int, commit: bool, records: bool = True
    ) -> WrittenPartition:
        written = WrittenPartition(topic, partition)
        async with open_object_store(self.url, env=self.env) as store:
            for log_path, index_path, timeindex_path in files:
                data = Path(log_path).read_bytes()
                if not data:
                    continue
                headers = list(iter_headers(data))
                segment = layout.CommittedSegment(
                    topic=topic,
                    partition=partition,
                    base_offset=headers[0].base_offset,
                    last_offset=headers[-1].last_offset,
                    base_timestamp=headers[0].base_timestamp,
                    max_timestamp=max(header.max_timestamp for header in headers),
                    size_bytes=len(data),
                    leader_epoch=leader_epoch,
                    upload_id=layout.new_upload_id(),
                )
                await store.put_file(segment.log_key, log_path)
                await store.put_file(segment.index_key, index_path)
                await store.put_file(segment.time_index_key, timeindex_path)
                if commit:
                    await store.put(segment.commit_key, b"", if_none_match=True)
                    written.segments.append(segment)
                    for batch in decode_batches(data) if records else ():
                        if batch.header.is_control:
                            continue
                        for record in batch.records:
                            written.records.append(ExpectedRecord(
                                topic, partition, record.offset, record.timestamp, batch.header.timestamp_type,
                                record.key, record.value, record.headers,
                            ))  # fmt: skip
        return written

    def delete(self, keys: Iterable[str]) -> None:
        async def run() -> None:
            async with open_object_store(self.url, env=self.env) as store:
                await store.delete_many(list(keys))

        asyncio.run(run())


def make_batches(
    count: int,
    records_per_batch: int,
    *,
    compression: int = 0,
    start_timestamp_ms: int = NOW_MS,
    timestamp_step_ms: int = 1,
    value_bytes: int = 40,
    with_headers: bool = False,
    key_space: int = 50,
    first_index: int = 0,
) -> list[bytes]:
    """`count` batches of `records_per_batch` records with distinct, checkable contents.
    Record i has key "key-{i % key_space}", a value naming i, and timestamp
    start + i * step. Every seventh record has a null key and every eleventh a null value."""
    batches = []
    index = first_index
    for _ in range(count):
        records = []
        for slot in range(records_per_batch):
            key = None if index % 7 == 3 else f"key-{index % key_space}".encode()
            value = None if index % 11 == 5 else f"value-{index}-".encode().ljust(value_bytes, b"x")
            headers = ((f"h{index % 3}", None if index % 5 == 0 else f"hv{index}".encode()),) if with_headers and index % 2 else ()
            records.append(Record(slot, start_timestamp_ms + index * timestamp_step_ms, key, value, headers))
            index += 1
        batches.append(encode_batch(records, compression=compression))
    return batches


# --- tests of the writer itself ---------------------------------------------------------


def test_writer_commits_contiguous_segments_with_exact_keys(tmp_path: Path) -> None:
    bucket = tmp_path / "bucket"
    writer = BucketWriter(f"file://{bucket}", tmp_path / "work")
    written = writer.write_partition("orders", 3, make_batches(40, 10, value_bytes=100), segment_bytes=8 * 1024)
    assert len(written.segments) > 2
    assert [s.base_offset for s in written.segments[1:]] == [s.next_offset for s in written.segments[:-1]]
    assert written.log_end_offset == 400
    assert [r.offset for r in written.records] == list(range(400))
    commits = sorted(p.relative_to(bucket).as_posix() for p in (bucket / "orders" / "3" / "commits").iterdir())
    assert commits == sorted(s.commit_key for s in written.segments)
    for segment in written.segments:
        assert (bucket / segment.log_key).stat().st_size == segment.size_bytes
        assert (bucket / segment.index_key).stat().st_size % 8 == 0
    assert layout.parse_catalogue(commits) == written.segments


def test_uncommitted_upload_leaves_data_objects_but_no_commit(tmp_path: Path) -> None:
    bucket = tmp_path / "bucket"
    writer = BucketWriter(f"file://{bucket}", tmp_path / "work")
    written = writer.write_partition("orders", 0, make_batches(2, 5), commit=False)
    assert written.segments == []
    assert not (bucket / "orders" / "0" / "commits").exists()
    assert len(list((bucket / "orders" / "0").glob("*.log"))) == 1
