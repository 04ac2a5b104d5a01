"""Every request and response version the broker speaks survives our framing and kio, both ways.

Bodies come from Hypothesis strategies built from kio's generated types: the field types'
strategies are the ones kio registers through its `__hypothesis_hook__`s when Hypothesis is
installed, arrays are kept short. A request goes through
`encode_request` -> `parse_request`, a response through `encode_response_bytes` ->
`parse_response`; what comes out must equal what went in, header fields included.
"""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.static.primitive import Records, i64Timedelta

from diskless.wire import SUPPORTED, encode_request, encode_response_bytes, parse_request, parse_response, request_type, response_type


# Record bytes are opaque to the framing (the records modules have their own round-trips).
RECORDS = st.binary(max_size=64)
# kio's own i64 duration strategy reaches timedelta.max, but kio converts these durations through
# microseconds and floats, which overflow or round long before int64 milliseconds do (a writer
# ValueError, a reader "timedelta milliseconds overflow", or a changed value). Real clients send
# -1 or days (OffsetCommit v2-v4 retention_time is the one such field): stay within 35 years.
I64_DURATIONS = st.integers(-(2**40), 2**40).map(lambda ms: i64Timedelta.parse(datetime.timedelta(milliseconds=ms)))

VERSIONS = [(key, version) for key, (_name, low, high) in sorted(SUPPORTED.items()) for version in range(low, high + 1)]
IDS = [f"{SUPPORTED[key][0]}-v{version}" for key, version in VERSIONS]
ROUND_TRIP = settings(
    max_examples=10, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
client_ids = st.none() | st.text(max_size=20)


@cache
def bodies(entity_type: type) -> st.SearchStrategy:
    """Like st.from_type, but with arrays of at most two elements, so that nested messages stay
    small and a few examples reach every field."""
    hints = typing.get_type_hints(entity_type)
    return st.builds(entity_type, **{f.name: _values(hints[f.name]) for f in dataclasses.fields(entity_type) if f.init})


def _values(hint: object) -> st.SearchStrategy:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return st.lists(_values(args[0]), max_size=2).map(tuple)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(st.none() if a is type(None) else _values(a) for a in args))
    if dataclasses.is_dataclass(hint):
        return bodies(hint)
    if hint is str:
        return st.text(max_size=8)
    if hint is Records:
        return RECORDS
    if hint is i64Timedelta:
        return I64_DURATIONS
    return st.from_type(hint)


correlation_ids = st.integers(-(2**31), 2**31 - 1)


@pytest.mark.parametrize(("api_key", "api_version"), VERSIONS, ids=IDS)
@ROUND_TRIP
@given(data=st.data(), correlation_id=correlation_ids, client_id=client_ids)
def test_request_round_trip(api_key: int, api_version: int, data, correlation_id: int, client_id: str | None) -> None:
    body = data.draw(bodies(request_type(api_key, api_version)))
    frame = encode_request(correlation_id, client_id, body)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    request = parse_request(frame[4:])
    assert (request.header.api_key, request.header.api_version, request.header.correlation_id) == (api_key, api_version, correlation_id)
    assert request.header.client_id == client_id
    assert request.body == body


@pytest.mark.parametrize(("api_key", "api_version"), VERSIONS, ids=IDS)
@ROUND_TRIP
@given(data=st.data(), correlation_id=correlation_ids)
def test_response_round_trip(api_key: int, api_version: int, data, correlation_id: int) -> None:
    body_type = response_type(api_key, api_version)
    body = data.draw(bodies(body_type))
    frame = encode_response_bytes(correlation_id, body)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert parse_response(frame[4:], body_type) == (correlation_id, body)
