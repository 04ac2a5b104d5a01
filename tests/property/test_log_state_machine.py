"""The Log against a plain in-memory model: lists of segments holding lists of batches.

Tiny segment.bytes and index.interval.bytes make rolls and index entries frequent. Every step
is followed by a check that offsets, segment boundaries and sizes agree, that a consumer
reading from the log start offset gets exactly the model's bytes, and that the offset index
follows Kafka's rule and the time index names the batches that first reached its timestamps.
"""

from __future__ import annotations

import shutil
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from hot_tier import Log, LogConfig, OffsetOutOfRange, TimestampOffset
from hot_tier.records import Compression, Record, encode_batch, iter_headers


@dataclass
class Batch:
    base_offset: int
    timestamps: list[int]
    data: bytes

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.timestamps)

    @property
    def last_offset(self) -> int:
        return self.next_offset - 1

    @property
    def max_timestamp(self) -> int:
        return max(self.timestamps)


@dataclass
class Segment:
    base_offset: int
    batches: list[Batch] = field(default_factory=list)

    @property
    def size_bytes(self) -> int:
        return sum(len(b.data) for b in self.batches)

    @property
    def next_offset(self) -> int:
        return self.batches[-1].next_offset if self.batches else self.base_offset

    @property
    def max_timestamp(self) -> int:
        return max((b.max_timestamp for b in self.batches), default=-1)


batch_specs = st.tuples(
    st.lists(st.integers(0, 3000), min_size=1, max_size=3),
    st.integers(0, 60),
    st.sampled_from([Compression.NONE, Compression.ZSTD]),
)


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="hot-tier-sm-"))
        self.dir = self.root / "orders-3"
        self.now_ms = 10_000

    def teardown(self) -> None:
        if getattr(self, "log", None) is not None and not self.log.closed:
            self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)

    @initialize(
        segment_bytes=st.integers(250, 700),
        index_interval_bytes=st.sampled_from([0, 60, 150]),
        retention_ms=st.sampled_from([-1, 2000, 8000]),
        retention_bytes=st.sampled_from([-1, 400, 1200]),
    )
    def open(self, segment_bytes: int, index_interval_bytes: int, retention_ms: int, retention_bytes: int) -> None:
        self.config = LogConfig(
            segment_bytes=segment_bytes, index_interval_bytes=index_interval_bytes,
            retention_ms=retention_ms, retention_bytes=retention_bytes,
        )  # fmt: skip
        self.log = Log.open(self.dir, self.config, self.now_ms)
        self.segments = [Segment(0)]
        self.log_start_offset = 0

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    def batches(self) -> list[Batch]:
        return [b for s in self.segments for b in s.batches]

    # -- rules -----------------------------------------------------------------------------

    @rule(ms=st.integers(0, 3000))
    def tick(self, ms: int) -> None:
        self.now_ms += ms

    @rule(spec=batch_specs, log_append_time=st.booleans())
    def append(self, spec, log_append_time: bool) -> None:
        timestamps, value_bytes, compression = spec
        records = [Record(i, ts, None, b"x" * value_bytes) for i, ts in enumerate(timestamps)]
        buf = bytearray(encode_batch(records, compression=compression))
        info = self.log.append(buf, self.now_ms, log_append_time=log_append_time)
        if log_append_time:
            timestamps = [self.now_ms] * len(timestamps)
        active = self.segments[-1]
        if active.batches and active.size_bytes + len(buf) > self.config.segment_bytes:
            active = Segment(self.log_end_offset)
            self.segments.append(active)
        batch = Batch(self.log_end_offset, timestamps, bytes(buf))
        active.batches.append(batch)
        assert (info.first_offset, info.last_offset, info.max_timestamp) == (
            batch.base_offset, batch.last_offset, batch.max_timestamp
        )

    @rule()
    def roll(self) -> None:
        self.log.roll(self.now_ms)
        if self.segments[-1].batches:
            self.segments.append(Segment(self.log_end_offset))

    @rule(data=st.data())
    def reads(self, data) -> None:
        for _ in range(4):  # reads are cheap and have the most cases
            self.read(data, data.draw(st.booleans()), data.draw(st.booleans()))

    def read(self, data, min_one_batch: bool, bounded: bool) -> None:
        offset = data.draw(st.integers(self.log_start_offset, self.log_end_offset))
        max_offset = data.draw(st.integers(self.log_start_offset, self.log_end_offset)) if bounded else None
        # sizes that end exactly on a batch boundary (or one byte short) half of the time
        boundaries, total = [], 0
        for batch in (b for b in self.batches() if b.last_offset >= offset):
            total += len(batch.data)
            boundaries += [total - 1, total]
        sizes = st.integers(0, 800)
        max_bytes = data.draw(st.one_of(sizes, st.sampled_from(boundaries)) if boundaries else sizes)
        piece = self.log.read(offset, max_bytes, min_one_batch=min_one_batch, max_offset=max_offset)
        expected = self.expected_read(offset, max_bytes, min_one_batch, max_offset)
        assert (piece.read_bytes() if piece is not None else None) == expected

    def expected_read(self, offset: int, max_bytes: int, min_one_batch: bool, max_offset: int | None) -> bytes | None:
        limit = self.log_end_offset if max_offset is None else min(max_offset, self.log_end_offset)
        if offset >= limit:
            return None
        segment = next(s for s in self.segments if s.base_offset <= offset < s.next_offset)
        batches = [b for b in segment.batches if b.last_offset >= offset]
        if batches[0].next_offset > limit:
            return None
        if len(batches[0].data) > max_bytes:
            return batches[0].data if min_one_batch else None
        out = b""
        for batch in batches:
            if batch.next_offset > limit or len(out) + len(batch.data) > max_bytes:
                break
            out += batch.data
        return out

    @rule(data=st.data())
    def read_out_of_range(self, data) -> None:
        offset = data.draw(st.sampled_from([self.log_start_offset - 1, self.log_end_offset + 1]))
        try:
            self.log.read(offset, 1000)
        except OffsetOutOfRange as exc:
            assert (exc.log_start_offset, exc.log_end_offset) == (self.log_start_offset, self.log_end_offset)
        else:
            raise AssertionError(f"read({offset}) did not raise")

    @rule(data=st.data())
    def offset_for_timestamp(self, data) -> None:
        known = sorted({ts + d for b in self.batches() for ts in b.timestamps for d in (0, 1)})
        any_time = st.integers(0, 3500)
        timestamp = data.draw(st.one_of(any_time, st.sampled_from(known)) if known else any_time)
        expected = None
        for batch in self.batches():
            if batch.max_timestamp >= timestamp and batch.last_offset >= self.log_start_offset:
                found = [
                    TimestampOffset(ts, batch.base_offset + i)
                    for i, ts in enumerate(batch.timestamps)
                    if ts >= timestamp and batch.base_offset + i >= self.log_start_offset
                ]
                if found:
                    expected = found[0]
                    break
        assert self.log.offset_for_timestamp(timestamp) == expected

    @rule()
    def max_timestamp_offset(self) -> None:
        batches = self.batches()
        expected = None
        if batches:
            best = max(b.max_timestamp for b in batches)
            batch = next(b for b in batches if b.max_timestamp == best)
            expected = TimestampOffset(best, batch.base_offset + batch.timestamps.index(best))
        assert self.log.max_timestamp_offset() == expected

    @rule()
    def retention(self) -> None:
        deleted = self.log.delete_retention_segments(self.now_ms)
        remaining = sum(s.size_bytes for s in self.segments)
        count = 0
        for segment, successor in zip(self.segments, self.segments[1:]):
            if successor.base_offset <= self.log_start_offset:
                pass
            elif self.config.retention_bytes >= 0 and remaining - segment.size_bytes >= self.config.retention_bytes:
                pass
            elif self.config.retention_ms >= 0 and self.now_ms - segment.max_timestamp > self.config.retention_ms:
                pass
            else:
                break
            remaining -= segment.size_bytes
            count += 1
        assert [d.base_offset for d in deleted] == [s.base_offset for s in self.segments[:count]]
        self.drop_oldest(count)

    def drop_oldest(self, count: int) -> None:
        del self.segments[:count]
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)

    @rule(data=st.data())
    def delete_records(self, data) -> None:
        offset = data.draw(st.integers(self.log_start_offset, self.log_end_offset))
        self.log.advance_log_start_offset(offset)
        self.log_start_offset = max(self.log_start_offset, offset)
        count = 0
        while count < len(self.segments) - 1 and self.segments[count + 1].base_offset <= offset:
            count += 1
        self.drop_oldest(count)

    @rule(data=st.data())
    def truncate_to(self, data) -> None:
        offset = data.draw(st.integers(0, self.log_end_offset + 1))
        self.log.truncate_to(offset)
        if offset >= self.log_end_offset:
            return
        if offset < self.segments[0].base_offset:
            self.segments = [Segment(offset)]
            self.log_start_offset = offset
            return
        self.segments = [s for s in self.segments if s.base_offset <= offset]
        last = self.segments[-1]
        last.batches = [b for b in last.batches if b.last_offset < offset]
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)

    @rule(clean=st.booleans(), pass_log_start_offset=st.booleans())
    def reopen(self, clean: bool, pass_log_start_offset: bool) -> None:
        if clean:
            self.log.close()
        self.log = None  # a crash: the files stay as the page cache has them
        self.log = Log.open(
            self.dir, self.config, self.now_ms,
            log_start_offset=self.log_start_offset if pass_log_start_offset else None,
        )  # fmt: skip
        if not pass_log_start_offset:
            self.log_start_offset = self.segments[0].base_offset
        count = 0  # whole segments below the log start offset go on open
        while count < len(self.segments) - 1 and self.segments[count + 1].base_offset <= self.log_start_offset:
            count += 1
        self.drop_oldest(count)

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def offsets_and_segments_agree(self) -> None:
        if getattr(self, "log", None) is None:
            return
        assert (self.log.log_start_offset, self.log.log_end_offset, self.log.high_watermark) == (
            self.log_start_offset, self.log_end_offset, self.log_end_offset
        )
        assert [(s.base_offset, s.next_offset, s.size_bytes, s.max_timestamp) for s in self.log.segments] == [
            (s.base_offset, s.next_offset, s.size_bytes, s.max_timestamp) for s in self.segments
        ]

    @invariant()
    def a_consumer_reads_the_model(self) -> None:
        if getattr(self, "log", None) is None:
            return
        out = b""
        offset = self.log_start_offset
        while (piece := self.log.read(offset, 1 << 20)) is not None:
            data = piece.read_bytes()
            offset = list(iter_headers(data))[-1].next_offset
            out += data
        first = [b for b in self.batches() if b.last_offset >= self.log_start_offset]
        assert out == b"".join(b.data for b in first)

    @invariant()
    def indexes_follow_kafkas_rule(self) -> None:
        if getattr(self, "log", None) is None:
            return
        for info, segment in zip(self.log.segments, self.segments):
            expected, last, position = [], 0, 0
            reached: dict[int, int] = {}
            running = -1
            for batch in segment.batches:
                if batch.max_timestamp > running:
                    running = batch.max_timestamp
                    reached[running] = batch.last_offset
                if position - last > self.config.index_interval_bytes:
                    expected.append((batch.last_offset - segment.base_offset, position))
                    last = position
                position += len(batch.data)
            # A segment's index files are created by their first entry (or its roll): absent is empty.
            assert list(struct.iter_unpack(">ii", _bytes_or_empty(info.index_path))) == expected
            for timestamp, relative in struct.iter_unpack(">qi", _bytes_or_empty(info.timeindex_path)):
                assert reached[timestamp] == segment.base_offset + relative


def _bytes_or_empty(path) -> bytes:
    return path.read_bytes() if path.exists() else b""


LogMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestLogStateMachine = LogMachine.TestCase
