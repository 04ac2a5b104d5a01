"""The pure parts of the KIP-848 member (diskless/client/membership.py): one reconciliation
step from what a member holds to what it was assigned, and assignments by topic id turned into
topic names; and the consumer's group_protocol setting."""

from __future__ import annotations

import uuid

import pytest

from diskless.client.config import ConsumerConfig
from diskless.client.membership import Reconciliation, resolve_assignment
from diskless.client.structs import TopicPartition

A, B = uuid.UUID(int=1), uuid.UUID(int=2)


def tps(topic: str, *partitions: int) -> set[TopicPartition]:
    return {TopicPartition(topic, p) for p in partitions}


def test_a_step_revokes_what_is_no_longer_assigned_and_adds_what_is_new() -> None:
    step = Reconciliation.of(tps("a", 0, 1, 2), tps("a", 1, 2, 3))
    assert step.revoke == tps("a", 0) and step.add == tps("a", 3) and step.keep == tps("a", 1, 2)
    assert step.changes and step.assignment == sorted(tps("a", 1, 2, 3))


def test_a_member_holding_its_assignment_has_nothing_to_do() -> None:
    step = Reconciliation.of(tps("a", 0, 1), tps("a", 1, 0))
    assert not step.changes and step.assignment == sorted(tps("a", 0, 1))


def test_an_empty_assignment_revokes_everything() -> None:
    step = Reconciliation.of(tps("a", 0) | tps("b", 4), set())
    assert step.revoke == tps("a", 0) | tps("b", 4) and step.add == frozenset() and step.assignment == []


def test_assignments_by_topic_id_become_names_and_unknown_ids_are_reported() -> None:
    resolved, unknown = resolve_assignment({A: frozenset({0, 2}), B: frozenset({1})}, {A: "orders"})
    assert resolved == tps("orders", 0, 2) and unknown == {B}
    assert resolve_assignment({}, {A: "orders"}) == (set(), set())


def test_group_protocol_is_classic_or_consumer() -> None:
    assert ConsumerConfig.from_kwargs().group_protocol == "classic"
    config = ConsumerConfig.from_kwargs(group_protocol="consumer", group_remote_assignor="range")
    assert (config.group_protocol, config.group_remote_assignor) == ("consumer", "range")
    with pytest.raises(ValueError, match="group_protocol"):
        ConsumerConfig.from_kwargs(group_protocol="eager")
