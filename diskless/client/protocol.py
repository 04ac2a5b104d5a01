"""The API versions this client speaks, and small helpers to build kio entities of any version.

kio has one generated class per API version, with the fields of that version only. The client
builds requests with `build(cls, **fields)`, which drops the fields a version does not have,
so one call site serves every version in `CLIENT_VERSIONS`; fields whose meaning changed
between versions (topic ids, batched group keys) are handled where the request is built.
Responses are read by attribute name, with `getattr(..., default)` for fields that only
later versions carry.

Pure: no I/O. Version negotiation is `pick_version(api_key, broker_range)`: the highest version
both sides speak, as Kafka's NetworkClient does. Produce, the one request on the producer's hot
path, is encoded by hand (`encode_produce_request`) rather than through kio.
"""

from __future__ import annotations

import datetime
import struct
import sys
from functools import cache, lru_cache
from types import MappingProxyType
from typing import Any

from diskless.wire import request_type, response_type

from .errors import UnsupportedByBroker

PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
API_VERSIONS = 18
CREATE_TOPICS = 19
DELETE_TOPICS = 20
DELETE_RECORDS = 21
INIT_PRODUCER_ID = 22
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
WRITE_TXN_MARKERS = 27
TXN_OFFSET_COMMIT = 28
DESCRIBE_CONFIGS = 32
CREATE_PARTITIONS = 37
DELETE_GROUPS = 42
INCREMENTAL_ALTER_CONFIGS = 44
DESCRIBE_CLUSTER = 60
DESCRIBE_PRODUCERS = 61
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66
CONSUMER_GROUP_HEARTBEAT = 68
CONSUMER_GROUP_DESCRIBE = 69

# api_key: (name, min_version, max_version) that this client's code handles. The maxima stop
# before versions that name topics by id only (Fetch 13, Produce 13; DeleteTopics 6 is fine:
# it takes names too). OffsetCommit v9 carries a KIP-848 member epoch (membership.py), and
# classic members may send it too; OffsetFetch v9's member fields are not sent.
CLIENT_VERSIONS = MappingProxyType(
    {
        PRODUCE: ("Produce", 3, 11),
        FETCH: ("Fetch", 4, 12),
        LIST_OFFSETS: ("ListOffsets", 1, 8),
        METADATA: ("Metadata", 1, 12),
        OFFSET_COMMIT: ("OffsetCommit", 2, 9),
        OFFSET_FETCH: ("OffsetFetch", 1, 8),
        FIND_COORDINATOR: ("FindCoordinator", 0, 3),
        JOIN_GROUP: ("JoinGroup", 0, 9),
        HEARTBEAT: ("Heartbeat", 0, 4),
        LEAVE_GROUP: ("LeaveGroup", 0, 5),
        SYNC_GROUP: ("SyncGroup", 0, 5),
        DESCRIBE_GROUPS: ("DescribeGroups", 0, 5),
        LIST_GROUPS: ("ListGroups", 0, 5),
        API_VERSIONS: ("ApiVersions", 0, 3),
        CREATE_TOPICS: ("CreateTopics", 2, 7),
        DELETE_TOPICS: ("DeleteTopics", 1, 6),
        DELETE_RECORDS: ("DeleteRecords", 0, 2),
        INIT_PRODUCER_ID: ("InitProducerId", 0, 4),
        ADD_PARTITIONS_TO_TXN: ("AddPartitionsToTxn", 0, 3),
        ADD_OFFSETS_TO_TXN: ("AddOffsetsToTxn", 0, 3),
        END_TXN: ("EndTxn", 0, 3),
        WRITE_TXN_MARKERS: ("WriteTxnMarkers", 0, 1),
        TXN_OFFSET_COMMIT: ("TxnOffsetCommit", 0, 3),
        DESCRIBE_CONFIGS: ("DescribeConfigs", 1, 4),
        CREATE_PARTITIONS: ("CreatePartitions", 0, 3),
        DELETE_GROUPS: ("DeleteGroups", 0, 2),
        INCREMENTAL_ALTER_CONFIGS: ("IncrementalAlterConfigs", 0, 1),
        DESCRIBE_CLUSTER: ("DescribeCluster", 0, 1),
        DESCRIBE_PRODUCERS: ("DescribeProducers", 0, 0),
        DESCRIBE_TRANSACTIONS: ("DescribeTransactions", 0, 0),
        LIST_TRANSACTIONS: ("ListTransactions", 0, 1),
        CONSUMER_GROUP_HEARTBEAT: ("ConsumerGroupHeartbeat", 0, 1),
        CONSUMER_GROUP_DESCRIBE: ("ConsumerGroupDescribe", 0, 1),
    }
)


def api_name(api_key: int) -> str:
    entry = CLIENT_VERSIONS.get(api_key)
    return entry[0] if entry is not None else f"api {api_key}"


def pick_version(api_key: int, broker_range: tuple[int, int] | None) -> int:
    """The highest version of `api_key` both this client and the broker speak.

    Raises `UnsupportedByBroker` when the ranges do not overlap or the broker lacks the API.
    """
    name, client_min, client_max = CLIENT_VERSIONS[api_key]
    if broker_range is not None:
        version = min(client_max, broker_range[1])
        if version >= max(client_min, broker_range[0]):
            return version
    raise UnsupportedByBroker(name, (client_min, client_max), broker_range)


@cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(name for name in cls.__dataclass_fields__ if not name.startswith("__"))


def build(cls: type, **fields: Any) -> Any:
    """An entity of `cls` from the given fields that this version of it has; the rest are dropped."""
    names = _field_names(cls)
    return cls(**{name: value for name, value in fields.items() if name in names})


def has_field(cls: type, name: str) -> bool:
    return name in _field_names(cls)


@cache
def nested(cls: type, name: str) -> type:
    """The class `name` generated next to `cls` (the nested entities of the same version)."""
    return getattr(sys.modules[cls.__module__], name)


def request_class(api_key: int, version: int) -> type:
    return request_type(api_key, version)


def response_class(api_key: int, version: int) -> type:
    """kio's response class, or ours where kio refuses what brokers send (wire/response_overrides.py)."""
    return response_type(api_key, version)


@lru_cache(maxsize=1024)
def ms(milliseconds: int) -> datetime.timedelta:
    """kio's `timedelta_i32` fields take a timedelta."""
    return datetime.timedelta(milliseconds=milliseconds)


# --- Produce, encoded by hand --------------------------------------------------------------

_HEADER = struct.Struct(">hhih")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
CORRELATION_ID_AT = 8  # size (4), api_key (2), api_version (2), then the correlation id


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_produce_request(
    version: int,
    client_id: str | None,
    acks: int,
    timeout_ms: int,
    topics: list[tuple[str, list[tuple[int, bytes]]]],
    transactional_id: str | None = None,
) -> bytearray:
    """A whole Produce frame (size prefix included, correlation id 0 at CORRELATION_ID_AT);
    a transactional producer's batches go with its `transactional_id` (Kafka refuses them
    without it: TRANSACTIONAL_ID_AUTHORIZATION_FAILED).

    The producer's hot path: one request per drain, where kio's generic writer costs more than
    the rest of the send. Byte for byte what `diskless.wire.encode_request` writes for the
    same ProduceRequest (a unit test holds the two together):

        v3-v8   header v1; transactional_id int16-length string (null: -1), acks int16,
                timeout_ms int32, [topic: name string, [partition: index int32,
                records int32-length bytes]] with int32 array counts
        v9+     header v2 (+ empty tagged fields); compact strings, arrays and bytes
                (uvarint length + 1), an empty tagged-field set after each struct
    """
    flexible = version >= 9
    client = None if client_id is None else client_id.encode()
    out = bytearray(4)
    out += _HEADER.pack(PRODUCE, version, 0, -1 if client is None else len(client))
    if client is not None:
        out += client
    txn = None if transactional_id is None else transactional_id.encode()
    if flexible:
        out += b"\x00"  # header tagged fields
        out += b"\x00" if txn is None else _uvarint(len(txn) + 1) + txn  # transactional_id, null: 0
    else:
        out += b"\xff\xff" if txn is None else _INT16.pack(len(txn)) + txn
    out += _ACKS_TIMEOUT.pack(acks, timeout_ms)
    out += _uvarint(len(topics) + 1) if flexible else _INT32.pack(len(topics))
    for name, partitions in topics:
        encoded = name.encode()
        if flexible:
            out += _uvarint(len(encoded) + 1)
            out += encoded
            out += _uvarint(len(partitions) + 1)
        else:
            out += _INT16.pack(len(encoded))
            out += encoded
            out += _INT32.pack(len(partitions))
        for index, records in partitions:
            out += _INT32.pack(index)
            if flexible:
                out += _uvarint(len(records) + 1)
                out += records
                out += b"\x00"
            else:
                out += _INT32.pack(len(records))
                out += records
        if flexible:
            out += b"\x00"
    if flexible:
        out += b"\x00"
    _INT32.pack_into(out, 0, len(out) - 4)
    return out
