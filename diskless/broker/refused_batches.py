"""Idempotent producers' batches this broker refused with a retriable error, kept for a moment.

A producer keeps up to five Produce requests in flight per partition. When the first of them is
refused with a retriable error (the partition is not led here yet, it moved, the write-ahead
log is full) and the next one is read a moment later, when the cause is gone, the next one does
not follow the producer's last sequence here. Kafka answers OUT_OF_ORDER_SEQUENCE_NUMBER, and
the Java producer retries it once the first is resolved; librdkafka instead bumps its producer
epoch (KIP-360), which restarts every partition's sequences: a batch of another partition whose
answer was lost when its leader died is then sent again under the new epoch and written twice.
Leaders move and open more often here than in Kafka (a rebuild from the bucket takes a moment),
so the window is wider.

So a gap that one of our own retriable refusals explains - the sequence that would follow is the
base sequence of a batch of the same producer and epoch refused here moments ago - is answered
with that refusal's error again: the producer retries both, in order. So is a gap (or a
producer not known yet) in a partition that another leadership held before and that began to
be served here less than `SETTLING_MS` ago: the batches before it were in flight to the previous leader, which died or
refused them, and are on their way again (a leader's process that was killed keeps no memory of
what it refused); NOT_LEADER_OR_FOLLOWER makes the producer retry in order, where OUT_OF_ORDER
would make librdkafka bump its epoch. A gap nothing explains, or one that lasts, is still
OUT_OF_ORDER_SEQUENCE_NUMBER (UNKNOWN_PRODUCER_ID).

Sans-IO: the caller passes the time. Only the event-loop task uses it.
"""

from __future__ import annotations

from collections import OrderedDict

from kio.schema.errors import ErrorCode

# Errors that refuse a batch before it is appended and that a producer retries.
RETRIABLE_REFUSALS = frozenset({
    ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition, ErrorCode.leader_not_available,
    ErrorCode.not_enough_replicas, ErrorCode.kafka_storage_error, ErrorCode.request_timed_out,
})  # fmt: skip

SETTLING_MS = 5_000  # a leader change's retries arrive within a few retry backoffs (librdkafka's: at most 1 s)
KEEP_MS = 60_000  # well past a producer's retry backoff (librdkafka's retry.backoff.max.ms: 1 s)
MAX_KEPT = 10_000  # a bound whatever the number of producers; the oldest go first

# (topic, partition, producer id, producer epoch, base sequence)
Key = tuple[str, int, int, int, int]


class RefusedBatches:
    def __init__(self, keep_ms: int = KEEP_MS, max_kept: int = MAX_KEPT) -> None:
        self.keep_ms = keep_ms
        self.max_kept = max_kept
        self._refused: OrderedDict[Key, tuple[ErrorCode, int]] = OrderedDict()  # oldest first

    def __len__(self) -> int:
        return len(self._refused)

    def refused(self, topic: str, partition: int, producer_id: int, producer_epoch: int, base_sequence: int, error: ErrorCode, now_ms: int) -> None:
        """A batch of an idempotent producer was refused with `error` (only retriable refusals are kept)."""
        if error not in RETRIABLE_REFUSALS:
            return
        key = (topic, partition, producer_id, producer_epoch, base_sequence)
        self._refused.pop(key, None)
        self._refused[key] = (error, now_ms)
        self._expire(now_ms)

    def explains(self, topic: str, partition: int, producer_id: int, producer_epoch: int, expected_sequence: int, now_ms: int) -> ErrorCode | None:
        """The error of the refused batch that would have filled a gap before a batch of this
        producer and epoch, whose predecessor here ends just before `expected_sequence`; None
        if no such batch was refused here lately."""
        self._expire(now_ms)
        found = self._refused.get((topic, partition, producer_id, producer_epoch, expected_sequence))
        return found[0] if found is not None else None

    def _expire(self, now_ms: int) -> None:
        refused = self._refused
        while refused and (len(refused) > self.max_kept or next(iter(refused.values()))[1] < now_ms - self.keep_ms):
            refused.popitem(last=False)


def settling(serving_since_ms: int, now_ms: int) -> bool:
    """Whether a partition began to be served here so recently that a gap in a producer's
    sequences is more likely batches still on their way from the previous leader."""
    return now_ms - serving_since_ms < SETTLING_MS
