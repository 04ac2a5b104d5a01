"""Values the metadata store takes and returns, and the rules every backend enforces.

Everything here is pure: frozen dataclasses and functions that decide, raise a typed error
from `errors`, and never touch a database, a clock or the event loop. A backend is a shell
that reads rows, calls these checks, and writes rows; so a second backend (PostgreSQL) gets
the same semantics by calling the same functions inside its own transactions.
"""

from __future__ import annotations

import enum
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple

from .errors import (
    ConflictingConfigChanges,
    FencedLeaderEpoch,
    InvalidOffset,
    InvalidPartitions,
    InvalidProducerSnapshot,
    InvalidRemoteSegment,
    InvalidRemoteSegmentTransition,
    InvalidTopicId,
    InvalidTopicName,
    TopicNameCollision,
    UnknownLeaderEpoch,
    UnknownTopicOrPartition,
)

# Kafka's org.apache.kafka.common.internals.Topic: 249 = 255 (a file name) minus room for
# the partition suffix and the ".deleted" marker Kafka appends to directories.
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")

# Kafka's ProducerIdManager hands out blocks of this size (PRODUCER_ID_BLOCK_SIZE).
PRODUCER_ID_BLOCK_SIZE = 1000

INITIAL_LEADER_EPOCH = 0


class TopicPartition(NamedTuple):
    """A (topic, partition) pair; a plain tuple works wherever one is expected."""

    topic: str
    partition: int


def _frozen_configs(configs: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(configs))


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """A topic as the store knows it. `configs` holds only the overrides set on the topic
    (Kafka's names and string values); broker defaults are not the store's business."""

    name: str
    topic_id: uuid.UUID
    num_partitions: int
    configs: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # A read-only copy: the caller's dict cannot change a value that is supposed to be frozen.
        object.__setattr__(self, "configs", _frozen_configs(self.configs))

    def __hash__(self) -> int:
        return hash((self.name, self.topic_id, self.num_partitions, frozenset(self.configs.items())))


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """One consumer group offset commit (OffsetCommit's partition entry).

    `offset` is the next offset the group will consume; `leader_epoch` is the epoch of the
    record before it as the consumer saw it, None when the client did not send one (-1 on the
    wire); `metadata` is the client's opaque string, "" when it sent null, as Kafka does.
    """

    topic: str
    partition: int
    offset: int
    leader_epoch: int | None
    metadata: str
    commit_timestamp_ms: int


class RemoteSegmentState(enum.StrEnum):
    """Lifecycle of a segment in the bucket, after Kafka's RemoteLogSegmentState (KIP-405):
    uploading = COPY_SEGMENT_STARTED, committed = COPY_SEGMENT_FINISHED,
    deleting = DELETE_SEGMENT_STARTED; removing the row is DELETE_SEGMENT_FINISHED."""

    UPLOADING = "uploading"
    COMMITTED = "committed"
    DELETING = "deleting"


# uploading -> deleting abandons a failed upload so its objects can be garbage-collected.
REMOTE_SEGMENT_TRANSITIONS: Mapping[RemoteSegmentState, frozenset[RemoteSegmentState]] = MappingProxyType(
    {
        RemoteSegmentState.UPLOADING: frozenset({RemoteSegmentState.COMMITTED, RemoteSegmentState.DELETING}),
        RemoteSegmentState.COMMITTED: frozenset({RemoteSegmentState.DELETING}),
        RemoteSegmentState.DELETING: frozenset(),
    }
)


@dataclass(frozen=True, slots=True)
class SegmentDescriptor:
    """A rolled segment in the bucket: offsets [base_offset, last_offset], both inclusive.

    The one description of a bucket segment: the catalogue row (`RemoteSegment`) and the
    bucket's commit key (`cold_tier.layout.CommittedSegment`) both extend it.
    `base_timestamp` and `max_timestamp` are in ms (first batch's base timestamp, largest
    max timestamp); no order between them is assumed, since LogAppendTime rewrites only the
    max timestamp. `leader_epoch` is the epoch of the leader that uploaded it, the epoch every
    write about this segment is fenced on.
    """

    topic: str
    partition: int
    base_offset: int
    last_offset: int
    base_timestamp: int
    max_timestamp: int
    size_bytes: int
    leader_epoch: int

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    def descriptor_fields(self) -> dict[str, object]:
        """The descriptor's fields by name, to build another extension of it."""
        return {name: getattr(self, name) for name in SegmentDescriptor.__dataclass_fields__}


@dataclass(frozen=True, slots=True)
class RemoteSegment(SegmentDescriptor):
    """A catalogue row: the segment, where its commit is (`object_key`, unique across the
    bucket) and how far its upload or deletion got (`state`)."""

    object_key: str
    state: RemoteSegmentState = RemoteSegmentState.UPLOADING


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A broker of the cluster as the store knows it: where clients reach it, its rack, the
    incarnation (one per process start) that holds the session, and whether the session is
    alive (its last heartbeat is younger than its session timeout)."""

    node_id: int
    host: str
    port: int
    rack: str | None
    incarnation: str
    alive: bool
    # Milliseconds the session had left when the store answered (0 once expired): the
    # controller wakes when a silent broker's session runs out, not up to a heartbeat later.
    session_remaining_ms: int = field(default=0, compare=False)
    # (listener name, advertised host, port) of each listener; host and port are the first's.
    listeners: tuple[tuple[str, str, int], ...] = ()

    def endpoint(self, listener: str) -> tuple[str, int] | None:
        """Where a client of `listener` reaches this broker; None if it has no such listener.
        A registration without listeners (an older broker) offers its one address to all."""
        if not self.listeners:
            return (self.host, self.port)
        return next(((host, port) for name, host, port in self.listeners if name == listener), None)


# The name coordinator slots go by as leaderships (controller.py plans them as partitions).
COORDINATOR_SLOTS = "__consumer_offsets"


@dataclass(frozen=True, slots=True)
class PartitionLeadership:
    """Who leads a partition (None: nobody yet) and under which leader epoch; the broker asked
    to lead it (a reassignment, Kafka's preferred replica), None when the controller places it."""

    topic: str
    partition: int
    leader_id: int | None
    leader_epoch: int
    preferred_leader: int | None = None


@dataclass(frozen=True, slots=True)
class WalBatch:
    """One record batch of a partition inside a write-ahead object: offsets [base_offset,
    last_offset] at bytes [position, position + size_bytes) of the object `object_key`,
    appended under `leader_epoch`. Durable once its object is committed.

    `topic_id`, given to a commit: the id of the topic the batch was appended to. A topic
    deleted and made again under its name starts its partitions at the same epochs, so the
    epoch alone would let a deleted topic's late commit land in the new one; with the id the
    store refuses it (UnknownTopicId). None: whichever topic holds the name (listings return None)."""

    topic: str
    partition: int
    base_offset: int
    last_offset: int
    leader_epoch: int
    object_key: str
    position: int
    size_bytes: int
    topic_id: uuid.UUID | None = None

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


@dataclass(frozen=True, slots=True)
class ProducerStateEntry:
    """What an idempotent producer last wrote to one partition, after the entries of Kafka's
    producer snapshot files (ProducerStateManager): the last batch ended at `last_offset`
    with sequence `last_sequence`, and began `offset_delta` records earlier; the coordinator
    epoch of its last transaction marker, and the first offset of its open transaction (-1: none)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    last_timestamp_ms: int
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1


@dataclass(frozen=True, slots=True)
class ProducerSnapshot:
    """Producer state of one partition reflecting every batch below `log_end_offset`; a new
    leader loads it and replays the log from there."""

    log_end_offset: int
    entries: tuple[ProducerStateEntry, ...]


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    """Producer ids [first_producer_id, first_producer_id + size), claimed durably in one
    write; ids of a block not handed out before a restart are skipped, never reused."""

    first_producer_id: int
    size: int

    @property
    def last_producer_id(self) -> int:
        return self.first_producer_id + self.size - 1


# --- checks ------------------------------------------------------------------------------


def is_legal_topic_name(name: object) -> bool:
    """Kafka's rules (Topic.validate) as a yes/no, for the bucket layout and anything else."""
    return isinstance(name, str) and 0 < len(name) <= MAX_TOPIC_NAME_LENGTH and name not in (".", "..") and _LEGAL_TOPIC_NAME.fullmatch(name) is not None


def validate_topic_name(name: str) -> None:
    """Kafka's rules (Topic.validate): legal in a file name on every platform."""
    if not name:
        raise InvalidTopicName(name, "it is empty")
    if name in (".", ".."):
        raise InvalidTopicName(name, "'.' and '..' are not allowed")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicName(name, f"it is longer than {MAX_TOPIC_NAME_LENGTH} characters")
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        raise InvalidTopicName(name, "only ASCII letters, digits, '.', '_' and '-' are allowed")


def has_collision_chars(name: str) -> bool:
    """Kafka's Topic.hasCollisionChars: whether another name could collide with this one."""
    return "." in name or "_" in name


def unify_collision_chars(name: str) -> str:
    """Kafka's Topic.unifyCollisionChars: the name as metric names show it, '.' made '_'."""
    return name.replace(".", "_")


def check_topic_collision(name: str, existing: Iterable[str]) -> None:
    """Kafka's ReplicationControlManager.validateNewTopicNames: a new topic whose name unifies
    (`unify_collision_chars`) to an existing topic's other name is refused. `existing`: the
    topics there are, or only those whose unified name is `name`'s (a backend narrows them in
    SQL). The least colliding name is named, so that the message does not depend on an order;
    the topic of the same name itself is no collision (TopicAlreadyExists is the store's)."""
    if not has_collision_chars(name):
        return
    unified = unify_collision_chars(name)
    colliding = [other for other in existing if other != name and unify_collision_chars(other) == unified]
    if colliding:
        raise TopicNameCollision(name, min(colliding))


def validate_topic_id(topic_id: uuid.UUID) -> None:
    # Kafka reserves the nil UUID for "no id" and 0...01 for its metadata log.
    if topic_id.int in (0, 1):
        raise InvalidTopicId(topic_id, "the nil UUID and 00000000-0000-0000-0000-000000000001 are reserved")


def validate_partition_count(topic: str, current_partitions: int | None, requested_partitions: int) -> None:
    """A new topic needs at least one partition; an existing one can only grow."""
    if current_partitions is None:
        if requested_partitions < 1:
            raise InvalidPartitions(topic, None, requested_partitions, "a topic needs at least one partition")
        return
    if requested_partitions == current_partitions:
        raise InvalidPartitions(
            topic, current_partitions, requested_partitions, f"it already has {current_partitions} partitions"
        )
    if requested_partitions < current_partitions:
        raise InvalidPartitions(
            topic,
            current_partitions,
            requested_partitions,
            f"it has {current_partitions} partitions and partitions can only be added",
        )


def check_partition(topic: str, partition: int, num_partitions: int) -> None:
    if not 0 <= partition < num_partitions:
        raise UnknownTopicOrPartition(topic, partition, num_partitions)


def check_offset(topic: str, partition: int, offset: int) -> None:
    if offset < 0:
        raise InvalidOffset(topic, partition, offset)


def apply_config_changes(
    topic: str, configs: Mapping[str, str], set_configs: Mapping[str, str], delete_configs: Iterable[str]
) -> dict[str, str]:
    """IncrementalAlterConfigs' SET and DELETE on a topic's overrides. Deleting a name that
    is not set is not an error (Kafka ignores it too); naming one in both is."""
    delete_configs = frozenset(delete_configs)
    conflicting = delete_configs & set_configs.keys()
    if conflicting:
        raise ConflictingConfigChanges(topic, frozenset(conflicting))
    changed = {name: value for name, value in configs.items() if name not in delete_configs}
    changed.update(set_configs)
    return changed


def check_leader_epoch(topic: str, partition: int, leader_epoch: int, current_leader_epoch: int) -> None:
    """A write on behalf of a partition leader is accepted only at the current epoch: an
    older epoch belongs to a deposed leader, a newer one was never granted."""
    if leader_epoch < current_leader_epoch:
        raise FencedLeaderEpoch(topic, partition, leader_epoch, current_leader_epoch)
    if leader_epoch > current_leader_epoch:
        raise UnknownLeaderEpoch(topic, partition, leader_epoch, current_leader_epoch)


def validate_remote_segment(segment: RemoteSegment) -> None:
    def invalid(reason: str) -> InvalidRemoteSegment:
        return InvalidRemoteSegment(segment.topic, segment.partition, segment.base_offset, segment.object_key, reason)

    if segment.base_offset < 0:
        raise invalid("base_offset is negative")
    if segment.last_offset < segment.base_offset:
        raise invalid(f"last_offset {segment.last_offset} is below base_offset")
    if segment.size_bytes < 0:
        raise invalid("size_bytes is negative")
    if not segment.object_key:
        raise invalid("object_key is empty")
    if segment.state != RemoteSegmentState.UPLOADING:
        raise invalid(f"a segment enters the catalogue as uploading, not {segment.state}")


def check_remote_segment_transition(segment: RemoteSegment, target: RemoteSegmentState) -> None:
    if target not in REMOTE_SEGMENT_TRANSITIONS[segment.state]:
        raise InvalidRemoteSegmentTransition(
            segment.topic, segment.partition, segment.base_offset, segment.object_key, segment.state, target
        )


def check_remote_segment_removable(segment: RemoteSegment) -> None:
    """Only a deleting segment may leave the catalogue: readers must have stopped seeing it
    before its objects were deleted."""
    if segment.state != RemoteSegmentState.DELETING:
        raise InvalidRemoteSegmentTransition(
            segment.topic, segment.partition, segment.base_offset, segment.object_key, segment.state, "removed"
        )


def validate_producer_snapshot(topic: str, partition: int, snapshot: ProducerSnapshot) -> None:
    if snapshot.log_end_offset < 0:
        raise InvalidProducerSnapshot(topic, partition, f"log_end_offset {snapshot.log_end_offset} is negative")
    seen: set[int] = set()
    for entry in snapshot.entries:
        if entry.producer_id in seen:
            raise InvalidProducerSnapshot(topic, partition, f"producer id {entry.producer_id} appears twice")
        if entry.last_offset >= snapshot.log_end_offset:
            raise InvalidProducerSnapshot(
                topic,
                partition,
                f"producer id {entry.producer_id} wrote offset {entry.last_offset}, at or past log_end_offset "
                f"{snapshot.log_end_offset}",
            )
        seen.add(entry.producer_id)
