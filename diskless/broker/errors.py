"""The one table from our exceptions to Kafka error codes (kio's `ErrorCode`, Kafka's numbers).

Order matters: the first row whose type matches wins, so subclasses come before their bases.
What a client does with each code is Kafka's: retriable codes (NOT_LEADER_OR_FOLLOWER,
KAFKA_STORAGE_ERROR, UNKNOWN_LEADER_EPOCH, ...) make it refresh metadata and retry; fatal
ones reach the application. An exception missing from the table answers UNKNOWN_SERVER_ERROR,
and the request path that caught it logs it with its request (it is a bug to fix).
"""

from __future__ import annotations

import logging

from cold_tier.errors import ObjectStoreError, StoreUnavailable
from cold_tier.remote_errors import CorruptSegmentObject, ReaderClosed, RemoteOffsetOutOfRange, RemoteSegmentMissing
from hot_tier.errors import LogClosed, OffsetOutOfRange
from hot_tier.records.errors import CorruptBatch, DecompressedTooLarge, RecordsError
from kio.schema.errors import ErrorCode
from metadata.errors import (
    FencedLeaderEpoch,
    InvalidPartitions,
    InvalidTopicName,
    MetadataStorageError,
    MetadataStoreClosed,
    TopicAlreadyExists,
    TopicNameCollision,
    UnknownTopic,
    UnknownTopicId,
    UnknownLeaderEpoch,
    UnknownTopicOrPartition,
    WalBatchConflict,
)

from .partition_limits import PartitionPolicyViolation
from .security.errors import (
    ClusterAuthorizationFailed,
    GroupAuthorizationFailed,
    TopicAuthorizationFailed,
    TransactionalIdAuthorizationFailed,
)
from .quotas.entities import InvalidQuota, UnsupportedQuotaFilter
from .topic_configs import InvalidConfig

log = logging.getLogger(__name__)


class RecordTooLarge(Exception):
    def __init__(self, size_bytes: int, max_message_bytes: int) -> None:
        super().__init__(f"record batch of {size_bytes} bytes exceeds max.message.bytes={max_message_bytes}")
        self.size_bytes = size_bytes
        self.max_message_bytes = max_message_bytes


class InvalidReplicationFactor(Exception):
    def __init__(self, replication_factor: int, brokers: int) -> None:
        super().__init__(f"replication factor {replication_factor} is larger than the {brokers} available broker(s)")


class InvalidReplicaAssignment(Exception):
    """A manual replica assignment Kafka's ReplicationControlManager refuses; the message is
    Kafka's, word for word (admin clients show it)."""


class AssignmentCountMismatch(InvalidReplicaAssignment):
    """CreatePartitions: assignments given (an empty list too), but not one per new partition."""

    def __init__(self, topic: str, added_partitions: int, assignments: int) -> None:
        super().__init__(
            f"Attempted to add {added_partitions} additional partition(s), but only {assignments} assignment(s) were specified."
        )
        self.topic = topic
        self.added_partitions = added_partitions
        self.assignments = assignments


class UnregisteredBroker(InvalidReplicaAssignment):
    """An assignment names a broker id that is not in the cluster."""

    def __init__(self, topic: str, broker_id: int) -> None:
        super().__init__(f"The manual partition assignment includes broker {broker_id}, but no such broker is registered.")
        self.topic = topic
        self.broker_id = broker_id


class RepeatedPartitionIndex(InvalidReplicaAssignment):
    """CreateTopics: two assignments for the same partition index."""

    def __init__(self, topic: str, partition: int) -> None:
        super().__init__(f"Found multiple manual partition assignments for partition {partition}")
        self.topic = topic


class PartitionIndexGap(InvalidReplicaAssignment):
    """CreateTopics: the assignments' partition indexes are not 0, 1, ... n - 1."""

    def __init__(self, topic: str) -> None:
        super().__init__("partitions should be a consecutive 0-based integer sequence")
        self.topic = topic


class EmptyReplicaList(InvalidReplicaAssignment):
    """An assignment names no broker at all."""

    def __init__(self, topic: str) -> None:
        super().__init__("The manual partition assignment includes an empty replica list.")
        self.topic = topic


class RepeatedReplica(InvalidReplicaAssignment):
    """An assignment names one broker id more than once."""

    def __init__(self, topic: str, broker_id: int) -> None:
        super().__init__(f"The manual partition assignment includes the broker {broker_id} more than once.")
        self.topic = topic
        self.broker_id = broker_id


class ReplicaCountMismatch(InvalidReplicaAssignment):
    """An assignment's number of replicas differs from the topic's other partitions' (those it
    already has, for CreatePartitions; the request's earlier assignments, for CreateTopics)."""

    def __init__(self, topic: str, replicas: int, replication_factor: int) -> None:
        super().__init__(
            f"The manual partition assignment includes a partition with {replicas} replica(s), but this is not "
            f"consistent with previous partitions, which have {replication_factor} replica(s)."
        )
        self.topic = topic
        self.replicas = replicas
        self.replication_factor = replication_factor


class InvalidRequest(Exception):
    pass


class ThrottlingQuotaExceeded(Exception):
    """A topic of a CreateTopics, CreatePartitions or DeleteTopics refused: the client is over
    its controller_mutation_rate (KIP-599); it may retry after the response's throttle time."""

    def __init__(self) -> None:
        super().__init__("The throttling quota has been exceeded.")


class LocalDiskFull(Exception):
    def __init__(self, waiting_bytes: int, limit_bytes: int) -> None:
        super().__init__(
            f"{waiting_bytes} bytes of segments are waiting for the object store, over the local disk limit of "
            f"{limit_bytes} bytes; is the bucket reachable?"
        )
        self.waiting_bytes = waiting_bytes
        self.limit_bytes = limit_bytes


class NotLeaderOrFollower(Exception):
    """This broker does not lead the partition (any more): the client refreshes its metadata."""

    def __init__(self, topic: str, partition: int) -> None:
        super().__init__(f"this broker does not lead {topic}-{partition}")


class WalBackpressure(Exception):
    """Too many appended bytes wait to become durable in the bucket: produce is refused (a
    retriable error) instead of buffering without bound."""

    def __init__(self, pending_bytes: int, max_pending_bytes: int, hint: str) -> None:
        super().__init__(
            f"{pending_bytes} bytes wait for the bucket's write-ahead objects, over wal.max.pending.bytes="
            f"{max_pending_bytes}; {hint}"
        )
        self.pending_bytes = pending_bytes
        self.max_pending_bytes = max_pending_bytes


class DurabilityTimeout(Exception):
    """acks=all: the batch was appended but did not become durable within the request's timeout."""

    def __init__(self, topic: str, partition: int, last_offset: int, timeout_ms: int) -> None:
        super().__init__(f"{topic}-{partition}: offset {last_offset} was not durable within {timeout_ms} ms")


class CorruptWalBatch(Exception):
    """A durable batch recorded in the store cannot be read back from its write-ahead object."""

    def __init__(self, topic: str, partition: int, base_offset: int, object_key: str, reason: str) -> None:
        super().__init__(f"{topic}-{partition}: durable batch at {base_offset} in {object_key} {reason}")
        self.topic = topic
        self.partition = partition
        self.base_offset = base_offset
        self.object_key = object_key


class InvalidRecord(Exception):
    pass


class InvalidTimestamp(Exception):
    """INVALID_TIMESTAMP, with (index in the batch, why) per record refused (KIP-467)."""

    def __init__(self, record_errors: list[tuple[int, str]]) -> None:
        super().__init__("One or more records have been rejected due to invalid timestamp")
        self.record_errors = record_errors


class TransactionsUnsupported(Exception):
    def __init__(self) -> None:
        super().__init__("transactional produce is not supported by this broker")


class TxnVerificationFailed(Exception):
    """KIP-890 part 1: a transactional batch the coordinator did not verify; nothing was
    written. It answers the verification's own code, as Kafka answers the coordinator's:
    INVALID_TXN_STATE (the transaction did not add the partition), INVALID_PRODUCER_EPOCH,
    INVALID_PRODUCER_ID_MAPPING, or NOT_ENOUGH_REPLICAS when the coordinator could not be asked
    (handlers/transactions.verify_elsewhere), which the producer retries instead of failing its
    transaction. `error_code` is None when the verification gave no known code (the table's
    row answers then)."""

    def __init__(self, topic: str, partition: int, producer_id: int, coordinator_error: object) -> None:
        name = getattr(coordinator_error, "name", str(coordinator_error)).upper()
        super().__init__(f"{topic}-{partition}: the transaction of producer {producer_id} was not verified for this partition ({name})")
        self.producer_id = producer_id
        self.coordinator_error = coordinator_error
        self.error_code = _known_error_code(coordinator_error)


def _known_error_code(value: object) -> ErrorCode | None:
    """`value` as a Kafka error code other than NONE, else None."""
    if not isinstance(value, int):
        return None
    try:
        code = ErrorCode(value)
    except ValueError:
        return None
    return None if code is ErrorCode.none else code


class NotGroupCoordinator(Exception):
    """The group's coordinator slot moved while this broker read the group from the metadata
    store: the client looks the coordinator up again (NOT_COORDINATOR)."""

    def __init__(self, group_id: str) -> None:
        super().__init__(f"no longer the coordinator of group {group_id!r}")
        self.group_id = group_id


class NotTransactionCoordinator(Exception):
    """This broker lost the transaction coordinator's slot before writing a transition: the
    client looks the coordinator up again (NOT_COORDINATOR)."""

    def __init__(self, transactional_id: str) -> None:
        super().__init__(f"no longer the transaction coordinator of {transactional_id!r}")
        self.transactional_id = transactional_id


class OutOfOrderSequence(Exception):
    """`expected_sequence`: the base sequence the producer's next batch must have here."""

    def __init__(self, producer_id: int, producer_epoch: int, base_sequence: int, last_sequence: int, expected_sequence: int) -> None:
        super().__init__(f"producer {producer_id}: sequence {base_sequence} does not follow {last_sequence}")
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.expected_sequence = expected_sequence


class UnknownProducerId(Exception):
    def __init__(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        super().__init__(f"producer {producer_id} has no state here and its batch starts at sequence {base_sequence}, not 0")
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.expected_sequence = 0


class InvalidProducerEpoch(Exception):
    def __init__(self, producer_id: int, producer_epoch: int, current_epoch: int) -> None:
        super().__init__(f"producer {producer_id}: epoch {producer_epoch} is older than the current {current_epoch}")
        self.producer_id = producer_id


class TransactionCoordinatorFenced(Exception):
    def __init__(self, producer_id: int, coordinator_epoch: int, current_epoch: int) -> None:
        super().__init__(f"producer {producer_id}: a marker from coordinator epoch {coordinator_epoch}, older than the last one's {current_epoch}")
        self.producer_id = producer_id


_TABLE: list[tuple[type[BaseException], ErrorCode]] = [
    (OffsetOutOfRange, ErrorCode.offset_out_of_range),
    (RemoteOffsetOutOfRange, ErrorCode.offset_out_of_range),
    (RemoteSegmentMissing, ErrorCode.offset_out_of_range),
    (CorruptSegmentObject, ErrorCode.kafka_storage_error),
    (StoreUnavailable, ErrorCode.kafka_storage_error),
    (ObjectStoreError, ErrorCode.kafka_storage_error),  # the bucket refused or failed a request
    (ReaderClosed, ErrorCode.kafka_storage_error),
    (DecompressedTooLarge, ErrorCode.message_too_large),  # before its base, RecordsError: Java producers split the batch
    (CorruptBatch, ErrorCode.corrupt_message),
    (RecordsError, ErrorCode.corrupt_message),
    (RecordTooLarge, ErrorCode.message_too_large),
    (FencedLeaderEpoch, ErrorCode.fenced_leader_epoch),  # a newer leader took the partition
    (WalBatchConflict, ErrorCode.not_leader_or_follower),  # another epoch's batch is durable there: this log diverged
    (UnknownLeaderEpoch, ErrorCode.unknown_leader_epoch),
    (LogClosed, ErrorCode.not_leader_or_follower),  # the partition was closed (deleted, or leadership moved)
    (MetadataStorageError, ErrorCode.kafka_storage_error),  # the metadata store failed: retriable
    (MetadataStoreClosed, ErrorCode.kafka_storage_error),  # shutting down
    (TopicAlreadyExists, ErrorCode.topic_already_exists),
    (UnknownTopicId, ErrorCode.unknown_topic_id),
    (UnknownTopic, ErrorCode.unknown_topic_or_partition),
    (UnknownTopicOrPartition, ErrorCode.unknown_topic_or_partition),
    (InvalidTopicName, ErrorCode.invalid_topic_exception),
    (TopicNameCollision, ErrorCode.invalid_topic_exception),  # a.b beside a_b, as Kafka
    (PartitionPolicyViolation, ErrorCode.policy_violation),  # before its base, InvalidPartitions
    (InvalidPartitions, ErrorCode.invalid_partitions),
    (InvalidConfig, ErrorCode.invalid_config),
    (InvalidReplicationFactor, ErrorCode.invalid_replication_factor),
    (InvalidReplicaAssignment, ErrorCode.invalid_replica_assignment),
    (InvalidRequest, ErrorCode.invalid_request),
    (ThrottlingQuotaExceeded, ErrorCode.throttling_quota_exceeded),
    (InvalidQuota, ErrorCode.invalid_request),
    (UnsupportedQuotaFilter, ErrorCode.unsupported_version),
    (InvalidRecord, ErrorCode.invalid_record),
    (InvalidTimestamp, ErrorCode.invalid_timestamp),
    (LocalDiskFull, ErrorCode.kafka_storage_error),
    (NotLeaderOrFollower, ErrorCode.not_leader_or_follower),
    (WalBackpressure, ErrorCode.not_enough_replicas),  # retriable: nothing was appended
    (DurabilityTimeout, ErrorCode.request_timed_out),  # as Kafka when acks=all replication times out
    (CorruptWalBatch, ErrorCode.kafka_storage_error),
    (TransactionsUnsupported, ErrorCode.invalid_txn_state),
    (TxnVerificationFailed, ErrorCode.invalid_txn_state),  # unless it carries the verification's code (error_code_for)
    (NotTransactionCoordinator, ErrorCode.not_coordinator),
    (NotGroupCoordinator, ErrorCode.not_coordinator),
    (OutOfOrderSequence, ErrorCode.out_of_order_sequence_number),
    (UnknownProducerId, ErrorCode.unknown_producer_id),
    (InvalidProducerEpoch, ErrorCode.invalid_producer_epoch),
    (TransactionCoordinatorFenced, ErrorCode.transaction_coordinator_fenced),
    (TopicAuthorizationFailed, ErrorCode.topic_authorization_failed),
    (GroupAuthorizationFailed, ErrorCode.group_authorization_failed),
    (ClusterAuthorizationFailed, ErrorCode.cluster_authorization_failed),
    (TransactionalIdAuthorizationFailed, ErrorCode.transactional_id_authorization_failed),
]


def error_code_for(exc: BaseException, request: str = "") -> ErrorCode:
    """The Kafka error code answering `exc`. An exception the table does not know is logged
    here, once, with `request` (what was being done, e.g. "produce to orders-0")."""
    for exc_type, code in _TABLE:
        if isinstance(exc, exc_type):
            if isinstance(exc, TxnVerificationFailed) and exc.error_code is not None:
                return exc.error_code  # retriable or fatal as the verification answered, not one code for all
            return code
    log.error("unexpected error in %s; answering UNKNOWN_SERVER_ERROR", request or "a request", exc_info=exc)
    return ErrorCode.unknown_server_error
