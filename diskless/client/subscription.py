"""What a consumer reads: its subscription or manual assignment, and per partition where it is.

Two offsets per assigned partition, never mixed up:

    position      the offset of the next record handed to the application (None: unknown,
                  to be found from the committed offset or by auto_offset_reset)
    fetch_offset  the offset the next Fetch asks for; ahead of `position` while fetched
                  records wait in the buffer (fetches are pipelined ahead of the application)

`epoch` counts seeks and resets: a fetch answer carries the epoch it was sent under and is
dropped if the partition has moved since, so a seek never lets stale records through.

Pure; owned by one consumer and used from its event loop only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from .errors import IllegalStateError
from .structs import TopicPartition

RESET_EARLIEST = "earliest"
RESET_LATEST = "latest"


@dataclass(slots=True)
class PartitionState:
    position: int | None = None
    fetch_offset: int | None = None
    epoch: int = 0
    reset: str | None = None  # a pending reset to "earliest"/"latest" (seek_to_beginning/end)
    paused: bool = False  # by the application (pause/resume)
    awaiting_seek: bool = False  # out of range or no offset, with auto_offset_reset "none"
    revoking: bool = False  # being taken away by a rebalance: nothing more goes to the application
    in_flight: bool = False
    buffered: int = 0  # completed fetches waiting for the application
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    leader_epoch: int = -1

    def seek(self, offset: int) -> None:
        self.position = self.fetch_offset = offset
        self.reset = None
        self.awaiting_seek = False
        self._moved()

    def request_reset(self, strategy: str) -> None:
        self.position = self.fetch_offset = None
        self.reset = strategy
        self._moved()

    def _moved(self) -> None:
        # Answers fetched or in flight for the old epoch are dropped when they surface.
        self.epoch += 1
        self.buffered = 0
        self.in_flight = False

    @property
    def fetchable(self) -> bool:
        return (
            self.fetch_offset is not None
            and not self.paused
            and not self.awaiting_seek
            and not self.revoking
            and not self.in_flight
            and self.buffered < 2
        )


@dataclass(slots=True)
class SubscriptionState:
    topics: frozenset[str] = frozenset()
    pattern: re.Pattern[str] | None = None
    manual: bool = False
    assignment: dict[TopicPartition, PartitionState] = field(default_factory=dict)

    @property
    def subscribed(self) -> bool:
        """A group subscription (by names or by pattern) is in place."""
        return bool(self.topics) or self.pattern is not None

    def subscribe(self, topics: Iterable[str] = (), pattern: str | re.Pattern[str] | None = None) -> None:
        if self.manual:
            raise IllegalStateError("subscribe() after assign(): call unsubscribe() first")
        self.topics = frozenset(topics)
        self.pattern = re.compile(pattern) if isinstance(pattern, str) else pattern

    def matches(self, topic: str) -> bool:
        return topic in self.topics or (self.pattern is not None and self.pattern.fullmatch(topic) is not None)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Manual assignment, without a group."""
        if self.subscribed:
            raise IllegalStateError("assign() after subscribe(): call unsubscribe() first")
        self.manual = True
        self._set_assignment(partitions)

    def set_group_assignment(self, partitions: Iterable[TopicPartition]) -> None:
        self._set_assignment(partitions)

    def _set_assignment(self, partitions: Iterable[TopicPartition]) -> None:
        wanted = list(dict.fromkeys(partitions))
        self.assignment = {tp: self.assignment.get(tp) or PartitionState() for tp in wanted}

    def unsubscribe(self) -> None:
        self.topics = frozenset()
        self.pattern = None
        self.manual = False
        self.assignment = {}

    def state(self, tp: TopicPartition) -> PartitionState:
        found = self.assignment.get(tp)
        if found is None:
            raise IllegalStateError(f"partition {tp.topic}-{tp.partition} is not assigned to this consumer")
        return found

    def missing_positions(self) -> list[TopicPartition]:
        return [tp for tp, s in self.assignment.items() if s.position is None and not s.awaiting_seek]

    def consumed_offsets(self) -> dict[TopicPartition, int]:
        """What to commit: the position of every partition that has one."""
        return {tp: s.position for tp, s in self.assignment.items() if s.position is not None}
