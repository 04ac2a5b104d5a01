"""Hostile request frames shared by the unit and integration tests of wire bounds.

`lie_frame(api_key, api_version)` is issue N's 25-byte request: a valid request header, then the
body's fields up to its first array (fixed-size fields zero, strings empty), then that array's
count claiming 2^32 - 2 entries (compact: the uvarint ff ff ff ff 0f) or 2^31 - 2 (classic:
7f ff ff fe), padded with zeros to 25 bytes, size prefix included. A body without an array lies
with its first string or bytes length instead; a body without either has nothing to lie about.
"""

from __future__ import annotations

import dataclasses
import struct

from kio.serial._introspect import classify_field, get_field_tag, get_schema_field_type

from diskless.wire import SUPPORTED, advertised_range, request_type

LIE_BYTES = 25
COMPACT_LIE = b"\xff\xff\xff\xff\x0f"  # uvarint 2^32 - 1: a compact array of 2^32 - 2 entries
CLASSIC_ARRAY_LIE = b"\x7f\xff\xff\xfe"  # int32 2^31 - 2
CLASSIC_STRING_LIE = b"\x7f\xff"  # int16 32767
CLASSIC_BYTES_LIE = b"\x7f\xff\xff\xfe"

_FIXED_BYTES = {
    "int8": 1, "int16": 2, "int32": 4, "int64": 8, "bool": 1, "uuid": 16, "error_code": 2,
    "timedelta_i32": 4, "timedelta_i64": 8, "datetime_i64": 8,
}  # fmt: skip

# Every (api_key, api_version) ApiVersions lists, Produce v0-v2 included (advertised, refused).
ADVERTISED = [(key, version) for key in sorted(SUPPORTED) for version in range(advertised_range(key)[0], advertised_range(key)[1] + 1)]


def case_id(api_key: int, api_version: int) -> str:
    return f"{SUPPORTED[api_key][0]}-v{api_version}"


def request_header(api_key: int, api_version: int, correlation_id: int = 7, flexible_header: bool | None = None) -> bytes:
    if flexible_header is None:
        flexible_header = _body_type(api_key, api_version).__header_schema__.__version__ >= 2
    return struct.pack(">hhih", api_key, api_version, correlation_id, -1) + (b"\x00" if flexible_header else b"")


def _body_type(api_key: int, api_version: int) -> type | None:
    low, high = SUPPORTED[api_key][1], SUPPORTED[api_key][2]
    return request_type(api_key, api_version) if low <= api_version <= high else None


def lie_body(api_key: int, api_version: int) -> tuple[bytes, str] | None:
    """(body bytes up to and including the lie, the lying field's name), or None."""
    body_type = _body_type(api_key, api_version)
    if body_type is None:
        return None
    flexible = body_type.__flexible__
    out = bytearray()
    first_length: tuple[bytes, str] | None = None
    for field in dataclasses.fields(body_type):
        if get_field_tag(field) is not None:
            continue
        shape = classify_field(field)
        if shape.is_array:
            return bytes(out) + (COMPACT_LIE if flexible else CLASSIC_ARRAY_LIE), field.name
        kafka_type = get_schema_field_type(field) if type(shape).__name__ == "PrimitiveField" else None
        if kafka_type in _FIXED_BYTES:
            out += bytes(_FIXED_BYTES[kafka_type])
        elif kafka_type == "string":
            if first_length is None:
                first_length = (bytes(out) + (COMPACT_LIE if flexible else CLASSIC_STRING_LIE), field.name)
            out += b"\x01" if flexible else b"\x00\x00"
        elif kafka_type in ("bytes", "records"):
            if first_length is None:
                first_length = (bytes(out) + (COMPACT_LIE if flexible else CLASSIC_BYTES_LIE), field.name)
            out += b"\x01" if flexible else b"\x00\x00\x00\x00"
        else:
            raise AssertionError(f"no lie rule for {body_type.__name__}.{field.name}")
    return first_length


def lie_frame(api_key: int, api_version: int) -> bytes | None:
    """The whole frame, size prefix included, at least LIE_BYTES long; None when nothing can lie."""
    lie = lie_body(api_key, api_version)
    if lie is None:
        return None
    payload = request_header(api_key, api_version) + lie[0]
    payload += bytes(max(0, LIE_BYTES - 4 - len(payload)))
    return struct.pack(">i", len(payload)) + payload


# The advertised versions whose body has no array and no string or bytes: nothing to lie about.
NOTHING_TO_LIE_ABOUT = {(16, 0), (16, 1), (16, 2), (16, 3), (18, 0), (18, 1), (18, 2), (60, 0), (60, 1)}
# Advertised but refused before the body is read (see diskless/wire/apis.py): Produce v0-v2, SaslHandshake v0.
REFUSED_VERSIONS = {(0, 0), (0, 1), (0, 2), (17, 0)}
LIES = [(key, version) for key, version in ADVERTISED if (key, version) not in NOTHING_TO_LIE_ABOUT | REFUSED_VERSIONS]
