"""A partition's transactions, sans-IO: the open transaction of each producer (its first
offset), the last stable offset, and the aborted transactions (Kafka's ProducerStateManager
ongoing/unreplicated transactions and its transaction index, `.txnindex`).

A transaction marker is a control batch (Kafka's EndTransactionMarker, DefaultRecordBatch
with the control and transactional attribute bits), one record:

    key   = version int16 (0), type int16 (0 = ABORT, 1 = COMMIT)       4 bytes
    value = version int16 (0), coordinator_epoch int32                   6 bytes

The batch carries the transaction's producer id and epoch, base sequence -1.

The last stable offset (LSO) is the first offset a read_committed consumer may not read yet:
the first offset of the oldest transaction still open, or of the oldest one whose marker is
not yet durable, and never above the high watermark. A transaction ends at its marker's
durability, not at its append (a marker is acknowledged like acks=all).

Rebuilt at open from the batch headers of the local log (`rebuild`); headers only, no record
is decoded except the one key of each marker. Aborted transactions whose marker reached the
bucket in a segment are also recorded in the metadata store (`unrecorded` / `recorded`, by the
leader when a segment is committed), and merged back at open (`merge_aborted`): the local copy
of a segment goes soon after its upload. On a compacted topic the log cleaner removes an abort
marker with the last of its transaction's data, past delete.retention.ms, as Kafka does; the
transaction then leaves this list (`forget_aborted`), the store and the bucket's `.txnindex`.
A transaction open at the local log's start whose first batches are only in the bucket comes
from the producer state (its snapshot keeps each producer's open transaction, as Kafka's does:
`seed_ongoing`, before the fold, which may then meet its marker).

Kafka's transaction index, one per segment (`.txnindex`; uploaded to the bucket beside each
segment, see cold_tier/layout.py): one 34-byte entry per transaction whose abort marker is in
the segment, in marker order, big-endian:

    version int16 (0), producer_id int64, first_offset int64, last_offset int64 (the abort
    marker's offset), last_stable_offset int64

Kafka writes there the last stable offset right after the abort; this partition does not keep
it and writes the marker's offset + 1. Readers use the first four fields only.

`PartitionTxns` is used by the partition leader's task; the Spark reader folds the bucket's
tail with it to find the last stable offset and aborted transactions from the bucket alone.
`AbortedRanges` answers, for a read_committed reader, whether a transactional batch is aborted.
"""

from __future__ import annotations

import struct
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from dataclasses import dataclass

from hot_tier.records import Record, encode_batch
from hot_tier.records.decoder import iter_record_tuples
from hot_tier.records.header import BatchHeader, iter_headers

ABORT = 0
COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")
_TXN_INDEX_ENTRY = struct.Struct(">hqqqq")
TXN_INDEX_ENTRY_BYTES = _TXN_INDEX_ENTRY.size  # 34


class CorruptTxnIndex(ValueError):
    """A transaction index whose bytes are not whole 34-byte version-0 entries."""


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """An aborted transaction of this partition: data batches of `producer_id` from
    `first_offset` up to the abort marker at `last_offset` are not to be read committed."""

    producer_id: int
    first_offset: int
    last_offset: int


def encode_txn_index(aborted: Iterable[AbortedTxn]) -> bytes:
    """A segment's `.txnindex`: the aborted transactions whose marker it holds, in marker order."""
    return b"".join(_TXN_INDEX_ENTRY.pack(0, a.producer_id, a.first_offset, a.last_offset, a.last_offset + 1) for a in aborted)


def decode_txn_index(data: bytes | memoryview) -> list[AbortedTxn]:
    if len(data) % TXN_INDEX_ENTRY_BYTES:
        raise CorruptTxnIndex(f"{len(data)} bytes is not a whole number of {TXN_INDEX_ENTRY_BYTES}-byte entries")
    entries = []
    for version, producer_id, first_offset, last_offset, _ in _TXN_INDEX_ENTRY.iter_unpack(data):
        if version != 0 or not 0 <= first_offset <= last_offset:
            raise CorruptTxnIndex(f"entry {len(entries)}: version {version}, offsets {first_offset}-{last_offset}")
        entries.append(AbortedTxn(producer_id, first_offset, last_offset))
    return entries


class AbortedRanges:
    """Aborted transactions as a read_committed reader tests them: a transactional data batch
    of producer P at offset o is aborted when one of P's aborted transactions spans o (its
    first offset <= o < its abort marker). Picklable."""

    __slots__ = ("_by_producer",)

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        by_producer: dict[int, list[tuple[int, int]]] = {}
        for a in aborted:
            by_producer.setdefault(a.producer_id, []).append((a.first_offset, a.last_offset))
        self._by_producer = {p: sorted(spans) for p, spans in by_producer.items()}

    def __bool__(self) -> bool:
        return bool(self._by_producer)

    def is_aborted(self, producer_id: int, offset: int) -> bool:
        spans = self._by_producer.get(producer_id)
        if not spans:
            return False
        at = bisect_right(spans, (offset, 2**63)) - 1
        return at >= 0 and spans[at][0] <= offset < spans[at][1]


def encode_marker(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, timestamp_ms: int) -> bytes:
    """One control batch at base offset 0 (the log assigns the offset)."""
    record = Record(
        0, timestamp_ms, _CONTROL_KEY.pack(0, COMMIT if commit else ABORT), _MARKER_VALUE.pack(0, coordinator_epoch)
    )
    return encode_batch(
        [record], producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=-1,
        is_transactional=True, is_control=True,
    )  # fmt: skip


def marker_type(batch: bytes | bytearray | memoryview, header: BatchHeader) -> int | None:
    """ABORT, COMMIT, or None when the control batch is not a transaction marker."""
    for record in iter_record_tuples(batch, header):
        key = record[3]
        if key is not None and len(key) >= 4:
            _, kind = _CONTROL_KEY.unpack_from(key)
            return kind if kind in (ABORT, COMMIT) else None
        return None
    return None


class PartitionTxns:
    def __init__(self) -> None:
        self._ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction
        # Ended transactions whose marker is not yet durable: (marker offset, first offset).
        self._ending: list[tuple[int, int]] = []
        self._aborted: list[AbortedTxn] = []  # by last_offset
        self._recorded_end = 0  # aborted transactions with a marker below it are in the store
        self._seen = False  # a transactional batch, or an aborted transaction from the store, was seen
        self._rebuilt_aborts: set[int] = set()  # offsets of the ABORT markers `rebuild` found, until `merge_aborted`
        self._verifying: dict[int, object] = {}  # producer id -> guard of a verification in flight (begin_verification)

    @property
    def transaction_free(self) -> bool:
        """No transactional batch seen (in the local log, appended, or aborted in the store):
        read_committed reads the same as read_uncommitted, control batches aside."""
        return not self._seen

    @property
    def has_ongoing(self) -> bool:
        return bool(self._ongoing)

    def is_ongoing(self, producer_id: int) -> bool:
        return producer_id in self._ongoing

    def ongoing_first_offset(self, producer_id: int) -> int | None:
        """The first offset of the producer's open transaction here (DescribeProducers'
        currentTxnStartOffset), or None."""
        return self._ongoing.get(producer_id)

    def on_data(self, producer_id: int, first_offset: int) -> None:
        """A transactional data batch was appended."""
        self._seen = True
        self._ongoing.setdefault(producer_id, first_offset)
        self._verifying.pop(producer_id, None)

    def begin_verification(self, producer_id: int) -> object:
        """A guard for a KIP-890 verification of the producer's first batch here, asked of a
        coordinator on another broker (Kafka's VerificationGuard): a marker of the producer
        appended before the answer is used voids it (`verification_holds`), since the answer
        may describe the transaction that marker ended. Requests verifying together share it."""
        return self._verifying.setdefault(producer_id, object())

    def verification_holds(self, producer_id: int, guard: object) -> bool:
        return self._verifying.get(producer_id) is guard

    def end_verification(self, producer_id: int, guard: object) -> None:
        """The request that took `guard` is done with it (kept while another holds it: no matter)."""
        if self._verifying.get(producer_id) is guard:
            del self._verifying[producer_id]

    def on_marker(self, producer_id: int, marker_offset: int, commit: bool, default_first_offset: int) -> None:
        """A marker was appended at `marker_offset`; its transaction is stable once it is durable.
        A marker of a producer with no open transaction here (a second marker after a
        coordinator restart, or a transaction that wrote nothing to this partition) ends nothing."""
        self._seen = True
        self._verifying.pop(producer_id, None)
        first = self._ongoing.pop(producer_id, None)
        if first is None:
            return
        self._ending.append((marker_offset, first))
        if not commit:
            self._aborted.append(AbortedTxn(producer_id, first, marker_offset))

    def seed_ongoing(self, open_transactions: Iterable[tuple[int, int]]) -> None:
        """Transactions open at the local log's start that began below it, (producer id, first
        offset), from the producer state's snapshot; called before `rebuild`, whose fold sees
        only their later batches and may meet their markers (an abort then covers them from
        their first offset, in the bucket)."""
        for producer_id, first_offset in open_transactions:
            self._seen = True
            self._ongoing[producer_id] = min(self._ongoing.get(producer_id, first_offset), first_offset)

    def merge_aborted(self, entries: Iterable[tuple[int, int, int]], *, local: tuple[int, int] | None = None) -> None:
        """Aborted transactions from the store, (producer id, first offset, marker offset).
        With `local`, the [start, end) of the log `rebuild` folded: there the local log is what
        fetches read, and an entry whose marker it no longer holds (the cleaner removed marker
        and data, and the bucket's copy was not yet rewritten) is left out."""
        entries = list(entries)
        self._seen = self._seen or bool(entries)
        self._recorded_end = max([self._recorded_end] + [m + 1 for _, _, m in entries])
        if local is not None:
            start, end = local
            entries = [e for e in entries if not start <= e[2] < end or e[2] in self._rebuilt_aborts]
        self._rebuilt_aborts = set()
        known = {a.last_offset for a in self._aborted}
        merged = self._aborted + [AbortedTxn(p, f, m) for p, f, m in entries if m not in known]
        self._aborted = sorted(merged, key=lambda a: a.last_offset)

    def forget_aborted(self, marker_offsets: Iterable[int]) -> None:
        """The cleaner removed these ABORT markers with the last of their transactions' data:
        the transactions leave the lists fetches answer with. Called in the event-loop step
        that swaps in the copy without them (see rewrite.TransactionMarkers)."""
        gone = set(marker_offsets)
        if gone:
            self._aborted = [a for a in self._aborted if a.last_offset not in gone]

    @property
    def recorded_end(self) -> int:
        """Aborted transactions whose marker is below this are in the metadata store."""
        return self._recorded_end

    def unrecorded(self, end_offset: int) -> list[tuple[int, int, int]]:
        """Aborted transactions with a marker below `end_offset` not yet in the store."""
        return [(a.producer_id, a.first_offset, a.last_offset) for a in self._aborted if self._recorded_end <= a.last_offset < end_offset]

    def recorded(self, end_offset: int) -> None:
        self._recorded_end = max(self._recorded_end, end_offset)

    def truncate_to(self, offset: int) -> None:
        """The log was cut at `offset` (nothing at or above it remains)."""
        self._ongoing = {p: f for p, f in self._ongoing.items() if f < offset}
        self._ending = [(m, f) for m, f in self._ending if m < offset]
        self._aborted = [a for a in self._aborted if a.last_offset < offset]

    def last_stable_offset(self, high_watermark: int) -> int:
        if self._ending:
            self._ending = [(m, f) for m, f in self._ending if m >= high_watermark]
        lso = high_watermark
        for first in self._ongoing.values():
            lso = min(lso, first)
        for _, first in self._ending:
            lso = min(lso, first)
        return lso

    def aborted_with_markers_in(self, start_offset: int, end_offset: int) -> list[AbortedTxn]:
        """Aborted transactions whose marker is in [start_offset, end_offset): a segment's `.txnindex`."""
        return [a for a in self._aborted if start_offset <= a.last_offset < end_offset]

    def aborted_between(self, start_offset: int, end_offset: int) -> list[AbortedTxn]:
        """Aborted transactions a fetch of [start_offset, end_offset) must tell the consumer
        about (Kafka's collectAbortedTransactions): those ending at or after `start_offset`
        and starting before `end_offset`."""
        i = bisect_left([a.last_offset for a in self._aborted], start_offset)
        return [a for a in self._aborted[i:] if a.first_offset < end_offset]

    def forget_below(self, offset: int) -> None:
        """Retention moved the log start: aborted transactions wholly below it go."""
        if self._aborted and self._aborted[0].last_offset < offset:
            self._aborted = [a for a in self._aborted if a.last_offset >= offset]

    def rebuild(self, batches: Iterable[tuple[BatchHeader, bytes]], high_watermark: int) -> None:
        """Fold the local log's batches, in order: (header, batch bytes), the bytes needed
        only for control batches (the marker's type is in its record key)."""
        for header, data in batches:
            if not header.is_transactional:
                continue
            if header.is_control:
                kind = marker_type(data, header)
                if kind == ABORT:
                    self._rebuilt_aborts.add(header.base_offset)
                if kind is not None:
                    self.on_marker(header.producer_id, header.base_offset, kind == COMMIT, header.base_offset)
            else:
                self.on_data(header.producer_id, header.base_offset)
        self.last_stable_offset(high_watermark)


def trim_to(data: bytes | memoryview, end_offset: int) -> bytes | memoryview | None:
    """The whole batches of `data` that start below `end_offset` (a read_committed read from
    the bucket, which answers whole chunks, stops at the last stable offset)."""
    end = 0
    for header in iter_headers(data, check_crc=False):
        if header.base_offset >= end_offset:
            break
        end = header.position + header.size_bytes
    if end == 0:
        return None
    return data if end == len(data) else data[:end]
