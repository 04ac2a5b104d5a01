"""Partitioning: Java's murmur2 bit for bit, and the sticky partitioner for keyless records."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from diskless.client.partitioner import StickyPartitioner, murmur2, partition_for_key, to_positive

# Kafka's own vectors (clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java).
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def test_murmur2_matches_java_vectors() -> None:
    for data, expected in JAVA_MURMUR2.items():
        assert murmur2(data) == expected, data


def test_to_positive_clears_the_sign_bit_like_java() -> None:
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0
    assert to_positive(5) == 5


def _reference_murmur2(data: bytes) -> int:
    """A straight transcription of Java's Utils.murmur2, one byte at a time, for comparison."""
    m, h = 0x5BD1E995, (0x9747B28C ^ len(data)) & 0xFFFFFFFF
    for i in range(len(data) // 4):
        k = data[4 * i] | data[4 * i + 1] << 8 | data[4 * i + 2] << 16 | data[4 * i + 3] << 24
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    rest = len(data) % 4
    base = len(data) - rest
    if rest >= 3:
        h ^= data[base + 2] << 16
    if rest >= 2:
        h ^= data[base + 1] << 8
    if rest >= 1:
        h ^= data[base]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h >= 1 << 31 else h


@settings(max_examples=200)
@given(st.binary(max_size=64))
def test_murmur2_matches_the_byte_wise_transcription(data: bytes) -> None:
    assert murmur2(data) == _reference_murmur2(data)


@settings(max_examples=100)
@given(st.binary(max_size=32), st.integers(min_value=1, max_value=1000))
def test_partition_for_key_is_positive_hash_modulo_count(key: bytes, count: int) -> None:
    assert partition_for_key(key, count) == (_reference_murmur2(key) & 0x7FFFFFFF) % count


def test_known_keys_land_where_java_puts_them() -> None:
    # to_positive(murmur2(key)) % 3 with the vectors above.
    assert partition_for_key(b"foobar", 3) == (-790332482 & 0x7FFFFFFF) % 3
    assert partition_for_key(b"abc", 7) == 479470107 % 7


def test_sticky_partitioner_sticks_until_a_batch_worth_then_moves() -> None:
    partitioner = StickyPartitioner(batch_size=100, rng=random.Random(7))
    available = (0, 1, 2, 3)
    first = partitioner.partition("t", 4, available)
    for _ in range(9):
        assert partitioner.partition("t", 4, available) == first
        partitioner.record_appended("t", first, 10, 4, available)
    assert partitioner.partition("t", 4, available) == first  # 90 bytes: still below batch_size
    partitioner.record_appended("t", first, 10, 4, available)
    second = partitioner.partition("t", 4, available)
    assert second != first and second in available


def test_sticky_partitioner_prefers_partitions_with_a_leader() -> None:
    partitioner = StickyPartitioner(batch_size=1, rng=random.Random(1))
    for _ in range(50):
        partition = partitioner.partition("t", 5, (2, 4))
        assert partition in (2, 4)
        partitioner.record_appended("t", partition, 1, 5, (2, 4))


def test_sticky_partitioner_falls_back_to_all_partitions_without_leaders() -> None:
    partitioner = StickyPartitioner(batch_size=1, rng=random.Random(3))
    seen = set()
    for _ in range(200):
        partition = partitioner.partition("t", 3, ())
        seen.add(partition)
        partitioner.record_appended("t", partition, 1, 3, ())
    assert seen == {0, 1, 2}


def test_sticky_partitioner_spreads_evenly_over_time() -> None:
    partitioner = StickyPartitioner(batch_size=10, rng=random.Random(11))
    counts = [0, 0, 0]
    for _ in range(30000):
        partition = partitioner.partition("t", 3, (0, 1, 2))
        counts[partition] += 1
        partitioner.record_appended("t", partition, 1, 3, (0, 1, 2))
    assert min(counts) > 9000, counts
