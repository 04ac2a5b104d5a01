"""The local log: segments (`.log`, `.index`, `.timeindex`) in Kafka's formats, rolling,
recovery after a crash, lookups by offset and by time, local retention. Synchronous file I/O
only; imports nothing but `hot_tier.records`. See log.py for the entry point, `Log.open`.

The names below are loaded on first use (PEP 562 module `__getattr__`), not at import: the
client and Spark workers import `hot_tier.records` only, and must not pay for (or depend on)
the log, its segments and indexes. `from hot_tier import Log` works as before.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import LogConfig
    from .errors import CorruptIndex, CorruptLog, HotTierError, InvalidConfig, LogClosed, OffsetOutOfRange
    from .files import FileSlice
    from .index import IndexEntry, OffsetIndex, TimeIndex, TimestampOffset
    from .info import AppendInfo, DeletedSegment, DeleteReason, SegmentInfo
    from .log import Log
    from .segment import LogSegment

# name -> the submodule that defines it
_LAZY = {
    "AppendInfo": "info",
    "CorruptIndex": "errors",
    "CorruptLog": "errors",
    "DeleteReason": "info",
    "DeletedSegment": "info",
    "FileSlice": "files",
    "HotTierError": "errors",
    "IndexEntry": "index",
    "InvalidConfig": "errors",
    "Log": "log",
    "LogClosed": "errors",
    "LogConfig": "config",
    "LogSegment": "segment",
    "OffsetIndex": "index",
    "OffsetOutOfRange": "errors",
    "SegmentInfo": "info",
    "TimeIndex": "index",
    "TimestampOffset": "index",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
