"""Kafka framing: size-prefixed frames, request and response headers, bodies through kio.

Every frame is a 4-byte big-endian size followed by that many bytes. A request frame is:

    int16   api_key
    int16   api_version
    int32   correlation_id
    int16   client_id length (-1 = null), then that many UTF-8 bytes       (header v1)
    ...     tagged fields (uvarint count, then tag/size/bytes)           (header v2 only)
    ...     the body, in the request's schema for (api_key, api_version)

A response frame is `int32 correlation_id`, tagged fields when the response header is v1
(flexible versions; ApiVersions always answers with header v0), then the body.

Request bodies are checked against their frame (`bounds.check_request_body`) before kio
parses them: kio's native reader allocates what a declared length says before reading.

Pure: bytes in, values and bytes out. The server shell reads frames; `parse_request` and
`encode_response` do the rest. Fetch responses can carry `FileRecords` in place of record
bytes, so that the shell sends those bytes from the segment file with sendfile (zero copy).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from .apis import API_VERSIONS_KEY, supported_range
from .bounds import check_request_body, strip_unknown_tags
from .errors import FrameTooLarge, InvalidFrame, MalformedRequest, UnknownApi, UnsupportedVersion
from .response_overrides import RESPONSE_CLASSES
from .fast_encode import FAST_API_KEYS, encode_response_parts
from .file_records import FileRecords

SIZE = struct.Struct(">i")
_FIXED_HEADER = struct.Struct(">hhih")
_RESPONSE_HEADER = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


@dataclass(frozen=True, slots=True)
class Request:
    header: RequestHeader
    body: Any  # a kio request entity; None for an ApiVersions request of an unsupported version


def frame_size(prefix: bytes, max_bytes: int) -> int:
    """The size announced by a 4-byte frame prefix, checked against socket.request.max.bytes."""
    (size,) = SIZE.unpack(prefix)
    if size < _FIXED_HEADER.size:
        raise InvalidFrame(f"frame size {size} is smaller than a request header")
    if size > max_bytes:
        raise FrameTooLarge(size, max_bytes)
    return size


@cache
def request_type(api_key: int, api_version: int) -> type:
    return load_request_schema(api_key, api_version)


@cache
def response_type(api_key: int, api_version: int) -> type:
    """kio's response class, or ours where kio refuses what brokers send (response_overrides.py)."""
    return RESPONSE_CLASSES.get((api_key, api_version)) or load_response_schema(api_key, api_version)


@cache
def _reader(entity_type: type):
    return entity_reader(entity_type)


@cache
def _writer(entity_type: type):
    return entity_writer(entity_type)


def _read_uvarint(buf: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= len(buf):
            raise InvalidFrame("truncated varint in tagged fields")
        byte = buf[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7
        if shift > 28:
            raise InvalidFrame("varint too long in tagged fields")


def parse_request(frame: bytes) -> Request:
    """Turn one request frame (without its size prefix) into a header and a kio body.

    Raises `ProtocolError` for anything the connection cannot recover from. An ApiVersions
    request of a version we do not know gets `body=None`: Kafka answers it with a v0 response
    carrying UNSUPPORTED_VERSION and its ranges, so that the client can fall back.
    """
    if len(frame) < _FIXED_HEADER.size:
        raise InvalidFrame("request shorter than its header")
    api_key, api_version, correlation_id, client_id_length = _FIXED_HEADER.unpack_from(frame, 0)
    position = _FIXED_HEADER.size
    client_id = None
    if client_id_length >= 0:
        end = position + client_id_length
        if end > len(frame):
            raise InvalidFrame("client_id runs past the end of the frame")
        client_id = frame[position:end].decode("utf-8", "replace")
        position = end
    header = RequestHeader(api_key, api_version, correlation_id, client_id)
    versions = supported_range(api_key)
    if versions is None:
        raise UnknownApi(api_key)
    if not versions[0] <= api_version <= versions[1]:
        if api_key == API_VERSIONS_KEY:
            return Request(header, None)
        raise UnsupportedVersion(api_key, api_version)
    body_type = request_type(api_key, api_version)
    if body_type.__header_schema__.__version__ >= 2:
        count, position = _read_uvarint(frame, position)
        for _ in range(count):
            _tag, position = _read_uvarint(frame, position)
            size, position = _read_uvarint(frame, position)
            position += size
        if position > len(frame):
            raise InvalidFrame("tagged fields run past the end of the frame")
    # kio allocates what lengths declare before reading: bound them by the frame first (bounds.py).
    unknown_tags = check_request_body(frame, position, body_type)
    if unknown_tags:
        frame = strip_unknown_tags(frame, unknown_tags)
    try:
        body, size = _reader(body_type)(frame, position)
    except Exception as exc:  # kio raises assorted errors on garbage (bad UTF-8, booleans, ...)
        raise MalformedRequest(api_key, api_version, body_type.__name__, f"{type(exc).__name__}: {exc}") from exc
    return Request(header, body)


class ResponseParts:
    """A kio Writable collecting a response as bytes chunks and file sources, in order."""

    __slots__ = ("parts", "_chunk", "size_bytes")

    def __init__(self) -> None:
        self.parts: list[bytes | Any] = []
        self._chunk = bytearray(SIZE.size)  # room for the size prefix
        self.size_bytes = 0

    def write(self, data: bytes) -> int:
        if type(data) is FileRecords:
            self.parts.append(bytes(self._chunk))
            self.parts.append(data.source)
            self._chunk = bytearray()
            self.size_bytes += data.length
        else:
            self._chunk += data
            self.size_bytes += len(data)
        return len(data)

    def finish(self) -> list[bytes | Any]:
        if self._chunk:
            self.parts.append(bytes(self._chunk))
        first = bytearray(self.parts[0])
        SIZE.pack_into(first, 0, self.size_bytes)
        self.parts[0] = bytes(first)
        return self.parts


def encode_response(correlation_id: int, body: Any) -> list[bytes | Any]:
    """Encode a response frame, size prefix included, as parts to send in order.

    Parts are `bytes`, or the `source` of a `FileRecords` found in the body. Produce and Fetch
    responses go through compiled encoders (`fast_encode`, byte-identical to kio's; a Fetch
    response's large in-memory records are then a part of their own, not copied); every
    other response through kio's serialiser.
    """
    if type(body).__api_key__ in FAST_API_KEYS:
        return encode_response_parts(correlation_id, body)
    return encode_response_kio(correlation_id, body)


def encode_response_kio(correlation_id: int, body: Any) -> list[bytes | Any]:
    """`encode_response` through kio's generic serialiser, for every API."""
    out = ResponseParts()
    out.write(_RESPONSE_HEADER.pack(correlation_id))
    if type(body).__header_schema__.__version__ >= 1:
        out.write(b"\x00")  # no tagged fields
    _writer(type(body))(out, body)
    return out.finish()


def encode_response_bytes(correlation_id: int, body: Any) -> bytes:
    """`encode_response` for bodies without `FileRecords`: one bytes object."""
    parts = encode_response(correlation_id, body)
    return parts[0] if len(parts) == 1 else b"".join(parts)


# --- the client side ------------------------------------------------------------------------


def encode_request(correlation_id: int, client_id: str | None, body: Any) -> bytes:
    """A request frame, size prefix included, for a kio request entity."""
    body_type = type(body)
    out = ResponseParts()
    out.write(_FIXED_HEADER.pack(body_type.__api_key__, body_type.__version__, correlation_id, -1 if client_id is None else len(client_id.encode())))
    if client_id is not None:
        out.write(client_id.encode())
    if body_type.__header_schema__.__version__ >= 2:
        out.write(b"\x00")
    _writer(body_type)(out, body)
    return b"".join(out.finish())


def parse_response(frame: bytes, body_type: type) -> tuple[int, Any]:
    """(correlation_id, kio response entity) of one response frame without its size prefix."""
    (correlation_id,) = _RESPONSE_HEADER.unpack_from(frame, 0)
    position = _RESPONSE_HEADER.size
    if body_type.__header_schema__.__version__ >= 1:
        count, position = _read_uvarint(frame, position)
        for _ in range(count):
            _tag, position = _read_uvarint(frame, position)
            size, position = _read_uvarint(frame, position)
            position += size
    try:
        body, _size = _reader(body_type)(frame, position)
    except Exception as exc:
        raise InvalidFrame(f"malformed {body_type.__name__}: {exc}") from exc
    return correlation_id, body
