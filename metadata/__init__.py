"""Cluster state: topics and their configs, partition state and leader epochs, consumer
group offsets, producer ids and snapshots, and the catalogue of segments in the bucket.

`open_metadata_store(url)` picks the backend; everything else talks to the
`MetadataStore` protocol. Imports nothing from the other project packages.
"""

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
    MetadataBackendNotAvailable,
    MetadataError,
    MetadataStorageError,
    MetadataStoreClosed,
    RemoteSegmentAlreadyExists,
    RemoteSegmentOverlap,
    TopicAlreadyExists,
    TopicIdAlreadyExists,
    UnknownLeaderEpoch,
    UnknownRemoteSegment,
    UnknownTopic,
    UnknownTopicId,
    UnknownTopicOrPartition,
    UnsupportedMetadataUrl,
    UnsupportedSchemaVersion,
)
from .model import (
    INITIAL_LEADER_EPOCH,
    CommittedOffset,
    ProducerSnapshot,
    ProducerStateEntry,
    RemoteSegment,
    RemoteSegmentState,
    TopicMetadata,
    TopicPartition,
)
from .store import MetadataStore
from .url import open_metadata_store, parse_metadata_url, sqlite_url

__all__ = [
    "INITIAL_LEADER_EPOCH",
    "CommittedOffset",
    "ConflictingConfigChanges",
    "FencedLeaderEpoch",
    "InvalidOffset",
    "InvalidPartitions",
    "InvalidProducerSnapshot",
    "InvalidRemoteSegment",
    "InvalidRemoteSegmentTransition",
    "InvalidTopicId",
    "InvalidTopicName",
    "MetadataBackendNotAvailable",
    "MetadataError",
    "MetadataStorageError",
    "MetadataStore",
    "MetadataStoreClosed",
    "ProducerSnapshot",
    "ProducerStateEntry",
    "RemoteSegment",
    "RemoteSegmentAlreadyExists",
    "RemoteSegmentOverlap",
    "RemoteSegmentState",
    "TopicAlreadyExists",
    "TopicIdAlreadyExists",
    "TopicMetadata",
    "TopicPartition",
    "UnknownLeaderEpoch",
    "UnknownRemoteSegment",
    "UnknownTopic",
    "UnknownTopicId",
    "UnknownTopicOrPartition",
    "UnsupportedMetadataUrl",
    "UnsupportedSchemaVersion",
    "open_metadata_store",
    "parse_metadata_url",
    "sqlite_url",
]
