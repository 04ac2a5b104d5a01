"""Chunk arithmetic, range assembly, prefetch planning and the LRU cache of the remote reader."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cold_tier.chunks import (
    LruCache,
    chunk_count,
    chunk_of,
    chunk_span,
    chunks_covering,
    join_range,
    prefetch_targets,
)


@dataclass(frozen=True)
class Sized:
    size_bytes: int


def test_chunk_spans_tile_the_object_exactly():
    assert chunk_count(0, 4) == 0
    assert chunk_count(10, 4) == 3
    assert chunk_count(12, 4) == 3
    assert [chunk_span(k, 4, 10) for k in range(3)] == [(0, 4), (4, 8), (8, 10)]
    assert chunk_of(0, 4) == 0 and chunk_of(3, 4) == 0 and chunk_of(4, 4) == 1
    with pytest.raises(ValueError):
        chunk_span(3, 4, 10)
    with pytest.raises(ValueError):
        chunk_span(-1, 4, 10)


def test_chunks_covering_a_range():
    assert chunks_covering(0, 0, 4) == range(0)
    assert chunks_covering(5, 5, 4) == range(0)
    assert list(chunks_covering(0, 4, 4)) == [0]
    assert list(chunks_covering(3, 5, 4)) == [0, 1]
    assert list(chunks_covering(4, 13, 4)) == [1, 2, 3]


@settings(max_examples=150, deadline=None)  # the CPUs are shared: time is not under test
@given(
    data=st.binary(min_size=1, max_size=200),
    chunk_bytes=st.integers(1, 64),
    bounds=st.tuples(st.integers(0, 200), st.integers(0, 200)),
)
def test_join_range_equals_slicing_the_whole_object(data, chunk_bytes, bounds):
    start, end = sorted(bounds)
    start, end = min(start, len(data)), min(end, len(data))
    chunks = chunks_covering(start, end, chunk_bytes)
    if not chunks:
        return
    parts = [data[slice(*chunk_span(k, chunk_bytes, len(data)))] for k in chunks]
    assert bytes(join_range(parts, chunks.start, start, end, chunk_bytes)) == data[start:end]


def test_join_range_refuses_chunks_that_do_not_cover_the_range():
    with pytest.raises(ValueError):
        join_range([b"abcd"], 1, 2, 6, 4)  # chunk 1 starts at 4
    with pytest.raises(ValueError):
        join_range([b"abcd"], 0, 2, 6, 4)  # ends at 4


def test_prefetch_targets_continue_into_the_next_segments():
    segments = [Sized(10), Sized(0), Sized(5), Sized(9)]
    # segment 0 has chunks 0..2 (chunk_bytes 4); after chunk 1 comes chunk 2, then the next
    # non-empty segment's first chunks.
    assert prefetch_targets(segments, 0, 1, 3, 4) == [(0, 2), (2, 0), (2, 1)]
    assert prefetch_targets(segments, 0, 2, 4, 4) == [(2, 0), (2, 1), (3, 0), (3, 1)]
    assert prefetch_targets(segments, 3, 1, 5, 4) == [(3, 2)]
    assert prefetch_targets(segments, 3, 2, 5, 4) == []
    assert prefetch_targets(segments, 0, 0, 0, 4) == []


def test_lru_cache_evicts_least_recently_used_by_weight():
    cache: LruCache[str, bytes] = LruCache(10, len)
    cache.put("a", b"1234")
    cache.put("b", b"1234")
    assert cache.get("a") == b"1234"  # a is now the most recent
    cache.put("c", b"1234")  # 12 > 10: b goes
    assert "b" not in cache and "a" in cache and "c" in cache
    assert cache.weight == 8 and len(cache) == 2
    cache.put("huge", b"x" * 11)  # heavier than the whole cache: not kept, evicts nothing
    assert "huge" not in cache and cache.weight == 8
    cache.put("a", b"123456")  # replacing re-weighs: 6 + 4
    assert cache.weight == 10 and cache.get("a") == b"123456"
    cache.discard("a")
    cache.discard("missing")
    assert cache.weight == 4 and cache.get("a") is None


def test_lru_cache_discard_where_and_clear():
    cache: LruCache[tuple[str, int], int] = LruCache(100)
    for key in ("x", "y"):
        for chunk in range(3):
            cache.put((key, chunk), chunk)
    assert cache.discard_where(lambda key: key[0] == "x") == 3
    assert [key for key in [("x", 0), ("y", 0), ("y", 1), ("y", 2)] if key in cache] == [("y", 0), ("y", 1), ("y", 2)]
    assert cache.weight == 3
    cache.clear()
    assert len(cache) == 0 and cache.weight == 0


def test_lru_cache_by_entries_keeps_the_newest():
    cache: LruCache[int, str] = LruCache(2)
    for key in range(5):
        cache.put(key, str(key))
    assert [key for key in range(5) if key in cache] == [3, 4]
