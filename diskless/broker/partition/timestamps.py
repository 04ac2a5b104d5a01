"""message.timestamp.before.max.ms / message.timestamp.after.max.ms (KIP-937): how far behind
or ahead of the broker's clock a CreateTime record's timestamp may be when it is produced.

The common case costs one comparison and decodes nothing: a batch's header carries its
largest timestamp, which bounds every record's from above (after.max.ms, default an hour).
Only a topic that sets before.max.ms (default: no bound) has its records' timestamps decoded
on produce, to find the smallest; and a refused batch, to name its records (KIP-467), within
the bound on what produce decompresses (compression.py).
"""

from __future__ import annotations

from hot_tier.records import BatchHeader, iter_record_tuples

from ..compression import PRODUCE_DECOMPRESSED_MAX_BYTES
from ..errors import InvalidTimestamp

LONG_MAX = 2**63 - 1
NO_TIMESTAMP = -1


def check_timestamps(records: bytes | bytearray | memoryview, header: BatchHeader, now_ms: int, before_max_ms: int, after_max_ms: int) -> None:
    """Raise InvalidTimestamp, naming each record out of [now - before, now + after], as
    Kafka's LogValidator; a record without a timestamp (-1) passes."""
    too_new = header.max_timestamp != NO_TIMESTAMP and header.max_timestamp - now_ms > after_max_ms
    if not too_new and before_max_ms >= LONG_MAX:
        return
    low, high = now_ms - before_max_ms, now_ms + after_max_ms
    wrong = [
        (index, f"Timestamp {timestamp} of message with offset {offset} is out of range. The timestamp should be within [{low}, {high}]")
        for index, (offset, timestamp, *_) in enumerate(iter_record_tuples(records, header, PRODUCE_DECOMPRESSED_MAX_BYTES))
        if timestamp != NO_TIMESTAMP and not low <= timestamp <= high
    ]  # fmt: skip
    if wrong:
        raise InvalidTimestamp(wrong)
