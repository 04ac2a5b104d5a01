"""Errors raised by the Spark reader. Each carries the fields a user needs to act on it.

Spark shows the message of an exception raised in `partitions()` or `read()` to the user, so
every message names the option, topic-partition or offset at fault and says what to change.
Errors from below pass through unchanged: `cold_tier.errors.InvalidObjectStoreUrl` for a bad
location, `hot_tier.records.CorruptBatch` for bytes in the bucket that fail their CRC.
"""

from __future__ import annotations

FAIL_ON_DATA_LOSS_HINT = (
    'If you want the query to skip the missing records instead, set the option "failOnDataLoss" to "false".'
)


class SparkReaderError(Exception):
    """Base class of every error raised by `spark_reader`."""


class InvalidOption(SparkReaderError, ValueError):
    """A reader option that is missing, malformed, or contradicts another one."""

    def __init__(self, option: str, value: object, reason: str) -> None:
        shown = "" if value is None else f" = {value!r}"
        super().__init__(f"option {option!r}{shown}: {reason}")
        self.option = option
        self.value = value
        self.reason = reason


class DataLoss(SparkReaderError):
    """Records the query asked for are not in the bucket (or broker) any more: retention
    deleted them, a commit is missing, or the asked-for range starts before the log does.
    Raised only with failOnDataLoss=true, as Spark's Kafka source does."""

    def __init__(
        self, topic: str, partition: int, first_missing_offset: int, next_available_offset: int | None, reason: str
    ) -> None:
        available = "none" if next_available_offset is None else str(next_available_offset)
        super().__init__(
            f"{topic}-{partition}: offsets from {first_missing_offset} are missing (next available: {available}):"
            f" {reason}. Some data may have been lost because it is not in the bucket any more (retention, or a"
            f" deleted segment). {FAIL_ON_DATA_LOSS_HINT}"
        )
        self.topic = topic
        self.partition = partition
        self.first_missing_offset = first_missing_offset
        self.next_available_offset = next_available_offset
        self.reason = reason


class CorruptSegment(SparkReaderError):
    """A segment object whose bytes cannot be trusted (bad CRC, cut short, not a batch where
    its index points): corrupt data at rest. The query fails, naming the object, the byte and
    the offsets being read; with failOnDataLoss=false the rest of the segment is skipped with a
    warning (read.py): rows are missing, never wrong."""

    def __init__(
        self, key: str, position: int, reason: str,
        topic: str | None = None, partition: int | None = None, offset: int | None = None,
    ) -> None:  # fmt: skip
        records = "" if topic is None else f" (reading {topic}-{partition} from offset {offset})"
        super().__init__(f"corrupt segment object {key!r} at byte {position}{records}: {reason}")
        self.key = key
        self.position = position
        self.reason = reason
        self.topic = topic
        self.partition = partition
        self.offset = offset


class CorruptWriteAheadObject(SparkReaderError):
    """A write-ahead object (cold_tier/wal_format.py) whose footer, index or batches cannot be
    trusted: torn, cut short, a bad CRC, or a batch that is not the one its index names.
    `topic`, `partition` and `offset` say which records it was read for, when known (a corrupt
    index names none). With failOnDataLoss=false a corrupt index is skipped with a warning:
    the offsets only it held end the partition's tail, so no row is wrong, some are missing."""

    def __init__(
        self, key: str, position: int | None, reason: str,
        topic: str | None = None, partition: int | None = None, offset: int | None = None,
    ) -> None:  # fmt: skip
        at = "" if position is None else f" at byte {position}"
        records = "" if topic is None else f" (records of {topic}-{partition} from offset {offset})"
        super().__init__(f"corrupt write-ahead object {key!r}{at}{records}: {reason}")
        self.key = key
        self.position = position
        self.reason = reason
        self.topic = topic
        self.partition = partition
        self.offset = offset


class OffsetRangeInvalid(SparkReaderError, ValueError):
    """A starting offset after its ending offset, as Spark's Kafka source refuses it."""

    def __init__(self, topic: str, partition: int, start_offset: int, end_offset: int) -> None:
        super().__init__(
            f"{topic}-{partition}: the starting offset {start_offset} is after the ending offset {end_offset}"
        )
        self.topic = topic
        self.partition = partition
        self.start_offset = start_offset
        self.end_offset = end_offset


class NoOffsetForTimestamp(SparkReaderError):
    """startingTimestamp (or ...ByTimestamp) matches no record of a partition, and
    startingOffsetsByTimestampStrategy is "error" (Spark's default)."""

    def __init__(self, topic: str, partition: int, timestamp_ms: int) -> None:
        super().__init__(
            f"{topic}-{partition}: no record has a timestamp at or after {timestamp_ms};"
            ' set startingOffsetsByTimestampStrategy to "latest" to start such partitions at their end'
        )
        self.topic = topic
        self.partition = partition
        self.timestamp_ms = timestamp_ms


class BrokerError(SparkReaderError):
    """A broker answered a hot-tail request with a Kafka error code."""

    def __init__(self, api: str, error_code: int, topic: str | None = None, partition: int | None = None) -> None:
        where = f" for {topic}-{partition}" if topic is not None else ""
        super().__init__(f"broker answered {api}{where} with Kafka error code {error_code}")
        self.api = api
        self.error_code = error_code
        self.topic = topic
        self.partition = partition


class BrokerUnavailable(SparkReaderError):
    """No broker of `kafka.bootstrap.servers` could be reached, or one closed the connection."""

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(f"broker {address} unavailable: {reason}")
        self.address = address
        self.reason = reason
