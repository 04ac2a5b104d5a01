"""The bucket layout: exact keys, exact parsing, and deterministic catalogue resolution."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cold_tier.errors import InvalidSegmentKey
from cold_tier.layout import (
    MAX_OFFSET,
    CommittedSegment,
    SegmentObjectKey,
    commits_prefix,
    index_key,
    log_key,
    new_upload_id,
    parse_catalogue,
    parse_commit_key,
    parse_segment_object_key,
    partition_prefix,
    resolve_overlaps,
    time_index_key,
    topic_prefix,
)


def segment(
    base: int,
    last: int,
    *,
    epoch: int = 0,
    upload_id: str = "aa",
    topic: str = "orders",
    partition: int = 0,
    base_timestamp: int = 1_700_000_000_000,
    max_timestamp: int = 1_700_000_000_500,
    size_bytes: int = 4096,
) -> CommittedSegment:
    return CommittedSegment(
        topic=topic,
        partition=partition,
        base_offset=base,
        last_offset=last,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        size_bytes=size_bytes,
        leader_epoch=epoch,
        upload_id=upload_id,
    )


# --- exact keys -----------------------------------------------------------------------------


def test_keys_of_a_segment_are_exactly_the_documented_ones():
    s = segment(100, 199, epoch=3, upload_id="0123456789abcdef", topic="my.topic_name-1", partition=7)
    assert s.log_key == "my.topic_name-1/7/00000000000000000100-0123456789abcdef.log"
    assert s.index_key == "my.topic_name-1/7/00000000000000000100-0123456789abcdef.index"
    assert s.time_index_key == "my.topic_name-1/7/00000000000000000100-0123456789abcdef.timeindex"
    assert s.commit_key == (
        "my.topic_name-1/7/commits/00000000000000000100-00000000000000000199"
        "-1700000000000-1700000000500-4096-3-0123456789abcdef.commit"
    )
    assert s.next_offset == 200
    assert (s.log_key, s.index_key, s.time_index_key) == (
        log_key("my.topic_name-1", 7, 100, "0123456789abcdef"),
        index_key("my.topic_name-1", 7, 100, "0123456789abcdef"),
        time_index_key("my.topic_name-1", 7, 100, "0123456789abcdef"),
    )


def test_prefixes():
    assert topic_prefix("orders") == "orders/"
    assert partition_prefix("orders", 12) == "orders/12/"
    assert commits_prefix("orders", 12) == "orders/12/commits/"
    assert segment(0, 0, partition=12).commit_key.startswith(commits_prefix("orders", 12))


def test_negative_timestamps_show_as_a_doubled_dash_and_parse_back():
    s = segment(0, 9, base_timestamp=-1, max_timestamp=-1)
    name = s.commit_key.rsplit("/", 1)[1]
    assert name == "00000000000000000000-00000000000000000009--1--1-4096-0-aa.commit"
    assert parse_commit_key(s.commit_key) == s
    odd = segment(0, 9, base_timestamp=-5, max_timestamp=0)
    assert parse_commit_key(odd.commit_key) == odd


@pytest.mark.parametrize("topic", ["a", "commits", "-", "_", "a.b", "x-1_y.z", "..a", "." * 3, "T" * 249])
def test_any_legal_topic_name_round_trips(topic):
    s = segment(5, 6, topic=topic, partition=2147483647)
    assert parse_commit_key(s.commit_key) == s
    assert parse_segment_object_key(s.log_key) == SegmentObjectKey(topic, 2147483647, 5, "aa", ".log")


def test_extreme_values_round_trip():
    s = segment(
        MAX_OFFSET,
        MAX_OFFSET,
        base_timestamp=-(2**63),
        max_timestamp=2**63 - 1,
        size_bytes=0,
        epoch=2**31 - 1,
        upload_id="z" * 64,
    )
    assert parse_commit_key(s.commit_key) == s


# --- parse errors ---------------------------------------------------------------------------

GOOD = "orders/0/commits/00000000000000000000-00000000000000000009-1-2-3-4-ab.commit"


def test_the_good_key_used_below_parses():
    expected = segment(0, 9, base_timestamp=1, max_timestamp=2, size_bytes=3, epoch=4, upload_id="ab")
    assert parse_commit_key(GOOD) == expected


@pytest.mark.parametrize(
    "key",
    [
        "orders/0/commits/0000000000000000000-00000000000000000009-1-2-3-4-ab.commit",  # 19-digit base
        "orders/0/commits/00000000000000000000-00000000000000000009-01-2-3-4-ab.commit",  # leading zero
        "orders/0/commits/00000000000000000000-00000000000000000009--0-2-3-4-ab.commit",  # -0
        "orders/0/commits/00000000000000000000-00000000000000000009-+1-2-3-4-ab.commit",  # plus sign
        "orders/0/commits/00000000000000000000-00000000000000000009-1-2--3-4-ab.commit",  # negative size
        "orders/0/commits/00000000000000000000-00000000000000000009-1-2-3--1-ab.commit",  # epoch -1
        "orders/0/commits/00000000000000000000-00000000000000000009-1-2-3-4-AB.commit",  # upper-case id
        "orders/0/commits/00000000000000000000-00000000000000000009-1-2-3-4-a-b.commit",  # '-' in id
        "orders/0/commits/00000000000000000000-00000000000000000009-1-2-3-4-ab.commit.tmp",
        "orders/0/commits/00000000000000000000-00000000000000000009-1-2-3-ab.commit",  # field missing
        "orders/0/commits/00000000000000000010-00000000000000000009-1-2-3-4-ab.commit",  # last < base
        "orders/0/commits/99999999999999999999-99999999999999999999-1-2-3-4-ab.commit",  # > 2**63-1
        "orders/0/commits/00000000000000000000-00000000000000000009-99999999999999999999-2-3-4-ab.commit",
        "orders/0/commits/00000000000000000000-00000000000000000009-1-2-3-2147483648-ab.commit",
        "orders/00/commits/00000000000000000000-00000000000000000009-1-2-3-4-ab.commit",  # partition 00
        "orders/-1/commits/00000000000000000000-00000000000000000009-1-2-3-4-ab.commit",
        "orders/2147483648/commits/00000000000000000000-00000000000000000009-1-2-3-4-ab.commit",
        "or/ders/0/commits/00000000000000000000-00000000000000000009-1-2-3-4-ab.commit",  # extra level
        "prefix/orders/0/commits/00000000000000000000-00000000000000000009-1-2-3-4-ab.commit",
        "orders/0/00000000000000000000-00000000000000000009-1-2-3-4-ab.commit",  # not under commits/
        "orders/0/commit/00000000000000000000-00000000000000000009-1-2-3-4-ab.commit",
        "ord ers/0/commits/00000000000000000000-00000000000000000009-1-2-3-4-ab.commit",  # illegal topic
        "../0/commits/00000000000000000000-00000000000000000009-1-2-3-4-ab.commit",
        "/0/commits/00000000000000000000-00000000000000000009-1-2-3-4-ab.commit",
        "orders/0/commits/\uff10" + "0" * 19 + "-00000000000000000009-1-2-3-4-ab.commit",  # non-ASCII digit
    ],
)
def test_malformed_commit_keys_are_invalid_segment_keys(key):
    with pytest.raises(InvalidSegmentKey) as caught:
        parse_commit_key(key)
    assert caught.value.key == key


@pytest.mark.parametrize(
    "key",
    [
        "orders/0/00000000000000000000-ab.lg",
        "orders/0/00000000000000000000.log",
        "orders/0/0000000000000000000-ab.log",
        "orders/0/00000000000000000000-ab.log.tmp",
        "orders/0/commits/00000000000000000000-ab.log",
        "orders/x/00000000000000000000-ab.log",
        "orders/0/99999999999999999999-ab.log",
    ],
)
def test_malformed_segment_object_keys_are_invalid_segment_keys(key):
    with pytest.raises(InvalidSegmentKey):
        parse_segment_object_key(key)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"topic": ""},
        {"topic": "."},
        {"topic": ".."},
        {"topic": "a/b"},
        {"topic": "T" * 250},
        {"topic": "ünïcode"},
        {"partition": -1},
        {"partition": 2**31},
        {"base": -1, "last": 0},
        {"base": 5, "last": 4},
        {"base": 0, "last": 2**63},
        {"epoch": -1},
        {"size_bytes": -1},
        {"base_timestamp": 2**63},
        {"upload_id": ""},
        {"upload_id": "a-b"},
        {"upload_id": "a" * 65},
        {"partition": True},
    ],
)
def test_building_a_key_from_bad_fields_is_a_value_error(kwargs):
    fields = {"base": 0, "last": 1} | kwargs
    with pytest.raises(ValueError):
        segment(fields.pop("base"), fields.pop("last"), **fields)


def test_builders_reject_bad_arguments():
    with pytest.raises(ValueError):
        log_key("orders", 0, -1, "ab")
    with pytest.raises(ValueError):
        log_key("a/b", 0, 0, "ab")
    with pytest.raises(ValueError):
        commits_prefix("orders", -1)


# --- catalogue ------------------------------------------------------------------------------


def keys_of(*segments: CommittedSegment) -> list[str]:
    return [s.commit_key for s in segments]


def test_catalogue_is_ordered_by_base_offset_and_ignores_non_commit_objects():
    s0, s1, s2 = segment(0, 99), segment(100, 149, upload_id="bb"), segment(150, 150, upload_id="cc")
    listing = [s2.commit_key, "orders/0/commits/stray.txt", s0.commit_key, s1.commit_key, s0.log_key]
    assert parse_catalogue(listing) == [s0, s1, s2]
    assert parse_catalogue([]) == []


def test_catalogue_raises_on_a_corrupt_commit_key():
    with pytest.raises(InvalidSegmentKey):
        parse_catalogue([segment(0, 1).commit_key, "orders/0/commits/garbage.commit"])


def test_same_base_offset_keeps_the_highest_leader_epoch():
    old, new = segment(100, 199, epoch=4, upload_id="00"), segment(100, 180, epoch=5, upload_id="ff")
    assert parse_catalogue(keys_of(old, new)) == [new]


def test_same_base_and_epoch_keeps_the_lowest_upload_id():
    a, b, c = (segment(100, 199, epoch=2, upload_id=u) for u in ("b7", "a9", "c0"))
    assert parse_catalogue(keys_of(a, b, c)) == [b]


def test_an_overlap_is_won_by_the_higher_epoch_whatever_the_bases():
    zombie = segment(200, 299, epoch=1, upload_id="aa")
    leader = [segment(150, 249, epoch=2, upload_id="bb"), segment(250, 260, epoch=2, upload_id="cc")]
    before = segment(0, 149, epoch=1, upload_id="dd")
    assert parse_catalogue(keys_of(zombie, before, *leader)) == [before, *leader]


def test_within_one_epoch_the_lower_base_offset_wins_an_overlap():
    a, b = segment(0, 100, upload_id="ff"), segment(50, 150, upload_id="00")
    assert parse_catalogue(keys_of(b, a)) == [a]


def test_gaps_are_reported_as_they_are():
    a, c = segment(0, 9), segment(20, 29, upload_id="cc")
    assert parse_catalogue(keys_of(c, a)) == [a, c]


def test_catalogue_groups_by_topic_and_partition():
    p1 = segment(0, 9, partition=1)
    p0 = segment(0, 9, partition=0, epoch=0, upload_id="zz")
    p0_overlap = segment(5, 20, partition=0, epoch=1)
    other = segment(0, 9, topic="a.topic")
    assert parse_catalogue(keys_of(p1, p0, p0_overlap, other)) == [other, p0_overlap, p1]


def test_catalogue_does_not_depend_on_listing_order():
    segments = [
        segment(0, 99, epoch=0, upload_id="a1"),
        segment(0, 99, epoch=0, upload_id="a0"),
        segment(100, 199, epoch=0, upload_id="b1"),
        segment(100, 149, epoch=1, upload_id="c1"),
        segment(150, 300, epoch=1, upload_id="d1"),
        segment(200, 250, epoch=0, upload_id="e1"),
    ]
    expected = parse_catalogue(keys_of(*segments))
    assert expected == [segments[1], segments[3], segments[4]]
    for order in itertools.permutations(segments):
        assert parse_catalogue(keys_of(*order)) == expected


def test_upload_ids_are_16_hex_digits_and_distinct():
    ids = {new_upload_id() for _ in range(100)}
    assert len(ids) == 100
    for upload_id in ids:
        assert len(upload_id) == 16 and set(upload_id) <= set("0123456789abcdef")
        assert parse_commit_key(segment(0, 0, upload_id=upload_id).commit_key).upload_id == upload_id


# --- Hypothesis -----------------------------------------------------------------------------

topics = st.text(alphabet="abcXYZ019._-", min_size=1, max_size=30).filter(lambda t: t not in (".", ".."))
offsets = st.integers(0, MAX_OFFSET)
timestamps = st.integers(-(2**63), 2**63 - 1)


@st.composite
def committed_segments(draw, topic=topics, partition=st.integers(0, 2**31 - 1)):
    base = draw(offsets)
    return CommittedSegment(
        topic=draw(topic),
        partition=draw(partition),
        base_offset=base,
        last_offset=draw(st.integers(base, MAX_OFFSET)),
        base_timestamp=draw(timestamps),
        max_timestamp=draw(timestamps),
        size_bytes=draw(st.integers(0, 2**40)),
        leader_epoch=draw(st.integers(0, 2**31 - 1)),
        upload_id=draw(st.text(alphabet="0123456789abcdefz", min_size=1, max_size=64)),
    )


@settings(max_examples=200, deadline=None)
@given(committed_segments())
def test_commit_key_round_trips(s):
    assert parse_commit_key(s.commit_key) == s
    for key, suffix in ((s.log_key, ".log"), (s.index_key, ".index"), (s.time_index_key, ".timeindex")):
        expected = SegmentObjectKey(s.topic, s.partition, s.base_offset, s.upload_id, suffix)
        assert parse_segment_object_key(key) == expected


@settings(max_examples=100, deadline=None)
@given(st.lists(committed_segments(topic=st.just("t"), partition=st.just(0)), min_size=2, max_size=10))
def test_key_order_is_base_offset_order(segments):
    by_key = sorted(segments, key=lambda s: s.commit_key)
    assert [s.base_offset for s in by_key] == sorted(s.base_offset for s in segments)
    data_keys = sorted(segments, key=lambda s: s.log_key)
    assert [s.base_offset for s in data_keys] == sorted(s.base_offset for s in segments)


small_segments = st.builds(
    lambda base, length, epoch, upload_id: segment(base, base + length, epoch=epoch, upload_id=upload_id),
    st.integers(0, 60),
    st.integers(0, 25),
    st.integers(0, 3),
    st.sampled_from(["a", "b", "c"]),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(small_segments, max_size=12), st.randoms(use_true_random=False))
def test_resolution_is_disjoint_ordered_maximal_and_order_independent(segments, rng: random.Random):
    winners = resolve_overlaps(segments)
    assert [w.base_offset for w in winners] == sorted(w.base_offset for w in winners)
    for before, after in zip(winners, winners[1:]):
        assert before.last_offset < after.base_offset
    assert set(winners) <= set(segments)
    for s in set(segments) - set(winners):
        # Left out only because it overlaps a winner that ranks at least as high.
        assert any(
            w.base_offset <= s.last_offset
            and s.base_offset <= w.last_offset
            and (-w.leader_epoch, w.base_offset, w.upload_id) <= (-s.leader_epoch, s.base_offset, s.upload_id)
            for w in winners
        )
    shuffled = list(segments)
    rng.shuffle(shuffled)
    assert resolve_overlaps(shuffled) == winners
    assert parse_catalogue(keys_of(*shuffled)) == winners
