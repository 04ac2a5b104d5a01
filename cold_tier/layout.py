"""Bucket layout: the object keys of tiered segments. This is the contract Spark reads.

Pure: builds and parses keys, resolves a catalogue; no I/O. Keys are relative to the store's
root (an `s3://bucket/prefix` URL's prefix is applied by the store, not here).

Objects of one segment upload, for partition P of topic T:

    T/P/BBBBBBBBBBBBBBBBBBBB-U.log         the segment's record batches, byte for byte
    T/P/BBBBBBBBBBBBBBBBBBBB-U.index       its offset index (8-byte entries, as on local disk)
    T/P/BBBBBBBBBBBBBBBBBBBB-U.timeindex   its time index (12-byte entries, as on local disk)
    T/P/BBBBBBBBBBBBBBBBBBBB-U.txnindex    its transaction index: the transactions whose abort
                                           marker it holds (Kafka's 34-byte entries, layout in
                                           hot_tier/records/transactions.py; empty when none)
    T/P/BBBBBBBBBBBBBBBBBBBB-U.snapshot    the producer state at the segment's end or a little
                                           after (each producer's open transaction among it;
                                           layout in diskless/broker/producer_state.py), when
                                           the broker had one; as Kafka's tiered storage keeps
    T/P/commits/BBBBBBBBBBBBBBBBBBBB-LLLLLLLLLLLLLLLLLLLL-F-M-S-E-U.commit

and, apart from uploads, the topic's id (text; written when the topic is made, after the
objects of an older topic of its name were deleted: readers of write-ahead objects, whose
entries carry topic ids, leave out the older topic's batches):

    T/topic-id

and one empty object per leadership that may have fenced another leader:

    T/P/epochs/EEEEEEEEEE-OOOOOOOOOOOOOOOOOOOO-I.epoch   leader epoch E of the topic whose id
                                           is I (32 hex digits) began at offset O, the
                                           partition's durable end when its leader took it
                                           (10 and 20 digits, zero-padded; Kafka's leader
                                           epoch cache, for readers of write-ahead objects:
                                           spark_reader/wal.py rule 2)

    T  topic name, Kafka's legal characters [A-Za-z0-9._-], 1 to 249 of them, not "." or ".."
    P  partition, decimal, no leading zeros (0, 1, ..., 2147483647)
    B  base offset, 20 decimal digits, zero-padded
    L  last offset (inclusive), 20 decimal digits, zero-padded; L >= B
    F  base timestamp (the first batch's base_timestamp), decimal ms, may be negative (-1 = none)
    M  max timestamp over the segment, decimal ms, may be negative (-1 = none)
    S  size of the .log object in bytes, decimal
    E  leader epoch of the broker that uploaded the segment, decimal, >= 0
    U  upload id, 1 to 64 of [0-9a-z] (writers use 16 random hex digits, `new_upload_id`)

Fields are separated by '-', so a negative timestamp shows as two dashes in a row
(`...-00000000000000000099--1--1-4096-3-9f...`). Numbers are canonical (no '+', no leading
zeros, no "-0"), so each commit has exactly one key and `parse_commit_key` is exact:

    ^([0-9]{20})-([0-9]{20})-(0|-?[1-9][0-9]*)-(0|-?[1-9][0-9]*)-(0|[1-9][0-9]*)-(0|[1-9][0-9]*)-([0-9a-z]{1,64})\\.commit$

Fixed-width offsets make the lexicographic order of keys (S3's LIST order) the base-offset
order, and data keys never clash with the `commits/` directory (they start with a digit).

Protocol (what makes the bucket self-describing):
- Upload: write .log, .index, .timeindex, .txnindex and .snapshot (in any order, each in one
  atomic PUT; segments uploaded before transaction indexes existed have neither), then the
  commit object LAST, empty body, with `if_none_match`. An upload is visible to readers
  exactly when its commit object exists; a crash before that leaves data objects no commit
  names, which are garbage (collect them only after a grace period longer than any upload).
- Read: one LIST of `T/P/commits/` is the partition's whole catalogue (`parse_catalogue`).
  The commit key gives the offset and time range and the .log size; the .index object maps
  an offset to a byte position in the .log with one small ranged GET.
- Delete (retention): delete the commit object first, then the data objects. A reader that
  listed before the delete may find the data gone: it treats `ObjectNotFound` as "the
  segment was deleted by retention".
- Objects are never modified once committed; a re-upload gets a new upload id.
- Rewrite (compaction of a compacted topic): a cleaned copy of consecutive committed segments
  is uploaded as a new upload whose base offset is the first one's and whose last offset is
  the last one's, its commit object last; then the replaced commit objects are deleted, and
  their data objects only after a grace period (readers that listed before finish on them).
  Until the replaced commits are gone a LIST finds both; they share their base offset, so the
  overlap resolution below picks either the copy or the replaced set, each whole.

Overlapping commits (a retried upload of the same range, or a fenced leader racing the new
one) are resolved by `parse_catalogue` deterministically, independent of listing order: the
commit with the highest leader epoch wins; among equal epochs the lowest base offset, then
the lowest upload id. A commit that overlaps any winner in offsets is left out whole. Writers
keep this lossless by starting every new leader's uploads at the bucket's log end offset, so
overlapping commits always share their base offset; the catalogue reports gaps as they are.
"""

from __future__ import annotations

import bisect
import re
import secrets
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from metadata.model import MAX_TOPIC_NAME_LENGTH, SegmentDescriptor, is_legal_topic_name

from .errors import InvalidSegmentKey

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
PRODUCER_SNAPSHOT_SUFFIX = ".snapshot"
COMMIT_SUFFIX = ".commit"
COMMITS_DIRECTORY = "commits"
EPOCHS_DIRECTORY = "epochs"
TOPIC_ID_NAME = "topic-id"
EPOCH_SUFFIX = ".epoch"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, PRODUCER_SNAPSHOT_SUFFIX)

MAX_TOPIC_LENGTH = MAX_TOPIC_NAME_LENGTH
MAX_PARTITION = 2**31 - 1
MAX_OFFSET = 2**63 - 1
MIN_TIMESTAMP = -(2**63)
MAX_TIMESTAMP = 2**63 - 1
MAX_LEADER_EPOCH = 2**31 - 1
OFFSET_DIGITS = 20

_PARTITION = re.compile(r"0|[1-9][0-9]*")
_UPLOAD_ID = re.compile(r"[0-9a-z]{1,64}")
_UNSIGNED = r"0|[1-9][0-9]*"
_SIGNED = r"0|-?[1-9][0-9]*"
_COMMIT_NAME = re.compile(
    rf"([0-9]{{20}})-([0-9]{{20}})-({_SIGNED})-({_SIGNED})-({_UNSIGNED})-({_UNSIGNED})-([0-9a-z]{{1,64}})\.commit"
)
_EPOCH_NAME = re.compile(r"([0-9]{10})-([0-9]{20})-([0-9a-f]{32})\.epoch")
_SEGMENT_OBJECT_NAME = re.compile(r"([0-9]{20})-([0-9a-z]{1,64})(\.log|\.index|\.timeindex|\.txnindex|\.snapshot)")


def new_upload_id() -> str:
    """16 random hex digits: unique per upload, so a retried upload never overwrites a committed one."""
    return secrets.token_hex(8)


def topic_prefix(topic: str) -> str:
    return f"{_checked_topic(topic)}/"


def topic_id_key(topic: str) -> str:
    return f"{topic_prefix(topic)}{TOPIC_ID_NAME}"


def partition_prefix(topic: str, partition: int) -> str:
    return f"{_checked_topic(topic)}/{_checked_partition(partition)}/"


def commits_prefix(topic: str, partition: int) -> str:
    """The prefix to LIST for a partition's catalogue."""
    return f"{partition_prefix(topic, partition)}{COMMITS_DIRECTORY}/"


def epochs_prefix(topic: str, partition: int) -> str:
    """The prefix to LIST for the leader epochs a partition's leaders began (`epoch_key`)."""
    return f"{partition_prefix(topic, partition)}{EPOCHS_DIRECTORY}/"


def epoch_key(topic: str, partition: int, leader_epoch: int, start_offset: int, topic_id: uuid.UUID) -> str:
    if not 0 <= leader_epoch <= MAX_LEADER_EPOCH:
        raise ValueError(f"leader epoch {leader_epoch} out of range")
    return f"{epochs_prefix(topic, partition)}{leader_epoch:010d}-{_offset_field(start_offset)}-{topic_id.hex}{EPOCH_SUFFIX}"


def parse_epoch_key(key: str) -> tuple[int, int, uuid.UUID] | None:
    """(leader epoch, start offset, topic id) of an `epoch_key`, None for any other key."""
    match = _EPOCH_NAME.fullmatch(key.rsplit("/", 1)[-1])
    return None if match is None else (int(match[1]), int(match[2]), uuid.UUID(hex=match[3]))


def segment_object_key(topic: str, partition: int, base_offset: int, upload_id: str, suffix: str) -> str:
    """The key of one data object of an upload; `suffix` is one of SEGMENT_SUFFIXES."""
    if suffix not in SEGMENT_SUFFIXES:
        raise ValueError(f"suffix must be one of {SEGMENT_SUFFIXES}, got {suffix!r}")
    return f"{partition_prefix(topic, partition)}{_offset_field(base_offset)}-{_checked_upload_id(upload_id)}{suffix}"


def log_key(topic: str, partition: int, base_offset: int, upload_id: str) -> str:
    return segment_object_key(topic, partition, base_offset, upload_id, LOG_SUFFIX)


def index_key(topic: str, partition: int, base_offset: int, upload_id: str) -> str:
    return segment_object_key(topic, partition, base_offset, upload_id, INDEX_SUFFIX)


def time_index_key(topic: str, partition: int, base_offset: int, upload_id: str) -> str:
    return segment_object_key(topic, partition, base_offset, upload_id, TIME_INDEX_SUFFIX)


@dataclass(frozen=True, slots=True)
class CommittedSegment(SegmentDescriptor):
    """One committed segment upload, exactly what its commit key says: the descriptor every
    catalogue row also carries, plus the upload id that names its objects."""

    upload_id: str

    def __post_init__(self) -> None:
        _checked_topic(self.topic)
        _checked_partition(self.partition)
        _offset_field(self.base_offset)
        _offset_field(self.last_offset)
        if self.last_offset < self.base_offset:
            raise ValueError(f"last_offset {self.last_offset} is below base_offset {self.base_offset}")
        for name in ("base_timestamp", "max_timestamp"):
            value = getattr(self, name)
            if not _is_int(value) or not MIN_TIMESTAMP <= value <= MAX_TIMESTAMP:
                raise ValueError(f"{name} must be a 64-bit integer, got {value!r}")
        if not _is_int(self.size_bytes) or self.size_bytes < 0:
            raise ValueError(f"size_bytes must be >= 0, got {self.size_bytes!r}")
        if not _is_int(self.leader_epoch) or not 0 <= self.leader_epoch <= MAX_LEADER_EPOCH:
            raise ValueError(f"leader_epoch must be in [0, {MAX_LEADER_EPOCH}], got {self.leader_epoch!r}")
        _checked_upload_id(self.upload_id)

    @property
    def log_key(self) -> str:
        return log_key(self.topic, self.partition, self.base_offset, self.upload_id)

    @property
    def index_key(self) -> str:
        return index_key(self.topic, self.partition, self.base_offset, self.upload_id)

    @property
    def time_index_key(self) -> str:
        return time_index_key(self.topic, self.partition, self.base_offset, self.upload_id)

    @property
    def txn_index_key(self) -> str:
        return segment_object_key(self.topic, self.partition, self.base_offset, self.upload_id, TXN_INDEX_SUFFIX)

    @property
    def producer_snapshot_key(self) -> str:
        return segment_object_key(self.topic, self.partition, self.base_offset, self.upload_id, PRODUCER_SNAPSHOT_SUFFIX)

    @property
    def data_keys(self) -> tuple[str, ...]:
        """Every data object an upload may have written (a delete removes them all)."""
        return tuple(segment_object_key(self.topic, self.partition, self.base_offset, self.upload_id, s) for s in SEGMENT_SUFFIXES)

    @property
    def commit_key(self) -> str:
        return (
            f"{commits_prefix(self.topic, self.partition)}"
            f"{self.base_offset:020d}-{self.last_offset:020d}-{self.base_timestamp}-{self.max_timestamp}"
            f"-{self.size_bytes}-{self.leader_epoch}-{self.upload_id}{COMMIT_SUFFIX}"
        )


@dataclass(frozen=True, slots=True)
class SegmentObjectKey:
    """A parsed data-object key: which upload it belongs to, and which of its objects it is."""

    topic: str
    partition: int
    base_offset: int
    upload_id: str
    suffix: str


def parse_commit_key(key: str) -> CommittedSegment:
    """The segment a commit key describes; `InvalidSegmentKey` if it is not exactly one."""
    topic, partition, directory, name = _split_partition_key(key, 4)
    if directory != COMMITS_DIRECTORY:
        raise InvalidSegmentKey(key, f"commit objects live under '{COMMITS_DIRECTORY}/'")
    match = _COMMIT_NAME.fullmatch(name)
    if match is None:
        raise InvalidSegmentKey(key, f"name {name!r} does not match the commit key grammar")
    base, last, base_ts, max_ts, size, epoch, upload_id = match.groups()
    try:
        return CommittedSegment(
            topic=topic,
            partition=partition,
            base_offset=int(base),
            last_offset=int(last),
            base_timestamp=int(base_ts),
            max_timestamp=int(max_ts),
            size_bytes=int(size),
            leader_epoch=int(epoch),
            upload_id=upload_id,
        )
    except ValueError as error:
        raise InvalidSegmentKey(key, str(error)) from None


def parse_segment_object_key(key: str) -> SegmentObjectKey:
    """Parse a data object's key (for garbage collection of uncommitted uploads)."""
    topic, partition, name = _split_partition_key(key, 3)
    match = _SEGMENT_OBJECT_NAME.fullmatch(name)
    if match is None:
        raise InvalidSegmentKey(key, f"name {name!r} is not <base:020d>-<upload_id>.log|.index|.timeindex|.txnindex|.snapshot")
    base, upload_id, suffix = match.groups()
    if int(base) > MAX_OFFSET:
        raise InvalidSegmentKey(key, f"base offset {base} is beyond 2**63-1")
    return SegmentObjectKey(topic=topic, partition=partition, base_offset=int(base), upload_id=upload_id, suffix=suffix)


def parse_catalogue(keys: Iterable[str]) -> list[CommittedSegment]:
    """The committed segments named by `keys` (one LIST of a partition's `commits/` prefix),
    ordered by (topic, partition, base_offset), overlaps resolved as the module docstring says.

    Keys that do not end in `.commit` are ignored (stray objects); a `.commit` key that does
    not parse raises `InvalidSegmentKey`, because silently skipping it could hide records.
    """
    by_partition: dict[tuple[str, int], list[CommittedSegment]] = {}
    for key in keys:
        if key.endswith(COMMIT_SUFFIX):
            segment = parse_commit_key(key)
            by_partition.setdefault((segment.topic, segment.partition), []).append(segment)
    catalogue: list[CommittedSegment] = []
    for topic_partition in sorted(by_partition):
        catalogue.extend(resolve_overlaps(by_partition[topic_partition]))
    return catalogue


def resolve_overlaps(segments: Iterable[CommittedSegment]) -> list[CommittedSegment]:
    """Non-overlapping winners among one partition's segments, ordered by base offset."""
    ranked = sorted(segments, key=_priority)
    bases: list[int] = []
    winners: list[CommittedSegment] = []  # disjoint, in base-offset order, parallel to `bases`
    for segment in ranked:
        at = bisect.bisect_left(bases, segment.base_offset)
        if at > 0 and winners[at - 1].last_offset >= segment.base_offset:
            continue
        if at < len(winners) and winners[at].base_offset <= segment.last_offset:
            continue
        bases.insert(at, segment.base_offset)
        winners.insert(at, segment)
    return winners


def _priority(segment: CommittedSegment) -> tuple[int, int, str, int, int, int, int]:
    # Everything after upload_id only breaks ties between keys that a correct writer never
    # produces, so that the result still does not depend on listing order.
    return (
        -segment.leader_epoch,
        segment.base_offset,
        segment.upload_id,
        segment.last_offset,
        segment.size_bytes,
        segment.base_timestamp,
        segment.max_timestamp,
    )


def _split_partition_key(key: str, parts: int) -> list:
    """Split `key` into topic, partition and `parts - 2` more components, checking the first two."""
    pieces = key.split("/")
    if len(pieces) != parts:
        raise InvalidSegmentKey(key, f"expected {parts} '/'-separated components, got {len(pieces)}")
    topic, partition = pieces[0], pieces[1]
    if not _is_topic(topic):
        raise InvalidSegmentKey(key, f"{topic!r} is not a legal topic name")
    if not _PARTITION.fullmatch(partition) or int(partition) > MAX_PARTITION:
        raise InvalidSegmentKey(key, f"{partition!r} is not a partition number")
    return [topic, int(partition), *pieces[2:]]


def _is_topic(topic: object) -> bool:
    return is_legal_topic_name(topic)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _checked_topic(topic: str) -> str:
    if not _is_topic(topic):
        raise ValueError(
            f"illegal topic name {topic!r}: 1 to {MAX_TOPIC_LENGTH} of [A-Za-z0-9._-], not '.' or '..'"
        )
    return topic


def _checked_partition(partition: int) -> int:
    if not _is_int(partition) or not 0 <= partition <= MAX_PARTITION:
        raise ValueError(f"partition must be in [0, {MAX_PARTITION}], got {partition!r}")
    return partition


def _offset_field(offset: int) -> str:
    if not _is_int(offset) or not 0 <= offset <= MAX_OFFSET:
        raise ValueError(f"offset must be in [0, 2**63-1], got {offset!r}")
    return f"{offset:0{OFFSET_DIGITS}d}"


def _checked_upload_id(upload_id: str) -> str:
    if not isinstance(upload_id, str) or _UPLOAD_ID.fullmatch(upload_id) is None:
        raise ValueError(f"upload id must be 1 to 64 of [0-9a-z], got {upload_id!r}")
    return upload_id
