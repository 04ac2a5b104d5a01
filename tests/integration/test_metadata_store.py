"""The metadata store scenarios, written once against the `MetadataStore` protocol and run
against every backend in BACKENDS: SQLite files in a temporary directory, and PostgreSQL
databases (one new database per test) on the session's real server (`postgres_server` in
conftest). Only the tests at the end, under "SQLite only", look beneath the protocol;
PostgreSQL-only tests (migrations, faults) are in test_metadata_postgres.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest

from metadata.postgres import broker_session_name
from metadata.sqlite_schema import SCHEMA_VERSION
from metadata.model import COORDINATOR_SLOTS
from metadata import (
    MetadataError,
    BrokerIdInUse,
    BrokerRegistration,
    CommittedOffset,
    CoordinatorFenced,
    PartitionLeadership,
    ConflictingConfigChanges,
    FencedLeaderEpoch,
    InvalidOffset,
    InvalidPartitions,
    InvalidProducerSnapshot,
    InvalidRemoteSegment,
    InvalidRemoteSegmentTransition,
    InvalidTopicName,
    MetadataStorageError,
    MetadataStore,
    MetadataStoreClosed,
    ProducerSnapshot,
    ProducerStateEntry,
    RemoteSegment,
    RemoteSegmentAlreadyExists,
    RemoteSegmentOverlap,
    RemoteSegmentState,
    TopicAlreadyExists,
    TopicIdAlreadyExists,
    TopicMetadata,
    TopicNameCollision,
    UnknownLeaderEpoch,
    UnknownRemoteSegment,
    UnknownTopic,
    UnknownTopicId,
    UnknownTopicOrPartition,
    UnsupportedMetadataUrl,
    UnsupportedSchemaVersion,
    WalBatch,
    open_metadata_store,
    sqlite_url,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
UPLOADING, COMMITTED, DELETING = RemoteSegmentState.UPLOADING, RemoteSegmentState.COMMITTED, RemoteSegmentState.DELETING
ALL_STATES = tuple(RemoteSegmentState)


@dataclass(frozen=True)
class Backend:
    name: str


BACKENDS = [
    pytest.param(Backend("sqlite"), id="sqlite"),
    pytest.param(Backend("postgresql"), id="postgresql"),
]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Backend:
    return request.param


@pytest.fixture
def url(backend: Backend, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """The URL of a fresh, empty database for this test."""
    if backend.name == "postgresql":
        return request.getfixturevalue("postgres_database")  # the server starts only if asked for
    return sqlite_url(tmp_path / "metadata.db")


@pytest.fixture
async def store(url: str) -> AsyncIterator[MetadataStore]:
    opened = await open_metadata_store(url)
    yield opened
    await opened.close()


def name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def offset(topic: str, partition: int, value: int, *, epoch: int | None = 1, ts: int = 1_000) -> CommittedOffset:
    return CommittedOffset(topic, partition, value, epoch, f"meta-{value}", ts)


def seg(topic: str, partition: int, base: int, last: int, *, epoch: int = 0, key: str | None = None) -> RemoteSegment:
    key = key or f"{topic}/{partition}/{base:020d}-{uuid.uuid4().hex[:8]}.log"
    return RemoteSegment(topic, partition, base, last, 1_000 + base, 1_000 + last, 100 * (last - base + 1), epoch, key)


async def add_committed(store: MetadataStore, segment: RemoteSegment) -> RemoteSegment:
    await store.add_remote_segment(segment)
    return await store.commit_remote_segment(
        segment.topic, segment.partition, segment.base_offset, segment.object_key, leader_epoch=segment.leader_epoch
    )


# --- topics ------------------------------------------------------------------------------


async def test_store_follows_the_protocol(store: MetadataStore) -> None:
    assert isinstance(store, MetadataStore)


async def test_create_and_read_topic(store: MetadataStore) -> None:
    topic = name()
    created = await store.create_topic(topic, 3, {"retention.ms": "60000", "cleanup.policy": "delete"})
    assert created.name == topic
    assert created.num_partitions == 3
    assert created.configs == {"retention.ms": "60000", "cleanup.policy": "delete"}
    assert created.topic_id.version == 4
    assert await store.get_topic(topic) == created
    assert await store.get_topic_by_id(created.topic_id) == created
    assert await store.get_log_start_offsets(topic) == {0: 0, 1: 0, 2: 0}
    assert [await store.get_leader_epoch(topic, p) for p in range(3)] == [0, 0, 0]


async def test_create_topic_keeps_a_given_topic_id(store: MetadataStore) -> None:
    topic_id = uuid.uuid4()
    created = await store.create_topic(name(), 1, {}, topic_id=topic_id)
    assert created.topic_id == topic_id
    assert (await store.get_topic_by_id(topic_id)).name == created.name


async def test_create_topic_refuses_duplicates(store: MetadataStore) -> None:
    topic = name()
    first = await store.create_topic(topic, 2, {"a": "1"})
    with pytest.raises(TopicAlreadyExists) as by_name:
        await store.create_topic(topic, 5, {})
    assert by_name.value.name == topic
    other = name()
    with pytest.raises(TopicIdAlreadyExists) as by_id:
        await store.create_topic(other, 1, {}, topic_id=first.topic_id)
    assert (by_id.value.topic_id, by_id.value.existing_name) == (first.topic_id, topic)
    assert await store.list_topics() == [first]


async def test_create_topic_refuses_names_that_collide_in_metrics(store: MetadataStore) -> None:
    """'.' and '_' are one character in Kafka's metric names: a topic whose name differs from an
    existing one's only there is refused with Kafka's message, naming the least colliding one;
    nothing of it is written. The same name again is still TopicAlreadyExists."""
    prefix = uuid.uuid4().hex[:10]
    first = await store.create_topic(f"c{prefix}.a_b", 1, {})
    for clash in (f"c{prefix}_a_b", f"c{prefix}.a.b", f"c{prefix}_a.b"):
        with pytest.raises(TopicNameCollision) as collision:
            await store.create_topic(clash, 2, {"retention.ms": "1"})
        assert (str(collision.value), collision.value.name, collision.value.existing_name) == (
            f"Topic '{clash}' collides with existing topic: c{prefix}.a_b", clash, f"c{prefix}.a_b",
        )
    with pytest.raises(TopicAlreadyExists):
        await store.create_topic(f"c{prefix}.a_b", 1, {})
    other = await store.create_topic(f"c{prefix}-a-b", 1, {})  # '-' is no collision character
    assert await store.list_topics() == sorted([first, other], key=lambda t: t.name)
    with pytest.raises(UnknownTopic):
        await store.get_topic(f"c{prefix}_a_b")


async def test_create_topic_validates_before_writing(store: MetadataStore) -> None:
    with pytest.raises(InvalidTopicName):
        await store.create_topic("bad name", 1, {})
    with pytest.raises(InvalidPartitions) as e:
        await store.create_topic(name(), 0, {})
    assert (e.value.current_partitions, e.value.requested_partitions) == (None, 0)
    assert await store.list_topics() == []


async def test_unknown_topics(store: MetadataStore) -> None:
    missing = name()
    for call in (store.get_topic, store.delete_topic, store.get_log_start_offsets):
        with pytest.raises(UnknownTopic) as e:
            await call(missing)
        assert e.value.name == missing
    with pytest.raises(UnknownTopic):
        await store.alter_topic_configs(missing, {"a": "1"}, set())
    with pytest.raises(UnknownTopic):
        await store.create_partitions(missing, 4)
    topic_id = uuid.uuid4()
    with pytest.raises(UnknownTopicId) as by_id:
        await store.get_topic_by_id(topic_id)
    assert by_id.value.topic_id == topic_id


async def test_list_topics_is_ordered_by_name(store: MetadataStore) -> None:
    names = ["zeta", "alpha", "mid.dle", "Alpha"]
    created = {n: await store.create_topic(n, 1, {"n": n}) for n in names}
    assert await store.list_topics() == [created[n] for n in sorted(names)]


async def test_alter_topic_configs_is_incremental(store: MetadataStore) -> None:
    topic = name()
    await store.create_topic(topic, 1, {"retention.ms": "1", "segment.bytes": "2", "flush.ms": "3"})
    altered = await store.alter_topic_configs(
        topic, {"retention.ms": "10", "cleanup.policy": "delete"}, {"segment.bytes", "never.set"}
    )
    expected = {"retention.ms": "10", "cleanup.policy": "delete", "flush.ms": "3"}
    assert altered.configs == expected
    assert (await store.get_topic(topic)).configs == expected
    with pytest.raises(ConflictingConfigChanges) as e:
        await store.alter_topic_configs(topic, {"flush.ms": "4", "x": "1"}, {"flush.ms"})
    assert e.value.config_names == frozenset({"flush.ms"})
    assert (await store.get_topic(topic)).configs == expected


async def test_create_partitions_only_grows(store: MetadataStore) -> None:
    topic = name()
    await store.create_topic(topic, 2, {"a": "1"})
    await store.set_log_start_offset(topic, 1, 50)
    grown = await store.create_partitions(topic, 5)
    assert (grown.num_partitions, grown.configs) == (5, {"a": "1"})
    assert await store.get_log_start_offsets(topic) == {0: 0, 1: 50, 2: 0, 3: 0, 4: 0}
    assert await store.get_leader_epoch(topic, 4) == 0
    for bad in (5, 3):
        with pytest.raises(InvalidPartitions) as e:
            await store.create_partitions(topic, bad)
        assert (e.value.topic, e.value.current_partitions, e.value.requested_partitions) == (topic, 5, bad)
    assert (await store.get_topic(topic)).num_partitions == 5


async def test_delete_topic_removes_everything_keyed_on_it(store: MetadataStore) -> None:
    topic, kept = name(), name()
    created = await store.create_topic(topic, 2, {"retention.ms": "5"})
    await store.create_topic(kept, 1, {})
    await store.set_log_start_offset(topic, 0, 40)
    epoch = await store.bump_leader_epoch(topic, 1)
    await store.commit_offsets("g1", [offset(topic, 0, 41), offset(topic, 1, 7), offset(kept, 0, 3)])
    await store.commit_offsets("g2", [offset(topic, 1, 9)])
    await store.add_remote_segment(seg(topic, 1, 0, 9, epoch=epoch))
    await add_committed(store, seg(topic, 1, 10, 19, epoch=epoch))
    deleting = await add_committed(store, seg(topic, 1, 20, 29, epoch=epoch))
    await store.mark_remote_segment_deleting(topic, 1, 20, deleting.object_key, leader_epoch=epoch)
    await store.put_producer_snapshot(topic, 1, ProducerSnapshot(30, (pstate(7, 29),)), leader_epoch=epoch)

    assert await store.delete_topic(topic) == created

    with pytest.raises(UnknownTopic):
        await store.get_topic(topic)
    with pytest.raises(UnknownTopicId):
        await store.get_topic_by_id(created.topic_id)
    assert await store.fetch_offsets("g1") == [offset(kept, 0, 3)]
    assert await store.fetch_offsets("g2") == []
    assert await store.list_groups_with_offsets() == ["g1"]
    # The same name again is a new topic with none of the old state.
    again = await store.create_topic(topic, 2, {})
    assert again.topic_id != created.topic_id and again.configs == {}
    assert await store.get_log_start_offsets(topic) == {0: 0, 1: 0}
    assert await store.get_leader_epoch(topic, 1) == 0
    assert await store.list_remote_segments(topic, 1, ALL_STATES) == []
    assert await store.get_producer_snapshot(topic, 1) is None
    # Object keys of the deleted topic's segments are free again.
    await store.add_remote_segment(dataclasses.replace(deleting, leader_epoch=0, state=UPLOADING))


# --- partition state ---------------------------------------------------------------------


async def test_log_start_offset_never_moves_back(store: MetadataStore) -> None:
    topic = name()
    await store.create_topic(topic, 2, {})
    assert await store.set_log_start_offset(topic, 0, 10) == 10
    assert await store.set_log_start_offset(topic, 0, 5) == 10
    assert await store.set_log_start_offset(topic, 0, 10) == 10
    assert await store.set_log_start_offset(topic, 0, 25) == 25
    assert await store.get_log_start_offsets(topic) == {0: 25, 1: 0}


async def test_log_start_offset_errors(store: MetadataStore) -> None:
    topic = name()
    await store.create_topic(topic, 2, {})
    with pytest.raises(UnknownTopicOrPartition) as e:
        await store.set_log_start_offset(topic, 2, 1)
    assert (e.value.topic, e.value.partition, e.value.num_partitions) == (topic, 2, 2)
    with pytest.raises(InvalidOffset):
        await store.set_log_start_offset(topic, 0, -1)
    with pytest.raises(UnknownTopic):
        await store.set_log_start_offset(name(), 0, 1)
    assert await store.get_log_start_offsets(topic) == {0: 0, 1: 0}


async def test_log_start_offset_fenced_when_epoch_given(store: MetadataStore) -> None:
    topic = name()
    await store.create_topic(topic, 1, {})
    await store.bump_leader_epoch(topic, 0)
    with pytest.raises(FencedLeaderEpoch):
        await store.set_log_start_offset(topic, 0, 9, leader_epoch=0)
    with pytest.raises(UnknownLeaderEpoch):
        await store.set_log_start_offset(topic, 0, 9, leader_epoch=2)
    assert await store.set_log_start_offset(topic, 0, 9, leader_epoch=1) == 9


async def test_leader_epochs_bump_per_partition(store: MetadataStore) -> None:
    topic = name()
    await store.create_topic(topic, 2, {})
    assert [await store.bump_leader_epoch(topic, 1) for _ in range(3)] == [1, 2, 3]
    assert (await store.get_leader_epoch(topic, 0), await store.get_leader_epoch(topic, 1)) == (0, 3)
    with pytest.raises(UnknownTopicOrPartition):
        await store.bump_leader_epoch(topic, 2)
    with pytest.raises(UnknownTopicOrPartition):
        await store.get_leader_epoch(topic, -1)


# --- consumer group offsets --------------------------------------------------------------


async def test_commit_and_fetch_offsets(store: MetadataStore) -> None:
    a, b = sorted([name(), name()])
    await store.create_topic(a, 3, {})
    await store.create_topic(b, 1, {})
    commits = [
        CommittedOffset(b, 0, 5, None, "", 1_000),
        CommittedOffset(a, 2, 100, 4, "client state", 2_000),
        CommittedOffset(a, 0, 0, 0, "zero", 3_000),
    ]
    await store.commit_offsets("group", commits)
    assert await store.fetch_offsets("group") == [commits[2], commits[1], commits[0]]
    assert await store.fetch_offsets("group", [(a, 2), (a, 1), (b, 0), (name(), 0)]) == [commits[1], commits[0]]
    assert await store.fetch_offsets("group", []) == []
    assert await store.fetch_offsets("other-group") == []


async def test_a_later_commit_replaces_the_earlier(store: MetadataStore) -> None:
    topic = name()
    await store.create_topic(topic, 1, {})
    await store.commit_offsets("g", [offset(topic, 0, 10, ts=1)])
    await store.commit_offsets("g", [CommittedOffset(topic, 0, 20, None, "", 2)])
    assert await store.fetch_offsets("g") == [CommittedOffset(topic, 0, 20, None, "", 2)]


async def test_the_last_offset_of_a_partition_in_one_commit_wins(store: MetadataStore) -> None:
    topic = name()
    await store.create_topic(topic, 2, {})
    await store.commit_offsets("g", [offset(topic, 0, 1), offset(topic, 1, 7), offset(topic, 0, 2, epoch=None)])
    assert await store.fetch_offsets("g") == [offset(topic, 0, 2, epoch=None), offset(topic, 1, 7)]
    await store.commit_offsets("g", [])
    assert len(await store.fetch_offsets("g")) == 2


async def test_commit_offsets_is_all_or_nothing(store: MetadataStore) -> None:
    topic = name()
    await store.create_topic(topic, 2, {})
    await store.commit_offsets("g", [offset(topic, 0, 1)])
    with pytest.raises(UnknownTopicOrPartition):
        await store.commit_offsets("g", [offset(topic, 0, 50), offset(topic, 1, 50), offset(topic, 2, 50)])
    with pytest.raises(UnknownTopic):
        await store.commit_offsets("g", [offset(topic, 1, 60), offset(name(), 0, 60)])
    assert await store.fetch_offsets("g") == [offset(topic, 0, 1)]
    # Negative offsets are kept as given, as Kafka keeps them.
    await store.commit_offsets("g", [offset(topic, 1, 70), offset(topic, 0, -1)])
    assert await store.fetch_offsets("g") == [offset(topic, 0, -1), offset(topic, 1, 70)]


async def test_delete_offsets_and_groups(store: MetadataStore) -> None:
    topic = name()
    await store.create_topic(topic, 3, {})
    await store.commit_offsets("g1", [offset(topic, p, 10 + p) for p in range(3)])
    await store.commit_offsets("g2", [offset(topic, 0, 99)])
    await store.commit_offsets("g0", [offset(topic, 1, 98)])
    assert await store.list_groups_with_offsets() == ["g0", "g1", "g2"]
    assert await store.delete_offsets("g1", [(topic, 0), (topic, 2), (topic, 2), (name(), 0)]) == 2
    assert await store.fetch_offsets("g1") == [offset(topic, 1, 11)]
    assert await store.delete_offsets("g1", [(topic, 0)]) == 0
    assert await store.delete_offsets("g1", []) == 0
    assert await store.delete_group("g2") == 1
    assert await store.delete_group("g2") == 0
    assert await store.list_groups_with_offsets() == ["g0", "g1"]
    assert await store.fetch_offsets("g0") == [offset(topic, 1, 98)]


async def test_expire_offsets_deletes_strictly_older_commits(store: MetadataStore) -> None:
    topic = name()
    await store.create_topic(topic, 3, {})
    await store.commit_offsets("old", [offset(topic, 0, 1, ts=100), offset(topic, 1, 1, ts=199)])
    await store.commit_offsets("mixed", [offset(topic, 0, 2, ts=150), offset(topic, 2, 2, ts=200)])
    assert await store.expire_offsets(200) == 3
    assert await store.list_groups_with_offsets() == ["mixed"]
    assert await store.fetch_offsets("mixed") == [offset(topic, 2, 2, ts=200)]
    assert await store.expire_offsets(200) == 0


# --- consumer groups (KIP-848) -----------------------------------------------------------


async def test_consumer_group_state_is_put_whole_and_read_back_exactly(store: MetadataStore) -> None:
    group, other = name("g"), name("g")
    assert await store.get_consumer_group(group) is None
    first = json.dumps({"group_epoch": 1, "members": {"m-1": {"member_epoch": 1, "assigned": {"orders": [0, 1]}}}, "rack": "é"}, ensure_ascii=False)
    await store.put_consumer_group(group, first)
    assert await store.get_consumer_group(group) == first
    second = json.dumps({"group_epoch": 2, "members": {}})
    await store.put_consumer_group(group, second)  # replaces the whole state
    assert await store.get_consumer_group(group) == second
    await store.put_consumer_group(other, "{}")
    assert [g for g in await store.list_consumer_groups() if g in (group, other)] == sorted([group, other])
    await store.delete_consumer_group(group)
    assert await store.get_consumer_group(group) is None
    await store.delete_consumer_group(group)  # unknown now: a no-op
    await store.delete_consumer_group(name("g"))
    assert await store.get_consumer_group(other) == "{}"
    assert [g for g in await store.list_consumer_groups() if g in (group, other)] == [other]


async def test_consumer_group_state_is_written_only_at_its_coordinator_slots_epoch(store: MetadataStore) -> None:
    group, never_written = name("g"), name("g")
    await store.create_coordinator_slots(4)
    assert await store.set_coordinator_slots([(2, 1, 0)]) == [1]  # broker 1 holds slot 2 at epoch 1
    await store.put_consumer_group(group, "held by 1", (2, 1))
    assert await store.set_coordinator_slots([(2, 7, 1)]) == [2]  # the slot moves to broker 7
    with pytest.raises(CoordinatorFenced) as fenced:
        await store.put_consumer_group(group, "late", (2, 1))  # the old holder, not told yet
    assert (fenced.value.slot, fenced.value.expected_epoch, fenced.value.found_epoch) == (2, 1, 2)
    with pytest.raises(CoordinatorFenced) as fenced:
        await store.delete_consumer_group(group, (2, 1))
    assert (fenced.value.slot, fenced.value.expected_epoch, fenced.value.found_epoch) == (2, 1, 2)
    with pytest.raises(CoordinatorFenced):
        await store.put_consumer_group(never_written, "late", (2, 1))
    with pytest.raises(CoordinatorFenced) as fenced:
        await store.put_consumer_group(group, "late", (9, 0))  # no such slot
    assert (fenced.value.slot, fenced.value.expected_epoch, fenced.value.found_epoch) == (9, 0, None)
    assert await store.get_consumer_group(group) == "held by 1"  # nothing of the stale holder landed
    assert await store.get_consumer_group(never_written) is None
    await store.put_consumer_group(group, "held by 7", (2, 2))  # the new holder writes
    assert await store.get_consumer_group(group) == "held by 7"
    await store.delete_consumer_group(group, (2, 2))
    assert await store.get_consumer_group(group) is None


async def test_delete_group_forgets_the_consumer_group_state_with_the_offsets(store: MetadataStore) -> None:
    topic, g1, g2, g3 = name(), name("g"), name("g"), name("g")
    await store.create_topic(topic, 2, {})
    await store.commit_offsets(g1, [offset(topic, 0, 5), offset(topic, 1, 6)])
    await store.commit_offsets(g3, [offset(topic, 0, 9)])
    for group in (g1, g2, g3):  # g2: a state and no offsets
        await store.put_consumer_group(group, f"state of {group}")
    assert await store.delete_group(g1) == 2  # still the offsets deleted
    assert (await store.get_consumer_group(g1), await store.fetch_offsets(g1)) == (None, [])
    assert await store.delete_group(g2) == 0
    assert await store.get_consumer_group(g2) is None
    await store.create_coordinator_slots(1)
    assert await store.set_coordinator_slots([(0, 1, 0)]) == [1]
    with pytest.raises(CoordinatorFenced):
        await store.delete_group(g3, (0, 0))
    assert (await store.get_consumer_group(g3), await store.fetch_offsets(g3)) == (f"state of {g3}", [offset(topic, 0, 9)])
    assert await store.delete_group(g3, (0, 1)) == 1
    assert (await store.get_consumer_group(g3), await store.fetch_offsets(g3)) == (None, [])


# --- producer ids and snapshots ----------------------------------------------------------


async def test_producer_ids_are_distinct_and_increasing_across_blocks(store: MetadataStore) -> None:
    ids = [await store.allocate_producer_id() for _ in range(1_205)]
    assert ids == sorted(set(ids))
    assert ids[0] >= 0


async def test_producer_ids_are_never_reused_after_reopen(url: str) -> None:
    seen: list[int] = []
    for _ in range(3):
        async with await open_metadata_store(url) as store:
            seen += [await store.allocate_producer_id() for _ in range(5)]
    assert seen == sorted(set(seen))
    assert len(seen) == 15


def pstate(producer_id: int, last_offset: int, epoch: int = 0) -> ProducerStateEntry:
    return ProducerStateEntry(producer_id, epoch, 9, last_offset, 9, 5_000 + last_offset)


async def test_producer_snapshot_replaces_the_previous_one(store: MetadataStore) -> None:
    topic = name()
    await store.create_topic(topic, 2, {})
    assert await store.get_producer_snapshot(topic, 0) is None
    first = ProducerSnapshot(100, (pstate(7, 99), pstate(3, 50)))
    await store.put_producer_snapshot(topic, 0, first, leader_epoch=0)
    assert await store.get_producer_snapshot(topic, 0) == ProducerSnapshot(100, (pstate(3, 50), pstate(7, 99)))
    second = ProducerSnapshot(200, (pstate(7, 199, epoch=1),))
    await store.put_producer_snapshot(topic, 0, second, leader_epoch=0)
    assert await store.get_producer_snapshot(topic, 0) == second
    # A producer in a transaction: the last marker's coordinator epoch and where the open one began.
    third = ProducerSnapshot(300, (ProducerStateEntry(7, 1, 3, 299, 2, 9_000, coordinator_epoch=4, current_txn_first_offset=250),))
    await store.put_producer_snapshot(topic, 0, third, leader_epoch=0)
    assert await store.get_producer_snapshot(topic, 0) == third
    assert await store.get_producer_snapshot(topic, 1) is None


async def test_producer_snapshot_writes_are_fenced_and_validated(store: MetadataStore) -> None:
    topic = name()
    await store.create_topic(topic, 1, {})
    kept = ProducerSnapshot(10, (pstate(1, 9),))
    await store.put_producer_snapshot(topic, 0, kept, leader_epoch=0)
    await store.bump_leader_epoch(topic, 0)
    with pytest.raises(FencedLeaderEpoch):
        await store.put_producer_snapshot(topic, 0, ProducerSnapshot(20, ()), leader_epoch=0)
    with pytest.raises(InvalidProducerSnapshot):
        await store.put_producer_snapshot(topic, 0, ProducerSnapshot(20, (pstate(1, 20),)), leader_epoch=1)
    with pytest.raises(UnknownTopicOrPartition):
        await store.put_producer_snapshot(topic, 1, ProducerSnapshot(20, ()), leader_epoch=1)
    assert await store.get_producer_snapshot(topic, 0) == kept


# --- remote segment catalogue ------------------------------------------------------------


async def test_remote_segment_lifecycle(store: MetadataStore) -> None:
    topic = name()
    await store.create_topic(topic, 2, {})
    s = seg(topic, 1, 0, 99)
    assert await store.add_remote_segment(s) == s
    assert await store.list_remote_segments(topic, 1) == []  # uploads are invisible
    assert await store.list_remote_segments(topic, 1, ("uploading",)) == [s]
    committed = await store.commit_remote_segment(topic, 1, 0, s.object_key, leader_epoch=0)
    assert committed == dataclasses.replace(s, state=COMMITTED)
    assert await store.list_remote_segments(topic, 1) == [committed]
    assert await store.list_remote_segments(topic, 0) == []
    deleting = await store.mark_remote_segment_deleting(topic, 1, 0, s.object_key, leader_epoch=0)
    assert deleting.state is DELETING
    assert await store.list_remote_segments(topic, 1) == []
    assert await store.list_remote_segments(topic, 1, [DELETING, COMMITTED]) == [deleting]
    await store.remove_remote_segment(topic, 1, 0, s.object_key, leader_epoch=0)
    assert await store.list_remote_segments(topic, 1, ALL_STATES) == []


async def test_remote_segments_are_listed_by_base_offset(store: MetadataStore) -> None:
    topic = name()
    await store.create_topic(topic, 1, {})
    bases = [300, 0, 200, 100]
    committed = {b: await add_committed(store, seg(topic, 0, b, b + 99)) for b in bases}
    uploading = seg(topic, 0, 400, 499)
    await store.add_remote_segment(uploading)
    assert await store.list_remote_segments(topic, 0) == [committed[b] for b in sorted(bases)]
    assert [x.base_offset for x in await store.list_remote_segments(topic, 0, ALL_STATES)] == [0, 100, 200, 300, 400]
    assert await store.list_remote_segments(topic, 0, ()) == []


async def test_remote_segment_transitions_are_enforced(store: MetadataStore) -> None:
    topic = name()
    await store.create_topic(topic, 1, {})
    s = await add_committed(store, seg(topic, 0, 0, 9))
    with pytest.raises(InvalidRemoteSegmentTransition) as twice:
        await store.commit_remote_segment(topic, 0, 0, s.object_key, leader_epoch=0)
    assert (twice.value.state, twice.value.target) == (COMMITTED, COMMITTED)
    with pytest.raises(InvalidRemoteSegmentTransition) as early:
        await store.remove_remote_segment(topic, 0, 0, s.object_key, leader_epoch=0)
    assert (early.value.state, early.value.target) == (COMMITTED, "removed")
    await store.mark_remote_segment_deleting(topic, 0, 0, s.object_key, leader_epoch=0)
    with pytest.raises(InvalidRemoteSegmentTransition):
        await store.commit_remote_segment(topic, 0, 0, s.object_key, leader_epoch=0)
    assert [x.state for x in await store.list_remote_segments(topic, 0, ALL_STATES)] == [DELETING]


async def test_an_abandoned_upload_goes_straight_to_deleting(store: MetadataStore) -> None:
    topic = name()
    await store.create_topic(topic, 1, {})
    s = seg(topic, 0, 0, 9)
    await store.add_remote_segment(s)
    assert (await store.mark_remote_segment_deleting(topic, 0, 0, s.object_key, leader_epoch=0)).state is DELETING
    await store.remove_remote_segment(topic, 0, 0, s.object_key, leader_epoch=0)
    assert await store.list_remote_segments(topic, 0, ALL_STATES) == []


async def test_unknown_and_duplicate_remote_segments(store: MetadataStore) -> None:
    topic = name()
    await store.create_topic(topic, 2, {})
    s = seg(topic, 0, 0, 9)
    await store.add_remote_segment(s)
    with pytest.raises(RemoteSegmentAlreadyExists) as same:
        await store.add_remote_segment(s)
    assert (same.value.base_offset, same.value.object_key) == (0, s.object_key)
    with pytest.raises(RemoteSegmentAlreadyExists):  # an object key names one object, bucket-wide
        await store.add_remote_segment(seg(topic, 1, 50, 59, key=s.object_key))
    for call in (store.commit_remote_segment, store.mark_remote_segment_deleting, store.remove_remote_segment):
        with pytest.raises(UnknownRemoteSegment) as e:
            await call(topic, 0, 1, s.object_key, leader_epoch=0)
        assert (e.value.topic, e.value.partition, e.value.base_offset, e.value.object_key) == (
            topic, 0, 1, s.object_key,
        )  # fmt: skip
    with pytest.raises(InvalidRemoteSegment):
        await store.add_remote_segment(seg(topic, 0, 10, 9))
    with pytest.raises(UnknownTopicOrPartition):
        await store.add_remote_segment(seg(topic, 2, 0, 9))
    with pytest.raises(UnknownTopicOrPartition):
        await store.list_remote_segments(topic, 2)
    with pytest.raises(UnknownTopic):
        await store.list_remote_segments(name(), 0)
    assert await store.list_remote_segments(topic, 0, ALL_STATES) == [s]


async def test_committed_segments_never_overlap(store: MetadataStore) -> None:
    topic = name()
    await store.create_topic(topic, 1, {})
    first = await add_committed(store, seg(topic, 0, 100, 199))
    # A retried upload of the same range, and one straddling its end, may start but not commit.
    retry = seg(topic, 0, 100, 199)
    straddle = seg(topic, 0, 150, 249)
    await store.add_remote_segment(retry)
    await store.add_remote_segment(straddle)
    for s in (retry, straddle):
        with pytest.raises(RemoteSegmentOverlap) as e:
            await store.commit_remote_segment(topic, 0, s.base_offset, s.object_key, leader_epoch=0)
        assert (e.value.base_offset, e.value.last_offset) == (s.base_offset, s.last_offset)
        assert (e.value.existing_base_offset, e.value.existing_last_offset) == (100, 199)
    adjacent = await add_committed(store, seg(topic, 0, 200, 299))
    before = await add_committed(store, seg(topic, 0, 0, 99))
    assert await store.list_remote_segments(topic, 0) == [before, first, adjacent]
    # Once the first is on its way out, its range can be committed again.
    await store.mark_remote_segment_deleting(topic, 0, 100, first.object_key, leader_epoch=0)
    replacement = await store.commit_remote_segment(topic, 0, 100, retry.object_key, leader_epoch=0)
    assert await store.list_remote_segments(topic, 0) == [before, replacement, adjacent]


async def test_a_rewritten_copy_replaces_committed_segments_in_one_fenced_write(store: MetadataStore) -> None:
    topic = name()
    await store.create_topic(topic, 1, {})
    a, b, c = [await add_committed(store, seg(topic, 0, base, base + 99)) for base in (0, 100, 200)]
    merged = seg(topic, 0, 0, 199)
    await store.add_remote_segment(merged)
    # A fenced leader changes nothing, and neither does a swap naming a segment already going.
    assert await store.bump_leader_epoch(topic, 0) == 1
    with pytest.raises(FencedLeaderEpoch):
        await store.replace_remote_segments(topic, 0, 0, merged.object_key, [(0, a.object_key), (100, b.object_key)], leader_epoch=0)
    await store.mark_remote_segment_deleting(topic, 0, 200, c.object_key, leader_epoch=1)
    with pytest.raises(InvalidRemoteSegmentTransition):
        await store.replace_remote_segments(topic, 0, 0, merged.object_key, [(200, c.object_key)], leader_epoch=1)
    assert await store.list_remote_segments(topic, 0) == [a, b]
    # Replacing only part of what it covers would overlap: refused whole.
    with pytest.raises(RemoteSegmentOverlap):
        await store.replace_remote_segments(topic, 0, 0, merged.object_key, [(0, a.object_key)], leader_epoch=1)
    assert await store.list_remote_segments(topic, 0) == [a, b]
    # The copy lost the abort markers at 50 and 150 (the cleaner removed them with their data).
    await store.put_aborted_transactions(topic, 0, [(7, 40, 50), (8, 120, 150), (9, 160, 170)], delete_below=0, leader_epoch=1)
    with pytest.raises(RemoteSegmentOverlap):  # refused: the entries stay too
        await store.replace_remote_segments(topic, 0, 0, merged.object_key, [(0, a.object_key)], leader_epoch=1, forget_aborted=[50])
    assert await store.list_aborted_transactions(topic, 0) == [(7, 40, 50), (8, 120, 150), (9, 160, 170)]
    swapped = await store.replace_remote_segments(
        topic, 0, 0, merged.object_key, [(0, a.object_key), (100, b.object_key)], leader_epoch=1, forget_aborted=[50, 150]
    )
    assert swapped == dataclasses.replace(merged, state=COMMITTED)
    assert await store.list_aborted_transactions(topic, 0) == [(9, 160, 170)]
    assert await store.list_remote_segments(topic, 0) == [swapped]
    deleting = await store.list_remote_segments(topic, 0, [DELETING])
    assert [(s.base_offset, s.object_key) for s in deleting] == [(0, a.object_key), (100, b.object_key), (200, c.object_key)]


async def test_catalogue_writes_are_fenced_by_leader_epoch(store: MetadataStore) -> None:
    topic = name()
    await store.create_topic(topic, 1, {})
    old = seg(topic, 0, 0, 9, epoch=0)
    await store.add_remote_segment(old)
    assert await store.bump_leader_epoch(topic, 0) == 1
    # The deposed leader (epoch 0) can no longer touch the catalogue.
    with pytest.raises(FencedLeaderEpoch) as e:
        await store.commit_remote_segment(topic, 0, 0, old.object_key, leader_epoch=0)
    assert (e.value.topic, e.value.partition, e.value.leader_epoch, e.value.current_leader_epoch) == (topic, 0, 0, 1)
    with pytest.raises(FencedLeaderEpoch):
        await store.add_remote_segment(seg(topic, 0, 10, 19, epoch=0))
    with pytest.raises(FencedLeaderEpoch):
        await store.mark_remote_segment_deleting(topic, 0, 0, old.object_key, leader_epoch=0)
    with pytest.raises(UnknownLeaderEpoch) as future:
        await store.add_remote_segment(seg(topic, 0, 10, 19, epoch=2))
    assert (future.value.leader_epoch, future.value.current_leader_epoch) == (2, 1)
    # The new leader abandons the old upload and writes its own.
    await store.mark_remote_segment_deleting(topic, 0, 0, old.object_key, leader_epoch=1)
    new = await add_committed(store, seg(topic, 0, 0, 9, epoch=1))
    assert await store.list_remote_segments(topic, 0) == [new]


# --- write-ahead objects -----------------------------------------------------------------


def wal(topic: str, partition: int, base: int, last: int, key: str, *, epoch: int = 0, position: int = 0) -> WalBatch:
    return WalBatch(topic, partition, base, last, epoch, key, position, 64 * (last - base + 1))


def wal_key() -> str:
    return f"wal/{uuid.uuid4().hex}"


async def test_wal_commit_is_all_or_none(store: MetadataStore) -> None:
    topic = name()
    await store.create_topic(topic, 3, {})
    await store.bump_leader_epoch(topic, 1)
    key = wal_key()
    good, stale = wal(topic, 0, 0, 9, key), wal(topic, 1, 0, 4, key, position=640)
    with pytest.raises(FencedLeaderEpoch) as fenced:
        await store.commit_wal_object(key, [good, stale])
    assert (fenced.value.topic, fenced.value.partition, fenced.value.leader_epoch, fenced.value.current_leader_epoch) == (
        topic, 1, 0, 1,
    )  # fmt: skip
    with pytest.raises(UnknownLeaderEpoch) as future:
        await store.commit_wal_object(key, [good, wal(topic, 2, 0, 4, key, epoch=5)])
    assert (future.value.partition, future.value.leader_epoch, future.value.current_leader_epoch) == (2, 5, 0)
    with pytest.raises(UnknownTopicOrPartition):
        await store.commit_wal_object(key, [good, wal(topic, 3, 0, 4, key)])
    with pytest.raises(UnknownTopic):
        await store.commit_wal_object(key, [good, wal(name(), 0, 0, 4, key)])
    # Nothing of the refused commits was written: no batch, and no object row either.
    for p in range(3):
        assert await store.list_wal_batches(topic, p) == []
    assert await store.list_unreferenced_wal_objects() == []
    # At the right epochs the same object commits whole.
    fixed = dataclasses.replace(stale, leader_epoch=1)
    await store.commit_wal_object(key, [good, fixed])
    assert await store.list_wal_batches(topic, 0) == [good]
    assert await store.list_wal_batches(topic, 1) == [fixed]


async def test_wal_batches_are_listed_from_an_offset(store: MetadataStore) -> None:
    topic = name()
    await store.create_topic(topic, 2, {})
    first, second = wal_key(), wal_key()
    b0, b2 = wal(topic, 0, 0, 9, first), wal(topic, 0, 20, 29, first, position=640)
    b1, other = wal(topic, 0, 10, 19, second), wal(topic, 1, 0, 99, second, position=640)
    await store.commit_wal_object(first, [b2, b0])
    await store.commit_wal_object(second, [b1, other])
    assert await store.list_wal_batches(topic, 0) == [b0, b1, b2]
    assert await store.list_wal_batches(topic, 0, from_offset=9) == [b0, b1, b2]
    assert await store.list_wal_batches(topic, 0, from_offset=10) == [b1, b2]
    assert await store.list_wal_batches(topic, 0, from_offset=29) == [b2]
    assert await store.list_wal_batches(topic, 0, from_offset=30) == []
    assert await store.list_wal_batches(topic, 1, from_offset=50) == [other]
    assert b2.next_offset == 30
    with pytest.raises(UnknownTopicOrPartition):
        await store.list_wal_batches(topic, 2)
    with pytest.raises(UnknownTopic):
        await store.list_wal_batches(name(), 0)


async def test_wal_batches_below_an_offset_are_deleted_under_the_epoch(store: MetadataStore) -> None:
    topic = name()
    await store.create_topic(topic, 1, {})
    key = wal_key()
    batches = [wal(topic, 0, 10 * i, 10 * i + 9, key, position=640 * i) for i in range(3)]
    await store.commit_wal_object(key, batches)
    # Batches [0, 9] and [10, 19] are inside a committed segment [0, 19] now; [20, 29] is not.
    assert await store.delete_wal_batches_below(topic, 0, 20, leader_epoch=0) == 2
    assert await store.list_wal_batches(topic, 0) == [batches[2]]
    assert await store.delete_wal_batches_below(topic, 0, 29, leader_epoch=0) == 0
    assert await store.list_unreferenced_wal_objects() == []
    await store.bump_leader_epoch(topic, 0)
    with pytest.raises(FencedLeaderEpoch):
        await store.delete_wal_batches_below(topic, 0, 30, leader_epoch=0)
    assert await store.list_wal_batches(topic, 0) == [batches[2]]
    assert await store.delete_wal_batches_below(topic, 0, 30, leader_epoch=1) == 1
    assert await store.list_unreferenced_wal_objects() == [key]
    await store.delete_wal_object(key)
    assert await store.list_unreferenced_wal_objects() == []


async def test_wal_objects_are_unreferenced_once_their_topics_are_deleted(store: MetadataStore) -> None:
    gone, kept = name(), name()
    await store.create_topic(gone, 2, {})
    await store.create_topic(kept, 1, {})
    only_gone, shared = "wal/a-" + uuid.uuid4().hex, "wal/b-" + uuid.uuid4().hex
    await store.commit_wal_object(only_gone, [wal(gone, 0, 0, 9, only_gone), wal(gone, 1, 0, 9, only_gone, position=640)])
    await store.commit_wal_object(shared, [wal(gone, 0, 10, 19, shared), wal(kept, 0, 0, 9, shared, position=640)])
    await store.delete_topic(gone)
    assert await store.list_unreferenced_wal_objects() == [only_gone]
    assert await store.list_wal_batches(kept, 0) == [wal(kept, 0, 0, 9, shared, position=640)]
    # A topic of the same name starts with no write-ahead batches.
    await store.create_topic(gone, 2, {})
    assert await store.list_wal_batches(gone, 0) == []
    await store.delete_wal_object(only_gone)
    await store.delete_wal_object(only_gone)  # a key not recorded is a no-op
    await store.delete_wal_object("wal/never-recorded")
    assert await store.list_unreferenced_wal_objects() == []
    await store.delete_wal_batches_below(kept, 0, 10, leader_epoch=0)
    assert await store.list_unreferenced_wal_objects() == [shared]


async def test_a_retried_wal_commit_of_the_same_object_is_harmless(store: MetadataStore) -> None:
    topic = name()
    await store.create_topic(topic, 2, {})
    key = wal_key()
    batches = [wal(topic, 0, 0, 9, key), wal(topic, 1, 0, 3, key, position=640)]
    await store.commit_wal_object(key, batches)
    await store.commit_wal_object(key, batches)  # its answer was lost: the writer commits again
    assert await store.list_wal_batches(topic, 0) == [batches[0]]
    assert await store.list_wal_batches(topic, 1) == [batches[1]]
    # A rewrite of the same batch into another object (a retried upload) replaces the record.
    again = wal_key()
    rewritten = wal(topic, 0, 0, 9, again, position=128)
    await store.commit_wal_object(again, [rewritten])
    assert await store.list_wal_batches(topic, 0) == [rewritten]
    assert await store.list_unreferenced_wal_objects() == []


async def test_wal_batches_survive_reopen(url: str) -> None:
    topic, key = name(), wal_key()
    async with await open_metadata_store(url) as store:
        await store.create_topic(topic, 1, {})
        await store.commit_wal_object(key, [wal(topic, 0, 0, 9, key)])
    async with await open_metadata_store(url) as store:
        assert await store.list_wal_batches(topic, 0) == [wal(topic, 0, 0, 9, key)]


# --- the cluster id ----------------------------------------------------------------------


async def test_cluster_id_is_recorded_once(url: str) -> None:
    async with await open_metadata_store(url) as store:
        assert await store.get_or_create_cluster_id("first-proposal") == "first-proposal"
        assert await store.get_or_create_cluster_id("second-proposal") == "first-proposal"
    async with await open_metadata_store(url) as store:
        assert await store.get_or_create_cluster_id("third-proposal") == "first-proposal"


# --- membership and leadership -------------------------------------------------------------


async def test_broker_sessions(store: MetadataStore) -> None:
    await store.register_broker(1, "127.0.0.1", 9092, "rack-a", "first", 60_000)
    await store.register_broker(2, "127.0.0.1", 9093, None, "second", 60_000)
    # A second process with node id 1 is refused while the first one's session lives.
    with pytest.raises(BrokerIdInUse) as refused:
        await store.register_broker(1, "127.0.0.1", 9094, None, "impostor", 60_000)
    assert (refused.value.node_id, refused.value.incarnation) == (1, "first")
    assert await store.heartbeat_broker(1, "first", 60_000) is True
    assert await store.heartbeat_broker(1, "impostor", 60_000) is False
    assert await store.list_brokers() == [
        BrokerRegistration(1, "127.0.0.1", 9092, "rack-a", "first", True),
        BrokerRegistration(2, "127.0.0.1", 9093, None, "second", True),
    ]
    await store.unregister_broker(2, "not-its-incarnation")
    assert [b.node_id for b in await store.list_brokers()] == [1, 2]
    await store.unregister_broker(2, "second")
    assert [b.node_id for b in await store.list_brokers()] == [1]
    # An expired session is taken by the next incarnation; the old one's heartbeat fails.
    await store.register_broker(3, "127.0.0.1", 9095, None, "old", 1)
    deadline = time.monotonic() + 5
    while (await store.list_brokers())[-1].alive:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)  # the store's clock has to pass 1 ms: nothing to wait on
    assert (await store.list_brokers())[-1].session_remaining_ms == 0
    await store.register_broker(3, "127.0.0.1", 9095, None, "new", 60_000)
    assert await store.heartbeat_broker(3, "old", 60_000) is False
    assert await store.heartbeat_broker(3, "new", 60_000) is True
    # How long each session has left, as the store counts it: what the controller wakes on.
    assert 50_000 < (await store.list_brokers())[-1].session_remaining_ms <= 60_000


async def test_the_sessions_a_dead_broker_left_are_ended_and_free_its_partitions(backend: Backend, url: str, store: MetadataStore) -> None:
    """A broker cut off from PostgreSQL mid-transaction leaves its locks in a session the
    server never ends; the controller ends the sessions of that incarnation, and only those."""
    async with await open_metadata_store(url) as cut_off:
        await cut_off.register_broker(7, "127.0.0.1", 9092, None, "cut-off", 60_000)
        assert await cut_off.heartbeat_broker(7, "cut-off", 60_000) is True
        await store.create_topic("orders", 1, {})
        held = None
        if backend.name == "postgresql":
            # Its transaction, left open after taking the partition's row.
            held = await asyncpg.connect(url, server_settings={"application_name": broker_session_name(7, "cut-off")})
            await held.execute("BEGIN")
            await held.execute("SELECT * FROM partitions FOR UPDATE")
            with pytest.raises(MetadataError):  # the controller's move waits, and times out
                await asyncio.wait_for(store.set_partition_leaders("orders", [(0, 1, 0)]), 30)
        try:
            assert await store.end_broker_sessions(7, "another-incarnation") == 0
            ended = await store.end_broker_sessions(7, "cut-off")
            assert ended == (2 if backend.name == "postgresql" else 0)  # its pool's connection and the open transaction
            assert await store.set_partition_leaders("orders", [(0, 1, 0)]) == [1]
            # The broker's store connects again if the broker comes back.
            assert await cut_off.heartbeat_broker(7, "cut-off", 60_000) is True
        finally:
            if held is not None:
                held.terminate()


async def test_coordinator_slots_move_by_compare_and_set(store: MetadataStore) -> None:
    assert await store.list_coordinator_slots() == []
    assert await store.create_coordinator_slots(3) == 3
    assert await store.create_coordinator_slots(50) == 3  # made once: groups keep their slot
    assert await store.list_coordinator_slots() == [PartitionLeadership(COORDINATOR_SLOTS, slot, None, 0) for slot in range(3)]
    assert await store.set_coordinator_slots([(0, 1, 0), (1, 2, 0), (1, 3, 0), (2, 1, 5)]) == [1, 1, None, None]
    assert await store.set_coordinator_slots([(0, None, 1)]) == [2]
    assert await store.list_coordinator_slots() == [
        PartitionLeadership(COORDINATOR_SLOTS, 0, None, 2), PartitionLeadership(COORDINATOR_SLOTS, 1, 2, 1),
        PartitionLeadership(COORDINATOR_SLOTS, 2, None, 0),
    ]  # fmt: skip
    assert await store.list_partition_leaders() == []  # slots are not partitions of a topic


async def test_leases(store: MetadataStore) -> None:
    assert await store.lease_holder("controller") is None
    assert await store.acquire_lease("controller", 1, 60_000) is True
    assert await store.lease_holder("controller") == 1
    assert await store.acquire_lease("controller", 2, 60_000) is False
    assert await store.acquire_lease("controller", 1, 60_000) is True  # renewed
    await store.release_lease("controller", 2)  # not its lease: nothing happens
    assert await store.acquire_lease("controller", 2, 60_000) is False
    await store.release_lease("controller", 1)
    assert await store.lease_holder("controller") is None
    assert await store.acquire_lease("controller", 2, 60_000) is True
    assert await store.lease_holder("controller") == 2


async def test_partition_leaders_move_by_compare_and_set(store: MetadataStore) -> None:
    await store.create_topic("orders", 2, {})
    assert await store.list_partition_leaders() == [PartitionLeadership("orders", 0, None, 0), PartitionLeadership("orders", 1, None, 0)]
    assert await store.set_partition_leader("orders", 0, 7, expected_epoch=0) == 1
    with pytest.raises(FencedLeaderEpoch):
        await store.set_partition_leader("orders", 0, 8, expected_epoch=0)
    # The old leader's writes are fenced by the bump.
    with pytest.raises(FencedLeaderEpoch):
        await store.set_log_start_offset("orders", 0, 1, leader_epoch=0)
    assert await store.set_partition_leader("orders", 0, None, expected_epoch=1) == 2
    assert await store.list_partition_leaders() == [PartitionLeadership("orders", 0, None, 2), PartitionLeadership("orders", 1, None, 0)]
    with pytest.raises(UnknownTopicOrPartition):
        await store.set_partition_leader("orders", 5, 1, expected_epoch=0)
    # Many at once: each move that still holds its epoch happens; the stale one does not.
    assert await store.set_partition_leaders("orders", [(0, 3, 2), (1, 4, 0), (1, 5, 0)]) == [3, 1, None]
    assert await store.list_partition_leaders() == [PartitionLeadership("orders", 0, 3, 3), PartitionLeadership("orders", 1, 4, 1)]


async def test_preferred_leaders_are_kept_apart_from_leadership(store: MetadataStore) -> None:
    await store.create_topic("orders", 3, {})
    await store.set_preferred_leaders("orders", [(0, 2), (2, 5)])
    assert await store.list_partition_leaders() == [
        PartitionLeadership("orders", 0, None, 0, 2), PartitionLeadership("orders", 1, None, 0), PartitionLeadership("orders", 2, None, 0, 5)
    ]  # fmt: skip
    # Leadership moves by its own compare-and-set and leaves the preference alone; None clears it.
    assert await store.set_partition_leaders("orders", [(0, 1, 0)]) == [1]
    await store.set_preferred_leaders("orders", [(2, None), (1, 3)])
    assert await store.list_partition_leaders() == [
        PartitionLeadership("orders", 0, 1, 1, 2), PartitionLeadership("orders", 1, None, 0, 3), PartitionLeadership("orders", 2, None, 0)
    ]  # fmt: skip
    with pytest.raises(UnknownTopicOrPartition):
        await store.set_preferred_leaders("orders", [(1, 1), (3, 1)])
    assert (await store.list_partition_leaders())[1].preferred_leader == 3  # nothing of a refused call is kept
    with pytest.raises(UnknownTopic):
        await store.set_preferred_leaders("missing", [(0, 1)])
    # A topic made again under the name starts without preferences.
    await store.delete_topic("orders")
    await store.create_topic("orders", 1, {})
    assert await store.list_partition_leaders() == [PartitionLeadership("orders", 0, None, 0)]


# --- two stores on one database (two brokers) --------------------------------------------


@pytest.fixture
async def two_stores(url: str) -> AsyncIterator[tuple[MetadataStore, MetadataStore]]:
    first = await open_metadata_store(url)
    second = await open_metadata_store(url)
    yield first, second
    await first.close()
    await second.close()


async def test_a_topic_is_never_listed_without_its_configs_while_it_is_created(two_stores) -> None:
    """A broker following the store lists topics while another creates them: each listing holds
    a topic with all its configs or not at all (one snapshot, not one per table)."""
    creator, lister = two_stores
    prefix = name("listed")
    created = 0
    seen: list[TopicMetadata] = []

    async def create() -> None:
        nonlocal created
        for i in range(30):
            await creator.create_topic(f"{prefix}-{i:02d}", 1, {"message.timestamp.type": "LogAppendTime", "i": str(i)})
            created += 1

    async def follow() -> None:
        while created < 30:
            seen.extend(t for t in await lister.list_topics() if t.name.startswith(prefix))

    await asyncio.gather(create(), follow())
    assert seen, "the lister ran beside the creator"
    assert [t.name for t in seen if t.configs != {"message.timestamp.type": "LogAppendTime", "i": str(int(t.name[-2:]))}] == []


async def test_two_stores_racing_to_create_a_topic_make_one_winner(two_stores) -> None:
    a, b = two_stores
    for _ in range(20):
        topic = name()
        results = await asyncio.gather(
            a.create_topic(topic, 3, {"by": "a"}), b.create_topic(topic, 2, {"by": "b"}), return_exceptions=True
        )
        winners = [r for r in results if isinstance(r, TopicMetadata)]
        losers = [r for r in results if isinstance(r, TopicAlreadyExists)]
        assert (len(winners), len(losers)) == (1, 1), results
        assert await a.get_topic(topic) == await b.get_topic(topic) == winners[0]
        partitions = await b.get_log_start_offsets(topic)
        assert partitions == {p: 0 for p in range(winners[0].num_partitions)}


async def test_two_stores_racing_to_create_colliding_names_make_one_winner(two_stores) -> None:
    """Two brokers creating a.b and a_b at the same moment: one topic is made, the other refused
    as a collision (on PostgreSQL neither would see the other's uncommitted row unaided)."""
    a, b = two_stores
    for _ in range(20):
        prefix = f"r{uuid.uuid4().hex[:10]}"
        results = await asyncio.gather(a.create_topic(f"{prefix}.x", 1, {}), b.create_topic(f"{prefix}_x", 1, {}), return_exceptions=True)
        winners = [r for r in results if isinstance(r, TopicMetadata)]
        losers = [r for r in results if isinstance(r, TopicNameCollision)]
        assert (len(winners), len(losers)) == (1, 1), results
        assert losers[0].existing_name == winners[0].name
        assert [t for t in await a.list_topics() if t.name.startswith(prefix)] == winners


async def test_two_stores_never_hand_out_the_same_producer_id(two_stores) -> None:
    a, b = two_stores

    async def allocate(store: MetadataStore) -> list[int]:
        ids = []
        for _ in range(2_000):
            ids.append(await store.allocate_producer_id())
        return ids

    from_a, from_b = await asyncio.gather(allocate(a), allocate(b))
    assert from_a == sorted(from_a) and from_b == sorted(from_b)
    assert len(set(from_a) | set(from_b)) == 4_000


async def test_after_a_bump_only_the_new_leader_writes(two_stores) -> None:
    a, b = two_stores
    topic = name()
    await a.create_topic(topic, 1, {})
    for round in range(10):
        # Both brokers take leadership at once: each gets its own epoch, one of them newer.
        epoch_a, epoch_b = await asyncio.gather(a.bump_leader_epoch(topic, 0), b.bump_leader_epoch(topic, 0))
        assert {epoch_a, epoch_b} == {2 * round + 1, 2 * round + 2}
        base = 100 * round
        key_a, key_b = wal_key(), wal_key()
        wal_results = await asyncio.gather(
            a.commit_wal_object(key_a, [wal(topic, 0, base, base + 9, key_a, epoch=epoch_a)]),
            b.commit_wal_object(key_b, [wal(topic, 0, base, base + 9, key_b, epoch=epoch_b)]),
            return_exceptions=True,
        )
        seg_a, seg_b = seg(topic, 0, base, base + 9, epoch=epoch_a), seg(topic, 0, base, base + 9, epoch=epoch_b)
        segment_results = await asyncio.gather(
            add_committed(a, seg_a), add_committed(b, seg_b), return_exceptions=True
        )
        newer = 0 if epoch_a > epoch_b else 1
        for results in (wal_results, segment_results):
            assert not isinstance(results[newer], BaseException), results
            loser = results[1 - newer]
            assert isinstance(loser, FencedLeaderEpoch), results
            assert (loser.leader_epoch, loser.current_leader_epoch) == (min(epoch_a, epoch_b), max(epoch_a, epoch_b))
        winner_key = (key_a, key_b)[newer]
        assert [w.object_key for w in await b.list_wal_batches(topic, 0, base)] == [winner_key]
        committed = await a.list_remote_segments(topic, 0)
        assert committed[-1].object_key == (seg_a, seg_b)[newer].object_key
        assert len(committed) == round + 1


async def test_two_stores_agree_on_the_cluster_id(url: str) -> None:
    stores = [await open_metadata_store(url) for _ in range(4)]
    try:
        ids = await asyncio.gather(*(s.get_or_create_cluster_id(f"proposal-{i}") for i, s in enumerate(stores)))
        assert len(set(ids)) == 1 and ids[0] in {f"proposal-{i}" for i in range(4)}
    finally:
        for s in stores:
            await s.close()


# --- lifecycle and URLs ------------------------------------------------------------------


async def test_close_is_idempotent_and_later_calls_fail(url: str) -> None:
    store = await open_metadata_store(url)
    await store.close()
    await store.close()
    with pytest.raises(MetadataStoreClosed):
        await store.list_topics()


async def test_calls_made_before_close_complete(url: str) -> None:
    topics = [name() for _ in range(20)]
    store = await open_metadata_store(url)
    # gather starts its tasks in order: every create is submitted before close is.
    *created, _ = await asyncio.gather(*(store.create_topic(t, 1, {}) for t in topics), store.close())
    assert [t.name for t in created] == topics
    async with await open_metadata_store(url) as reopened:
        assert sorted(t.name for t in await reopened.list_topics()) == sorted(topics)


async def test_async_with_closes(url: str) -> None:
    async with await open_metadata_store(url) as store:
        await store.create_topic(name(), 1, {})
    with pytest.raises(MetadataStoreClosed):
        await store.list_topics()


async def test_open_refuses_unknown_backends() -> None:
    with pytest.raises(UnsupportedMetadataUrl):
        await open_metadata_store("mysql://127.0.0.1/diskless")
    with pytest.raises(UnsupportedMetadataUrl):
        await open_metadata_store("postgresql://127.0.0.1:notaport/diskless")


# --- durability --------------------------------------------------------------------------


async def test_everything_survives_close_and_reopen(url: str) -> None:
    topic = name()
    async with await open_metadata_store(url) as store:
        created = await store.create_topic(topic, 3, {"retention.ms": "7"})
        await store.alter_topic_configs(topic, {"segment.bytes": "1024"}, {"retention.ms"})
        await store.create_partitions(topic, 4)
        await store.set_log_start_offset(topic, 2, 77)
        epoch = await store.bump_leader_epoch(topic, 3)
        await store.commit_offsets("g", [offset(topic, 3, 5, epoch=None)])
        await store.put_consumer_group("g", '{"group_epoch": 4}')
        committed = await add_committed(store, seg(topic, 3, 0, 9, epoch=epoch))
        uploading = seg(topic, 3, 10, 19, epoch=epoch)
        await store.add_remote_segment(uploading)
        snapshot = ProducerSnapshot(10, (pstate(4, 9),))
        await store.put_producer_snapshot(topic, 3, snapshot, leader_epoch=epoch)
        last_producer_id = await store.allocate_producer_id()
    async with await open_metadata_store(url) as store:
        expected = TopicMetadata(topic, created.topic_id, 4, {"segment.bytes": "1024"})
        assert await store.get_topic(topic) == expected
        assert await store.get_topic_by_id(created.topic_id) == expected
        assert await store.get_log_start_offsets(topic) == {0: 0, 1: 0, 2: 77, 3: 0}
        assert await store.get_leader_epoch(topic, 3) == epoch == 1
        assert await store.fetch_offsets("g") == [offset(topic, 3, 5, epoch=None)]
        assert await store.get_consumer_group("g") == '{"group_epoch": 4}'
        assert await store.list_remote_segments(topic, 3, ALL_STATES) == [committed, uploading]
        assert await store.get_producer_snapshot(topic, 3) == snapshot
        assert await store.allocate_producer_id() > last_producer_id


KILLED_WRITER = r"""
import asyncio, json, sys
from metadata import CommittedOffset, open_metadata_store

async def main(url):
    store = await open_metadata_store(url)
    topic = await store.create_topic("orders", 2, {"retention.ms": "1000"})
    await store.commit_offsets("g", [CommittedOffset("orders", 1, 42, 3, "m", 1000)])
    await store.set_log_start_offset("orders", 0, 7)
    producer_id = await store.allocate_producer_id()
    print(json.dumps({"topic_id": str(topic.topic_id), "producer_id": producer_id}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)  # until killed

asyncio.run(main(sys.argv[1]))
"""


async def test_acknowledged_writes_survive_kill_9(backend: Backend, url: str, tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", KILLED_WRITER, url,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, cwd=REPO_ROOT,
    )  # fmt: skip
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=60)
    finally:
        proc.kill()  # SIGKILL: no close, no checkpoint, no atexit
        await proc.wait()
    assert proc.returncode == -9
    acked = json.loads(line)
    if backend.name == "sqlite":  # the commits are still only in the WAL: recovery is exercised
        assert (tmp_path / "metadata.db-wal").stat().st_size > 0
    async with await open_metadata_store(url) as store:
        topic = await store.get_topic("orders")
        assert (str(topic.topic_id), topic.num_partitions, topic.configs) == (
            acked["topic_id"], 2, {"retention.ms": "1000"},
        )  # fmt: skip
        assert await store.fetch_offsets("g") == [CommittedOffset("orders", 1, 42, 3, "m", 1000)]
        assert await store.get_log_start_offsets("orders") == {0: 7, 1: 0}
        assert await store.allocate_producer_id() > acked["producer_id"]


# --- concurrency and the event loop ------------------------------------------------------


async def test_200_concurrent_writes_give_exact_results(store: MetadataStore) -> None:
    topics = [name() for _ in range(200)]
    created = await asyncio.gather(*(store.create_topic(t, 1 + i % 3, {"i": str(i)}) for i, t in enumerate(topics)))
    assert sorted(await store.list_topics(), key=lambda t: t.name) == sorted(created, key=lambda t: t.name)

    shared = name()
    await store.create_topic(shared, 4, {})
    await asyncio.gather(
        *(store.commit_offsets(f"g{i % 10}", [offset(shared, i % 4, i, ts=i)]) for i in range(200))
    )
    # Per (group, partition) the last commit in call order wins: calls run in the order made.
    for g in range(10):
        expected = {}
        for i in range(g, 200, 10):
            expected[i % 4] = offset(shared, i % 4, i, ts=i)
        assert await store.fetch_offsets(f"g{g}") == [expected[p] for p in sorted(expected)]

    epochs = await asyncio.gather(*(store.bump_leader_epoch(shared, 0) for _ in range(200)))
    assert sorted(epochs) == list(range(1, 201))
    assert await store.get_leader_epoch(shared, 0) == 200

    results = await asyncio.gather(*(store.set_log_start_offset(shared, 1, (i * 37) % 200) for i in range(200)))
    assert max(results) == 199 and results == [max(results[: i + 1]) for i in range(200)]
    assert (await store.get_log_start_offsets(shared))[1] == 199


async def test_200_concurrent_producer_id_allocations_are_distinct(store: MetadataStore) -> None:
    ids = await asyncio.gather(*(store.allocate_producer_id() for _ in range(200)))
    assert len(set(ids)) == 200
    assert ids == sorted(ids)  # calls run in the order made


async def test_the_event_loop_runs_during_a_large_transaction(store: MetadataStore) -> None:
    # Creating 100 000 partitions is one transaction of 100 000 inserts. Were it run on the
    # loop, the ticker below could only run once it had finished.
    big = asyncio.ensure_future(store.create_topic(name("big"), 100_000, {}))
    ticks = 0
    while ticks < 100:
        await asyncio.sleep(0)  # one pass of the event loop
        ticks += 1
    assert not big.done(), "the loop made 100 passes only after the transaction finished"
    assert (await big).num_partitions == 100_000


# --- SQLite only -------------------------------------------------------------------------


def sqlite_path(tmp_path: Path) -> Path:
    return tmp_path / "metadata.db"


async def test_sqlite_file_is_in_wal_mode(tmp_path: Path) -> None:
    path = sqlite_path(tmp_path)
    async with await open_metadata_store(sqlite_url(path)) as store:
        await store.create_topic(name(), 1, {})
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)


async def test_sqlite_relative_url_is_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    async with await open_metadata_store("sqlite:///data/dir/m.db") as store:
        topic = await store.create_topic(name(), 1, {})
    monkeypatch.chdir(REPO_ROOT)  # a later chdir must not matter to a URL already opened
    assert (tmp_path / "data" / "dir" / "m.db").is_file()
    async with await open_metadata_store(sqlite_url(tmp_path / "data/dir/m.db")) as store:
        assert await store.list_topics() == [topic]


async def test_sqlite_in_memory_store() -> None:
    async with await open_metadata_store("sqlite://") as store:
        topic = await store.create_topic(name(), 2, {})
        assert await store.list_topics() == [topic]


async def test_sqlite_refuses_a_newer_schema(tmp_path: Path) -> None:
    path = sqlite_path(tmp_path)
    async with await open_metadata_store(sqlite_url(path)):
        pass
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 99")
    with pytest.raises(UnsupportedSchemaVersion) as e:
        await open_metadata_store(sqlite_url(path))
    assert (e.value.found_version, e.value.supported_version) == (99, SCHEMA_VERSION)


async def test_sqlite_refuses_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = sqlite_path(tmp_path)
    path.write_bytes(b"this is not a database, it is a text file of some length" * 20)
    with pytest.raises(MetadataStorageError) as e:
        await open_metadata_store(sqlite_url(path))
    assert e.value.operation == "open"


async def test_sqlite_loop_keeps_running_while_the_worker_waits_for_a_lock(tmp_path: Path) -> None:
    # Another process's writer holds the write lock; our write must wait for it on the
    # worker thread, not on the loop. Deterministic: the write cannot finish before release.
    path = sqlite_path(tmp_path)
    async with await open_metadata_store(sqlite_url(path)) as store:
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            write = asyncio.ensure_future(store.create_topic(name(), 1, {}))
            ticks = 0
            while ticks < 100:
                await asyncio.sleep(0)
                ticks += 1
            assert not write.done()
            other.execute("COMMIT")
        finally:
            other.close()
        assert (await asyncio.wait_for(write, timeout=30)).num_partitions == 1


async def test_resource_configs_replace_a_resources_whole_set(store: MetadataStore) -> None:
    assert await store.list_resource_configs("group") == {}
    await store.set_resource_configs("group", "g1", {"consumer.session.timeout.ms": "50000", "consumer.heartbeat.interval.ms": "6000"})
    await store.set_resource_configs("group", "g2", {"consumer.session.timeout.ms": "60000"})
    await store.set_resource_configs("group", "g1", {"consumer.heartbeat.interval.ms": "7000"})
    assert await store.list_resource_configs("group") == {
        "g1": {"consumer.heartbeat.interval.ms": "7000"},
        "g2": {"consumer.session.timeout.ms": "60000"},
    }
    assert await store.list_resource_configs("broker") == {}
    await store.set_resource_configs("group", "g2", {})
    assert await store.list_resource_configs("group") == {"g1": {"consumer.heartbeat.interval.ms": "7000"}}


async def test_partitions_with_state_names_each_partition_with_rows_of_its_own(store: MetadataStore) -> None:
    # A new leader reads back only these partitions' catalogue, write-ahead batches and
    # aborted transactions; the others are opened without asking.
    topic = name()
    await store.create_topic(topic, 6, {})
    assert await store.partitions_with_state(topic) == set()
    await store.add_remote_segment(seg(topic, 1, 0, 9))  # uploading: a crash may have left it
    await add_committed(store, seg(topic, 2, 0, 9))
    await store.commit_wal_object((key := wal_key()), [wal(topic, 3, 0, 4, key), wal(topic, 2, 10, 12, key, position=320)])
    await store.put_aborted_transactions(topic, 4, [(7, 0, 3)], delete_below=0, leader_epoch=0)
    assert await store.partitions_with_state(topic) == {1, 2, 3, 4}
    await store.delete_wal_batches_below(topic, 3, 5, leader_epoch=0)  # the batches went into a segment
    assert await store.partitions_with_state(topic) == {1, 2, 4}
    other = name()
    await store.create_topic(other, 2, {})
    assert await store.partitions_with_state(other) == set()
    with pytest.raises(UnknownTopic):
        await store.partitions_with_state(name())
