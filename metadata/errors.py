"""Errors raised by the metadata store.

Each error carries the fields the broker needs to answer the client (topic, partition,
epochs), and the broker maps them to Kafka error codes in its one table. Three families stay
apart on purpose:

- a request the cluster state refuses (`UnknownTopic`, `FencedLeaderEpoch`, ...): the
  caller's fault or a race the caller lost; nothing was written;
- the store itself failing (`MetadataStorageError`, `UnsupportedSchemaVersion`): the database
  is unreachable, full, or holds data this code cannot read;
- a store that was closed (`MetadataStoreClosed`).
"""

from __future__ import annotations

import uuid


class MetadataError(Exception):
    """Base class of every error in `metadata`."""


# --- topics and partitions ---------------------------------------------------------------


class TopicAlreadyExists(MetadataError):
    def __init__(self, name: str) -> None:
        super().__init__(f"topic {name!r} already exists")
        self.name = name


class TopicIdAlreadyExists(MetadataError):
    def __init__(self, topic_id: uuid.UUID, existing_name: str) -> None:
        super().__init__(f"topic id {topic_id} already belongs to topic {existing_name!r}")
        self.topic_id = topic_id
        self.existing_name = existing_name


class UnknownTopic(MetadataError):
    def __init__(self, name: str) -> None:
        super().__init__(f"topic {name!r} does not exist")
        self.name = name


class UnknownTopicId(MetadataError):
    def __init__(self, topic_id: uuid.UUID) -> None:
        super().__init__(f"no topic has id {topic_id}")
        self.topic_id = topic_id


class UnknownTopicOrPartition(MetadataError):
    """The topic exists but has no partition with this number."""

    def __init__(self, topic: str, partition: int, num_partitions: int) -> None:
        super().__init__(f"topic {topic!r} has {num_partitions} partitions, no partition {partition}")
        self.topic = topic
        self.partition = partition
        self.num_partitions = num_partitions


class InvalidTopicName(MetadataError):
    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"invalid topic name {name!r}: {reason}")
        self.name = name
        self.reason = reason


class TopicNameCollision(MetadataError):
    """A new topic's name differs from an existing one's only in '.' against '_': Kafka's
    metric names make the two one character, so it refuses the second (Topic.hasCollision).
    The message is Kafka's, word for word (admin clients show it)."""

    def __init__(self, name: str, existing_name: str) -> None:
        super().__init__(f"Topic '{name}' collides with existing topic: {existing_name}")
        self.name = name
        self.existing_name = existing_name


class InvalidTopicId(MetadataError):
    def __init__(self, topic_id: uuid.UUID, reason: str) -> None:
        super().__init__(f"invalid topic id {topic_id}: {reason}")
        self.topic_id = topic_id
        self.reason = reason


class InvalidPartitions(MetadataError):
    """A partition count that cannot be set: not positive, or not larger than today's.

    `current_partitions` is None when the topic is being created.
    """

    def __init__(self, topic: str, current_partitions: int | None, requested_partitions: int, reason: str) -> None:
        super().__init__(f"topic {topic!r}: cannot have {requested_partitions} partitions: {reason}")
        self.topic = topic
        self.current_partitions = current_partitions
        self.requested_partitions = requested_partitions
        self.reason = reason


class ConflictingConfigChanges(MetadataError):
    """An incremental config change that both sets and deletes the same names."""

    def __init__(self, topic: str, config_names: frozenset[str]) -> None:
        super().__init__(f"topic {topic!r}: configs both set and deleted: {sorted(config_names)}")
        self.topic = topic
        self.config_names = config_names


class InvalidOffset(MetadataError):
    """A negative offset where only a logical offset (>= 0) makes sense."""

    def __init__(self, topic: str, partition: int, offset: int) -> None:
        super().__init__(f"{topic}-{partition}: offset {offset} is negative")
        self.topic = topic
        self.partition = partition
        self.offset = offset


# --- leader epochs -----------------------------------------------------------------------


class FencedLeaderEpoch(MetadataError):
    """The writer's leader epoch is older than the partition's: another leader took over."""

    def __init__(self, topic: str, partition: int, leader_epoch: int, current_leader_epoch: int) -> None:
        super().__init__(
            f"{topic}-{partition}: leader epoch {leader_epoch} is fenced, the current one is {current_leader_epoch}"
        )
        self.topic = topic
        self.partition = partition
        self.leader_epoch = leader_epoch
        self.current_leader_epoch = current_leader_epoch


class UnknownLeaderEpoch(MetadataError):
    """The writer's leader epoch is newer than any the store has granted."""

    def __init__(self, topic: str, partition: int, leader_epoch: int, current_leader_epoch: int) -> None:
        super().__init__(
            f"{topic}-{partition}: leader epoch {leader_epoch} was never granted, the current one is "
            f"{current_leader_epoch}"
        )
        self.topic = topic
        self.partition = partition
        self.leader_epoch = leader_epoch
        self.current_leader_epoch = current_leader_epoch


class WalBatchConflict(MetadataError):
    """A write-ahead batch would replace the durable batch another leader epoch recorded at its
    base offset: the writer's log diverged from the durable one (a write-ahead row is only
    ever rewritten by its own epoch, a retried commit or upload). Nothing is written."""

    def __init__(self, topic: str, partition: int, base_offset: int, leader_epoch: int, recorded_leader_epoch: int) -> None:
        super().__init__(
            f"{topic}-{partition}: the batch at offset {base_offset} of leader epoch {leader_epoch} would replace the"
            f" durable batch of leader epoch {recorded_leader_epoch}"
        )
        self.topic = topic
        self.partition = partition
        self.base_offset = base_offset
        self.leader_epoch = leader_epoch
        self.recorded_leader_epoch = recorded_leader_epoch


# --- remote segment catalogue ------------------------------------------------------------


class InvalidRemoteSegment(MetadataError):
    def __init__(self, topic: str, partition: int, base_offset: int, object_key: str, reason: str) -> None:
        super().__init__(f"{topic}-{partition} remote segment {base_offset} ({object_key}): {reason}")
        self.topic = topic
        self.partition = partition
        self.base_offset = base_offset
        self.object_key = object_key
        self.reason = reason


class RemoteSegmentAlreadyExists(MetadataError):
    def __init__(self, topic: str, partition: int, base_offset: int, object_key: str) -> None:
        super().__init__(f"{topic}-{partition}: remote segment {base_offset} ({object_key}) is already catalogued")
        self.topic = topic
        self.partition = partition
        self.base_offset = base_offset
        self.object_key = object_key


class UnknownRemoteSegment(MetadataError):
    def __init__(self, topic: str, partition: int, base_offset: int, object_key: str) -> None:
        super().__init__(f"{topic}-{partition}: no remote segment {base_offset} ({object_key})")
        self.topic = topic
        self.partition = partition
        self.base_offset = base_offset
        self.object_key = object_key


class InvalidRemoteSegmentTransition(MetadataError):
    """A state change the segment lifecycle does not allow (see `model.REMOTE_SEGMENT_TRANSITIONS`)."""

    def __init__(self, topic: str, partition: int, base_offset: int, object_key: str, state: str, target: str) -> None:
        super().__init__(
            f"{topic}-{partition}: remote segment {base_offset} ({object_key}) is {state}, cannot become {target}"
        )
        self.topic = topic
        self.partition = partition
        self.base_offset = base_offset
        self.object_key = object_key
        self.state = state
        self.target = target


class RemoteSegmentOverlap(MetadataError):
    """Committing this segment would make two committed segments cover the same offset."""

    def __init__(
        self,
        topic: str,
        partition: int,
        base_offset: int,
        last_offset: int,
        existing_base_offset: int,
        existing_last_offset: int,
    ) -> None:
        super().__init__(
            f"{topic}-{partition}: remote segment [{base_offset}, {last_offset}] overlaps committed segment "
            f"[{existing_base_offset}, {existing_last_offset}]"
        )
        self.topic = topic
        self.partition = partition
        self.base_offset = base_offset
        self.last_offset = last_offset
        self.existing_base_offset = existing_base_offset
        self.existing_last_offset = existing_last_offset


class InvalidProducerSnapshot(MetadataError):
    def __init__(self, topic: str, partition: int, reason: str) -> None:
        super().__init__(f"{topic}-{partition}: invalid producer snapshot: {reason}")
        self.topic = topic
        self.partition = partition
        self.reason = reason


# --- the store itself --------------------------------------------------------------------


class UnsupportedMetadataUrl(MetadataError):
    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"metadata URL {url!r}: {reason}")
        self.url = url
        self.reason = reason


class MetadataBackendNotAvailable(MetadataError):
    """A backend the URL names correctly but that this build does not ship yet."""

    def __init__(self, url: str, scheme: str) -> None:
        super().__init__(
            f"metadata URL {url!r}: the {scheme} backend is not available yet; use sqlite:///PATH for now"
        )
        self.url = url
        self.scheme = scheme


class BrokerIdInUse(MetadataError):
    """Another live broker process holds this node id's session (a second broker started with
    the same --node-id, or a restarted one whose old session has not expired yet)."""

    def __init__(self, node_id: int, incarnation: str) -> None:
        super().__init__(f"node id {node_id} is held by a live broker session ({incarnation}); it expires after broker.session.timeout.ms")
        self.node_id = node_id
        self.incarnation = incarnation


class CoordinatorFenced(MetadataError):
    """A coordinator wrote with a slot epoch the store has moved past: the slot went to another
    broker, which now owns its transactions (Kafka's TRANSACTION_COORDINATOR_FENCED)."""

    def __init__(self, slot: int, expected_epoch: int, found_epoch: int | None) -> None:
        super().__init__(f"coordinator slot {slot} is at epoch {found_epoch}, not {expected_epoch}: another broker coordinates it")
        self.slot = slot
        self.expected_epoch = expected_epoch
        self.found_epoch = found_epoch


class MetadataStorageError(MetadataError):
    """The database failed: unreachable, full, locked for too long, corrupt, ..."""

    def __init__(self, operation: str, reason: str) -> None:
        super().__init__(f"metadata store failed during {operation}: {reason}")
        self.operation = operation
        self.reason = reason


class UnsupportedSchemaVersion(MetadataError):
    """The database was written by a newer (or foreign) version of the schema."""

    def __init__(self, location: str, found_version: int, supported_version: int) -> None:
        super().__init__(
            f"metadata database {location} has schema version {found_version}, this build reads up to "
            f"{supported_version}"
        )
        self.location = location
        self.found_version = found_version
        self.supported_version = supported_version


class MetadataStoreClosed(MetadataError):
    def __init__(self, location: str) -> None:
        super().__init__(f"metadata store {location} is closed")
        self.location = location
