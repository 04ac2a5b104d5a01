"""Framing edge cases: sizes, broken headers, garbage, and FileRecords parts in responses."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import response as fetch_v12
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from diskless.wire import (
    FileRecords,
    FrameTooLarge,
    InvalidFrame,
    ProtocolError,
    UnknownApi,
    UnsupportedVersion,
    encode_request,
    encode_response,
    frame_size,
    parse_request,
    parse_response,
)


def metadata_frame() -> bytes:
    """A Metadata v12 request frame without its size prefix (request header v2)."""
    body = MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name="orders"),), allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    return encode_request(3, "client", body)[4:]


# --- frame sizes -------------------------------------------------------------------------------


def test_frame_size_accepts_a_header_and_up_to_the_limit() -> None:
    assert frame_size((10).to_bytes(4, "big"), 100) == 10  # api key, version, correlation id, client id length
    assert frame_size((100).to_bytes(4, "big"), 100) == 100


@pytest.mark.parametrize("size", [-(2**31), -1, 0, 9])
def test_frame_size_refuses_less_than_a_header(size: int) -> None:
    with pytest.raises(InvalidFrame):
        frame_size(size.to_bytes(4, "big", signed=True), 100)


def test_frame_size_refuses_more_than_socket_request_max_bytes() -> None:
    with pytest.raises(FrameTooLarge) as refused:
        frame_size((101).to_bytes(4, "big"), 100)
    assert (refused.value.size_bytes, refused.value.max_bytes) == (101, 100)


# --- broken requests ---------------------------------------------------------------------------


def test_parse_request_reads_header_v2() -> None:
    request = parse_request(metadata_frame())
    assert (request.header.api_key, request.header.api_version, request.header.correlation_id, request.header.client_id) == (3, 12, 3, "client")
    assert [t.name for t in request.body.topics] == ["orders"]


def test_parse_request_skips_unknown_tagged_fields_in_the_header() -> None:
    frame = metadata_frame()
    header_end = 8 + 2 + len("client")
    assert frame[header_end] == 0  # no tagged fields
    # Two tagged fields (tag 5, 3 bytes; tag 200, 0 bytes): 200 needs a two-byte varint.
    tagged = bytes([2, 5, 3, 0xAA, 0xBB, 0xCC, 0xC8, 0x01, 0])
    request = parse_request(frame[:header_end] + tagged + frame[header_end + 1 :])
    assert request.body == parse_request(frame).body


@pytest.mark.parametrize(
    ("frame", "error", "text"),
    [
        (b"\x00\x03\x00\x0c\x00\x00", InvalidFrame, "shorter than its header"),
        (b"\x00\x03\x00\x0c\x00\x00\x00\x01\x00\x09abc", InvalidFrame, "client_id runs past"),
        (b"\x7f\xff\x00\x00\x00\x00\x00\x01\xff\xff", UnknownApi, "unknown or unsupported API key 32767"),
        (b"\x00\x01\x00\x02\x00\x00\x00\x01\xff\xff", UnsupportedVersion, "API key 1 version 2 is not supported"),
        (b"\x00\x03\x00\x0c\x00\x00\x00\x01\xff\xff\x01\x05\x09\x00", InvalidFrame, "tagged fields run past"),
        (b"\x00\x03\x00\x0c\x00\x00\x00\x01\xff\xff\x01\x85", InvalidFrame, "truncated varint"),
        (b"\x00\x03\x00\x0c\x00\x00\x00\x01\xff\xff\x00\x05\xff\xff", InvalidFrame, "malformed MetadataRequest body"),
    ],
    ids=["short-header", "client-id", "unknown-api", "unsupported-version", "tagged-fields", "varint", "malformed-body"],
)
def test_parse_request_refuses_broken_frames(frame: bytes, error: type, text: str) -> None:
    with pytest.raises(error) as refused:
        parse_request(frame)
    assert text in str(refused.value)


def test_every_truncation_of_a_request_is_a_protocol_error() -> None:
    frame = metadata_frame()
    for cut in range(len(frame)):
        with pytest.raises(ProtocolError):
            parse_request(frame[:cut])


@settings(max_examples=300, deadline=None, database=None)
@given(st.binary(max_size=64), st.sampled_from([b"", b"\x00\x03\x00\x0c", b"\x00\x00\x00\x09", b"\x00\x01\x00\x0c", b"\x00\x12\x00\x03"]))
def test_garbage_is_a_request_or_a_protocol_error(garbage: bytes, header: bytes) -> None:
    """Whatever a peer sends, parsing either yields a request or raises ProtocolError (which
    closes that connection with a log line), never another exception."""
    try:
        parse_request(header + garbage)
    except ProtocolError:
        pass


# --- FileRecords in responses ------------------------------------------------------------------


def fetch_response(records: bytes) -> object:
    partition = fetch_v12.PartitionData(
        partition_index=0, error_code=ErrorCode.none, high_watermark=10, last_stable_offset=10, log_start_offset=0,
        aborted_transactions=None, records=records,
    )  # fmt: skip
    return fetch_v12.FetchResponse(
        throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, session_id=0,
        responses=(fetch_v12.FetchableTopicResponse(topic="orders", partitions=(partition,)),),
    )  # fmt: skip


def test_file_records_become_a_separate_part_with_the_right_frame_size() -> None:
    payload = bytes(range(256)) * 4
    source = object()  # stands for a FileSlice the server sends with sendfile
    parts = encode_response(9, fetch_response(FileRecords(source, len(payload))))
    assert len(parts) == 3 and parts[1] is source
    assert isinstance(parts[0], bytes) and isinstance(parts[2], bytes)
    # The frame, with the file's bytes where the source was, is the same as with plain bytes.
    sent = parts[0] + payload + parts[2]
    assert int.from_bytes(sent[:4], "big") == len(sent) - 4
    expected = encode_response(9, fetch_response(payload))
    assert [sent] == expected
    assert parse_response(sent[4:], fetch_v12.FetchResponse) == (9, fetch_response(payload))
