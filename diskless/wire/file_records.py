"""`FileRecords`: the bytes of a response's `records` field that live in a file (sent with
sendfile, never copied). Its own module: the generic and the compiled response encoders both
recognise it."""

from __future__ import annotations

from typing import Any


class FileRecords(bytes):
    """Stands in for the bytes of a `records` field that live in a file.

    kio's writer asks for `len()` (to write the length prefix) and then calls `write(value)`;
    `ResponseParts` notices this type and keeps `source` (such as a hot-tier FileSlice) as a
    separate part instead of copying bytes.
    """

    source: Any
    length: int

    def __new__(cls, source: Any, length: int) -> FileRecords:
        obj = super().__new__(cls)
        obj.source = source
        obj.length = length
        return obj

    def __len__(self) -> int:
        return self.length

    def __bool__(self) -> bool:
        return True
