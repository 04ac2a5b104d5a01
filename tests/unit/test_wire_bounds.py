"""Bounds of request bodies (diskless/wire/bounds.py): no length, count or null that does not fit
the frame or the schema reaches kio's native parser, which would allocate what it says first.

Every advertised API key and version gets issue N's 25-byte lie as a fixed case; then classic
and compact arrays, strings, bytes, nulls, nested arrays and tagged fields one by one; then a
Hypothesis test that corrupts valid requests of every version anywhere.
"""

from __future__ import annotations

import datetime
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.create_topics.v7.request import CreateTopicsRequest
from kio.schema.fetch.v4 import request as fetch_v4
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.metadata.v4.request import MetadataRequest as MetadataRequestV4
from kio.schema.metadata.v12.request import MetadataRequestTopic
from kio.schema.produce.v3.request import PartitionProduceData, ProduceRequest, TopicProduceData

from diskless.broker.refusal_log import RefusalLog
from diskless.wire import MalformedRequest, ProtocolError, UnsupportedVersion, encode_request, parse_request, request_type
from diskless.wire.bounds import check_request_body
from tests.unit.test_wire_roundtrip import bodies
from tests.wire_cases import ADVERTISED, LIE_BYTES, LIES, NOTHING_TO_LIE_ABOUT, REFUSED_VERSIONS, case_id, lie_body, lie_frame

ZERO = datetime.timedelta(0)


# --- the 25-byte lie, every advertised API key and version ------------------------------------


def test_the_fixed_cases_cover_every_advertised_version() -> None:
    assert len(ADVERTISED) == 207  # with OffsetForLeaderEpoch (23), client quotas (48, 49), DescribeLogDirs (35), ElectLeaders (43), reassignments (45, 46), KIP-848 (68, 69), AlterConfigs (33), OffsetCommit/Fetch v9, ListGroups v5, DescribeGroups v6, SASL, ACLs and SCRAM (17, 29-31, 36, 50, 51), transactions (24-28, 61, 65, 66)
    assert {case for case in ADVERTISED if lie_body(*case) is None} == NOTHING_TO_LIE_ABOUT | REFUSED_VERSIONS
    assert len(LIES) == 207 - 9 - 4


@pytest.mark.parametrize(("api_key", "api_version"), LIES, ids=[case_id(*case) for case in LIES])
def test_the_25_byte_lie_is_refused_before_parsing(api_key: int, api_version: int) -> None:
    frame = lie_frame(api_key, api_version)
    assert frame is not None and len(frame) >= LIE_BYTES
    body, field = lie_body(api_key, api_version)
    with pytest.raises(MalformedRequest) as refused:
        parse_request(frame[4:])
    assert (refused.value.api_key, refused.value.api_version) == (api_key, api_version)
    assert f".{field} claims " in refused.value.reason
    assert "remain" in refused.value.reason


@pytest.mark.parametrize(("api_key", "api_version"), sorted(REFUSED_VERSIONS))
def test_advertised_produce_v0_to_v2_are_refused_by_version(api_key: int, api_version: int) -> None:
    frame = struct.pack(">hhih", api_key, api_version, 7, -1) + b"\xff\xff\xff\xff\x0f" * 3
    with pytest.raises(UnsupportedVersion):
        parse_request(frame)


def test_the_lie_of_the_issue_is_exactly_what_it_says() -> None:
    """Metadata v12, 25 bytes: header v2 (11 bytes), then topics = uvarint 2^32 - 1, then padding."""
    frame = lie_frame(3, 12)
    assert frame == b"\x00\x00\x00\x15" + b"\x00\x03\x00\x0c\x00\x00\x00\x07\xff\xff\x00" + b"\xff\xff\xff\xff\x0f" + bytes(5)
    with pytest.raises(MalformedRequest, match="array MetadataRequest.topics claims 4294967294 entries of at least 18 bytes, 5 bytes remain"):
        parse_request(frame[4:])


# --- arrays, strings, bytes, nulls ---------------------------------------------------------------

V4_HEADER = struct.pack(">hhih", 3, 4, 1, -1)  # Metadata v4: header v1, classic encodings
V12_HEADER = struct.pack(">hhih", 3, 12, 1, -1) + b"\x00"


def test_classic_array_count_is_bounded_by_the_bytes_that_remain() -> None:
    # Metadata v4: topics (array of string, each at least 2 bytes), allow_auto_topic_creation.
    fits = V4_HEADER + struct.pack(">i", 2) + b"\x00\x01a\x00\x01b" + b"\x01"
    assert [t.name for t in parse_request(fits).body.topics] == ["a", "b"]
    with pytest.raises(MalformedRequest, match=r"topics claims 4 entries of at least 2 bytes, 7 bytes remain"):
        parse_request(V4_HEADER + struct.pack(">i", 4) + b"\x00\x01a\x00\x01b" + b"\x01")


def test_classic_array_negative_count_other_than_null_is_refused() -> None:
    with pytest.raises(MalformedRequest, match="array MetadataRequest.topics has negative length -2"):
        parse_request(V4_HEADER + struct.pack(">i", -2) + b"\x01")


def test_null_array_where_the_schema_allows_it_parses() -> None:
    request = parse_request(V4_HEADER + struct.pack(">i", -1) + b"\x01")
    assert request.body == MetadataRequestV4(topics=None, allow_auto_topic_creation=True)


def test_null_array_where_the_schema_needs_one_is_refused() -> None:
    """Fetch v4 topics and ListOffsets v1 topics are not nullable: Kafka cannot parse them either."""
    fetch = fetch_v4.FetchRequest(replica_id=-1, max_wait=ZERO, min_bytes=1, max_bytes=1024, isolation_level=0, topics=())
    frame = encode_request(1, None, fetch)[4:]
    assert frame.endswith(b"\x00\x00\x00\x00")  # the empty topics array, last field
    with pytest.raises(MalformedRequest, match="non-nullable array FetchRequest.topics was serialized as null"):
        parse_request(frame[:-4] + b"\xff\xff\xff\xff")
    list_offsets = struct.pack(">hhih", 2, 1, 1, -1) + struct.pack(">i", -1) + struct.pack(">i", -1)
    with pytest.raises(MalformedRequest, match="non-nullable array ListOffsetsRequest.topics was serialized as null"):
        parse_request(list_offsets)


def test_compact_null_array_where_the_schema_needs_one_is_refused() -> None:
    frame = encode_request(1, None, CreateTopicsRequest(topics=(), timeout=ZERO, validate_only=False))[4:]
    header = 11
    assert frame[header] == 1  # compact empty array
    with pytest.raises(MalformedRequest, match="non-nullable array CreateTopicsRequest.topics was serialized as null"):
        parse_request(frame[:header] + b"\x00" + frame[header + 1 :])


def test_classic_string_length_is_bounded() -> None:
    with pytest.raises(MalformedRequest, match=r"field MetadataRequestTopic.name claims 32767 bytes, 3 remain"):
        parse_request(V4_HEADER + struct.pack(">i", 1) + b"\x7f\xff" + b"abc")
    with pytest.raises(MalformedRequest, match=r"field MetadataRequestTopic.name has negative length -2"):
        parse_request(V4_HEADER + struct.pack(">i", 1) + b"\xff\xfe" + b"\x01")
    with pytest.raises(MalformedRequest, match=r"non-nullable field MetadataRequestTopic.name was serialized as null"):
        parse_request(V4_HEADER + struct.pack(">i", 1) + b"\xff\xff" + b"\x01")


def test_compact_string_length_is_bounded() -> None:
    topic = b"\x00" * 16 + b"\xff\xff\xff\xff\x0f"  # topic_id, then name claiming 2^32 - 2 bytes
    with pytest.raises(MalformedRequest, match=r"field MetadataRequestTopic.name claims 4294967294 bytes, 3 remain"):
        parse_request(V12_HEADER + b"\x02" + topic + b"\x00\x00\x00")


def test_nullable_compact_string_accepts_null() -> None:
    topic = b"\x00" * 16 + b"\x00" + b"\x00"  # topic_id, null name, no tagged fields
    request = parse_request(V12_HEADER + b"\x02" + topic + b"\x00\x00\x00")
    assert request.body.topics == (MetadataRequestTopic(topic_id=None, name=None),)


def test_classic_bytes_length_is_bounded() -> None:
    body = ProduceRequest(
        transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=1),
        topic_data=(TopicProduceData(name="t", partition_data=(PartitionProduceData(index=0, records=b"0123456789"),)),),
    )  # fmt: skip
    frame = encode_request(1, None, body)[4:]
    records_at = frame.index(b"0123456789") - 4
    assert frame[records_at : records_at + 4] == struct.pack(">i", 10)
    assert parse_request(frame).body == body
    lying = frame[:records_at] + struct.pack(">i", 2**31 - 1) + frame[records_at + 4 :]
    with pytest.raises(MalformedRequest, match=r"field PartitionProduceData.records claims 2147483647 bytes, 10 remain"):
        parse_request(lying)
    negative = frame[:records_at] + struct.pack(">i", -7) + frame[records_at + 4 :]
    with pytest.raises(MalformedRequest, match=r"records has negative length -7"):
        parse_request(negative)


def test_a_lie_in_a_nested_array_is_refused() -> None:
    partition = fetch_v12.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1024)
    topic = fetch_v12.FetchTopic(topic="orders", partitions=(partition,))
    body = fetch_v12.FetchRequest(
        replica_id=-1, max_wait=ZERO, min_bytes=1, max_bytes=1024, isolation_level=0, session_id=0, session_epoch=-1,
        topics=(topic,), forgotten_topics_data=(), rack_id="",
    )  # fmt: skip
    frame = encode_request(1, None, body)[4:]
    count_at = frame.index(b"orders") + len(b"orders")
    assert frame[count_at] == 2  # compact array of one partition
    lying = frame[:count_at] + b"\xff\xff\xff\xff\x0f" + frame[count_at + 1 :]
    with pytest.raises(MalformedRequest, match=r"array FetchTopic.partitions claims 4294967294 entries of at least 33 bytes"):
        parse_request(lying)


# --- tagged fields -------------------------------------------------------------------------------


def fetch_v12_frame(cluster_id: str | None = None) -> bytes:
    body = fetch_v12.FetchRequest(
        cluster_id=cluster_id, replica_id=-1, max_wait=ZERO, min_bytes=1, max_bytes=1024, isolation_level=0, session_id=0,
        session_epoch=-1, topics=(), forgotten_topics_data=(), rack_id="",
    )  # fmt: skip
    return encode_request(1, None, body)[4:]


def test_tagged_field_count_and_sizes_are_bounded() -> None:
    frame = fetch_v12_frame()
    assert frame[-1] == 0  # the body's tagged fields: none
    with pytest.raises(MalformedRequest, match="FetchRequest claims 4294967295 tagged fields, 0 bytes remain"):
        parse_request(frame[:-1] + b"\xff\xff\xff\xff\x0f")
    with pytest.raises(MalformedRequest, match="tagged field 9 of FetchRequest claims 4294967295 bytes, 2 remain"):
        parse_request(frame[:-1] + b"\x01\x09\xff\xff\xff\xff\x0f" + b"ab")
    with pytest.raises(MalformedRequest, match="FetchRequest claims 1 tagged fields, 1 bytes remain"):
        parse_request(frame[:-1] + b"\x01\x09")
    with pytest.raises(MalformedRequest, match="truncated varint"):
        parse_request(frame[:-1] + b"\x01\x09\x80")


def test_known_tagged_field_is_read_and_must_fill_its_size() -> None:
    frame = fetch_v12_frame("cluster-a")
    assert parse_request(frame).body.cluster_id == "cluster-a"
    assert frame.endswith(b"\x01\x00\x0a\x0acluster-a")  # one tag: 0, size 10, compact string
    with pytest.raises(MalformedRequest, match="tagged field 0 of FetchRequest does not fill its 11 bytes"):
        parse_request(frame[:-11] + b"\x0b\x0acluster-a!")
    with pytest.raises(MalformedRequest, match=r"field FetchRequest.cluster_id claims 9 bytes, 8 remain"):
        parse_request(frame[:-11] + b"\x09\x0acluster-")


def test_unknown_tagged_fields_are_skipped_as_kafka_skips_them() -> None:
    """kio raises KeyError on a tag it does not know; Kafka keeps them as unknown fields. The
    request must parse as if they were not there, wherever they are (body or nested entity)."""
    plain = fetch_v12_frame("c")
    expected = parse_request(plain).body
    # Body: tag 0 (known) stays, tags 5 and 200 (unknown, 200 a two-byte varint) go.
    with_unknown = plain[:-5] + b"\x03" + b"\x00\x02\x02c" + b"\x05\x03xyz" + b"\xc8\x01\x00"
    assert plain[-5:] == b"\x01\x00\x02\x02c"
    assert parse_request(with_unknown).body == expected
    # Nested: a Metadata v12 topic with an unknown tag.
    topic = b"\x00" * 16 + b"\x02a" + b"\x01\x07\x02hi"
    request = parse_request(V12_HEADER + b"\x02" + topic + b"\x00\x00\x00")
    assert request.body.topics == (MetadataRequestTopic(topic_id=None, name="a"),)


def test_check_request_body_reports_unknown_tags_without_copying_known_ones() -> None:
    frame = fetch_v12_frame()
    assert check_request_body(frame, 11, request_type(1, 12)) == []


# --- corrupted valid requests, every version ------------------------------------------------------

VERSIONS = [case for case in ADVERTISED if case not in REFUSED_VERSIONS]


@pytest.mark.parametrize(("api_key", "api_version"), VERSIONS, ids=[case_id(*case) for case in VERSIONS])
@settings(max_examples=15, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_corrupted_requests_parse_or_are_protocol_errors(api_key: int, api_version: int, data) -> None:
    """Overwrite bytes of a valid request with extreme length values anywhere: parsing gives a
    request or a ProtocolError, and never allocates what a length claims (a crash would kill the
    test process, not fail it)."""
    body = data.draw(bodies(request_type(api_key, api_version)))
    frame = bytearray(encode_request(1, "fuzz", body)[4:])
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(frame) - 1))
        patch = data.draw(st.sampled_from([b"\xff\xff\xff\xff\x0f", b"\x7f\xff\xff\xfe", b"\xff\xff", b"\x00", b"\x80\x80\x80\x80\x80", b"\x7f\xff"]))
        frame[at : at + len(patch)] = patch
    try:
        parse_request(bytes(frame))
    except ProtocolError:
        pass


# --- the log of refusals -------------------------------------------------------------------------


def test_refusal_log_admits_one_line_per_kind_per_interval_and_counts_the_rest() -> None:
    refusals = RefusalLog(interval_ms=1000)
    assert refusals.admit("array X claims 7 entries", now_ms=0) == 0
    assert refusals.admit("array X claims 9 entries", now_ms=10) is None  # same kind: numbers differ
    assert refusals.admit("frame size -2 is smaller than a request header", now_ms=20) == 0  # another kind
    assert refusals.admit("array X claims 1 entries", now_ms=999) is None
    assert refusals.admit("array X claims 5 entries", now_ms=1000) == 2
    assert refusals.admit("array X claims 5 entries", now_ms=1500) is None
    assert refusals.admit("array X claims 5 entries", now_ms=2000) == 1


def test_refusal_log_forgets_the_oldest_kinds_beyond_its_bound() -> None:
    refusals = RefusalLog(interval_ms=1000, max_kinds=2)
    assert refusals.admit("a", 0) == 0
    assert refusals.admit("b", 0) == 0
    assert refusals.admit("c", 0) == 0  # forgets "a"
    assert refusals.admit("a", 1) == 0  # logged again: "a" was forgotten
    assert refusals.admit("c", 2) is None
