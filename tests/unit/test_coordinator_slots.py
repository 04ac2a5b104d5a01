"""Coordinator slots: group and transactional ids hash to a slot as Kafka picks a group's
__consumer_offsets partition (abs(String.hashCode) % partitions). The hash codes were
printed by Java 17's String.hashCode."""

from __future__ import annotations

from diskless.broker.cluster.slots import holder, java_hash, slot_of
from metadata import PartitionLeadership
from metadata.model import COORDINATOR_SLOTS


def test_java_string_hash_codes() -> None:
    assert java_hash("") == 0
    assert java_hash("a") == 97
    assert java_hash("hello") == 99162322
    assert java_hash("my-group") == -1906497762
    assert java_hash("consumer-group-with-a-long-name") == -1157546098
    assert java_hash("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE
    assert java_hash("\U0001F600") == 1772899  # a surrogate pair counts as two UTF-16 units


def test_slots_as_kafka_picks_offsets_partitions() -> None:
    assert slot_of("my-group", 50) == 1906497762 % 50 == 12
    assert slot_of("consumer-group-with-a-long-name", 50) == 1157546098 % 50 == 48
    assert slot_of("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) is 0


def test_the_holder_of_a_keys_slot() -> None:
    slots = {slot: PartitionLeadership(COORDINATOR_SLOTS, slot, 1 + slot % 3, 4) for slot in range(50)}
    assert holder(slots, "my-group") == 1 + 12 % 3
    assert holder({}, "my-group") is None
    slots[slot_of("my-group", 50)] = PartitionLeadership(COORDINATOR_SLOTS, slot_of("my-group", 50), None, 5)
    assert holder(slots, "my-group") is None
