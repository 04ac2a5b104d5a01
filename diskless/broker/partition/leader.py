"""`PartitionLeader`: the one owner of a partition this broker leads.

It holds the partition's whole state: the local log (hot tier), the remote log (the bucket's
catalogue and reads), the leader epoch, the high watermark, the log start offset, the
idempotent producers' state and the fetches waiting for an append. Nothing else writes any
of it; handlers, the uploader and the retention loop ask the leader.

- Every batch appended carries the partition leader epoch (written into its header, outside
  the CRC, as Kafka does), and every metadata write about the partition is fenced on it.
- The high watermark is its own value: the offset up to which consumers may read, the end of
  the durable log. For tiered topics (remote.storage.enable=true) with write-ahead objects on,
  a batch is durable once the write-ahead writer committed it to the bucket (wal/writer.py);
  the high watermark moves over the durable prefix of the appended batches, and an acks=all
  produce waits for it (`until_durable`). Otherwise it follows the log end at each append.
- The log start offset is the first offset served: the bucket's first segment, or the local
  log's if the bucket holds nothing, raised by DeleteRecords and by retention.

Only the event-loop task calls a leader. The log underneath does synchronous file I/O, which
lands in the page cache (appends) or is an fsync on roll (bounded by segment size).
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from hot_tier import AppendInfo, FileSlice, Log, LogClosed, LogConfig, OffsetOutOfRange, SegmentInfo
from hot_tier.records.header import BatchHeader, iter_headers
from hot_tier.scan import scan_batches
from kio.schema.errors import ErrorCode
from metadata import MetadataStore

from ..compression import PRODUCER, apply_compression_type
from ..compaction.keys import check_keys
from ..errors import NotLeaderOrFollower, InvalidProducerEpoch, InvalidRecord, OutOfOrderSequence, RecordTooLarge, TransactionsUnsupported, UnknownProducerId
from ..errors import TransactionCoordinatorFenced, TxnVerificationFailed
from ..producer_state import Duplicate
from ..producer_state import InvalidProducerEpoch as EpochDecision
from ..producer_state import OutOfOrderSequence as SequenceDecision
from ..producer_state import UnknownProducer
from ..producer_state import ProducerStateManager, sequence_after
from ..tiering import policy
from ..txn.log_scan import transactional_batches
from hot_tier.records.transactions import PartitionTxns, encode_marker, encode_txn_index, trim_to
from ..tiering.remote_log import RemoteLog
from ..wal.recovery import recover_tail
from ..wal.writer import WalWriter
from .batch_checks import check_produced_batch
from .epoch_checkpoint import last_leader_epoch, record_leader_epoch
from .epoch_history import epoch_starts
from .producer_snapshots import drop_snapshots_above, load_producer_state, published_state, snapshot_after, to_published
from .producer_snapshots import write_producer_snapshot
from .rules import PartitionRules
from .timestamps import check_timestamps

logger = logging.getLogger(__name__)


class UploadSignals(Protocol):
    """What the leader tells the uploader, and asks it before accepting bytes."""

    def check_disk(self) -> None:
        """Raise LocalDiskFull if too much waits for the bucket."""
        ...

    def rolled(self) -> None:
        """A segment rolled: there is something to upload."""
        ...

    def wake(self) -> None:
        """Something changed (DeleteRecords, configs): run a retention pass soon."""
        ...


class PartitionLeader:
    def __init__(
        self,
        topic: str,
        topic_id: uuid.UUID,
        index: int,
        log: Log,
        rules: PartitionRules,
        remote: RemoteLog,
        store: MetadataStore,
        uploads: UploadSignals,
        wal: WalWriter | None,
        may_write: Callable[[], bool] = lambda: True,
        *,
        leader_epoch: int,
        log_start_offset: int,
        high_watermark: int,
        producer_id_expiration_ms: int,
        published: ProducerStateManager | None = None,
    ) -> None:
        self.topic = topic
        self.topic_id = topic_id
        self.index = index
        self.leader_epoch = leader_epoch
        self.remote = remote
        self._log = log
        self._rules = rules
        self._store = store
        self._uploads = uploads
        self._wal = wal
        self._may_write = may_write  # false once this broker's session may have expired (cluster/membership.py)
        self._deleted_below = log_start_offset  # DeleteRecords and remote retention: nothing below is served
        self.high_watermark = min(high_watermark, log.log_end_offset)
        # Where this leadership began, as Kafka's leader epoch cache says it (the log end when it
        # took the partition: a kept tail of the last leadership here is that one's, not this
        # one's), and, read once when first asked (OffsetForLeaderEpoch), where the earlier ones did.
        self.epoch_start_offset = log.log_end_offset
        self.serving_since_ms = 0  # when it began to serve (set by the registry once open)
        self._epoch_starts: list[tuple[int, int]] | None = None
        # Batches appended, not yet durable: (their end offset, the writer's future), in order.
        self._in_flight: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._durable_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._wal_failure: BaseException | None = None
        self.producers: ProducerStateManager
        self.producers, self._snapshot_base, open_below = load_producer_state(log, producer_id_expiration_ms, published)
        self.txns = PartitionTxns()  # open transactions, last stable offset, aborted ones (txn/)
        self.txns.seed_ongoing(open_below)  # before the fold: its markers may end them
        self.txns.rebuild(transactional_batches(log), self.high_watermark)
        self._saw_whole_log = log.log_start_offset <= log_start_offset  # known_transaction_free
        self._appended: asyncio.Future[None] | None = None
        self._tail_uploaded: tuple[int, asyncio.Future[None]] | None = None  # hand_over_tail's wait
        # Files written before this leadership's first write, not at open (_first_write).
        self.before_first_write: list[Callable[[], None]] = []
        self.maybe_snapshot_producers()

    @classmethod
    async def open(
        cls, topic: str, topic_id: uuid.UUID, index: int, log: Log, rules: PartitionRules, remote: RemoteLog,
        store: MetadataStore, uploads: UploadSignals, wal: WalWriter | None, may_write: Callable[[], bool], *,
        leader_epoch: int, log_start_offset: int | None, producer_id_expiration_ms: int, now_ms: int, stored: bool = True,
    ) -> PartitionLeader:
        """Take up the partition at `leader_epoch`: its bucket catalogue settled, and a local log
        that continues where the durable log ends.

        The local tail above the bucket's segments is trusted only if this broker wrote it
        last: if its last batch carries an older leader epoch than the last durable batch,
        another leader has written since, and the local tail may diverge from the durable
        log (Kafka truncates to the leader epoch's end offset for the same reason); it is cut
        back to the segments and rebuilt from the write-ahead objects.

        `stored=False`: the store holds no catalogued segment, write-ahead batch or aborted
        transaction of the partition (the registry asked once for the whole topic, or just
        made the partition), so none is read back: a topic of 10,000 partitions would wait on
        40,000 reads that all answer nothing."""
        wal = wal if rules.tiered else None
        if stored:
            compaction = rules.compaction
            await remote.load(leader_epoch, deleting_data_at_ms=None if compaction is None else now_ms + compaction.file_delete_delay_ms)
        # Epochs are handed out one per leadership: a gap since the one this broker last took
        # means another broker may have led (and been sent this broker's unacknowledged tail).
        last_here = last_leader_epoch(log.dir)
        led_since = last_here is None or leader_epoch > last_here + 1
        kept = [log.log_end_offset]  # where the local log was cut, at the lowest
        if wal is not None and led_since:
            kept.append(_drop_copies_another_leader_replaced(log, remote, last_here, topic, index))
        if wal is not None and log.log_end_offset > remote.end_offset:
            await _drop_a_stale_tail(log, store, remote, topic, index, led_since, stored)
        kept.append(log.log_end_offset)
        if remote.end_offset > log.log_end_offset:
            logger.warning(
                "%s-%d: local log ends at %d but the bucket holds up to %d; continuing from the bucket",
                topic, index, log.log_end_offset, remote.end_offset,
            )  # fmt: skip
            log.truncate_fully_and_start_at(remote.end_offset)
        high_watermark = log.log_end_offset
        if wal is not None:
            high_watermark = await recover_tail(
                log, store, remote.storage.bucket, topic, index, remote.end_offset, now_ms, on_truncate=kept.append, stored=stored
            )
            # Below the log start (retention, DeleteRecords, local copies gone once uploaded)
            # nothing waits to become durable: a log that retention emptied, whose bucket holds
            # no segment any more, starts its high watermark there, not at 0.
            high_watermark = max(high_watermark, min(log.log_end_offset, max(log_start_offset or 0, log.log_start_offset)))
        # Producer snapshots above the cut describe batches that are gone: the tail rebuilt over
        # them may hold other batches at those offsets (another leader's), and a snapshot kept
        # there would hide them from the producer state (their sequences unknown: the
        # producer's next batch is refused OUT_OF_ORDER_SEQUENCE, and it resends).
        if min(kept) < log.log_end_offset:  # else load_producer_state drops those above the log's end
            drop_snapshots_above(log.dir, min(kept))
        published = None
        if 0 < remote.end_offset <= log.segments[0].base_offset:  # no local history below the bucket's end
            published = await _published_producer_state(store, topic, index, producer_id_expiration_ms)
        leader = cls(
            topic, topic_id, index, log, rules, remote, store, uploads, wal, may_write,
            leader_epoch=leader_epoch, log_start_offset=log_start_offset or 0, high_watermark=high_watermark,
            producer_id_expiration_ms=producer_id_expiration_ms, published=published,
        )  # fmt: skip
        leader._record_epoch_at_first_write()
        leader._resubmit_tail()
        if stored:
            aborted = await store.list_aborted_transactions(topic, index)
            leader.txns.merge_aborted(aborted, local=(log.log_start_offset, log.log_end_offset))
        try:
            await leader.record_aborted_transactions()
        except Exception as exc:  # kept in memory: the next segment commit writes them
            logger.warning("%s-%d: recording aborted transactions failed: %s", topic, index, exc)
        return leader

    # --- state others read ------------------------------------------------------------------

    async def epoch_starts(self) -> list[tuple[int, int]]:
        """(leader epoch, start offset) of every leadership known, up to this one."""
        if self._epoch_starts is None:
            current = (self.leader_epoch, self.epoch_start_offset)
            self._epoch_starts = await epoch_starts(self.remote.storage.bucket, self.topic, self.index, self.topic_id, self._log.dir, current)
        return self._epoch_starts

    @property
    def rules(self) -> PartitionRules:
        return self._rules

    @property
    def tiered(self) -> bool:
        return self._rules.tiered

    @property
    def readable_elsewhere(self) -> bool:
        """Every acknowledged batch is in the bucket (tiered, with write-ahead objects), so a
        broker that does not lead the partition can serve it (replica_reads.py)."""
        return self._rules.tiered and self._wal is not None

    @property
    def known_transaction_free(self) -> bool:
        """No batch of the partition is transactional, as far as this leader can tell: it has
        seen every batch (its local log held the whole log when it opened, or the partition was
        made here) and none was. Transactions committed long ago, only in the bucket, leave no
        trace in the store, so a leader that opened above them cannot vouch for their absence."""
        return self._saw_whole_log and self.txns.transaction_free

    @property
    def closed(self) -> bool:
        return self._log.closed

    @property
    def log_start_offset(self) -> int:
        """The first offset served, from the bucket or the local log (Kafka's logStartOffset)."""
        first = self.remote.start_offset
        return max(self._log.log_start_offset if first is None else first, self._deleted_below)

    @property
    def local_log_start_offset(self) -> int:
        return self._log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log.log_end_offset

    @property
    def local_segments(self) -> tuple[SegmentInfo, ...]:
        return self._log.segments

    @property
    def log_config(self) -> LogConfig:
        return self._log.config

    def segments_to_upload(self) -> list[SegmentInfo]:
        if self._log.active_base_offset <= self.remote.end_offset:
            return []  # nothing rolled above the bucket: no SegmentInfo built (uploader passes run over every partition)
        return policy.segments_to_upload(self._log.segments, self.remote.end_offset)

    def segments_ready_to_upload(self) -> list[SegmentInfo]:
        """The rolled segments the uploader may take now: those wholly below the high
        watermark. A segment can roll before its last batches reach a write-ahead object
        (acks=1 is answered at the local append); uploaded then, it would go without the
        producer state at its end (only durable batches are published, `producer_state_after`),
        and a leader whose log begins at the bucket's end would not know its producers."""
        return [s for s in self.segments_to_upload() if s.next_offset <= self.high_watermark]

    # --- produce ----------------------------------------------------------------------------

    def append(self, records: bytes, now_ms: int, verify: Callable[[int, int, str, int], object] | None = None) -> AppendInfo:
        """Validate and append the one batch of a produce request; wake waiting fetches.

        A retried batch of an idempotent producer is not appended again: the answer is the
        offsets it got the first time. Raises CorruptBatch, UnsupportedCompression, InvalidRecord,
        InvalidTimestamp, RecordTooLarge, DecompressedTooLarge, OutOfOrderSequence,
        InvalidProducerEpoch, UnknownProducerId or LocalDiskFull; nothing is written then.
        """
        if not self._may_write():
            raise NotLeaderOrFollower(self.topic, self.index)
        rules = self._rules
        wal = self._wal if rules.tiered else None
        if rules.tiered:
            self._uploads.check_disk()
        if wal is not None:
            if self._wal_failure is not None:
                raise self._wal_failure
            wal.check_room()
        headers = list(iter_headers(records, check_crc=False))
        if len(headers) != 1:
            raise InvalidRecord("produce requests v3+ carry exactly one record batch per partition")
        header = headers[0]
        check_produced_batch(header)
        if header.size_bytes > rules.max_message_bytes:
            raise RecordTooLarge(header.size_bytes, rules.max_message_bytes)
        if header.is_transactional:
            self._check_transactional(header, verify)
        if not rules.log_append_time:
            check_timestamps(records, header, now_ms, *rules.timestamp_bounds)
        if rules.compaction is not None:  # only compacted topics decode records on produce
            check_keys(records, header, self.topic, self.index)
        if header.has_producer_id:
            decision = self.producers.check(
                header.producer_id, header.producer_epoch, header.base_sequence, header.last_sequence, now_ms,
                partition_empty=self._log.log_end_offset == 0,
            )  # fmt: skip
            if isinstance(decision, Duplicate):
                # On LogAppendTime topics the retained timestamp is the first append's time.
                log_append_time_ms = decision.timestamp_ms if rules.log_append_time else -1
                return AppendInfo(
                    decision.first_offset, decision.last_offset, decision.timestamp_ms, log_append_time_ms, self.log_start_offset, 0
                )
            if isinstance(decision, SequenceDecision):
                last = decision.current_last_sequence
                raise OutOfOrderSequence(header.producer_id, header.producer_epoch, header.base_sequence, last, sequence_after(last))
            if isinstance(decision, EpochDecision):
                raise InvalidProducerEpoch(header.producer_id, header.producer_epoch, decision.current_epoch)
            if isinstance(decision, UnknownProducer):
                raise UnknownProducerId(header.producer_id, header.producer_epoch, header.base_sequence)
        if rules.compression_type != PRODUCER:  # after the duplicate check: a retry is not rewritten
            records = apply_compression_type(records, rules.compression_type)
            if len(records) > rules.max_message_bytes:  # recompression may have grown it
                raise RecordTooLarge(len(records), rules.max_message_bytes)
        if self.before_first_write:
            self._first_write()
        active_before = self._log.active_base_offset
        appended = bytearray(records)  # offsets, epoch (and LogAppendTime) are written into it
        info = self._log.append(appended, now_ms, log_append_time=rules.log_append_time, leader_epoch=self.leader_epoch)
        self._quietly(self._snapshot_at_roll)
        if header.has_producer_id:
            self.producers.record(
                header.producer_id, header.producer_epoch, header.base_sequence, header.last_sequence,
                info.first_offset, info.last_offset, info.max_timestamp, header.is_transactional,
            )  # fmt: skip
        self.producers.update_map_end_offset(self._log.log_end_offset)
        if header.is_transactional:
            self.txns.on_data(header.producer_id, info.first_offset)
        self._quietly(self._snapshot_at_roll)
        self._quietly(self.maybe_snapshot_producers)
        if wal is not None:
            self._submit(wal, info.first_offset, info.last_offset, appended)
        else:
            self._advance_high_watermark(self._log.log_end_offset)
        if rules.tiered and self._log.active_base_offset != active_before:
            self._uploads.rolled()
        return info

    def _record_epoch_at_first_write(self) -> None:
        """The leader-epoch checkpoint notes this leadership before its first write (a batch,
        a marker, the tail sent to the bucket again), not at open: a leadership that writes
        nothing leaves nothing another leader could have written again, and a broker opening
        thousands of partitions makes no file for each."""
        dir, epoch, start = self._log.dir, self.leader_epoch, self._log.log_end_offset
        self.before_first_write.append(lambda: record_leader_epoch(dir, epoch, start))

    def _first_write(self) -> None:
        """The files a leadership writes before its first write (its leader-epoch checkpoint;
        a new partition's directory topic id, registry.py): until then they guard nothing."""
        while self.before_first_write:
            self.before_first_write.pop(0)()

    # --- transactions (txn/) ------------------------------------------------------------------

    def _check_transactional(self, header: BatchHeader, verify: Callable[[int, int, str, int], object] | None) -> None:
        """A client's transactional batch (never a control batch: batch_checks.py): KIP-890
        part 1, the first batch of a producer's transaction here only once the coordinator
        says the partition was added to it (`verify` answers an error code, NONE when it was)."""
        if self.txns.is_ongoing(header.producer_id):
            return
        if verify is None:
            raise TransactionsUnsupported()
        code = verify(header.producer_id, header.producer_epoch, self.topic, self.index)
        if code:
            raise TxnVerificationFailed(self.topic, self.index, header.producer_id, code)

    def append_marker(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, now_ms: int) -> int:
        """Append a commit or abort marker for the producer's transaction; returns its offset.
        The transaction is stable for read_committed consumers once the marker is durable
        (`until_durable(offset + 1)`), which is when the coordinator may count it written."""
        if not self._may_write():
            raise NotLeaderOrFollower(self.topic, self.index)
        # As Kafka's appendEndTxnMarker: a late marker of a fenced epoch, or from a coordinator
        # that lost its slot, must not end the transaction open now.
        refused = self.producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
        if refused is ErrorCode.invalid_producer_epoch:
            raise InvalidProducerEpoch(producer_id, producer_epoch, self.producers.last_entry(producer_id).producer_epoch)
        if refused is ErrorCode.transaction_coordinator_fenced:
            raise TransactionCoordinatorFenced(producer_id, coordinator_epoch, self.producers.last_entry(producer_id).coordinator_epoch)
        wal = self._wal if self._rules.tiered else None
        if wal is not None and self._wal_failure is not None:
            raise self._wal_failure
        if self.before_first_write:
            self._first_write()
        active_before = self._log.active_base_offset
        appended = bytearray(encode_marker(producer_id, producer_epoch, commit, coordinator_epoch, now_ms))
        info = self._log.append(appended, now_ms, log_append_time=self._rules.log_append_time, leader_epoch=self.leader_epoch)
        self._quietly(self._snapshot_at_roll)
        self.producers.record_marker(producer_id, producer_epoch, info.last_offset, now_ms, coordinator_epoch)
        self._quietly(self._snapshot_at_roll)
        self.txns.on_marker(producer_id, info.first_offset, commit, self.log_start_offset)
        if wal is not None:
            self._submit(wal, info.first_offset, info.last_offset, appended)
        else:
            self._advance_high_watermark(self._log.log_end_offset)
        if self._rules.tiered and self._log.active_base_offset != active_before:
            self._uploads.rolled()
        return info.first_offset

    async def record_aborted_transactions(self, end: int | None = None) -> None:
        """Aborted transactions whose marker is below `end` (default: in the bucket's segments),
        into the store (hot_tier/records/transactions.py: rebuilt from the local log, which
        keeps only the tail). The uploader records a segment's before it commits the segment: a
        leader whose log begins at the bucket's end learns them only from the store."""
        end = self.remote.end_offset if end is None else end
        entries = self.txns.unrecorded(end)
        if entries:
            await self._store.put_aborted_transactions(
                self.topic, self.index, entries, delete_below=self.log_start_offset, leader_epoch=self.leader_epoch
            )
        self.txns.recorded(end)

    @property
    def last_stable_offset(self) -> int:
        """The first offset a read_committed consumer may not read yet (<= the high watermark)."""
        return self.txns.last_stable_offset(self.high_watermark)

    @property
    def cleanable_end_offset(self) -> int:
        """Where the log cleaner stops: the last stable offset, and on a tiered partition the
        bucket's end too, so a segment is compacted only once uploaded, never while the
        uploader reads it (its bucket copy stays as written: history for a new leader)."""
        last_stable = self.last_stable_offset
        return min(last_stable, self.remote.end_offset) if self.tiered else last_stable

    def maybe_snapshot_producers(self) -> bool:
        """Write a producer-state snapshot if the log rolled since the last one: before tiering
        can drop a rolled segment's local copy, the snapshot covers its batches."""
        if self._log.recovery_point <= self._snapshot_base:  # cheap check: a roll moves it
            return False
        active_base = self._log.active_base_offset
        if active_base <= self._snapshot_base:
            return False
        write_producer_snapshot(self._log.dir, self.producers, keep_above=self.remote.end_offset)
        self._snapshot_base = active_base
        return True

    def _snapshot_at_roll(self) -> None:
        """Called around each append: when the producer state stands exactly at a segment
        boundary the log just rolled over (before the batch that opened the new segment is
        recorded, or after one that filled the old), snapshot it there, as Kafka does at
        each roll. The uploader then finds the state at the segment's end
        (`producer_state_after`) for the bucket and the store."""
        active_base = self._log.active_base_offset
        if active_base > self._snapshot_base and self.producers.map_end_offset == active_base:
            write_producer_snapshot(self._log.dir, self.producers, keep_above=self.remote.end_offset)
            self._snapshot_base = active_base

    def _quietly(self, snapshot: Callable[[], object]) -> None:
        """A snapshot step of an append: a failed write (a full or failing disk) is logged and
        tried again at the next append or roll (`maybe_snapshot_producers`: the log rolled
        since `_snapshot_base`), whose snapshot the uploader then takes for the segment's end.
        Raised out of the append, between the local log and the write-ahead log, it left the
        batch in the log unsubmitted and unrecorded: the high watermark passed it once later
        batches were durable, and the producer's retry was appended again."""
        try:
            snapshot()
        except OSError as exc:
            logger.warning("%s-%d: producer-state snapshot at %d not written (%s); will retry", self.topic, self.index, self.producers.map_end_offset, exc)

    def producer_state_after(self, segment_end: int) -> ProducerStateManager | None:
        """The producer state at a segment's end (the first local snapshot after it that holds
        only durable batches), or None: uploaded beside the segment and published to the store."""
        return snapshot_after(self._log.dir, segment_end, self.high_watermark, self.producers.producer_id_expiration_ms)

    def txn_index(self, base_offset: int, next_offset: int) -> bytes:
        """The `.txnindex` of the segment [base_offset, next_offset): its abort markers' transactions."""
        return encode_txn_index(self.txns.aborted_with_markers_in(base_offset, next_offset))

    async def publish_producer_state(self, state: ProducerStateManager | None) -> None:
        """Before a segment's commit: the producer state at its end (`producer_state_after`)
        goes to the store. A leader on another broker, whose local log will begin where the
        bucket ends, starts from it; without it a retry of a batch below would be taken as
        new (load_producer_state). A failure raises: the upload is retried rather than the
        segment committed without it."""
        if state is None:
            return
        await self._store.put_producer_snapshot(self.topic, self.index, to_published(state), leader_epoch=self.leader_epoch)

    # --- durability ---------------------------------------------------------------------------

    def _submit(self, wal: WalWriter, base_offset: int, last_offset: int, data: bytes | bytearray) -> None:
        done = wal.submit(self.topic, self.index, self.leader_epoch, base_offset, last_offset, bytes(data), topic_id=self.topic_id)
        self._in_flight.append((last_offset + 1, done))
        done.add_done_callback(self._on_durable)

    def _on_durable(self, _: asyncio.Future[None]) -> None:
        """A batch became durable (or failed): move the high watermark over the durable prefix."""
        end = None
        while self._in_flight and self._in_flight[0][1].done():
            batch_end, done = self._in_flight.popleft()
            failure = done.exception()
            if failure is not None:
                # Only a lost leadership or a shutdown ends a commit without success: nothing
                # above stays acknowledgeable through this leader.
                if self._wal_failure is None:
                    logger.error("%s-%d: batch ending at %d cannot become durable: %s", self.topic, self.index, batch_end, failure)
                self._wal_failure = failure
                self._fail_waiters(failure)
                self._in_flight.clear()
                break
            end = batch_end
        if end is not None:
            self._advance_high_watermark(end)

    def _advance_high_watermark(self, end: int) -> None:
        if end <= self.high_watermark:
            return
        if self._rules.tiered and self.high_watermark < self._log.active_base_offset and self.remote.end_offset < self._log.active_base_offset:
            self._uploads.wake()  # a rolled segment may have become durable: segments_ready_to_upload
        self.high_watermark = end
        if self._durable_waiters:
            ready = [w for w in self._durable_waiters if w[0] <= end]
            self._durable_waiters = [w for w in self._durable_waiters if w[0] > end]
            for _, waiter in ready:
                if not waiter.done():
                    waiter.set_result(None)
        self.notify()

    def _fail_waiters(self, failure: BaseException) -> None:
        for _, waiter in self._durable_waiters:
            if not waiter.done():
                waiter.set_exception(failure)
        self._durable_waiters = []

    async def until_durable(self, end_offset: int) -> None:
        """Return once every offset below `end_offset` is durable (acks=all); raises what made
        that impossible (a fenced epoch, a shutdown)."""
        if end_offset <= self.high_watermark:
            return
        if self._wal_failure is not None:
            raise self._wal_failure
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._durable_waiters.append((end_offset, waiter))
        await waiter

    def _resubmit_tail(self) -> None:
        """At start-up: batches the local log holds above the durable end (acknowledged to
        acks=1 producers before a stop or crash) go to the write-ahead writer again."""
        if self._wal is None or self.high_watermark >= self._log.log_end_offset:
            return
        if self.before_first_write:
            self._first_write()
        offset, count = self.high_watermark, 0
        while offset < self._log.log_end_offset:
            chunk = self._log.read(offset, 8 * 2**20, min_one_batch=True)
            if chunk is None:
                break
            data = chunk.read_bytes()
            for header in iter_headers(data, check_crc=False):
                self._submit(self._wal, header.base_offset, header.last_offset, data[header.position : header.position + header.size_bytes])
                offset = header.next_offset
                count += 1
        logger.info("%s-%d: %d batch(es) above the durable end %d sent to the bucket again", self.topic, self.index, count, self.high_watermark)

    # --- fetch and offsets ------------------------------------------------------------------

    async def read(
        self, offset: int, max_bytes: int, *, min_one_batch: bool, max_offset: int | None = None
    ) -> FileSlice | bytes | memoryview | None:
        """Record bytes from `offset`, never past the high watermark (nor `max_offset`, the
        last stable offset of a read_committed fetch): a FileSlice of the hot tier, bytes from
        the bucket, or None when there is nothing to send."""
        log_start_offset = self.log_start_offset
        # As Kafka: out of range only past the log end; between the high watermark and it
        # (appended, not yet durable) nothing yet, and the fetch waits.
        if not log_start_offset <= offset <= self._log.log_end_offset:
            raise OffsetOutOfRange(offset, log_start_offset, self._log.log_end_offset)
        limit = self.high_watermark if max_offset is None else min(max_offset, self.high_watermark)
        if offset >= limit:
            return None
        if offset < self._log.log_start_offset:
            data = await self.remote.read(offset, max_bytes, min_one_batch=min_one_batch)
            return data if data is None or max_offset is None else trim_to(data, limit)
        return self._log.read(offset, max_bytes, min_one_batch=min_one_batch, max_offset=limit)

    async def offset_for_timestamp(self, timestamp: int, fetchable_below: int | None = None) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record with a timestamp >= `timestamp`, or None.
        The bucket answers only below the local log, whose copies are what fetches read (a
        compacted partition's local copies are cleaned, its bucket copies as written). As
        Kafka's, an answer at or above `fetchable_below` (the high watermark, or the last
        stable offset for read_committed; default the high watermark) is None: a consumer
        seeking there would be answered nothing, or out of range on another leader."""
        found = None
        if self.remote.may_hold_timestamp(timestamp):
            found = await self.remote.offset_for_timestamp(timestamp, self.log_start_offset)
            if found is not None and found[1] >= self._log.log_start_offset:
                found = None
        if found is None:
            local = self._log.offset_for_timestamp(timestamp)
            found = None if local is None else (local.timestamp, local.offset)
        return self._fetchable(found, fetchable_below)

    async def max_timestamp_offset(self, fetchable_below: int | None = None) -> tuple[int, int] | None:
        """(timestamp, offset) of the record with the largest timestamp, or None (the bucket
        answers only below the local log, and only fetchable offsets, as for offset_for_timestamp)."""
        local = self._log.max_timestamp_offset()
        found = None if local is None else (local.timestamp, local.offset)
        remote_max = self.remote.max_timestamp()
        if remote_max is not None and (local is None or remote_max > local.timestamp):
            remote = await self.remote.offset_for_timestamp(remote_max, self.log_start_offset)
            if remote is not None and remote[1] < self._log.log_start_offset:
                found = remote
        return self._fetchable(found, fetchable_below)

    def _fetchable(self, found: tuple[int, int] | None, fetchable_below: int | None) -> tuple[int, int] | None:
        limit = self.high_watermark if fetchable_below is None else min(fetchable_below, self.high_watermark)
        if found is None or not self.log_start_offset <= found[1] < limit:
            return None
        return found

    def notify(self) -> None:
        """Wake every fetch waiting on this partition (the high watermark moved, or a deletion)."""
        if self._appended is not None:
            if not self._appended.done():
                self._appended.set_result(None)
            self._appended = None

    def appended(self) -> asyncio.Future[None]:
        """A future that completes when the high watermark next moves: long-polling fetches wait on it."""
        if self._appended is None:
            self._appended = asyncio.get_running_loop().create_future()
        return self._appended

    # --- changes ----------------------------------------------------------------------------

    def update_rules(self, rules: PartitionRules, log_config: LogConfig) -> None:
        """New topic configs (IncrementalAlterConfigs)."""
        self._rules = rules
        self._log.update_config(log_config)

    async def delete_records(self, offset: int) -> int:
        """DeleteRecords: raise the log start offset to `offset`; returns the new low watermark.

        Local segments below it go now; bucket segments at the next retention pass.
        """
        if offset > self._log.log_start_offset:
            self._log.advance_log_start_offset(offset)
        self._deleted_below = max(self._deleted_below, offset)
        await self._store.set_log_start_offset(self.topic, self.index, self.log_start_offset, leader_epoch=self.leader_epoch)
        self._uploads.wake()
        return self.log_start_offset

    async def maintain(self, now_ms: int) -> None:
        """One pass of time-based rolls, flush.ms, producer expiry and (untiered) local retention."""
        if self._log.maybe_roll(now_ms):
            self.maybe_snapshot_producers()
            if self.tiered:
                self._uploads.rolled()
        self._log.maybe_flush(now_ms)
        self.producers.expire(now_ms)
        self.txns.forget_below(self.log_start_offset)
        before = self.log_start_offset
        deleted = self._log.delete_retention_segments(now_ms)
        if deleted:
            logger.info(
                "retention deleted %d segment(s) of %s-%d; log start offset %d -> %d",
                len(deleted), self.topic, self.index, before, self.log_start_offset,
            )  # fmt: skip
            await self._store.set_log_start_offset(self.topic, self.index, self.log_start_offset, leader_epoch=self.leader_epoch)

    def drop_uploaded_local_copies(self, now_ms: int) -> None:
        """Delete local copies of segments in the bucket, by local.retention.ms / .bytes."""
        local_retention_ms, local_retention_bytes = self._rules.local_retention
        target = policy.local_copies_to_delete(
            self._log.segments, self.remote.end_offset,
            local_retention_ms=local_retention_ms, local_retention_bytes=local_retention_bytes, now_ms=now_ms,
        )  # fmt: skip
        if target and self._log.delete_segments_to(target):
            logger.info("%s-%d: deleted local segments now in the bucket; local log starts at %d", self.topic, self.index, self._log.log_start_offset)

    async def enforce_remote_retention(self, now_ms: int) -> None:
        """retention.ms / retention.bytes over the whole log, and DeleteRecords, in the bucket."""
        await self.remote.collect_replaced(now_ms, self.leader_epoch)
        retention_ms, retention_bytes = self._rules.retention
        count = policy.remote_segments_to_delete(
            self.remote.segments, self._log.segments,
            retention_ms=retention_ms, retention_bytes=retention_bytes, log_start_offset=self._deleted_below, now_ms=now_ms,
        )  # fmt: skip
        if count:
            # The store learns the new log start offset before the segments go: with the bucket
            # emptied, it is all a next leader has to start from (the bucket's end is then 0).
            # A failed write deletes nothing, so the next pass selects the same segments and
            # writes again; a crash after it leaves segments below it, which it hides.
            start = max(self.log_start_offset, self.remote.segments[count - 1].next_offset)
            await self._store.set_log_start_offset(self.topic, self.index, start, leader_epoch=self.leader_epoch)
            self._deleted_below = max(self._deleted_below, start)
            if self._log.log_start_offset < start <= self._log.log_end_offset:
                # Local copies that outlived the bucket's (a compacted topic keeps them) go too,
                # as Kafka's local log never starts below the log start offset: lookups by
                # timestamp there found offsets fetches then answered out of range.
                self._log.advance_log_start_offset(start)
        for _ in range(count):
            segment = await self.remote.delete_oldest(self.leader_epoch)
            logger.info(
                "%s-%d: retention deleted segment %d-%d from the bucket; log start offset is %d",
                self.topic, self.index, segment.base_offset, segment.last_offset, self.log_start_offset,
            )  # fmt: skip

    async def segment_committed(self) -> None:
        """A segment reached the bucket: write-ahead batches inside it are no longer needed.
        Its aborted transactions went to the store before the commit (the uploader); any
        still unrecorded below the bucket's end goes now, before a local copy may go."""
        try:
            await self.record_aborted_transactions()
        except Exception as exc:  # kept in memory: the next commit or the next open writes them
            logger.warning("%s-%d: recording aborted transactions failed: %s", self.topic, self.index, exc)
        if self._tail_uploaded is not None and self.remote.end_offset >= self._tail_uploaded[0]:
            if not self._tail_uploaded[1].done():
                self._tail_uploaded[1].set_result(None)
        if self._wal is not None:
            await self._store.delete_wal_batches_below(self.topic, self.index, self.remote.end_offset, leader_epoch=self.leader_epoch)

    @property
    def unrolled_offsets(self) -> int:
        """Offsets in the active segment: what a new leader would rebuild from write-ahead objects."""
        return self._log.log_end_offset - self._log.active_base_offset

    async def hand_over_tail(self, now_ms: int) -> None:
        """Controlled shutdown, while still serving: roll the active segment and return once
        the bucket holds it. The next leader then rebuilds only what is written after it from
        write-ahead objects, not every batch since the last roll (one ranged GET each)."""
        if not self.tiered or self.closed or self.unrolled_offsets == 0:
            return
        target = self._log.log_end_offset
        self._tail_uploaded = (target, asyncio.get_running_loop().create_future())
        self._log.roll(now_ms)
        self.maybe_snapshot_producers()  # at the roll: the state the next leader starts from
        self._uploads.rolled()
        await self._tail_uploaded[1]

    # --- compaction (compaction/cleaner.py) ---------------------------------------------------

    def producer_last_offsets(self) -> dict[int, int]:
        """Each active producer's last offset: the cleaner keeps that batch, if only empty."""
        entries = (self.producers.last_entry(pid) for pid in self.producers.producer_ids())
        return {e.producer_id: e.last_offset for e in entries if e is not None}

    def aborted_transactions(self, start_offset: int, end_offset: int) -> list[tuple[int, int, int]]:
        """(producer id, first offset, abort marker offset) of aborted transactions in the range."""
        return [(a.producer_id, a.first_offset, a.last_offset) for a in self.txns.aborted_between(start_offset, end_offset)]

    @property
    def aborts_removable_below(self) -> int:
        """Where the cleaner may remove abort markers: on a tiered partition, only those whose
        aborted transaction the store holds (a leader elsewhere reads the bucket's copy, marker
        and data, with the store's list until the bucket is rewritten too)."""
        return self.txns.recorded_end if self.tiered else 2**63

    def replace_cleaned_segment(self, base_offset: int, size_bytes: int, removed_aborts: Sequence[int] = ()) -> bool:
        """Swap in the cleaner's copy of a rolled segment (hot_tier Log.replace_segment); the
        aborted transactions whose markers it no longer holds go from fetches' lists in the
        same step."""
        if self._log.replace_segment(base_offset, size_bytes) is None:
            return False
        self.txns.forget_aborted(removed_aborts)
        return True

    def forget_aborted(self, marker_offsets: Sequence[int]) -> None:
        """A bucket rewrite swapped in a copy without these abort markers (compaction/bucket.py)."""
        self.txns.forget_aborted(marker_offsets)

    def close(self) -> None:
        """Stop leading: the log's files close, waiting fetches wake (and find it gone)."""
        self._log.close()
        self._fail_waiters(LogClosed(self._log.dir))
        self.notify()

    @property
    def dir(self) -> Path:
        """The local log's directory (deleting a topic removes it)."""
        return self._log.dir


def _drop_copies_another_leader_replaced(log: Log, remote: RemoteLog, last_here: int | None, topic: str, index: int) -> int:
    """Another broker may have led since this one last did (at `last_here`): the bucket's
    segments uploaded at a later epoch hold, from their base on, what that leader wrote, where
    the local log may hold this broker's own batches that never became durable (acks=1 while
    the bucket was slow), whose producers sent them again to that leader. `_drop_a_stale_tail`
    cuts only above the bucket's end; below it, the local copies from the first such segment
    on go (they are read from the bucket), else they would be served in place of the
    acknowledged records at their offsets. Returns where the local log was cut (its end if not)."""
    bases = [s.base_offset for s in remote.segments if last_here is None or s.leader_epoch > last_here]
    if not bases or min(bases) >= log.log_end_offset:
        return log.log_end_offset
    cut = min(bases)
    logger.warning("%s-%d: another leader uploaded the bucket's segments from offset %d on; the local copies from there are "
                   "dropped (read from the bucket)", topic, index, cut)  # fmt: skip
    if cut > log.log_start_offset:
        log.truncate_to(cut)
    else:
        log.truncate_fully_and_start_at(remote.end_offset)
    return cut


async def _drop_a_stale_tail(
    log: Log, store: MetadataStore, remote: RemoteLog, topic: str, index: int, led_since: bool, stored: bool
) -> None:
    """Cut the local log back where it diverges from the durable log: at the first durable
    batch of a newer leader epoch than the local tail's (another leader wrote from there on;
    what this broker holds from that offset on may differ). Kafka truncates a former leader
    to its leader epoch's end offset for the same reason; the cut part is rebuilt from the
    write-ahead objects.

    If another broker may have led since this one did (`led_since`), the tail above the
    durable end goes too, even when nothing newer became durable: it was never acknowledged
    to acks=all producers, and they sent it again to that leader, which may have appended it
    (under a bumped producer epoch, where sequences cannot tell it is the same records);
    sending it to the bucket now would duplicate it once that leader's copy lands. Unless the
    store holds nothing of the partition at all: then the local log is its only copy, written
    while the topic was not tiered (remote.storage.enable=false, or a compacted topic before
    those were tiered) and acknowledged at the local append; it is kept and sent to the
    bucket."""
    local_epoch = _last_batch_epoch(log)
    if local_epoch is None:
        return
    durable = await store.list_wal_batches(topic, index, remote.end_offset) if stored else []
    newer = next((b for b in durable if b.leader_epoch > local_epoch), None)
    if newer is not None:
        diverges_at = max(newer.base_offset, remote.end_offset)
    elif max((s.leader_epoch for s in remote.segments[-1:]), default=-1) > local_epoch:
        diverges_at = remote.end_offset
    elif led_since and (durable or remote.segments):
        diverges_at = max(remote.end_offset, durable[-1].next_offset if durable else 0)
    else:
        if led_since:
            logger.info("%s-%d: the store holds none of it; the local log (offsets %d-%d) is its only copy, kept and sent to the bucket",
                        topic, index, log.log_start_offset, log.log_end_offset - 1)  # fmt: skip
        return
    if diverges_at >= log.log_end_offset:
        return
    logger.warning(
        "%s-%d: the local tail from offset %d (leader epoch %d) may differ from the durable log (another leader may have "
        "written since); rebuilding it from the bucket",
        topic, index, diverges_at, local_epoch,
    )  # fmt: skip
    if diverges_at >= log.log_start_offset:
        log.truncate_to(diverges_at)
    else:
        log.truncate_fully_and_start_at(diverges_at)


async def _published_producer_state(store: MetadataStore, topic: str, index: int, producer_id_expiration_ms: int) -> ProducerStateManager | None:
    # A failed read fails the open (retried as any of its store reads): opened without the
    # state, the leader would take a retry of a durable batch below its log as new.
    snapshot = await store.get_producer_snapshot(topic, index)
    return None if snapshot is None else published_state(snapshot, producer_id_expiration_ms)


def _last_batch_epoch(log: Log) -> int | None:
    """The partition leader epoch of the local log's last batch (None: the log is empty)."""
    for segment in reversed(log.segments):
        if segment.size_bytes:
            fd = os.open(segment.log_path, os.O_RDONLY)
            try:
                last = None
                for last in scan_batches(fd, 0, segment.size_bytes):
                    pass
            finally:
                os.close(fd)
            return None if last is None else last.partition_leader_epoch
    return None
