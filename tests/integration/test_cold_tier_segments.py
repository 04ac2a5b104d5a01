"""Segments in the bucket, end to end, over both adapters (a local directory, moto's S3 over HTTP).

Real segments are written by hot_tier's Log, uploaded with cold_tier.segments, and read back
with RemoteLogReader; every read is compared byte for byte with what the local log returns
for the same request. GETs are observed through `ObservedStore`, a thin wrapper around the
real store that counts them and can hold some back until a test lets them go.
"""

from __future__ import annotations

import asyncio
import random
import struct
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from cold_tier.errors import PreconditionFailed, StoreUnavailable
from cold_tier.layout import CommittedSegment, commits_prefix, new_upload_id, parse_segment_object_key
from cold_tier.remote_errors import (
    CorruptSegmentObject,
    ReaderClosed,
    RemoteOffsetOutOfRange,
    RemoteSegmentMissing,
    SegmentFileMismatch,
)
from cold_tier.remote_log import RemoteLogReader
from cold_tier.retry import RetryPolicy
from cold_tier.segments import (
    delete_segment,
    delete_topic_objects,
    find_orphans,
    list_catalogue,
    list_topic_partitions,
    upload_segment,
)
from cold_tier.url import open_object_store
from hot_tier import Log, LogConfig, SegmentInfo
from hot_tier.records import Compression, Record, decode_batches, encode_batch, iter_headers, read_header

from .moto_s3 import MotoS3, moto_s3_server

pytestmark = pytest.mark.timeout(120)

FAST_RETRY = RetryPolicy(max_attempts=3, base_backoff_ms=5, max_backoff_ms=20)
NOW_MS = 1_700_000_000_000
TOPIC = "orders"


@pytest.fixture(scope="module")
def s3_server():
    with moto_s3_server() as server:
        yield server


@pytest.fixture(params=["local", "s3"])
async def store(request, tmp_path):
    if request.param == "local":
        url, env = (tmp_path / "bucket").as_uri(), {}
    else:
        server: MotoS3 = request.getfixturevalue("s3_server")
        url, env = server.url(server.create_bucket(), prefix="cluster"), server.env()
    async with open_object_store(url, env=env, retry=FAST_RETRY, connect_timeout_ms=2_000) as opened:
        yield opened


class ObservedStore:
    """The real store, with every GET counted (key, start, end) and, for keys matching
    `hold`, kept waiting until `release()`."""

    def __init__(self, store) -> None:
        self._store = store
        self.started: list[tuple[str, int | None, int | None]] = []
        self.finished: list[tuple[str, int | None, int | None]] = []
        self.hold: Callable[[str, int | None], bool] = lambda key, start: False
        self._released = asyncio.Event()
        self.held = 0

    def release(self) -> None:
        self._released.set()

    async def get(self, key: str, *, start: int | None = None, end: int | None = None) -> bytes:
        self.started.append((key, start, end))
        if self.hold(key, start):
            self.held += 1
            await asyncio.wait_for(self._released.wait(), timeout=15)  # a test bug fails, not hangs
        data = await self._store.get(key, start=start, end=end)
        self.finished.append((key, start, end))
        return data

    def gets_of(self, key: str) -> list[tuple[int | None, int | None]]:
        return [(start, end) for k, start, end in self.started if k == key]

    def __getattr__(self, name: str):
        return getattr(self._store, name)


async def until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met before the deadline")
        await asyncio.sleep(0.005)


# --- building real segments ------------------------------------------------------------------


VALUE_SIZES = (1, 20, 150, 400, 1200)
SMALL_VALUES = (1, 10, 30)


def build_log(
    directory: Path, *, seed: int = 7, batches: int = 40, segment_bytes: int = 6000, value_sizes=VALUE_SIZES
) -> Log:
    """A local log of `batches` varied batches (1 to 8 records, values up to 1200 bytes, some
    compressed, timestamps not monotonic), rolled so every segment is closed."""
    rng = random.Random(seed)
    log = Log.open(directory, LogConfig(segment_bytes=segment_bytes, index_interval_bytes=300), NOW_MS)
    timestamp = NOW_MS - 1_000_000
    for _ in range(batches):
        count = rng.randint(1, 8)
        records = []
        for i in range(count):
            timestamp += rng.randint(-40, 100)
            value_bytes = rng.choice(value_sizes)
            records.append(Record(i, timestamp, rng.randbytes(4), rng.randbytes(value_bytes), (("h", b"x"),)))
        compression = rng.choice([Compression.NONE, Compression.NONE, Compression.ZSTD, Compression.GZIP])
        log.append(bytearray(encode_batch(records, compression=compression)), NOW_MS)
    log.roll(NOW_MS)
    return log


def rolled(log: Log) -> list[SegmentInfo]:
    return [info for info in log.segments if not info.is_active and info.size_bytes > 0]


async def upload(store, info: SegmentInfo, *, topic: str = TOPIC, partition: int = 0, **kwargs) -> CommittedSegment:
    with open(info.log_path, "rb") as file:
        base_timestamp = int.from_bytes(file.read(35)[27:35], "big", signed=True)  # the first batch's
    return await upload_segment(
        store, topic=topic, partition=partition, log_path=info.log_path, index_path=info.index_path,
        timeindex_path=info.timeindex_path, base_offset=info.base_offset, last_offset=info.next_offset - 1,
        base_timestamp=base_timestamp, max_timestamp=info.max_timestamp, size_bytes=info.size_bytes,
        leader_epoch=1, **kwargs,
    )  # fmt: skip


async def upload_all(store, log: Log, *, topic: str = TOPIC, partition: int = 0) -> list[CommittedSegment]:
    return [await upload(store, info, topic=topic, partition=partition) for info in rolled(log)]


def local_read(log: Log, offset: int, max_bytes: int, min_one_batch: bool = True) -> bytes | None:
    found = log.read(offset, max_bytes, min_one_batch=min_one_batch)
    return None if found is None else found.read_bytes()


def next_offset_after(records: bytes) -> int:
    return [header.next_offset for header in iter_headers(records)][-1]


# --- reads compared with the local log -------------------------------------------------------


@pytest.mark.parametrize("chunk_bytes", [300, 1500, 4 * 1024 * 1024])
async def test_every_offset_reads_exactly_what_the_local_log_returns(store, tmp_path, chunk_bytes):
    log = build_log(tmp_path / "log")
    catalogue = await upload_all(store, log)
    assert len(catalogue) >= 5
    assert await list_catalogue(store, TOPIC, 0) == catalogue
    # Batches larger than a 300-byte chunk exist, and reads cross chunk boundaries.
    assert max(h.size_bytes for info in rolled(log) for h in iter_headers(info.log_path.read_bytes())) > 1000
    async with RemoteLogReader(store, chunk_bytes=chunk_bytes) as reader:
        for max_bytes, min_one_batch in [(1, True), (700, True), (5000, True), (10**6, True), (700, False)]:
            for offset in range(log.log_end_offset):
                expected = local_read(log, offset, max_bytes, min_one_batch)
                got = await reader.read(catalogue, offset, max_bytes, min_one_batch=min_one_batch)
                assert got == expected, (offset, max_bytes, min_one_batch)
        assert await reader.read(catalogue, log.log_end_offset, 10**6) is None
        assert await reader.read(catalogue, log.log_end_offset + 100, 10**6) is None


async def test_a_sequential_consumer_streams_the_whole_history(store, tmp_path):
    log = build_log(tmp_path / "log")
    catalogue = await upload_all(store, log)
    streamed = bytearray()
    offset, reads = 0, 0
    async with RemoteLogReader(store, chunk_bytes=1024, prefetch_chunks=3) as reader:
        while (records := await reader.read(catalogue, offset, 3000)) is not None:
            assert records == local_read(log, offset, 3000)
            streamed += records
            offset = next_offset_after(records)
            reads += 1
    assert offset == log.log_end_offset
    assert bytes(streamed) == b"".join(info.log_path.read_bytes() for info in rolled(log))
    assert reads > len(catalogue)  # one segment per read: never merged across a boundary


async def test_offset_for_timestamp_matches_the_local_log(store, tmp_path):
    log = build_log(tmp_path / "log")
    catalogue = await upload_all(store, log)
    batches = [batch for info in rolled(log) for batch in decode_batches(info.log_path.read_bytes())]
    record_timestamps = {record.timestamp for batch in batches for record in batch.records}
    low, high = min(record_timestamps) - 1, max(record_timestamps) + 1
    probes = sorted({low, high, *(t + delta for t in record_timestamps for delta in (-1, 0, 1))})
    async with RemoteLogReader(store, chunk_bytes=512) as reader:
        for timestamp in probes:
            expected = log.offset_for_timestamp(timestamp)
            got = await reader.offset_for_timestamp(catalogue, timestamp)
            assert got == (None if expected is None else (expected.timestamp, expected.offset)), timestamp
        # From a later log start offset, as ListOffsets after DeleteRecords.
        start = catalogue[2].base_offset + 1
        first = await reader.offset_for_timestamp(catalogue, low, log_start_offset=start)
        assert first is not None and first[1] == start
        assert await reader.offset_for_timestamp([], low) is None


async def test_an_offset_in_a_gap_starts_at_the_next_segment(store, tmp_path):
    log = build_log(tmp_path / "log")
    catalogue = await upload_all(store, log)
    holed = catalogue[:2] + catalogue[3:]  # segment 2 missing from the catalogue
    gap = range(catalogue[2].base_offset, catalogue[3].base_offset)
    async with RemoteLogReader(store, chunk_bytes=700) as reader:
        for offset in gap:
            assert await reader.read(holed, offset, 2000) == local_read(log, catalogue[3].base_offset, 2000)
        with pytest.raises(RemoteOffsetOutOfRange) as raised:
            await reader.read(catalogue[1:], 0, 2000)
        assert raised.value.log_start_offset == catalogue[1].base_offset


# --- upload, commit, delete ------------------------------------------------------------------


async def test_an_upload_without_its_commit_is_invisible_and_an_orphan(store, tmp_path):
    log = build_log(tmp_path / "log", batches=20)
    first, second, *_ = rolled(log)
    committed = await upload(store, first)
    # A crash after the data objects, before the commit object:
    crashed = new_upload_id()
    probe = CommittedSegment(TOPIC, 0, second.base_offset, second.next_offset - 1, 0, 0, second.size_bytes, 1, crashed)
    await store.put_file(probe.log_key, second.log_path)
    await store.put_file(probe.index_key, second.index_path)
    await store.put_file(probe.time_index_key, second.timeindex_path)
    crashed_keys = sorted([probe.log_key, probe.index_key, probe.time_index_key])
    assert await list_catalogue(store, TOPIC, 0) == [committed]
    assert await find_orphans(store, TOPIC, 0, [committed]) == crashed_keys
    # Named by a commit object in the bucket even if the caller's list misses it: not an orphan.
    assert await find_orphans(store, TOPIC, 0, []) == crashed_keys
    # Finishing the upload under the same id commits it; doing it again is a no-op.
    retried = await upload(store, second, upload_id=crashed)
    assert retried.upload_id == crashed
    assert await upload(store, second, upload_id=crashed) == retried
    assert await list_catalogue(store, TOPIC, 0) == [committed, retried]
    assert await find_orphans(store, TOPIC, 0, []) == []
    assert [parse_segment_object_key(info.key).suffix for info in await store.list(f"{TOPIC}/0/0")] == [
        ".index", ".log", ".timeindex", ".txnindex", ".index", ".log", ".timeindex", ".txnindex"
    ]  # fmt: skip


async def test_the_transaction_index_and_producer_snapshot_travel_with_the_segment(store, tmp_path):
    log = build_log(tmp_path / "log", batches=20)
    first, second, *_ = rolled(log)
    index = struct.pack(">hqqqq", 0, 7, first.base_offset, first.base_offset + 3, first.base_offset + 4)
    with_both = await upload(store, first, txn_index=index, producer_snapshot=b"DLPS-state")
    without = await upload(store, second)
    assert await store.get(with_both.txn_index_key) == index
    assert await store.get(with_both.producer_snapshot_key) == b"DLPS-state"
    assert await store.get(without.txn_index_key) == b""  # no aborted transaction: an empty index
    assert await store.head(without.producer_snapshot_key) is None  # the broker had no state to give
    assert await find_orphans(store, TOPIC, 0, [with_both, without]) == []
    await delete_segment(store, with_both)
    assert [await store.head(key) for key in with_both.data_keys] == [None] * 5
    assert await find_orphans(store, TOPIC, 0, [without]) == []


async def test_delete_segment_removes_commit_and_data(store, tmp_path):
    log = build_log(tmp_path / "log", batches=20)
    catalogue = await upload_all(store, log)
    await delete_segment(store, catalogue[0])
    await delete_segment(store, catalogue[0])  # idempotent
    assert await list_catalogue(store, TOPIC, 0) == catalogue[1:]
    for key in (*catalogue[0].data_keys, catalogue[0].commit_key):
        assert await store.head(key) is None
    assert await find_orphans(store, TOPIC, 0, catalogue[1:]) == []


async def test_topic_partitions_and_topic_deletion(store, tmp_path):
    log = build_log(tmp_path / "log", batches=15)
    info = rolled(log)[0]
    for partition in (0, 2, 11):
        await upload(store, info, partition=partition)
    await upload(store, info, topic="other")
    assert await list_topic_partitions(store, TOPIC) == [0, 2, 11]
    assert await delete_topic_objects(store, TOPIC) == 15  # 3 uploads of .log, .index, .timeindex, .txnindex, commit
    assert await store.list(f"{TOPIC}/") == []
    assert await list_topic_partitions(store, TOPIC) == []
    assert len(await list_catalogue(store, "other", 0)) == 1


async def test_only_the_first_size_bytes_of_the_log_are_uploaded(store, tmp_path):
    log = build_log(tmp_path / "log", batches=15)
    info = rolled(log)[0]
    original = info.log_path.read_bytes()
    longer = tmp_path / "longer.log"
    longer.write_bytes(original + b"\x00" * 777)
    grown = SegmentInfo(info.base_offset, info.next_offset, info.size_bytes, info.max_timestamp, longer,
                        info.index_path, info.timeindex_path, False)  # fmt: skip
    segment = await upload(store, grown)
    assert await store.get(segment.log_key) == original
    shorter = tmp_path / "shorter.log"
    shorter.write_bytes(original[:-1])
    cut = SegmentInfo(info.base_offset, info.next_offset, info.size_bytes, info.max_timestamp, shorter,
                      info.index_path, info.timeindex_path, False)  # fmt: skip
    with pytest.raises(SegmentFileMismatch) as raised:
        await upload(store, cut)
    assert (raised.value.expected_bytes, raised.value.actual_bytes) == (info.size_bytes, info.size_bytes - 1)
    assert await list_catalogue(store, TOPIC, 0) == [segment]


class LostAnswerStore:
    """The real store, but the answer to the commit PUT is lost after it landed: the caller
    sees `error` instead (StoreUnavailable, or PreconditionFailed as a retried PUT would)."""

    def __init__(self, store, error: Exception) -> None:
        self._store = store
        self._error = error

    async def put(self, key: str, data: bytes, *, if_none_match: bool = False) -> None:
        await self._store.put(key, data, if_none_match=if_none_match)
        if key.endswith(".commit"):
            raise self._error

    def __getattr__(self, name: str):
        return getattr(self._store, name)


@pytest.mark.parametrize("lost", ["unavailable", "precondition"])
async def test_a_commit_whose_answer_was_lost_counts_as_committed(store, tmp_path, lost):
    log = build_log(tmp_path / "log", batches=10)
    info = rolled(log)[0]
    error = StoreUnavailable("timed out", operation="put") if lost == "unavailable" else PreconditionFailed("k")
    segment = await upload(LostAnswerStore(store, error), info)
    assert await list_catalogue(store, TOPIC, 0) == [segment]


async def test_a_commit_key_taken_by_another_object_is_a_lost_race(store, tmp_path):
    log = build_log(tmp_path / "log", batches=10)
    info = rolled(log)[0]
    first = read_header(info.log_path.read_bytes(), 0, check_crc=False)
    clash = CommittedSegment(TOPIC, 0, info.base_offset, info.next_offset - 1, first.base_timestamp,
                             info.max_timestamp, info.size_bytes, 1, "feed")  # fmt: skip
    await store.put(clash.commit_key, b"not ours")
    with pytest.raises(PreconditionFailed):
        # Through a store that never heads, so the early "already committed" check cannot see it.
        await upload(NoEarlyHeadStore(store), info, upload_id="feed")


class NoEarlyHeadStore:
    """The real store, whose first HEAD (upload_segment's "already committed?" check) says no."""

    def __init__(self, store) -> None:
        self._store = store
        self._heads = 0

    async def head(self, key: str):
        self._heads += 1
        return None if self._heads == 1 else await self._store.head(key)

    def __getattr__(self, name: str):
        return getattr(self._store, name)


# --- errors ------------------------------------------------------------------------------------


async def test_a_segment_deleted_mid_read_raises_remote_segment_missing(store, tmp_path):
    log = build_log(tmp_path / "log")
    catalogue = await upload_all(store, log)
    first = catalogue[0]
    async with RemoteLogReader(store, chunk_bytes=200, prefetch_chunks=0) as reader:
        assert await reader.read(catalogue, 0, 100) == local_read(log, 0, 100)
        await delete_segment(store, first)
        # Cached bytes still serve; the next uncached chunk finds the object gone.
        assert await reader.read(catalogue, 0, 100) == local_read(log, 0, 100)
        with pytest.raises(RemoteSegmentMissing) as raised:
            await reader.read(catalogue, first.last_offset, 10**6)  # needs the index: gone
        assert (raised.value.segment, raised.value.key) == (first, first.index_key)
        reader.forget(first)
        with pytest.raises(RemoteSegmentMissing) as raised:
            await reader.read(catalogue, 0, 100)  # from the base offset: no index, the .log is gone
        assert (raised.value.segment, raised.value.key) == (first, first.log_key)
        # And by timestamp: the time index is gone too.
        with pytest.raises(RemoteSegmentMissing):
            await reader.offset_for_timestamp(catalogue, 0)


async def test_corrupt_bytes_in_the_bucket_are_reported_not_served(store, tmp_path):
    log = build_log(tmp_path / "log", batches=20)
    catalogue = await upload_all(store, log)
    segment = catalogue[0]
    data = bytearray(await store.get(segment.log_key))
    data[-1] ^= 0xFF  # inside the last batch's records: only its CRC can tell
    await store.put(segment.log_key, bytes(data))
    last_batch = list(iter_headers(bytes(data), check_crc=False))[-1]
    async with RemoteLogReader(store, chunk_bytes=256) as reader:
        with pytest.raises(CorruptSegmentObject) as raised:
            await reader.read(catalogue, last_batch.base_offset, 10**6)
        assert raised.value.key == segment.log_key
        await store.put(segment.index_key, b"\x00" * 7)
        reader.forget(segment)
        with pytest.raises(CorruptSegmentObject) as raised:
            await reader.read(catalogue, segment.last_offset, 10**6)
        assert raised.value.key == segment.index_key


# --- prefetch and concurrency ------------------------------------------------------------------


async def test_prefetch_fetches_the_next_chunks_and_crosses_into_the_next_segment(store, tmp_path):
    log = build_log(tmp_path / "log", value_sizes=SMALL_VALUES)
    catalogue = await upload_all(store, log)
    observed = ObservedStore(store)
    chunk = 512
    first, second = catalogue[0], catalogue[1]
    assert first.size_bytes > 3 * chunk
    async with RemoteLogReader(observed, chunk_bytes=chunk, prefetch_chunks=2) as reader:
        assert await reader.read(catalogue, 0, 100) == local_read(log, 0, 100)
        # The read touched chunk 0 only; chunks 1 and 2 follow in the background.
        await until(lambda: len(observed.finished) == 3)
        assert observed.gets_of(first.log_key) == [(0, chunk), (chunk, 2 * chunk), (2 * chunk, 3 * chunk)]
        # A batch lying within the prefetched chunks is served without a GET of them.
        headers = list(iter_headers(first_log_bytes(log)))
        in_chunks_1_and_2 = [h for h in headers if chunk <= h.position and h.position + h.size_bytes <= 3 * chunk]
        target = in_chunks_1_and_2[0]
        assert await reader.read(catalogue, target.base_offset, 1) == local_read(log, target.base_offset, 1)
        assert observed.gets_of(first.log_key)[:3] == [(0, chunk), (chunk, 2 * chunk), (2 * chunk, 3 * chunk)]
        assert all(observed.gets_of(first.log_key).count(span) == 1 for span in observed.gets_of(first.log_key))
        # Reading on to the end of the segment, prefetch runs into the next one.
        offset = target.next_offset
        while offset <= first.last_offset:
            records = await reader.read(catalogue, offset, 100)
            assert records == local_read(log, offset, 100)
            offset = next_offset_after(records)
        await until(
            lambda: len(observed.gets_of(second.log_key)) == 2 and len(observed.finished) == len(observed.started)
        )
        assert observed.gets_of(second.log_key) == [(0, chunk), (chunk, 2 * chunk)]
        assert await reader.read(catalogue, second.base_offset, 100) == local_read(log, second.base_offset, 100)
        # Served from the prefetched chunk, without an index GET (a read from the base offset).
        assert observed.gets_of(second.log_key).count((0, chunk)) == 1
        assert observed.gets_of(second.index_key) == []
        # Every chunk of the first segment was fetched exactly once.
        chunks = range(-(-first.size_bytes // chunk))
        expected = [(k * chunk, min((k + 1) * chunk, first.size_bytes)) for k in chunks]
        assert sorted(observed.gets_of(first.log_key)) == expected


async def test_a_read_joins_the_prefetch_already_fetching_its_chunk(store, tmp_path):
    log = build_log(tmp_path / "log", value_sizes=SMALL_VALUES)
    catalogue = await upload_all(store, log)
    observed = ObservedStore(store)
    chunk = 512
    first = catalogue[0]
    observed.hold = lambda key, start: key == first.log_key and start == chunk
    async with RemoteLogReader(observed, chunk_bytes=chunk, prefetch_chunks=1) as reader:
        assert await reader.read(catalogue, 0, 100) == local_read(log, 0, 100)
        await until(lambda: observed.held == 1)  # the prefetch of chunk 1 is in flight, held
        # An offset whose batch starts in chunk 1: the read must wait for that same GET.
        target = next(
            h.base_offset for h in iter_headers(first_log_bytes(log)) if chunk <= h.position < 2 * chunk
        )
        reading = asyncio.ensure_future(reader.read(catalogue, target, 100))
        await until(lambda: len(observed.gets_of(first.index_key)) == 1 and len(observed.finished) >= 2)
        assert not reading.done()  # its batch is in the held chunk
        observed.release()
        assert await reading == local_read(log, target, 100)
        assert observed.gets_of(first.log_key).count((chunk, 2 * chunk)) == 1  # one GET, shared
        # Both reads waited for a GET (the second for the prefetch's): two misses; one GET each
        # of chunk 0 (the read), chunk 1 (the prefetch) and the index.
        stats = reader.stats
        assert (stats.read_hits, stats.read_misses) == (0, 2)
        assert (stats.chunk_gets, stats.index_gets, stats.index_misses) == (1, 1, 1)
        await until(lambda: len(observed.finished) == len(observed.started))  # the next prefetch
        assert stats.prefetch_gets == len(observed.started) - 2 >= 1
        # The same read again finds its index and chunk cached: a hit, no GET.
        gets = len(observed.started)
        assert await reader.read(catalogue, target, 100) == local_read(log, target, 100)
        assert (reader.stats.read_hits, reader.stats.read_misses, reader.stats.index_hits) == (1, 2, 1)
        assert len(observed.started) == gets
        assert stats.chunk_gets + stats.prefetch_gets + stats.index_gets == gets
        assert (stats.cached_indexes, stats.cached_chunk_bytes) == (1, chunk * len(observed.gets_of(first.log_key)))


def first_log_bytes(log: Log) -> bytes:
    return rolled(log)[0].log_path.read_bytes()


async def test_a_stalled_partition_does_not_hold_up_another(store, tmp_path):
    log_a = build_log(tmp_path / "a", seed=1, batches=20)
    log_b = build_log(tmp_path / "b", seed=2, batches=20)
    catalogue_a = await upload_all(store, log_a, partition=0)
    catalogue_b = await upload_all(store, log_b, partition=1)
    observed = ObservedStore(store)
    prefix_a = f"{TOPIC}/0/"
    observed.hold = lambda key, start: key.startswith(prefix_a)
    async with RemoteLogReader(observed, chunk_bytes=1024) as reader:
        stalled = asyncio.ensure_future(reader.read(catalogue_a, 0, 1000))
        await until(lambda: observed.held >= 1)
        for offset in range(0, log_b.log_end_offset, 7):
            got = await asyncio.wait_for(reader.read(catalogue_b, offset, 1000), timeout=10)
            assert got == local_read(log_b, offset, 1000)
        assert not stalled.done()
        observed.release()
        assert await stalled == local_read(log_a, 0, 1000)


async def test_close_cancels_prefetches_and_refuses_reads(store, tmp_path):
    log = build_log(tmp_path / "log", value_sizes=SMALL_VALUES)
    catalogue = await upload_all(store, log)
    observed = ObservedStore(store)
    observed.hold = lambda key, start: start is not None and start > 0  # every prefetch hangs
    reader = RemoteLogReader(observed, chunk_bytes=256, prefetch_chunks=3)
    assert await reader.read(catalogue, 0, 50) == local_read(log, 0, 50)
    await until(lambda: observed.held == 3)
    await asyncio.wait_for(reader.close(), timeout=5)
    assert len(observed.finished) == 1  # the held prefetches were cancelled, not completed
    assert observed.held == 3
    with pytest.raises(ReaderClosed):
        await reader.read(catalogue, 0, 50)
    with pytest.raises(ReaderClosed):
        await reader.offset_for_timestamp(catalogue, 0)


async def test_commits_prefix_holds_only_commit_objects(store, tmp_path):
    log = build_log(tmp_path / "log", batches=20)
    catalogue = await upload_all(store, log)
    listed = await store.list(commits_prefix(TOPIC, 0))
    assert [info.key for info in listed] == [segment.commit_key for segment in catalogue]
    assert all(info.size_bytes == 0 for info in listed)


async def test_prefetches_in_flight_are_bounded(store, tmp_path):
    log = build_log(tmp_path / "log", value_sizes=SMALL_VALUES)
    catalogue = await upload_all(store, log)
    observed = ObservedStore(store)
    observed.hold = lambda key, start: start is not None and start > 0
    async with RemoteLogReader(observed, chunk_bytes=256, prefetch_chunks=4, max_prefetch_in_flight=2) as reader:
        assert await reader.read(catalogue, 0, 50) == local_read(log, 0, 50)
        await until(lambda: observed.held == 2)
        assert [start for _, start, _ in observed.started] == [0, 256, 512]  # chunks 3 and 4 skipped
        observed.release()
        await until(lambda: len(observed.finished) == 3)
