"""The Kafka wire protocol: framing, headers and kio types. Pure, no I/O."""

from .apis import SUPPORTED, advertised_range, supported_range
from .errors import ErrorCode, FrameTooLarge, InvalidFrame, MalformedRequest, ProtocolError, UnknownApi, UnsupportedVersion
from .framing import (
    FileRecords,
    Request,
    RequestHeader,
    encode_request,
    encode_response,
    encode_response_bytes,
    frame_size,
    parse_request,
    parse_response,
    request_type,
    response_type,
)

__all__ = [
    "SUPPORTED",
    "advertised_range",
    "supported_range",
    "ErrorCode",
    "FrameTooLarge",
    "InvalidFrame",
    "MalformedRequest",
    "ProtocolError",
    "UnknownApi",
    "UnsupportedVersion",
    "FileRecords",
    "Request",
    "RequestHeader",
    "encode_request",
    "encode_response",
    "encode_response_bytes",
    "frame_size",
    "parse_request",
    "parse_response",
    "request_type",
    "response_type",
]
