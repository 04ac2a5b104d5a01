"""Errors of the client: Kafka's error codes as types, plus what goes wrong on our side.

Every error a broker can answer with is a `BrokerResponseError` subclass found by code in one
table (`for_code`). Its retry policy lives in class attributes, as in aiokafka:

    errno             Kafka's error code
    name              Kafka's name for it (NOT_LEADER_OR_FOLLOWER)
    retriable         the same request may succeed if sent again
    invalid_metadata  our view of the cluster is stale: refresh Metadata before retrying

The classes the client itself raises or catches are written out below; the remaining codes of
kio's table get generated subclasses (named like `ProducerFencedError`), so an unexpected code
still carries its name and its policy. An instance carries the broker's message and the
resource it is about (topic, partition, group), when known.
"""

from __future__ import annotations

from typing import Any

from diskless.wire import ErrorCode

# --- errors of the client itself ----------------------------------------------------------


class KafkaError(Exception):
    """Base class of every error raised by `diskless.client`."""

    retriable = False
    invalid_metadata = False


class KafkaConnectionError(KafkaError):
    """A TCP connection to a broker could not be opened, or broke with requests in flight."""

    retriable = True
    invalid_metadata = True

    def __init__(self, host: str, port: int, reason: str) -> None:
        super().__init__(f"connection to {host}:{port} failed: {reason}")
        self.host = host
        self.port = port
        self.reason = reason


class NoBrokersAvailable(KafkaError):
    retriable = True

    def __init__(self, bootstrap_servers: str, reason: str) -> None:
        super().__init__(f"no broker of {bootstrap_servers!r} is reachable: {reason}")
        self.bootstrap_servers = bootstrap_servers
        self.reason = reason


class KafkaTimeoutError(KafkaError):
    """An operation did not finish within its deadline (a `*_ms` setting names which)."""

    retriable = True

    def __init__(self, operation: str, timeout_ms: int) -> None:
        super().__init__(f"{operation} did not complete within {timeout_ms} ms")
        self.operation = operation
        self.timeout_ms = timeout_ms


class RequestTimedOut(KafkaTimeoutError):
    """A broker did not answer a request within request_timeout_ms; the connection is closed."""

    invalid_metadata = True

    def __init__(self, api_name: str, host: str, port: int, timeout_ms: int) -> None:
        super().__init__(f"{api_name} request to {host}:{port}", timeout_ms)
        self.api_name = api_name
        self.host = host
        self.port = port


class ClientClosedError(KafkaError):
    """The producer, consumer or admin client was closed; it cannot be used any more."""

    def __init__(self, client: str) -> None:
        super().__init__(f"the {client} is closed")
        self.client = client


class UnsupportedByBroker(KafkaError):
    """The broker does not speak a version of an API that this client speaks."""

    def __init__(self, api_name: str, client_range: tuple[int, int], broker_range: tuple[int, int] | None) -> None:
        where = "does not support it" if broker_range is None else f"supports versions {broker_range[0]}-{broker_range[1]}"
        super().__init__(f"{api_name}: this client speaks versions {client_range[0]}-{client_range[1]}, the broker {where}")
        self.api_name = api_name
        self.client_range = client_range
        self.broker_range = broker_range


class CorruptRecordError(KafkaError):
    """A fetched record batch failed its CRC or could not be decoded."""

    def __init__(self, topic: str, partition: int, offset: int, reason: str) -> None:
        super().__init__(f"corrupt records in {topic}-{partition} at offset {offset}: {reason}")
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.reason = reason


class RecordDeserializationError(KafkaError):
    """The consumer's key or value deserializer raised on a record (its error is the
    `__cause__`). As Java's RecordDeserializationException: the partition's position stays at
    that record, so the next `getmany` meets it again; `seek` past it to go on."""

    def __init__(self, topic: str, partition: int, offset: int, part: str) -> None:
        super().__init__(f"cannot deserialize the {part} of the record in {topic}-{partition} at offset {offset}")
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.part = part  # "key" or "value"


class TransactionAbortableError(KafkaError):
    """A record batch of the open transaction failed for good (`error`, also the `__cause__`),
    so the transaction cannot commit: as the Java producer's abortable error state, `send`,
    `send_offsets_to_transaction` and `commit_transaction` raise this until
    `abort_transaction()`, which aborts and lets the next transaction begin."""

    def __init__(self, transactional_id: str, error: BaseException) -> None:
        super().__init__(f"transaction of {transactional_id!r} must be aborted: a record batch failed: {error}")
        self.transactional_id = transactional_id
        self.error = error
        self.__cause__ = error


class NoOffsetForPartitionError(KafkaError):
    """A partition has no committed offset and auto_offset_reset is "none": seek first."""

    def __init__(self, partitions: list[Any]) -> None:
        names = ", ".join(f"{tp[0]}-{tp[1]}" for tp in partitions)
        super().__init__(f"no committed offset for {names} and auto_offset_reset is 'none'")
        self.partitions = partitions


class IllegalStateError(KafkaError):
    """The call is not valid in the client's current state (e.g. seek on an unassigned partition)."""


class ProtocolViolation(KafkaError):
    """The broker's bytes did not follow the protocol; the connection was closed."""

    def __init__(self, host: str, port: int, reason: str) -> None:
        super().__init__(f"protocol error from {host}:{port}: {reason}")
        self.host = host
        self.port = port
        self.reason = reason


# --- errors answered by a broker ----------------------------------------------------------


class BrokerResponseError(KafkaError):
    """An error code in a broker's response. Subclasses set `errno`, `name`, the policy."""

    errno = -1
    name = "UNKNOWN_SERVER_ERROR"

    def __init__(self, message: str | None = None, **context: Any) -> None:
        where = ", ".join(f"{key}={value}" for key, value in context.items())
        text = self.name + (f" ({where})" if where else "") + (f": {message}" if message else "")
        super().__init__(text)
        self.message = message
        self.context = context


class UnknownServerError(BrokerResponseError):
    errno, name = -1, "UNKNOWN_SERVER_ERROR"


class OffsetOutOfRangeError(BrokerResponseError):
    errno, name = 1, "OFFSET_OUT_OF_RANGE"


class CorruptMessageError(BrokerResponseError):
    errno, name, retriable = 2, "CORRUPT_MESSAGE", True


class UnknownTopicOrPartitionError(BrokerResponseError):
    errno, name, retriable, invalid_metadata = 3, "UNKNOWN_TOPIC_OR_PARTITION", True, True


class LeaderNotAvailableError(BrokerResponseError):
    errno, name, retriable, invalid_metadata = 5, "LEADER_NOT_AVAILABLE", True, True


class NotLeaderOrFollowerError(BrokerResponseError):
    errno, name, retriable, invalid_metadata = 6, "NOT_LEADER_OR_FOLLOWER", True, True


class RequestTimedOutError(BrokerResponseError):
    errno, name, retriable = 7, "REQUEST_TIMED_OUT", True


class BrokerNotAvailableError(BrokerResponseError):
    errno, name, invalid_metadata = 8, "BROKER_NOT_AVAILABLE", True


class MessageSizeTooLargeError(BrokerResponseError):
    errno, name = 10, "MESSAGE_TOO_LARGE"


class NetworkExceptionError(BrokerResponseError):
    errno, name, retriable, invalid_metadata = 13, "NETWORK_EXCEPTION", True, True


class CoordinatorLoadInProgressError(BrokerResponseError):
    errno, name, retriable = 14, "COORDINATOR_LOAD_IN_PROGRESS", True


class CoordinatorNotAvailableError(BrokerResponseError):
    errno, name, retriable = 15, "COORDINATOR_NOT_AVAILABLE", True


class NotCoordinatorError(BrokerResponseError):
    errno, name, retriable = 16, "NOT_COORDINATOR", True


class InvalidTopicError(BrokerResponseError):
    errno, name = 17, "INVALID_TOPIC_EXCEPTION"


class RecordListTooLargeError(BrokerResponseError):
    errno, name = 18, "RECORD_LIST_TOO_LARGE"


class IllegalGenerationError(BrokerResponseError):
    errno, name = 22, "ILLEGAL_GENERATION"


class InconsistentGroupProtocolError(BrokerResponseError):
    errno, name = 23, "INCONSISTENT_GROUP_PROTOCOL"


class UnknownMemberIdError(BrokerResponseError):
    errno, name = 25, "UNKNOWN_MEMBER_ID"


class RebalanceInProgressError(BrokerResponseError):
    errno, name = 27, "REBALANCE_IN_PROGRESS"


class UnsupportedVersionError(BrokerResponseError):
    errno, name = 35, "UNSUPPORTED_VERSION"


class TopicAlreadyExistsError(BrokerResponseError):
    errno, name = 36, "TOPIC_ALREADY_EXISTS"


class InvalidPartitionsError(BrokerResponseError):
    errno, name = 37, "INVALID_PARTITIONS"


class InvalidReplicationFactorError(BrokerResponseError):
    errno, name = 38, "INVALID_REPLICATION_FACTOR"


class InvalidConfigError(BrokerResponseError):
    errno, name = 40, "INVALID_CONFIG"


class NotControllerError(BrokerResponseError):
    errno, name, retriable, invalid_metadata = 41, "NOT_CONTROLLER", True, True


class InvalidRequestError(BrokerResponseError):
    errno, name = 42, "INVALID_REQUEST"


class OutOfOrderSequenceNumberError(BrokerResponseError):
    errno, name = 45, "OUT_OF_ORDER_SEQUENCE_NUMBER"


class DuplicateSequenceNumberError(BrokerResponseError):
    errno, name = 46, "DUPLICATE_SEQUENCE_NUMBER"


class InvalidProducerEpochError(BrokerResponseError):
    errno, name = 47, "INVALID_PRODUCER_EPOCH"


class KafkaStorageError(BrokerResponseError):
    errno, name, retriable, invalid_metadata = 56, "KAFKA_STORAGE_ERROR", True, True


class SaslAuthenticationFailedError(BrokerResponseError):
    """The broker refused the login (wrong password, unknown user): not retried, as in Kafka."""

    errno, name = 58, "SASL_AUTHENTICATION_FAILED"


class UnknownProducerIdError(BrokerResponseError):
    errno, name = 59, "UNKNOWN_PRODUCER_ID"


class NonEmptyGroupError(BrokerResponseError):
    errno, name = 68, "NON_EMPTY_GROUP"


class GroupIdNotFoundError(BrokerResponseError):
    errno, name = 69, "GROUP_ID_NOT_FOUND"


class FencedLeaderEpochError(BrokerResponseError):
    errno, name, retriable, invalid_metadata = 74, "FENCED_LEADER_EPOCH", True, True


class UnknownLeaderEpochError(BrokerResponseError):
    errno, name, retriable, invalid_metadata = 75, "UNKNOWN_LEADER_EPOCH", True, True


class MemberIdRequiredError(BrokerResponseError):
    errno, name = 79, "MEMBER_ID_REQUIRED"


class FencedInstanceIdError(BrokerResponseError):
    errno, name = 82, "FENCED_INSTANCE_ID"


class InvalidRecordError(BrokerResponseError):
    errno, name = 87, "INVALID_RECORD"


class UnknownTopicIdError(BrokerResponseError):
    errno, name, retriable, invalid_metadata = 100, "UNKNOWN_TOPIC_ID", True, True


def _build_table() -> dict[int, type[BrokerResponseError]]:
    table: dict[int, type[BrokerResponseError]] = {}
    written = [cls for cls in globals().values() if isinstance(cls, type) and issubclass(cls, BrokerResponseError)]
    for cls in written:
        if cls is not BrokerResponseError:
            table[cls.errno] = cls
    for code in ErrorCode:
        if code.value == 0 or code.value in table:
            continue
        class_name = "".join(part.capitalize() for part in code.name.split("_")) + "Error"
        table[code.value] = type(
            class_name,
            (BrokerResponseError,),
            {"errno": code.value, "name": code.name.upper(), "retriable": code.retriable, "__module__": __name__},
        )
    return table


_BY_CODE = _build_table()


def for_code(code: int) -> type[BrokerResponseError]:
    """The error class of a Kafka error code (never called with 0, which means no error)."""
    cls = _BY_CODE.get(code)
    if cls is None:
        # A code without a class here still gets Kafka's name and retry policy (kio's table),
        # e.g. SASL_AUTHENTICATION_FAILED or GROUP_AUTHORIZATION_FAILED.
        from kio.schema.errors import ErrorCode

        try:
            known = ErrorCode(code)
        except ValueError:
            name, retriable = f"UNKNOWN_ERROR_{code}", False
        else:
            name = known.name.upper()
            retriable = bool(known.retriable) and "AUTH" not in name  # kio calls some refusals retriable; Kafka does not
        cls = type(f"Error{code}", (BrokerResponseError,), {"errno": code, "name": name, "retriable": retriable})
        _BY_CODE[code] = cls
    return cls


def error_for(code: int, message: str | None = None, **context: Any) -> BrokerResponseError:
    """An instance of the error of `code`, carrying the broker's message and what it is about."""
    return for_code(code)(message, **context)


def check(code: int, message: str | None = None, **context: Any) -> None:
    """Raise the error of `code` unless it is 0 (NONE)."""
    if code:
        raise for_code(code)(message, **context)
