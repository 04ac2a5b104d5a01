"""The consumer embedded protocol: our encoding, and decoding bytes other clients write."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diskless.client.consumer_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_generation,
    decode_subscription,
    encode_assignment,
    encode_generation,
    encode_subscription,
)
from diskless.client.structs import TopicPartition as TP
from diskless.wire import InvalidFrame

topic_names = st.text(alphabet="abcxyz-_.", min_size=1, max_size=8)
partitions = st.lists(st.builds(TP, topic_names, st.integers(min_value=0, max_value=100)), unique=True, max_size=6)


@settings(max_examples=100)
@given(st.lists(topic_names, unique=True, max_size=4), st.one_of(st.none(), st.binary(max_size=10)), partitions, st.integers(-1, 1000))
def test_subscription_round_trips(topics, user_data, owned, generation) -> None:
    sub = Subscription(tuple(sorted(topics)), user_data, tuple(sorted(owned)), generation)
    assert decode_subscription(encode_subscription(sub)) == sub


@settings(max_examples=100)
@given(partitions, st.one_of(st.none(), st.binary(max_size=10)))
def test_assignment_round_trips(assigned, user_data) -> None:
    assignment = Assignment(tuple(sorted(assigned)), user_data)
    assert decode_assignment(encode_assignment(assignment)) == assignment


def _string(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def test_decodes_a_version_0_subscription_as_old_clients_write_it() -> None:
    data = struct.pack(">hi", 0, 2) + _string("a") + _string("b") + struct.pack(">i", -1)
    assert decode_subscription(data) == Subscription(("a", "b"), None, (), -1)


def test_decodes_a_version_1_subscription_with_owned_partitions() -> None:
    data = (
        struct.pack(">hi", 1, 1) + _string("t") + struct.pack(">i", 3) + b"abc"
        + struct.pack(">i", 1) + _string("t") + struct.pack(">iii", 2, 4, 5)
    )  # fmt: skip
    assert decode_subscription(data) == Subscription(("t",), b"abc", (TP("t", 4), TP("t", 5)), -1)


def test_decodes_a_version_0_assignment() -> None:
    data = struct.pack(">hi", 0, 1) + _string("t") + struct.pack(">iii", 2, 0, 2) + struct.pack(">i", -1)
    assert decode_assignment(data) == Assignment((TP("t", 0), TP("t", 2)), None)


def test_an_empty_assignment_means_no_partitions() -> None:
    assert decode_assignment(b"") == Assignment(())


def test_garbage_is_an_invalid_frame() -> None:
    with pytest.raises(InvalidFrame):
        decode_subscription(b"\x00")
    with pytest.raises(InvalidFrame):
        decode_subscription(struct.pack(">hi", 0, 5) + b"xx")
    with pytest.raises(InvalidFrame):
        decode_assignment(struct.pack(">hi", 0, 7))


def test_we_write_version_3() -> None:
    assert encode_subscription(Subscription(("t",)))[:2] == b"\x00\x03"
    assert encode_assignment(Assignment(()))[:2] == b"\x00\x03"


def test_generation_user_data_is_an_int32() -> None:
    assert encode_generation(7) == b"\x00\x00\x00\x07"
    assert decode_generation(encode_generation(7)) == 7
    assert decode_generation(None) == -1
    assert decode_generation(b"longer than four") == -1
