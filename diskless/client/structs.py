"""Values the client hands to applications: partitions, records, delivery results, descriptions.

All immutable. `TopicPartition` and `ConsumerRecord` are named tuples (cheap to build and to
hash: one is a dict key on every hot path, the other is made once per consumed record); the
rest are frozen slotted dataclasses.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import NamedTuple

TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1


class TopicPartition(NamedTuple):
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where a produced record landed. `offset` is -1 with acks=0 (the broker does not say)."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class ConsumerRecord(NamedTuple):
    """One consumed record. A named tuple: the fetcher builds one per record with a single
    C-level `tuple.__new__`, several times cheaper than a slotted class."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    metadata: str = ""
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """A consumer's group membership, as Java's `consumer.groupMetadata()` (KIP-447): sent with
    TxnOffsetCommit so the group coordinator refuses offsets from a member of a past generation.
    `generation_id` -1 and `member_id` "" commit as a simple group, unchecked."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class OffsetAndTimestamp:
    """An answer of ListOffsets: the first offset at or after a time, with that record's timestamp."""

    offset: int
    timestamp: int
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    topic_id: uuid.UUID | None
    is_internal: bool
    partitions: tuple[PartitionDescription, ...]


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    brokers: tuple[BrokerInfo, ...]


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One config of a resource. `source` is Kafka's ConfigSource (1 topic, 5 default broker, ...)."""

    name: str
    value: str | None
    read_only: bool
    is_default: bool
    is_sensitive: bool
    source: int


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    num_partitions: int = 1
    replication_factor: int = -1  # the broker's default.replication.factor
    configs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str | None = None
    group_type: str | None = None  # "classic" or "consumer" (KIP-848); None from brokers before ListGroups v5


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberDescription:
    """A member of a KIP-848 group: what it holds now and what the coordinator wants it to hold."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    member_epoch: int
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: tuple[TopicPartition, ...]
    target_assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription:
    """ConsumerGroupDescribe's answer for one KIP-848 group."""

    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor_name: str
    members: tuple[ConsumerGroupMemberDescription, ...]


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]
