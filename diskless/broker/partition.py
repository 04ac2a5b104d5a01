"""One partition this broker leads: its log, its append rules and its long-poll waiters.

Only the event-loop task calls a Partition; the log underneath does synchronous file I/O,
which lands in the page cache (appends) or is an fsync on roll (bounded by segment size).
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass

from hot_tier import AppendInfo, Log
from hot_tier.records.header import iter_headers

from .errors import RecordTooLarge


@dataclass(frozen=True, slots=True)
class AppendRules:
    """The topic configs a produce to this partition is checked against."""

    max_message_bytes: int
    log_append_time: bool

    @classmethod
    def from_configs(cls, configs: dict[str, str]) -> AppendRules:
        return cls(
            max_message_bytes=int(configs["max.message.bytes"]),
            log_append_time=configs["message.timestamp.type"] == "LogAppendTime",
        )


class Partition:
    def __init__(self, topic: str, topic_id: uuid.UUID, index: int, log: Log, rules: AppendRules) -> None:
        self.topic = topic
        self.topic_id = topic_id
        self.index = index
        self.log = log
        self.rules = rules
        self.leader_epoch = 0
        self._appended: asyncio.Future[None] | None = None

    def append(self, records: bytes, now_ms: int) -> AppendInfo:
        """Validate and append the batches of one produce request; wake waiting fetches.

        Raises CorruptBatch (bad framing, magic or CRC) or RecordTooLarge; nothing is written then.
        """
        for header in iter_headers(records, check_crc=False):
            if header.size_bytes > self.rules.max_message_bytes:
                raise RecordTooLarge(header.size_bytes, self.rules.max_message_bytes)
        info = self.log.append(bytearray(records), now_ms, log_append_time=self.rules.log_append_time)
        self.notify()
        return info

    def notify(self) -> None:
        """Wake every fetch waiting on this partition (after an append or a truncation)."""
        if self._appended is not None:
            if not self._appended.done():
                self._appended.set_result(None)
            self._appended = None

    def appended(self) -> asyncio.Future[None]:
        """A future that completes at the next append: long-polling fetches wait on it."""
        if self._appended is None:
            self._appended = asyncio.get_running_loop().create_future()
        return self._appended
