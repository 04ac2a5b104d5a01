"""check_timestamps: Kafka's bounds on CreateTime timestamps, from the header when it can."""

from __future__ import annotations

import pytest

from diskless.broker.errors import InvalidTimestamp
from diskless.broker.partition.timestamps import LONG_MAX, check_timestamps
from hot_tier.records import CorruptBatch, Record, encode_batch, read_header

NOW = 1_700_000_000_000


def batch(*timestamps: int) -> bytes:
    return encode_batch([Record(i, ts, None, b"v", ()) for i, ts in enumerate(timestamps)])


def refused(data: bytes, before: int, after: int) -> list[int]:
    try:
        check_timestamps(data, read_header(data), NOW, before, after)
    except InvalidTimestamp as exc:
        return [index for index, _ in exc.record_errors]
    return []


def test_each_record_out_of_range_is_named_and_the_bounds_are_inclusive() -> None:
    data = batch(NOW - 1000, NOW - 1001, NOW + 1000, NOW + 1001, -1)
    assert refused(data, 1000, 1000) == [1, 3]
    assert refused(data, 1001, 1001) == []


def test_without_a_before_bound_only_the_header_is_read() -> None:
    """The records section is never decoded while the header's max timestamp is in range: a
    section made unreadable passes; with a before bound it is decoded, and fails to be."""
    data = bytearray(batch(NOW, NOW + 10))
    data[61:] = b"\xff" * (len(data) - 61)  # the records, past the 61-byte header
    header = read_header(bytes(data), check_crc=False)
    check_timestamps(bytes(data), header, NOW, LONG_MAX, 3_600_000)
    with pytest.raises(CorruptBatch):
        check_timestamps(bytes(data), header, NOW, 1000, 3_600_000)


def test_a_record_ahead_is_found_from_the_header_then_named() -> None:
    assert refused(batch(NOW, NOW + 7_200_000, NOW), LONG_MAX, 3_600_000) == [1]
