"""The compiled Produce and Fetch response encoders against kio's serialiser: byte-identical
frames for every version the broker speaks, with records as bytes, as `FileRecords` (kept as
their own parts for sendfile) and as large in-memory values (kept as their own parts).

Produce is advertised from v0 (see `apis.py`) but v0-v2 are refused before a response type is
chosen, and kio has no types below v3: the versions tested are those a response can have.
"""

from __future__ import annotations

import datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import response as fetch_v12
from kio.static.primitive import Records

from diskless.wire import SUPPORTED, FileRecords, encode_response, parse_response, response_type
from diskless.wire.fast_encode import SEPARATE_PART_BYTES, encode_response_parts, source_of
from diskless.wire.framing import encode_response_kio


class Source:
    """Stands for a FileSlice: the server sends its bytes with sendfile."""

    def __init__(self, data: bytes) -> None:
        self.data = data


def _file_records(data: bytes) -> FileRecords:
    return FileRecords(Source(data), len(data))


# Records: plain bytes, or bytes that live in a file.
st.register_type_strategy(Records, st.one_of(st.binary(max_size=64), st.binary(max_size=64).map(_file_records)))

VERSIONS = [(api_key, version) for api_key in (0, 1) for version in range(SUPPORTED[api_key][1], SUPPORTED[api_key][2] + 1)]


def _frame(parts: list) -> tuple[bytes, list]:
    """The bytes on the wire for `parts`, and the non-bytes parts (file sources) in order."""
    sources = [part for part in parts if not isinstance(part, bytes)]
    return b"".join(part if isinstance(part, bytes) else part.data for part in parts), sources


def _expected_sources(body: object) -> list:
    found: list = []

    def walk(value: object) -> None:
        if type(value) is FileRecords:
            found.append(value.source)
        elif isinstance(value, tuple):
            for item in value:
                walk(item)
        elif hasattr(value, "__dataclass_fields__"):
            for name in value.__dataclass_fields__:
                walk(getattr(value, name))

    walk(body)
    return found


@pytest.mark.parametrize(("api_key", "version"), VERSIONS)
def test_compiled_encoder_is_byte_identical_to_kio(api_key: int, version: int) -> None:
    body_type = response_type(api_key, version)

    # 50 random bodies per version (each version is its own test): generating kio's nested
    # Fetch and Produce bodies is what takes the time, and the suite's time is bounded.
    @settings(max_examples=50, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.from_type(body_type), st.integers(-(2**31), 2**31 - 1))
    def check(body: object, correlation_id: int) -> None:
        fast, fast_sources = _frame(encode_response_parts(correlation_id, body))
        kio, kio_sources = _frame(encode_response_kio(correlation_id, body))
        assert fast == kio
        assert int.from_bytes(fast[:4], "big") == len(fast) - 4
        expected = _expected_sources(body)
        assert [id(s) for s in fast_sources] == [id(s) for s in expected] == [id(s) for s in kio_sources]

    check()


@pytest.mark.parametrize(("api_key", "version"), VERSIONS)
def test_encode_response_dispatches_produce_and_fetch_to_the_compiled_path(api_key: int, version: int) -> None:
    assert "def write_" in source_of(response_type(api_key, version))


def _fetch(records: bytes) -> object:
    partition = fetch_v12.PartitionData(
        partition_index=3, error_code=ErrorCode.none, high_watermark=10, last_stable_offset=10, log_start_offset=0,
        aborted_transactions=None, records=records,
    )  # fmt: skip
    return fetch_v12.FetchResponse(
        throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, session_id=0,
        responses=(fetch_v12.FetchableTopicResponse(topic="orders", partitions=(partition, partition)),),
    )  # fmt: skip


def test_large_in_memory_records_are_their_own_part_not_copied() -> None:
    payload = bytes(range(256)) * (SEPARATE_PART_BYTES // 256 + 1)
    parts = encode_response(7, _fetch(payload))
    assert sum(part is payload for part in parts) == 2
    assert b"".join(parts) == b"".join(encode_response_kio(7, _fetch(payload)))
    assert parse_response(b"".join(parts)[4:], fetch_v12.FetchResponse) == (7, _fetch(payload))


def test_file_records_and_tagged_fields_together() -> None:
    data = b"x" * 100
    partition = fetch_v12.PartitionData(
        partition_index=0, error_code=ErrorCode.not_leader_or_follower, high_watermark=5, aborted_transactions=(),
        current_leader=fetch_v12.LeaderIdAndEpoch(leader_id=2, leader_epoch=7), records=_file_records(data),
    )  # fmt: skip
    body = fetch_v12.FetchResponse(throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, responses=(fetch_v12.FetchableTopicResponse(topic="t", partitions=(partition,)),))
    fast = encode_response(1, body)
    assert len(fast) == 3 and fast[1] is partition.records.source
    assert _frame(fast)[0] == _frame(encode_response_kio(1, body))[0]
