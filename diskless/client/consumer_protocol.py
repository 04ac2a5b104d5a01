"""The "consumer" embedded protocol: member subscriptions and assignments inside group requests.

JoinGroup carries each member's subscription and SyncGroup each member's assignment as opaque
bytes, which consumers of every client agree to encode as Kafka's ConsumerProtocol does:

    int16  version
    ...    ConsumerProtocolSubscription / ConsumerProtocolAssignment of that version

    Subscription v0: topics [string], user_data bytes
                 v1: + owned_partitions [topic string, partitions [int32]]
                 v2: + generation_id int32
                 v3: + rack_id string
    Assignment   v0: assigned_partitions [topic, partitions [int32]], user_data bytes

We write version 3 (as the Java client does) and read any version, a newer one by its known
prefix (Java's forward compatibility). Pure.
"""

from __future__ import annotations

import importlib
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from itertools import groupby

from kio.schema.consumer_protocol_assignment.v3.data import ConsumerProtocolAssignment
from kio.schema.consumer_protocol_assignment.v3.data import TopicPartition as AssignmentTopic
from kio.schema.consumer_protocol_subscription.v3.data import ConsumerProtocolSubscription
from kio.schema.consumer_protocol_subscription.v3.data import TopicPartition as SubscriptionTopic
from kio.serial import entity_reader, entity_writer

from diskless.wire import InvalidFrame

from .structs import TopicPartition

VERSION = 3
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class Subscription:
    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = -1
    rack_id: str | None = None


@dataclass(frozen=True, slots=True)
class Assignment:
    partitions: tuple[TopicPartition, ...]
    user_data: bytes | None = None


class _Buffer(bytearray):
    def write(self, data: bytes) -> int:
        self.extend(data)
        return len(data)


def _group(partitions: Iterable[TopicPartition]) -> list[tuple[str, tuple[int, ...]]]:
    ordered = sorted(partitions)
    return [(topic, tuple(tp.partition for tp in items)) for topic, items in groupby(ordered, key=lambda tp: tp.topic)]


def encode_subscription(subscription: Subscription) -> bytes:
    out = _Buffer(_INT16.pack(VERSION))
    entity = ConsumerProtocolSubscription(
        topics=tuple(sorted(subscription.topics)),
        user_data=subscription.user_data,
        owned_partitions=tuple(SubscriptionTopic(topic=t, partitions=p) for t, p in _group(subscription.owned_partitions)),
        generation_id=subscription.generation_id,
        rack_id=subscription.rack_id,
    )
    entity_writer(ConsumerProtocolSubscription)(out, entity)
    return bytes(out)


def _version(data: bytes) -> int:
    if len(data) < 2:
        raise InvalidFrame(f"consumer protocol data of {len(data)} bytes has no version")
    (version,) = _INT16.unpack_from(data, 0)
    if version < 0:
        raise InvalidFrame(f"consumer protocol version {version} is negative")
    return min(version, VERSION)


@cache
def _subscription_class(version: int) -> type:
    module = importlib.import_module(f"kio.schema.consumer_protocol_subscription.v{version}.data")
    return module.ConsumerProtocolSubscription


def decode_subscription(data: bytes) -> Subscription:
    """Decode a member's subscription; raises `InvalidFrame` for bytes that are not one."""
    version = _version(data)
    cls = _subscription_class(version)
    try:
        entity, _size = entity_reader(cls)(data, 2)
    except Exception as exc:
        raise InvalidFrame(f"malformed consumer subscription v{version}: {exc}") from exc
    owned = tuple(TopicPartition(t.topic, p) for t in getattr(entity, "owned_partitions", ()) for p in t.partitions)
    return Subscription(
        topics=tuple(entity.topics),
        user_data=entity.user_data,
        owned_partitions=owned,
        generation_id=getattr(entity, "generation_id", -1),
        rack_id=getattr(entity, "rack_id", None),
    )


def encode_assignment(assignment: Assignment) -> bytes:
    out = _Buffer(_INT16.pack(VERSION))
    entity = ConsumerProtocolAssignment(
        assigned_partitions=tuple(AssignmentTopic(topic=t, partitions=p) for t, p in _group(assignment.partitions)),
        user_data=assignment.user_data,
    )
    entity_writer(ConsumerProtocolAssignment)(out, entity)
    return bytes(out)


def decode_assignment(data: bytes) -> Assignment:
    """Decode a member's assignment. Empty bytes mean no assignment (what Kafka sends on error)."""
    if not data:
        return Assignment(())
    _version(data)
    try:
        entity, _size = entity_reader(ConsumerProtocolAssignment)(data, 2)
    except Exception as exc:
        raise InvalidFrame(f"malformed consumer assignment: {exc}") from exc
    partitions = tuple(TopicPartition(t.topic, p) for t in entity.assigned_partitions for p in t.partitions)
    return Assignment(partitions, entity.user_data)


def encode_generation(generation_id: int) -> bytes:
    """The user data of Java's CooperativeStickyAssignor: the member's generation, int32."""
    return _INT32.pack(generation_id)


def decode_generation(user_data: bytes | None) -> int:
    if user_data is not None and len(user_data) == 4:
        return _INT32.unpack(user_data)[0]
    return -1
