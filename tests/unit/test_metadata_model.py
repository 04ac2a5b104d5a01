"""The metadata store's pure rules: values, checks, and URL parsing. No event loop, no I/O."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from metadata import (
    CommittedOffset,
    ConflictingConfigChanges,
    FencedLeaderEpoch,
    InvalidOffset,
    InvalidPartitions,
    InvalidProducerSnapshot,
    InvalidRemoteSegment,
    InvalidRemoteSegmentTransition,
    InvalidTopicId,
    InvalidTopicName,
    ProducerSnapshot,
    ProducerStateEntry,
    RemoteSegment,
    RemoteSegmentState,
    TopicMetadata,
    TopicNameCollision,
    TopicPartition,
    UnknownLeaderEpoch,
    UnknownTopicOrPartition,
    UnsupportedMetadataUrl,
    parse_metadata_url,
    sqlite_url,
)
from metadata.model import (
    MAX_TOPIC_NAME_LENGTH,
    REMOTE_SEGMENT_TRANSITIONS,
    ProducerIdBlock,
    apply_config_changes,
    check_leader_epoch,
    check_offset,
    check_partition,
    check_remote_segment_removable,
    check_remote_segment_transition,
    check_topic_collision,
    validate_partition_count,
    validate_producer_snapshot,
    validate_remote_segment,
    validate_topic_id,
    validate_topic_name,
)

UPLOADING, COMMITTED, DELETING = RemoteSegmentState.UPLOADING, RemoteSegmentState.COMMITTED, RemoteSegmentState.DELETING


def segment(**changes: object) -> RemoteSegment:
    base = RemoteSegment("orders", 1, 100, 199, 1_000, 2_000, 4096, 3, "orders/1/100-abc.log")
    return dataclasses.replace(base, **changes)


# --- values ------------------------------------------------------------------------------


def test_topic_metadata_configs_are_a_frozen_copy() -> None:
    configs = {"retention.ms": "1000"}
    topic = TopicMetadata("orders", uuid.UUID(int=7), 3, configs)
    configs["retention.ms"] = "5"
    assert topic.configs == {"retention.ms": "1000"}
    with pytest.raises(TypeError):
        topic.configs["segment.bytes"] = "1"  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        topic.num_partitions = 4  # type: ignore[misc]


def test_topic_metadata_equality_and_hash_follow_values() -> None:
    a = TopicMetadata("orders", uuid.UUID(int=7), 3, {"a": "1", "b": "2"})
    b = TopicMetadata("orders", uuid.UUID(int=7), 3, {"b": "2", "a": "1"})
    c = TopicMetadata("orders", uuid.UUID(int=7), 3, {"a": "1"})
    assert a == b and hash(a) == hash(b)
    assert a != c
    assert len({a, b, c}) == 2


def test_topic_partition_is_a_plain_pair() -> None:
    assert TopicPartition("orders", 2) == ("orders", 2)
    assert TopicPartition(*("orders", 2)).partition == 2


def test_remote_segment_state_compares_with_its_name() -> None:
    assert RemoteSegmentState("committed") is COMMITTED
    assert COMMITTED == "committed"
    assert segment().state is UPLOADING


def test_producer_id_block_bounds() -> None:
    assert ProducerIdBlock(first_producer_id=2000, size=1000).last_producer_id == 2999


def test_committed_offset_is_frozen() -> None:
    offset = CommittedOffset("orders", 0, 10, None, "", 5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        offset.offset = 11  # type: ignore[misc]


# --- topic checks ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["orders", "a", "A.b_c-9", "x" * MAX_TOPIC_NAME_LENGTH, "..."])
def test_legal_topic_names(name: str) -> None:
    validate_topic_name(name)


@pytest.mark.parametrize(
    ("name", "reason_part"),
    [
        ("", "empty"),
        (".", "not allowed"),
        ("..", "not allowed"),
        ("x" * (MAX_TOPIC_NAME_LENGTH + 1), "longer than 249"),
        ("has space", "only ASCII"),
        ("slash/name", "only ASCII"),
        ("ümlaut", "only ASCII"),
    ],
)
def test_illegal_topic_names(name: str, reason_part: str) -> None:
    with pytest.raises(InvalidTopicName) as e:
        validate_topic_name(name)
    assert e.value.name == name
    assert reason_part in e.value.reason


@pytest.mark.parametrize(
    ("name", "existing", "colliding"),
    [
        ("a_b", ["a.b"], "a.b"),
        ("a.b", ["a_b"], "a_b"),
        ("a.b_c", ["a_b.c", "a.b.c", "x"], "a.b.c"),  # the least of them, whatever the order
        ("a.b_c", ["a.b_c", "a_b_c"], "a_b_c"),  # the name itself is not a collision
    ],
)
def test_names_colliding_in_metric_names(name: str, existing: list[str], colliding: str) -> None:
    with pytest.raises(TopicNameCollision) as e:
        check_topic_collision(name, existing)
    assert (e.value.name, e.value.existing_name) == (name, colliding)
    assert str(e.value) == f"Topic '{name}' collides with existing topic: {colliding}"  # Kafka's words


@pytest.mark.parametrize(("name", "existing"), [("ab", ["a.b", "a_b", "ab"]), ("a.b", ["a.b", "a-b", "a.bc", "A_b"]), ("a-b", ["a_b"])])
def test_names_that_do_not_collide(name: str, existing: list[str]) -> None:
    check_topic_collision(name, existing)


@pytest.mark.parametrize("value", [0, 1])
def test_reserved_topic_ids(value: int) -> None:
    with pytest.raises(InvalidTopicId) as e:
        validate_topic_id(uuid.UUID(int=value))
    assert e.value.topic_id == uuid.UUID(int=value)
    validate_topic_id(uuid.UUID(int=2))


def test_partition_count_of_a_new_topic() -> None:
    validate_partition_count("t", None, 1)
    for bad in (0, -3):
        with pytest.raises(InvalidPartitions) as e:
            validate_partition_count("t", None, bad)
        assert (e.value.topic, e.value.current_partitions, e.value.requested_partitions) == ("t", None, bad)


def test_partition_count_only_grows() -> None:
    validate_partition_count("t", 3, 4)
    with pytest.raises(InvalidPartitions) as same:
        validate_partition_count("t", 3, 3)
    assert (same.value.current_partitions, same.value.requested_partitions) == (3, 3)
    assert "already has 3" in same.value.reason
    with pytest.raises(InvalidPartitions) as fewer:
        validate_partition_count("t", 3, 2)
    assert (fewer.value.current_partitions, fewer.value.requested_partitions) == (3, 2)
    assert "only be added" in fewer.value.reason


def test_check_partition_range() -> None:
    check_partition("t", 0, 2)
    check_partition("t", 1, 2)
    for bad in (2, -1):
        with pytest.raises(UnknownTopicOrPartition) as e:
            check_partition("t", bad, 2)
        assert (e.value.topic, e.value.partition, e.value.num_partitions) == ("t", bad, 2)


def test_check_offset() -> None:
    check_offset("t", 0, 0)
    with pytest.raises(InvalidOffset) as e:
        check_offset("t", 1, -1)
    assert (e.value.topic, e.value.partition, e.value.offset) == ("t", 1, -1)


def test_apply_config_changes_sets_overrides_and_deletes() -> None:
    current = {"retention.ms": "1", "segment.bytes": "2"}
    changed = apply_config_changes("t", current, {"retention.ms": "9", "cleanup.policy": "delete"}, {"segment.bytes"})
    assert changed == {"retention.ms": "9", "cleanup.policy": "delete"}
    assert current == {"retention.ms": "1", "segment.bytes": "2"}  # input untouched


def test_apply_config_changes_ignores_deleting_an_unset_name() -> None:
    assert apply_config_changes("t", {"a": "1"}, {}, {"never.set"}) == {"a": "1"}


def test_apply_config_changes_refuses_set_and_delete_of_one_name() -> None:
    with pytest.raises(ConflictingConfigChanges) as e:
        apply_config_changes("t", {}, {"a": "1", "b": "2"}, {"b", "c"})
    assert (e.value.topic, e.value.config_names) == ("t", frozenset({"b"}))


# --- leader epochs -----------------------------------------------------------------------


def test_check_leader_epoch() -> None:
    check_leader_epoch("t", 0, 5, 5)
    with pytest.raises(FencedLeaderEpoch) as old:
        check_leader_epoch("t", 0, 4, 5)
    assert (old.value.topic, old.value.partition, old.value.leader_epoch, old.value.current_leader_epoch) == (
        "t", 0, 4, 5,
    )  # fmt: skip
    with pytest.raises(UnknownLeaderEpoch) as new:
        check_leader_epoch("t", 0, 6, 5)
    assert (new.value.leader_epoch, new.value.current_leader_epoch) == (6, 5)


# --- remote segments ---------------------------------------------------------------------


def test_valid_remote_segment() -> None:
    validate_remote_segment(segment())
    validate_remote_segment(segment(base_offset=0, last_offset=0, size_bytes=0))
    # LogAppendTime rewrites only max_timestamp, which may then be below the first timestamp.
    validate_remote_segment(segment(base_timestamp=5_000, max_timestamp=4_000))


@pytest.mark.parametrize(
    ("changes", "reason_part"),
    [
        ({"base_offset": -1}, "base_offset is negative"),
        ({"last_offset": 99}, "below base_offset"),
        ({"size_bytes": -1}, "size_bytes"),
        ({"object_key": ""}, "object_key"),
        ({"state": COMMITTED}, "enters the catalogue as uploading"),
    ],
)
def test_invalid_remote_segment(changes: dict[str, object], reason_part: str) -> None:
    bad = segment(**changes)
    with pytest.raises(InvalidRemoteSegment) as e:
        validate_remote_segment(bad)
    assert (e.value.topic, e.value.partition, e.value.base_offset, e.value.object_key) == (
        bad.topic, bad.partition, bad.base_offset, bad.object_key,
    )  # fmt: skip
    assert reason_part in e.value.reason


ALLOWED = {(UPLOADING, COMMITTED), (UPLOADING, DELETING), (COMMITTED, DELETING)}


@pytest.mark.parametrize("state", list(RemoteSegmentState))
@pytest.mark.parametrize("target", list(RemoteSegmentState))
def test_remote_segment_transitions(state: RemoteSegmentState, target: RemoteSegmentState) -> None:
    seg = segment(state=state)
    if (state, target) in ALLOWED:
        check_remote_segment_transition(seg, target)
    else:
        with pytest.raises(InvalidRemoteSegmentTransition) as e:
            check_remote_segment_transition(seg, target)
        assert (e.value.state, e.value.target, e.value.base_offset, e.value.object_key) == (
            state, target, seg.base_offset, seg.object_key,
        )  # fmt: skip


def test_transition_table_matches_the_lifecycle() -> None:
    table = {(s, t) for s, targets in REMOTE_SEGMENT_TRANSITIONS.items() for t in targets}
    assert table == ALLOWED


@pytest.mark.parametrize("state", list(RemoteSegmentState))
def test_only_deleting_segments_are_removable(state: RemoteSegmentState) -> None:
    if state is DELETING:
        check_remote_segment_removable(segment(state=state))
    else:
        with pytest.raises(InvalidRemoteSegmentTransition) as e:
            check_remote_segment_removable(segment(state=state))
        assert (e.value.state, e.value.target) == (state, "removed")


# --- producer snapshots ------------------------------------------------------------------


def entry(producer_id: int, last_offset: int) -> ProducerStateEntry:
    return ProducerStateEntry(producer_id, 0, 4, last_offset, 4, 1_000)


def test_valid_producer_snapshot() -> None:
    validate_producer_snapshot("t", 0, ProducerSnapshot(10, (entry(1, 9), entry(2, 3))))
    validate_producer_snapshot("t", 0, ProducerSnapshot(0, ()))


@pytest.mark.parametrize(
    ("snapshot", "reason_part"),
    [
        (ProducerSnapshot(-1, ()), "negative"),
        (ProducerSnapshot(10, (entry(1, 2), entry(1, 5))), "appears twice"),
        (ProducerSnapshot(10, (entry(1, 10),)), "at or past log_end_offset"),
    ],
)
def test_invalid_producer_snapshot(snapshot: ProducerSnapshot, reason_part: str) -> None:
    with pytest.raises(InvalidProducerSnapshot) as e:
        validate_producer_snapshot("t", 3, snapshot)
    assert (e.value.topic, e.value.partition) == ("t", 3)
    assert reason_part in e.value.reason


# --- URLs --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:///metadata.db", "metadata.db"),
        ("sqlite:///./diskless-data/metadata.db", "./diskless-data/metadata.db"),
        ("sqlite:///tmp/m.db", "tmp/m.db"),  # relative, as in SQLAlchemy
        ("sqlite:////var/lib/diskless/metadata.db", "/var/lib/diskless/metadata.db"),
        ("SQLite:////abs.db", "/abs.db"),
        ("sqlite:///with%20percent.db", "with%20percent.db"),  # verbatim, no decoding
        ("sqlite://", ":memory:"),
        ("sqlite:///:memory:", ":memory:"),
    ],
)
def test_parse_sqlite_urls(url: str, path: str) -> None:
    assert parse_metadata_url(url).path == path


@pytest.mark.parametrize(
    ("url", "reason_part"),
    [
        ("mysql://host/db", "unknown scheme 'mysql'"),
        ("file:///tmp/m.db", "unknown scheme 'file'"),
        ("/just/a/path.db", "not a URL"),
        ("sqlite:/m.db", "three slashes"),
        ("sqlite://host/m.db", "no host"),
        ("sqlite:///", "no database path"),
        ("sqlite:///m.db?mode=ro", "query"),
        ("sqlite:///m.db#x", "query"),
    ],
)
def test_refused_urls(url: str, reason_part: str) -> None:
    with pytest.raises(UnsupportedMetadataUrl) as e:
        parse_metadata_url(url)
    assert e.value.url == url
    assert reason_part in e.value.reason


@pytest.mark.parametrize(
    ("url", "dsn", "location"),
    [
        ("postgresql://u:p@127.0.0.1/diskless", "postgresql://u:p@127.0.0.1/diskless", "postgresql://u@127.0.0.1/diskless"),
        ("postgres://127.0.0.1:5433/d?sslmode=disable", "postgresql://127.0.0.1:5433/d?sslmode=disable", "postgresql://127.0.0.1:5433/d"),
        ("postgresql+asyncpg://h/d?timeout_ms=200&pool_max_size=3", "postgresql://h/d", "postgresql://h/d"),
    ],
)
def test_parse_postgresql_urls(url: str, dsn: str, location: str) -> None:
    parsed = parse_metadata_url(url)
    assert (parsed.dsn, parsed.location) == (dsn, location)
    assert "p@" not in parsed.location  # never the password in messages


def test_postgresql_url_settings() -> None:
    settings = parse_metadata_url("postgresql://h/d?timeout_ms=200&pool_max_size=3&connect_timeout_ms=50").settings
    assert (settings.timeout_ms, settings.pool_max_size, settings.connect_timeout_ms) == (200, 3, 50)


@pytest.mark.parametrize(
    ("url", "reason_part"),
    [
        ("postgresql://h:port/d", "not a valid postgresql URL"),
        ("postgresql://h", "name one database"),
        ("postgresql://h/d/e", "name one database"),
        ("postgresql://h/d#x", "fragment"),
        ("postgresql://h/d?timeout_ms=soon", "whole number"),
        ("postgresql://h/d?pool_max_size=0", "at least 1"),
    ],
)
def test_refused_postgresql_urls(url: str, reason_part: str) -> None:
    with pytest.raises(UnsupportedMetadataUrl) as e:
        parse_metadata_url(url)
    assert e.value.url == url
    assert reason_part in e.value.reason


@pytest.mark.parametrize("path", ["/abs/dir/metadata.db", "rel/metadata.db", "./diskless-data/metadata.db"])
def test_sqlite_url_round_trips(path: str) -> None:
    assert parse_metadata_url(sqlite_url(path)).path == path


def test_sqlite_url_of_an_absolute_path_has_four_slashes() -> None:
    assert sqlite_url("/var/lib/m.db") == "sqlite:////var/lib/m.db"


def test_sqlite_url_refuses_paths_it_cannot_express() -> None:
    with pytest.raises(UnsupportedMetadataUrl):
        sqlite_url("odd?name.db")
