"""Turning the records of a fetched batch into `ConsumerRecord`s: the consumer's hot loop.

The bytes are decoded by `hot_tier.records.iter_record_tuples`, the one record decoder (also
under `decode_batch`), which yields each record as (offset, timestamp, timestamp_type, key,
value, headers): a `ConsumerRecord` without its topic and partition. This module prefixes
those two and builds each record with one C-level `tuple.__new__`, no intermediate objects.
Records below `min_offset` are left out. A test holds the result to `decode_batch` on random
batches of every codec.

The batch's header and CRC are checked before (`hot_tier.records.read_header`); the decoder
still checks every length against the bytes there and raises `CorruptBatch` when the records
do not fill their section exactly. Pure.
"""

from __future__ import annotations

from hot_tier.records import BatchHeader, iter_record_tuples

from .structs import ConsumerRecord

_tuple_new = tuple.__new__


def decode_records(
    buf: bytes, header: BatchHeader, topic: str, partition: int, min_offset: int
) -> list[ConsumerRecord]:
    """The records of the batch `header` describes (it sits in `buf`), from `min_offset` on."""
    new, cls = _tuple_new, ConsumerRecord
    prefix = (topic, partition)
    out = [new(cls, prefix + record) for record in iter_record_tuples(buf, header)]
    if header.base_offset < min_offset:  # rare: the fetch position is inside this batch
        out = [r for r in out if r[2] >= min_offset]
    return out
