"""One batch of a segment being cleaned, filtered against the offset map (sans-IO).

Kafka's LogCleaner.cleanInto / MemoryRecords.filterTo for RecordBatch v2. A record is kept
unless

- it has no key (a compacted log keeps keyed records only; Kafka drops them too),
- the offset map holds a later offset for its key (a newer record supersedes it), or
- it is a tombstone (null value) in a batch past its delete horizon (`DeleteHorizons`).

A batch whose records are all kept is returned as it is (same bytes). Otherwise it is encoded
again by hot_tier.records.encode_batch with everything that is not a record unchanged: base
offset, last offset (Kafka's overrideLastOffset: the producer's last sequence stays put),
partition leader epoch, attributes (codec, timestamp type, transactional, control), producer
id and epoch, base sequence; each kept record keeps its offset, timestamp, key, value and
headers. A batch left without records is dropped, except the last batch of a producer that
is still active (`retain_empty`): Kafka keeps it as an empty batch (BatchRetention.
RETAIN_EMPTY) so that the producer's state survives a reload of the log. A batch whose kept
tombstones carry no delete horizon yet is written again with one (KIP-534), records unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from hot_tier.records import BatchHeader, Record, encode_batch, iter_record_keys, iter_record_tuples
from hot_tier.records.transactions import ABORT, COMMIT, marker_type

from .policy import OffsetMap, key_digest


class DeleteHorizons:
    """When tombstones and transaction markers may go, as Kafka decides since KIP-534: the
    first cleaning that keeps a batch's tombstones (or a marker whose transaction has no data
    left) stamps the batch with a delete horizon, now + delete.retention.ms, in its
    base_timestamp field; a later cleaning past that horizon removes them. The horizon travels
    with the bytes (restarts, the bucket), and the records' own timestamps play no part: a
    replay of old records keeps its deletes for delete.retention.ms like any other. One per
    pass; `earliest_ms` is when the first tombstone or marker the pass kept may go."""

    __slots__ = ("now_ms", "stamp_ms", "earliest_ms")

    def __init__(self, now_ms: int, delete_retention_ms: int) -> None:
        self.now_ms = now_ms
        self.stamp_ms = min(now_ms + delete_retention_ms, 2**63 - 1)  # delete.retention.ms may be Long.MAX
        self.earliest_ms: int | None = None

    def passed(self, header: BatchHeader) -> bool:
        horizon = header.delete_horizon_ms
        return horizon is not None and self.now_ms >= horizon

    def keep(self, header: BatchHeader) -> int:
        """The horizon of a batch whose tombstones (or itself, a marker) stay: its own, or a
        new one to stamp when it has none."""
        horizon = header.delete_horizon_ms
        if horizon is None:
            horizon = self.stamp_ms
        elif horizon <= self.now_ms:
            return horizon  # passed, kept only past the map's end: the next pass takes it, none need be forced
        self.earliest_ms = horizon if self.earliest_ms is None else min(self.earliest_ms, horizon)
        return horizon


@dataclass(slots=True)
class CleanStats:
    batches_read: int = 0
    records_read: int = 0
    records_kept: int = 0
    batches_dropped: int = 0
    tombstones_dropped: int = 0
    tombstones_kept: int = 0
    bytes_read: int = 0
    bytes_written: int = 0

    def count_passed(self, data: bytes, cleaned: bytes | None, header: BatchHeader) -> None:
        """A batch decided without decoding it (a marker, aborted data): kept whole, emptied or gone."""
        self.batches_read += 1
        self.bytes_read += len(data)
        self.records_read += header.records_count
        if cleaned is None:
            self.batches_dropped += 1
        else:
            self.bytes_written += len(cleaned)
            self.records_kept += header.records_count if cleaned is data else 0


def clean_batch(
    data: bytes, header: BatchHeader, offset_map: OffsetMap, *, horizons: DeleteHorizons, retain_empty: bool, stats: CleanStats
) -> bytes | None:
    """The batch `data` (whole, `header` read from it at position 0) after cleaning, or None
    when it goes. Records at or past the map's end are all kept, as in Kafka's
    shouldRetainRecord (the map says nothing about them; a tombstone there may still hide an
    older value below)."""
    stats.batches_read += 1
    stats.bytes_read += len(data)
    if header.is_control:  # markers are TransactionMarkers' to decide (cleaning.py does not pass them here)
        stats.bytes_written += len(data)
        return data
    if (
        header.records_count > 0 and offset_map.start_offset <= header.base_offset and header.last_offset < offset_map.end_offset
        and offset_map.latest_between(header.base_offset, header.last_offset) == 0
    ):  # fmt: skip
        # Every record is superseded (most batches of a cleaning): decided without a walk.
        stats.records_read += header.records_count
        if not retain_empty:
            stats.batches_dropped += 1
            return None
        cleaned = copy_with([], header, delete_horizon_ms=header.delete_horizon_ms)  # as the walk leaves it
        stats.bytes_written += len(cleaned)
        return cleaned
    kept: list[int] = []  # offsets; decided on keys alone, records decoded only for a partial copy
    count = tombstones = 0
    get = offset_map.get
    map_end = offset_map.end_offset
    drop_tombstones = horizons.passed(header)
    for offset, key, null_value in iter_record_keys(data, header):
        count += 1
        if offset >= map_end:
            kept.append(offset)
            tombstones += null_value
            continue
        if key is None:
            continue
        found = get(key_digest(key))
        if found is not None and offset < found:
            continue
        if null_value:
            if drop_tombstones:
                stats.tombstones_dropped += 1
                continue
            stats.tombstones_kept += 1
            tombstones += 1
        kept.append(offset)
    stats.records_read += count
    stats.records_kept += len(kept)
    horizon = horizons.keep(header) if tombstones else header.delete_horizon_ms
    if len(kept) == count and (count or retain_empty) and horizon == header.delete_horizon_ms:
        stats.bytes_written += len(data)
        return data
    if not kept and not retain_empty:
        stats.batches_dropped += 1
        return None
    cleaned = copy_with(_records(data, header, set(kept)), header, delete_horizon_ms=horizon)
    stats.bytes_written += len(cleaned)
    return cleaned


class TransactionMarkers:
    """What one pass does with transactions, as Kafka's cleaner does (CleanedTransactionMetadata),
    batch by batch in offset order over every segment the pass rewrites:

    - data of aborted transactions goes: read_committed consumers skip it anyway, read_uncommitted
      ones no longer see it (the last batch of an active producer stays, emptied);
    - a marker goes once none of its transaction's data is left and it is past its delete
      horizon (stamped, as a tombstone's, by the first pass that found its transaction empty:
      `DeleteHorizons`), so a reload never finds data without its marker. Only
      a transaction begun inside the pass is known whole: the pass must start at the log start,
      or have seen the producer's previous marker;
    - an ABORT marker goes only below `aborts_removable_below` (where the metadata store already
      holds its transaction, on a tiered partition), and the pass names it (`removed_aborts`):
      its aborted transaction must leave every list a fetch answers with at the moment the copy
      without its marker is swapped in. A read_committed consumer told of an aborted transaction
      skips that producer's batches until it meets the marker, later committed ones included.
    """

    __slots__ = ("_aborts_removable_below", "_begun", "_with_data", "_whole_from_start", "removed_aborts")

    def __init__(self, *, from_log_start: bool, aborts_removable_below: int = 2**63) -> None:
        self._whole_from_start = from_log_start
        self._aborts_removable_below = aborts_removable_below
        self._begun: set[int] = set()  # producers whose previous marker the pass went over
        self._with_data: set[int] = set()  # producers whose open transaction kept a batch
        self.removed_aborts: list[int] = []  # offsets of the ABORT markers removed, in order

    def kept_data(self, header: BatchHeader) -> None:
        """A transactional data batch of header.producer_id was kept (perhaps emptied)."""
        self._with_data.add(header.producer_id)

    def marker(self, data: bytes, header: BatchHeader, horizons: DeleteHorizons) -> bytes | None:
        """The marker batch `data` as the pass leaves it: itself, stamped with a delete
        horizon, or None when it goes."""
        producer = header.producer_id
        whole = self._whole_from_start or producer in self._begun
        empty = whole and producer not in self._with_data
        self._begun.add(producer)
        self._with_data.discard(producer)
        if not empty:
            return data
        if not horizons.passed(header):
            horizon = horizons.keep(header)
            if horizon == header.delete_horizon_ms:
                return data
            return copy_with(_records(data, header), header, delete_horizon_ms=horizon)
        kind = marker_type(data, header)
        if kind == COMMIT:
            return None
        if kind == ABORT and header.base_offset < self._aborts_removable_below:
            self.removed_aborts.append(header.base_offset)
            return None
        return data


def _records(data: bytes, header: BatchHeader, offsets: set[int] | None = None) -> list[Record]:
    """The records of the batch `data` (those at `offsets` only, when given), decoded."""
    return [Record(o, ts, k, v, h) for o, ts, _, k, v, h in iter_record_tuples(data, header) if offsets is None or o in offsets]


def copy_with(records: list[Record], header: BatchHeader, *, delete_horizon_ms: int | None = None) -> bytes:
    """The batch `header` describes holding `records` only; with none, Kafka's
    BatchRetention.RETAIN_EMPTY: its offsets and producer fields stay, so the producer's state
    survives a reload of the log. `delete_horizon_ms`: see DeleteHorizons."""
    return encode_batch(
        records, base_offset=header.base_offset, compression=header.codec, timestamp_type=header.timestamp_type,
        producer_id=header.producer_id, producer_epoch=header.producer_epoch, base_sequence=header.base_sequence,
        partition_leader_epoch=header.partition_leader_epoch, is_transactional=header.is_transactional,
        is_control=header.is_control, last_offset=header.last_offset, empty_timestamp=header.max_timestamp,
        delete_horizon_ms=delete_horizon_ms,
    )  # fmt: skip
