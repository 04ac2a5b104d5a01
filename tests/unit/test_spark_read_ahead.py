"""spark_reader.read._Chunks: ranged GETs of a .log object run ahead of the decoding, a few at
once, and are taken in order; a read that stops early leaves none running for long."""

from __future__ import annotations

import threading
import time

import pytest

from spark_reader.errors import CorruptSegment
from spark_reader.read import GETS_IN_FLIGHT, _Chunks


class SlowBucket:
    """GETs of a bytes object that each take `delay_s`, counting how many run at once."""

    def __init__(self, data: bytes, delay_s: float = 0.05) -> None:
        self.data, self.delay_s = data, delay_s
        self.running = self.most_running = 0
        self.ranges: list[tuple[int, int]] = []
        self._lock = threading.Lock()

    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        with self._lock:
            self.running += 1
            self.most_running = max(self.most_running, self.running)
            self.ranges.append((start, end))
        time.sleep(self.delay_s)  # the bucket's latency, stood in for
        with self._lock:
            self.running -= 1
        return self.data[start:end]


def test_windows_are_the_object_in_order_with_gets_in_flight() -> None:
    data = bytes(range(256)) * 40  # 10,240 bytes, 11 chunks of 1,000
    bucket = SlowBucket(data)
    chunks = _Chunks(bucket, "k.log", 120, len(data), 1000)
    read = b""
    while (window := chunks.next()) is not None:
        read += window
        chunks.consume(len(window))  # the whole window used: nothing carried
        time.sleep(0.05)  # decoding, overlapped with the GETs ahead
    chunks.finish()
    chunks.close()
    assert read == data[120:]
    assert sorted(bucket.ranges) == [(s, min(s + 1000, len(data))) for s in range(120, len(data), 1000)]
    assert bucket.most_running == GETS_IN_FLIGHT  # one after the other would be 1


def test_a_carried_batch_joins_the_next_window() -> None:
    data = b"a" * 2500
    chunks = _Chunks(SlowBucket(data, 0.0), "k.log", 0, 2500, 1000)
    assert chunks.next() == b"a" * 1000
    chunks.consume(600)  # 400 bytes of a cut batch carried
    assert chunks.next() == b"a" * 1400
    chunks.consume(1400)
    assert chunks.next() == b"a" * 500
    chunks.close()


def test_an_object_shorter_than_its_commit_says_is_corrupt_at_the_missing_byte() -> None:
    chunks = _Chunks(SlowBucket(b"x" * 1500, 0.0), "k.log", 0, 3000, 1000)
    assert chunks.next() == b"x" * 1000
    chunks.consume(1000)
    assert chunks.next() == b"x" * 500
    chunks.consume(500)
    with pytest.raises(CorruptSegment) as raised:
        chunks.next()
    assert (raised.value.key, raised.value.position) == ("k.log", 1500)
    chunks.close()


def test_stopping_early_cancels_the_gets_not_started() -> None:
    bucket = SlowBucket(b"y" * 100_000, 0.05)
    chunks = _Chunks(bucket, "k.log", 0, 100_000, 1000)
    assert chunks.next() == b"y" * 1000
    chunks.close()
    assert len(bucket.ranges) <= GETS_IN_FLIGHT  # those asked for ahead at most, not the object's 100 chunks
