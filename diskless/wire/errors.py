"""Protocol errors on the wire, and Kafka's error codes.

`ErrorCode` is kio's table of Kafka error codes (each member knows whether it is retriable).
The exceptions below are errors *of the peer's framing*: the connection that sent them is
closed with a log line; they never become an error code in a response.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "ProtocolError", "InvalidFrame", "MalformedRequest", "FrameTooLarge", "UnsupportedVersion", "UnknownApi"]


class ProtocolError(Exception):
    """The peer broke the Kafka framing: the connection cannot be trusted any more."""


class InvalidFrame(ProtocolError):
    def __init__(self, reason: str) -> None:
        super().__init__(f"invalid frame: {reason}")
        self.reason = reason


class MalformedRequest(InvalidFrame):
    """A request body that does not fit its frame or its schema: a length or count larger than
    the bytes that remain, a null where the schema allows none, bytes kio cannot decode."""

    def __init__(self, api_key: int, api_version: int, body_name: str, reason: str) -> None:
        super().__init__(f"malformed {body_name} body: {reason}")
        self.api_key = api_key
        self.api_version = api_version
        self.reason = reason


class FrameTooLarge(ProtocolError):
    def __init__(self, size_bytes: int, max_bytes: int) -> None:
        super().__init__(f"frame of {size_bytes} bytes exceeds socket.request.max.bytes={max_bytes}")
        self.size_bytes = size_bytes
        self.max_bytes = max_bytes


class UnknownApi(ProtocolError):
    def __init__(self, api_key: int) -> None:
        super().__init__(f"unknown or unsupported API key {api_key}")
        self.api_key = api_key


class UnsupportedVersion(ProtocolError):
    def __init__(self, api_key: int, api_version: int) -> None:
        super().__init__(f"API key {api_key} version {api_version} is not supported")
        self.api_key = api_key
        self.api_version = api_version
