"""The producer's bulk path (`Accumulator.append_many`, `BatchBuilder.append_many`) against
records appended one by one: the same batches, byte for byte, and the same buffer accounting."""

from __future__ import annotations

import random

import pytest

from diskless.client.accumulator import Accumulator, AccumulatorParams
from diskless.client.builder import _SMALL, BatchBuilder, encode_varint
from diskless.client.partitioner import StickyPartitioner

TP = ("t", 0)
NO_STICKY = 1 << 62


def make(batch_size: int) -> Accumulator:
    return Accumulator(AccumulatorParams(batch_size, 0, 1 << 20, 0, False, 5))


def records(rng: random.Random, count: int, keyed: bool) -> tuple[list, list | None]:
    values = [None if rng.random() < 0.05 else rng.randbytes(rng.choice([0, 3, 10, 200, 20000])) for _ in range(count)]
    keys = [None if rng.random() < 0.2 else rng.randbytes(rng.randrange(0, 40)) for _ in range(count)] if keyed else None
    return values, keys


def built(acc: Accumulator) -> list[tuple[bytes, int]]:
    return [(batch.builder.build(), batch.buffered_bytes) for batch in acc.partitions[TP].queue]  # type: ignore[index]


@pytest.mark.parametrize("keyed", [False, True])
@pytest.mark.parametrize("batch_size", [200, 1000, 16384])
def test_bulk_appends_build_the_batches_one_by_one_appends_build(keyed: bool, batch_size: int) -> None:
    rng = random.Random(batch_size * 2 + keyed)
    for _round in range(5):
        values, keys = records(rng, 300, keyed)
        one, bulk = make(batch_size), make(batch_size)
        prior = rng.randrange(0, 3)  # records already in the open batch, at an earlier timestamp
        for acc in (one, bulk):
            for i in range(prior):
                acc.append(TP, 900 + i, None, b"x" * 30, (), now=0)
        fills = 0
        for i, value in enumerate(values):
            fills += one.append(TP, 1000, keys[i] if keys else None, value, (), now=0)[3]
        position, bulk_fills = 0, 0
        while position < len(values):
            stop = rng.randrange(position + 1, len(values) + 1)  # the input comes in blocks
            while position < stop:
                _batch, position, _size, _created, filled = bulk.append_many(TP, 1000, keys, values, position, stop, 0, 1 << 40, NO_STICKY)
                bulk_fills += filled
        assert built(bulk) == built(one)
        assert bulk.buffered_bytes == one.buffered_bytes
        assert bulk_fills == fills


def test_room_and_sticky_limits_stop_the_bulk_path() -> None:
    builder = BatchBuilder()
    values = [b"v" * 9] * 10  # 30 bytes each in the accounting
    assert builder.append_many(1, None, values, 0, 10, 1 << 20, room_bytes=95, sticky_bytes=NO_STICKY) == (3, 90)
    assert builder.append_many(1, None, values, 3, 10, 1 << 20, room_bytes=1 << 20, sticky_bytes=45) == (5, 60)
    assert builder.append_many(1, None, values, 5, 10, 1 << 20, room_bytes=10, sticky_bytes=NO_STICKY) == (5, 0)
    assert builder.count == 5
    empty = BatchBuilder()  # the first record of a batch goes in whatever the room
    assert empty.append_many(1, None, values, 0, 10, 1 << 20, room_bytes=10, sticky_bytes=NO_STICKY) == (1, 30)


def test_the_sticky_partitioner_tells_the_bytes_left() -> None:
    partitioner = StickyPartitioner(100, random.Random(1))
    partition = partitioner.partition("t", 4, [0, 1, 2, 3])
    assert partitioner.bytes_left("t") == 100
    partitioner.record_appended("t", partition, 60, 4, [0, 1, 2, 3])
    assert partitioner.bytes_left("t") == 40


def test_the_table_of_small_varints_is_encode_varint() -> None:
    assert list(_SMALL) == [encode_varint(n) for n in range(1 << 14)]
