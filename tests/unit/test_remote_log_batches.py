"""The pure decisions of a remote read: segment choice, header peeks, KIP-74 batch selection."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cold_tier.layout import CommittedSegment
from cold_tier.remote_errors import RemoteOffsetOutOfRange
from cold_tier.remote_scan import PEEK_BYTES, BatchPeek, peek_batch, segment_for_offset, take_whole_batches
from hot_tier.records import BadLength, BadMagic, Record, TruncatedBatch, encode_batch, read_header


def batch(base_offset: int, records: int, value_bytes: int = 10, timestamp: int = 1_000) -> bytes:
    return encode_batch(
        [Record(base_offset + i, timestamp + i, None, b"v" * value_bytes) for i in range(records)],
        base_offset=base_offset,
    )


def segment(base: int, last: int) -> CommittedSegment:
    return CommittedSegment(
        topic="orders", partition=0, base_offset=base, last_offset=last, base_timestamp=0,
        max_timestamp=0, size_bytes=100, leader_epoch=0, upload_id="ab",
    )  # fmt: skip


# --- segment_for_offset ----------------------------------------------------------------------

CATALOGUE = [segment(0, 9), segment(10, 19), segment(30, 39), segment(40, 40)]


@pytest.mark.parametrize(
    "offset, expected",
    [(0, 0), (9, 0), (10, 1), (19, 1), (20, 2), (29, 2), (30, 2), (39, 2), (40, 3), (41, None), (10**9, None)],
)
def test_segment_for_offset_holds_it_or_follows_the_gap(offset, expected):
    assert segment_for_offset(CATALOGUE, offset) == expected


def test_segment_for_offset_below_the_first_segment_is_out_of_range():
    with pytest.raises(RemoteOffsetOutOfRange) as raised:
        segment_for_offset(CATALOGUE[1:], 5)
    assert (raised.value.offset, raised.value.log_start_offset, raised.value.log_end_offset) == (5, 10, 41)
    assert segment_for_offset([], 0) is None


# --- peek_batch ------------------------------------------------------------------------------


def test_peek_reads_what_the_full_header_says_from_43_bytes():
    data = batch(500, 7, timestamp=2_000)
    header = read_header(data)
    peek = peek_batch(data[:PEEK_BYTES], 4096)
    assert peek == BatchPeek(4096, 500, header.last_offset, header.max_timestamp, header.size_bytes)
    assert (peek.last_offset, peek.max_timestamp, peek.end_position) == (506, 2_006, 4096 + len(data))
    assert peek_batch(b"xx" + data, 7, at=2) == BatchPeek(7, 500, 506, 2_006, len(data))


def test_peek_refuses_what_is_not_a_batch_header():
    data = bytearray(batch(0, 1))
    with pytest.raises(TruncatedBatch):
        peek_batch(data[: PEEK_BYTES - 1], 0)
    bad_magic = bytearray(data)
    bad_magic[16] = 1
    with pytest.raises(BadMagic):
        peek_batch(bad_magic, 0)
    bad_length = bytearray(data)
    bad_length[8:12] = (10).to_bytes(4, "big")
    with pytest.raises(BadLength):
        peek_batch(bad_length, 0)


# --- take_whole_batches ----------------------------------------------------------------------


def test_take_whole_batches_fits_max_bytes_with_whole_batches_only():
    batches = [batch(0, 1), batch(1, 3), batch(4, 2)]
    buf = b"".join(batches)
    sizes = [len(b) for b in batches]
    assert take_whole_batches(buf, len(buf), min_one_batch=True) == len(buf)
    assert take_whole_batches(buf, len(buf) - 1, min_one_batch=True) == sizes[0] + sizes[1]
    assert take_whole_batches(buf, sizes[0] + sizes[1], min_one_batch=False) == sizes[0] + sizes[1]
    assert take_whole_batches(buf, sizes[0], min_one_batch=False) == sizes[0]
    # A batch cut short by the end of the buffer is left out, whatever max_bytes says.
    assert take_whole_batches(buf[:-1], 10**6, min_one_batch=True) == sizes[0] + sizes[1]


def test_take_whole_batches_first_batch_larger_than_max_bytes_is_kip_74():
    buf = batch(0, 5, value_bytes=100) + batch(5, 1)
    first = len(batch(0, 5, value_bytes=100))
    assert take_whole_batches(buf, 10, min_one_batch=True) == first
    assert take_whole_batches(buf, 0, min_one_batch=True) == first
    assert take_whole_batches(buf, 10, min_one_batch=False) == 0


def test_take_whole_batches_needs_the_whole_first_batch():
    data = batch(0, 3)
    with pytest.raises(TruncatedBatch):
        take_whole_batches(data[:-1], 10**6, min_one_batch=True)
    with pytest.raises(TruncatedBatch):
        take_whole_batches(data[:5], 10**6, min_one_batch=True)


@settings(max_examples=100, deadline=None)  # the CPUs are shared: time is not under test
@given(
    counts=st.lists(st.integers(1, 4), min_size=1, max_size=12),
    max_bytes=st.integers(0, 2_000),
    min_one_batch=st.booleans(),
)
def test_take_whole_batches_is_the_longest_fitting_prefix(counts, max_bytes, min_one_batch):
    batches, offset = [], 0
    for count in counts:
        batches.append(batch(offset, count, value_bytes=count * 7))
        offset += count
    buf = b"".join(batches)
    taken = take_whole_batches(buf, max_bytes, min_one_batch=min_one_batch)
    boundaries = [sum(len(b) for b in batches[:n]) for n in range(len(batches) + 1)]
    if len(batches[0]) > max_bytes:
        assert taken == (len(batches[0]) if min_one_batch else 0)
    else:
        assert taken == max(end for end in boundaries if end <= max_bytes)
