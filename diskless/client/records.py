"""Turning the records of a fetched batch into `ConsumerRecord`s: the consumer's hot loop.

The bytes are decoded by `hot_tier.records.iter_record_tuples`, the one record decoder (also
under `decode_batch`), which yields each record as (offset, timestamp, timestamp_type, key,
value, headers): a `ConsumerRecord` without its topic and partition. `iter_records` prefixes
those two and builds each record with one C-level `tuple.__new__`, the whole chain of
iterators running in C but the decoder. Records below `min_offset` are left out. A test holds
the result to `decode_batch` on random batches of every codec.

Records are built as the application takes them, not a batch at a time: a consumer taking
`max_poll_records` from a batch of thousands holds only those, which die young. Decoded whole,
a batch's records outlived several of the garbage collector's young generations and were
examined in each (consuming 100-byte records went from about 270k to 307k records/s).

The batch's header and CRC are checked before (`hot_tier.records.read_header`); the decoder
still checks every length against the bytes there and raises `CorruptBatch` when the records
do not fill their section exactly, after the records before the fault. Pure.

`deserialize` applies the consumer's key and value deserializers, stopping at the first record
one of them raises on (Java's RecordDeserializationException): the caller moves the partition's
position back to that record, so nothing after it is skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import partial
from itertools import dropwhile
from typing import Any

from hot_tier.records import BatchHeader, iter_record_tuples

from .errors import RecordDeserializationError
from .structs import ConsumerRecord

_new_record = partial(tuple.__new__, ConsumerRecord)


def iter_records(
    buf: bytes, header: BatchHeader, topic: str, partition: int, min_offset: int
) -> Iterator[ConsumerRecord]:
    """The records of the batch `header` describes (it sits in `buf`), from `min_offset` on."""
    records = map(_new_record, map((topic, partition).__add__, iter_record_tuples(buf, header)))
    if header.base_offset < min_offset:  # rare: the fetch position is inside this batch
        records = dropwhile(lambda record: record[2] < min_offset, records)
    return records



def deserialize(
    records: Sequence[ConsumerRecord],
    key_deserializer: Callable[[bytes | None], Any] | None,
    value_deserializer: Callable[[bytes | None], Any] | None,
) -> tuple[list[ConsumerRecord], RecordDeserializationError | None]:
    """(the records, deserialized, before the first one a deserializer raises on; the error
    naming that record, its `__cause__` the deserializer's exception, or None)."""
    out: list[ConsumerRecord] = []
    part = "key"
    try:
        for record in records:
            part = "key"
            key = record.key if key_deserializer is None else key_deserializer(record.key)
            part = "value"
            value = record.value if value_deserializer is None else value_deserializer(record.value)
            out.append(record._replace(key=key, value=value))
    except Exception as exc:
        failed = records[len(out)]
        error = RecordDeserializationError(failed.topic, failed.partition, failed.offset, part)
        error.__cause__ = exc
        return out, error
    return out, None
