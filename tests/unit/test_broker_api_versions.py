"""The ApiVersions table agrees with the handlers, with kio, and with what the broker answers.

Handlers are coroutines; those used here never await, so they are driven with `send(None)`
instead of an event loop.
"""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from diskless.broker.handlers import HANDLERS
from diskless.broker.handlers.cluster import handle_api_versions
from diskless.wire import (
    SUPPORTED,
    Request,
    RequestHeader,
    UnsupportedVersion,
    advertised_range,
    encode_response_bytes,
    parse_request,
    parse_response,
    request_type,
    response_type,
    supported_range,
)
from diskless.wire.apis import API_VERSIONS_KEY


def run(coroutine):
    """The result of a coroutine that completes without awaiting anything."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise AssertionError("the handler awaited; it needs an event loop")


def api_versions_answer(version: int, body=None):
    header = RequestHeader(API_VERSIONS_KEY, version, 7, "test")
    if body is None and supported_range(API_VERSIONS_KEY)[0] <= version <= supported_range(API_VERSIONS_KEY)[1]:
        body = request_type(API_VERSIONS_KEY, version)(**({} if version < 3 else {"client_software_name": "t", "client_software_version": "1"}))
    return run(handle_api_versions(None, Request(header, body)))


def test_every_supported_api_has_a_handler_and_every_handler_is_advertised() -> None:
    assert set(SUPPORTED) == set(HANDLERS)


@pytest.mark.parametrize("api_key", sorted(SUPPORTED))
def test_kio_knows_every_supported_version_under_the_same_name(api_key: int) -> None:
    name, low, high = SUPPORTED[api_key]
    assert 0 <= low <= high
    for version in range(low, high + 1):
        request, response = request_type(api_key, version), response_type(api_key, version)
        assert (request.__api_key__, request.__version__, request.__name__) == (api_key, version, f"{name}Request")
        assert (response.__api_key__, response.__version__, response.__name__) == (api_key, version, f"{name}Response")


@pytest.mark.parametrize("version", range(0, 4))
def test_api_versions_advertises_exactly_the_table(version: int) -> None:
    answer = api_versions_answer(version)
    assert answer.error_code == ErrorCode.none
    advertised = [(a.api_key, a.min_version, a.max_version) for a in answer.api_keys]
    assert advertised == [(key, *advertised_range(key)) for key in sorted(SUPPORTED)]
    assert advertised == sorted(advertised)


def test_produce_is_advertised_from_v0_but_v0_to_v2_are_refused() -> None:
    """KAFKA-18659, as in Kafka 4: older librdkafka compresses only if Produce v0 is listed."""
    low, high = supported_range(0)
    assert advertised_range(0) == (0, high)
    assert low == 3
    for version in range(0, low):
        frame = bytes([0, 0, 0, version, 0, 0, 0, 9, 0xFF, 0xFF])
        with pytest.raises(UnsupportedVersion) as refused:
            parse_request(frame)
        assert (refused.value.api_key, refused.value.api_version) == (0, version)
    # Every other API is advertised as supported, but SaslHandshake, listed from v0 for librdkafka.
    assert advertised_range(17) == (0, 1) and supported_range(17) == (1, 1)
    assert all(advertised_range(key) == supported_range(key) for key in SUPPORTED if key not in (0, 17))


def test_unknown_api_versions_version_gets_a_v0_answer_with_unsupported_version() -> None:
    # An ApiVersions v9 request from a newer client: header v2, a body we cannot parse.
    frame = bytes([0, 18, 0, 9, 0, 0, 0, 5, 0, 1, 0x41, 0x00, 0x12, 0x34])
    request = parse_request(frame)
    assert (request.header.api_version, request.header.correlation_id, request.body) == (9, 5, None)
    answer = run(handle_api_versions(None, request))
    assert type(answer) is response_type(API_VERSIONS_KEY, 0)
    assert answer.error_code == ErrorCode.unsupported_version
    assert [(a.api_key, a.min_version, a.max_version) for a in answer.api_keys] == [(k, *advertised_range(k)) for k in sorted(SUPPORTED)]


def test_api_versions_v3_response_uses_header_v0() -> None:
    """Kafka answers ApiVersions with response header v0 even for flexible versions, so that a
    client that does not yet know the broker can read the error code."""
    answer = api_versions_answer(3)
    frame = encode_response_bytes(7, answer)
    assert frame[4:8] == (7).to_bytes(4, "big")
    assert frame[8:10] == b"\x00\x00"  # error_code right after the correlation id: no tagged fields
    assert parse_response(frame[4:], response_type(API_VERSIONS_KEY, 3)) == (7, answer)
