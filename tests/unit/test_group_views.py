"""Groups known only by their committed offsets, and how a failed group request is answered."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from diskless.broker.group import GroupDescription, ListedGroup
from diskless.broker.group.views import described_with_offsets, listed_with_offsets
from diskless.broker.handlers.groups import coordinator_error
from metadata.errors import MetadataStorageError


def test_a_dead_group_with_offsets_is_described_as_an_empty_consumer_group() -> None:
    dead = GroupDescription("g", ErrorCode.none, "Dead")
    assert described_with_offsets(dead, has_offsets=True) == GroupDescription("g", ErrorCode.none, "Empty", "consumer")
    assert described_with_offsets(dead, has_offsets=False) is dead
    stable = GroupDescription("g", ErrorCode.none, "Stable", "connect", "range")
    assert described_with_offsets(stable, has_offsets=True) is stable


def test_groups_known_only_by_offsets_are_listed_as_empty_when_the_filter_admits_empty() -> None:
    stable = ListedGroup("b", "consumer", "Stable")
    offsets_only = ListedGroup("a", "consumer", "Empty")
    assert listed_with_offsets([stable], {"b"}, ["a", "b"], ()) == [offsets_only, stable]
    assert listed_with_offsets([], {"b"}, ["a", "b"], ("EMPTY",)) == [offsets_only]  # b is Stable: filtered out
    assert listed_with_offsets([stable], {"b"}, ["a"], ("Stable",)) == [stable]


def _request(client_id: str = "client-1") -> SimpleNamespace:
    return SimpleNamespace(header=SimpleNamespace(client_id=client_id))


def test_a_storage_failure_answers_not_coordinator_and_is_logged_once(caplog) -> None:
    caplog.set_level(logging.WARNING)
    exc = MetadataStorageError("commit offsets", "database is locked")
    assert coordinator_error(exc, "OffsetCommit", ["g1"], _request()) is ErrorCode.not_coordinator
    assert len(caplog.records) == 1
    record = caplog.records[0]
    assert record.levelno == logging.WARNING
    assert "OffsetCommit" in record.getMessage() and "'g1'" in record.getMessage() and "client-1" in record.getMessage()
    assert "NOT_COORDINATOR" in record.getMessage()


def test_an_unexpected_exception_answers_unknown_server_error_and_is_logged_once_with_its_traceback(caplog) -> None:
    caplog.set_level(logging.WARNING)
    try:
        raise RuntimeError("bug")
    except RuntimeError as exc:
        assert coordinator_error(exc, "JoinGroup", ["g2"], _request()) is ErrorCode.unknown_server_error
    assert len(caplog.records) == 1
    record = caplog.records[0]
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert "JoinGroup" in record.getMessage() and "'g2'" in record.getMessage()
