"""Coordinator slots: Kafka's partitions of __consumer_offsets (and __transaction_state).

Every group id and transactional id hashes to one of `offsets.topic.num.partitions` slots, as
Kafka picks a group's offsets partition (`abs(groupId.hashCode) % partitions`); the broker
holding the slot coordinates the group or the transactions of that id. The controller moves
slots like partitions (plan_leaders, plan_balance), each move bumping the slot's epoch in the
store, so coordination spreads over the cluster and follows a dead broker's successor.
The number of slots is fixed when the first controller creates them.
"""

from __future__ import annotations

from collections.abc import Mapping

from metadata import PartitionLeadership

DEFAULT_SLOTS = 50  # offsets.topic.num.partitions


def java_hash(text: str) -> int:
    """Java's String.hashCode (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def slot_of(key: str, count: int) -> int:
    """The slot of a group id or transactional id (Kafka's Utils.abs: MIN_VALUE maps to 0)."""
    h = java_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % count


def holder(slots: Mapping[int, PartitionLeadership], key: str) -> int | None:
    """The node id holding `key`'s slot; None while slots are not made or the slot is unheld."""
    if not slots:
        return None
    slot = slots.get(slot_of(key, len(slots)))
    return None if slot is None else slot.leader_id
