"""The local log: segments (`.log`, `.index`, `.timeindex`) in Kafka's formats, rolling,
recovery after a crash, lookups by offset and by time, local retention. Synchronous file I/O
only; imports nothing but `hot_tier.records`. See log.py for the entry point, `Log.open`.
"""

from .config import LogConfig
from .errors import CorruptIndex, CorruptLog, HotTierError, InvalidConfig, LogClosed, OffsetOutOfRange
from .files import FileSlice
from .index import IndexEntry, OffsetIndex, TimeIndex, TimestampOffset
from .info import AppendInfo, DeletedSegment, DeleteReason, SegmentInfo
from .log import Log
from .segment import LogSegment

__all__ = [
    "AppendInfo",
    "CorruptIndex",
    "CorruptLog",
    "DeleteReason",
    "DeletedSegment",
    "FileSlice",
    "HotTierError",
    "IndexEntry",
    "InvalidConfig",
    "Log",
    "LogClosed",
    "LogConfig",
    "LogSegment",
    "OffsetIndex",
    "OffsetOutOfRange",
    "SegmentInfo",
    "TimeIndex",
    "TimestampOffset",
]
