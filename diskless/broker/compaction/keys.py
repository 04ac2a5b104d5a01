"""A compacted topic refuses records without a key (sans-IO), as Kafka's LogValidator does.

Only batches of compacted topics are decoded here (decompressed if need be): the produce path
of other topics stays on batch headers. Kafka checks every record of the batch and answers
INVALID_RECORD for the whole batch with one KIP-467 record error per keyless record:

    record error   (batch_index, "Compacted topic cannot accept message without key in topic
                   partition T-P.")
    error_message  "One or more records have been rejected due to N record errors in total,
                   and only showing the first three errors at most: [RecordError(batchIndex=I,
                   message='...'), ...]"   (LogValidator.processRecordErrors, RecordError.toString)
"""

from __future__ import annotations

from hot_tier.records import BatchHeader, iter_record_tuples

from ..compression import PRODUCE_DECOMPRESSED_MAX_BYTES
from ..errors import InvalidRecord


class RecordsWithoutKey(InvalidRecord):
    """INVALID_RECORD with the indexes (within the batch) of the records that have no key."""

    def __init__(self, topic: str, partition: int, batch_indexes: list[int]) -> None:
        self.record_message = f"Compacted topic cannot accept message without key in topic partition {topic}-{partition}."
        self.record_errors = [(index, self.record_message) for index in batch_indexes]
        shown = ", ".join(f"RecordError(batchIndex={index}, message='{message}')" for index, message in self.record_errors[:3])
        super().__init__(
            f"One or more records have been rejected due to {len(self.record_errors)} record errors in total, "
            f"and only showing the first three errors at most: [{shown}]"
        )


def check_keys(records: bytes | bytearray | memoryview, header: BatchHeader, topic: str, partition: int) -> None:
    """Raise RecordsWithoutKey if a record of the batch (at `header.position` of `records`)
    has a null key. Control batches (transaction markers) carry keys of their own and pass.

    A compressed batch is decompressed whole, on the event loop: at most
    PRODUCE_DECOMPRESSED_MAX_BYTES (64 MiB, a fixed bound: the topic's max.message.bytes bounds
    only the compressed batch), else DecompressedTooLarge (MESSAGE_TOO_LARGE) and no more of it
    is decompressed. The log cleaner reads stored batches without this bound."""
    if header.is_control:
        return
    missing = [index for index, record in enumerate(iter_record_tuples(records, header, PRODUCE_DECOMPRESSED_MAX_BYTES)) if record[3] is None]
    if missing:
        raise RecordsWithoutKey(topic, partition, missing)
