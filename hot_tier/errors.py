"""Errors of the local log (`hot_tier`).

Corrupt *batches* are `hot_tier.records.CorruptBatch` (raised as is by `Log.append`). The
errors here are about the log itself: an offset outside it, a closed log, data at rest that
recovery cannot repair, a bad topic config. The broker maps them to Kafka error codes in one
table (OffsetOutOfRange -> OFFSET_OUT_OF_RANGE, InvalidConfig -> INVALID_CONFIG, ...).
"""

from __future__ import annotations

from pathlib import Path


class HotTierError(Exception):
    """Base class of the errors of the local log."""

    retriable = False


class OffsetOutOfRange(HotTierError):
    """`offset` is outside [log_start_offset, log_end_offset] of this (local) log."""

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(
            f"offset {offset} is out of range: the log holds [{log_start_offset}, {log_end_offset})"
        )
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class LogClosed(HotTierError):
    """The log (or segment) was closed or deleted; it takes no more calls."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"log {path} is closed")
        self.path = path


class CorruptLog(HotTierError):
    """Data at rest that recovery must not paper over, e.g. segments whose offsets overlap.

    A torn or corrupt tail is not this: recovery truncates it. This is raised when the only
    repair would be to guess which of two copies of an offset is right.
    """

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"corrupt log data in {path}: {reason}")
        self.path = path
        self.reason = reason


class CorruptIndex(HotTierError):
    """An index file that contradicts itself or its segment; recovery rebuilds it."""

    def __init__(self, path: Path | None, reason: str) -> None:
        super().__init__(f"corrupt index {path or '(in memory)'}: {reason}")
        self.path = path
        self.reason = reason


class InvalidConfig(HotTierError):
    """A topic config value that is not a number or is outside Kafka's allowed range."""

    def __init__(self, name: str, value: object, reason: str) -> None:
        super().__init__(f"invalid value {value!r} for {name}: {reason}")
        self.name = name
        self.value = value
        self.reason = reason
