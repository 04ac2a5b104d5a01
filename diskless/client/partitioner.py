"""Choosing a partition for a record: explicit, by key hash, or sticky for keyless records.

Keyed records go to `to_positive(murmur2(key)) % num_partitions`, bit for bit as Java's
`BuiltInPartitioner.partitionForKey` (org.apache.kafka.common.utils.Utils.murmur2, seed
0x9747b28c), which is also librdkafka's `murmur2_random` partitioner: the same key lands on
the same partition whichever of these clients produced it. The count is of all partitions,
available or not, so a key's partition does not move when a leader is briefly unknown.

Keyless records stick to one partition until `batch_size` bytes have gone to it, then move
to another partition picked at random among those with a known leader (KIP-794's uniform
sticky partitioner, without its adaptive weighting): big batches, and an even spread over time.

Pure: no I/O, no clock; the random source is injected.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Sequence

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Java's `Utils.murmur2`: the signed 32-bit MurmurHash2 of `data`."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    length4 = length // 4
    if length4:
        for k in struct.unpack_from(f"<{length4}I", data):
            k = (k * _M) & _MASK
            k ^= k >> 24
            k = (k * _M) & _MASK
            h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    base = length & ~3
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Java's `Utils.toPositive`: clear the sign bit (not abs: abs(MIN_VALUE) overflows)."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    return to_positive(murmur2(key)) % num_partitions


class StickyPartitioner:
    """The partition of keyless records, per topic. Called by the producer on every send."""

    def __init__(self, batch_size: int, rng: random.Random | None = None) -> None:
        self.batch_size = batch_size
        self._rng = rng or random.Random()
        self._current: dict[str, int] = {}
        self._produced_bytes: dict[str, int] = {}

    def partition(self, topic: str, num_partitions: int, available: Sequence[int]) -> int:
        current = self._current.get(topic)
        if current is None or current >= num_partitions:
            current = self._next(topic, num_partitions, available, None)
        return current

    def bytes_left(self, topic: str) -> int:
        """How many more bytes may go to the sticky partition before it moves on."""
        return self.batch_size - self._produced_bytes.get(topic, 0)

    def record_appended(self, topic: str, partition: int, size_bytes: int, num_partitions: int, available: Sequence[int]) -> None:
        """Count bytes sent to the sticky partition; move on once a batch's worth went there."""
        if self._current.get(topic) != partition:
            return
        produced = self._produced_bytes.get(topic, 0) + size_bytes
        if produced >= self.batch_size:
            self._next(topic, num_partitions, available, partition)
        else:
            self._produced_bytes[topic] = produced

    def _next(self, topic: str, num_partitions: int, available: Sequence[int], previous: int | None) -> int:
        choices = [p for p in available if p < num_partitions] or list(range(num_partitions))
        if previous is not None and len(choices) > 1:
            choices = [p for p in choices if p != previous]
        chosen = choices[self._rng.randrange(len(choices))]
        self._current[topic] = chosen
        self._produced_bytes[topic] = 0
        return chosen
