"""offsets.retention.minutes: committed offsets expire only at the group's coordinator, only
while the group has no members (KIP-211: counted from when it became empty, as far as the
coordinator saw it), and with a delete conditional on the commit time, so a commit landing
during the pass survives.

The broker's `Groups` shell over a real metadata store (SQLite; the store call also on
PostgreSQL), driven by a clock the test moves.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from diskless.broker.group import GroupConfig, GroupState
from diskless.broker.group.consumer_coordinator import HeartbeatRequest
from diskless.broker.groups import Groups
from metadata import CommittedOffset, MetadataStore, open_metadata_store, sqlite_url

from .test_metadata_store import backend, store, url  # noqa: F401 (fixtures: every backend)

MINUTE_MS = 60_000
RETENTION_MS = 7 * 24 * 60 * MINUTE_MS
CONFIG = GroupConfig(group_initial_rebalance_delay_ms=0)
GRACE_MS = max(CONFIG.group_max_session_timeout_ms, CONFIG.group_consumer_max_session_timeout_ms)
RANGE = ("range", b"range-meta")


def everywhere(group_id: str) -> bool:
    return True


def nowhere(group_id: str) -> bool:
    return False


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_000

    def __call__(self) -> int:
        return self.now_ms


def offset(topic: str, partition: int, value: int, ts: int) -> CommittedOffset:
    return CommittedOffset(topic, partition, value, None, "", ts)


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[MetadataStore]:
    opened = await open_metadata_store(sqlite_url(tmp_path / "metadata.db"))
    yield opened
    await opened.close()


async def setup(opened: MetadataStore, partitions: int = 2) -> tuple[Clock, Groups, Any, str]:
    clock = Clock()
    groups = Groups(CONFIG, opened, clock, RETENTION_MS)
    topic = await opened.create_topic(f"t-{uuid.uuid4().hex[:10]}", partitions, {})
    return clock, groups, topic, f"g-{uuid.uuid4().hex[:10]}"


async def offsets(opened: MetadataStore, group_id: str) -> dict[int, int]:
    return {o.partition: o.offset for o in await opened.fetch_offsets(group_id)}


async def test_store_expires_one_groups_offsets_older_than_the_cutoff(store: MetadataStore) -> None:  # noqa: F811
    topic = (await store.create_topic(f"t-{uuid.uuid4().hex[:10]}", 3, {})).name
    await store.commit_offsets("a", [offset(topic, 0, 1, 100), offset(topic, 1, 2, 199), offset(topic, 2, 3, 200)])
    await store.commit_offsets("b", [offset(topic, 0, 4, 100)])
    assert await store.expire_group_offsets("a", 200) == 2
    assert {o.partition for o in await store.fetch_offsets("a")} == {2}
    assert len(await store.fetch_offsets("b")) == 1  # another group's are not touched
    assert await store.expire_group_offsets("a", 200) == 0


async def test_a_broker_that_does_not_coordinate_the_group_never_deletes_its_offsets(sqlite_store: MetadataStore) -> None:
    clock, groups, topic, group = await setup(sqlite_store)
    await sqlite_store.commit_offsets(group, [offset(topic.name, 0, 5, clock.now_ms)])
    for _ in range(3):  # a group without members here, offsets far past retention, again and again
        clock.now_ms += RETENTION_MS + GRACE_MS
        assert await groups.expire_offsets(nowhere) == 0
    assert await offsets(sqlite_store, group) == {0: 5}


async def test_an_empty_groups_old_offsets_expire_at_its_coordinator(sqlite_store: MetadataStore) -> None:
    clock, groups, topic, group = await setup(sqlite_store)
    await sqlite_store.commit_offsets(group, [offset(topic.name, 0, 5, clock.now_ms)])
    clock.now_ms += RETENTION_MS - MINUTE_MS
    await sqlite_store.commit_offsets(group, [offset(topic.name, 1, 7, clock.now_ms)])
    assert await groups.expire_offsets(everywhere) == 0  # the first pass that sees it here: grace
    clock.now_ms += GRACE_MS
    assert await groups.expire_offsets(everywhere) == 1  # partition 0's, past retention
    assert await offsets(sqlite_store, group) == {1: 7}


async def test_a_classic_group_with_a_live_member_keeps_its_old_offsets(sqlite_store: MetadataStore) -> None:
    clock, groups, topic, group = await setup(sqlite_store)
    c = groups.coordinator
    first = c.join_group(group, "", None, "c", "/10.0.0.9", "consumer", [RANGE], 10_000, 30_000, True, clock.now_ms).response
    assert first is not None
    c.join_group(group, first.member_id, None, "c", "/10.0.0.9", "consumer", [RANGE], 10_000, 30_000, True, clock.now_ms)
    c.tick(clock.now_ms)
    c.sync_group(group, 1, first.member_id, None, None, None, [(first.member_id, b"assign")], clock.now_ms)
    assert c.group_overview(group).state is GroupState.STABLE
    await sqlite_store.commit_offsets(group, [offset(topic.name, 0, 5, clock.now_ms)])  # a quiet partition: never committed again
    for _ in range(3):
        clock.now_ms += RETENTION_MS + GRACE_MS
        assert await groups.expire_offsets(everywhere) == 0
    assert await offsets(sqlite_store, group) == {0: 5}

    # The member leaves: the group became empty now, so the offset stays a retention longer.
    assert (await groups.leave_group(group, [(first.member_id, None)])).error_code.value == 0
    assert c.group_overview(group).state is GroupState.EMPTY
    clock.now_ms += RETENTION_MS - MINUTE_MS
    assert await groups.expire_offsets(everywhere) == 0
    clock.now_ms += 2 * MINUTE_MS
    assert await groups.expire_offsets(everywhere) == 1
    assert await offsets(sqlite_store, group) == {}


async def test_a_consumer_group_with_a_live_member_keeps_its_old_offsets(sqlite_store: MetadataStore) -> None:
    clock, groups, topic, group = await setup(sqlite_store)
    joined = await groups.consumer_group_heartbeat(
        HeartbeatRequest(group, uuid.uuid4().hex, 0, rebalance_timeout_ms=30_000, subscribed_topic_names=(topic.name,), owned={}), [topic]
    )
    assert joined.error_code.value == 0 and not groups.consumer.is_empty(group)
    await sqlite_store.commit_offsets(group, [offset(topic.name, 1, 9, clock.now_ms)])
    for _ in range(3):
        clock.now_ms += RETENTION_MS + GRACE_MS
        assert await groups.expire_offsets(everywhere) == 0
    assert await offsets(sqlite_store, group) == {1: 9}


class CommitDuringExpiry:
    """A store through which an OffsetCommit lands between the pass's decision and its delete."""

    def __init__(self, inner: MetadataStore, commit: tuple[str, list[CommittedOffset]]) -> None:
        self._store, self._commit = inner, commit

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def expire_group_offsets(self, group_id: str, older_than_ms: int, coordinator: tuple[int, int] | None = None) -> int:
        await self._store.commit_offsets(*self._commit)
        return await self._store.expire_group_offsets(group_id, older_than_ms, coordinator)


async def test_a_commit_landing_during_the_pass_survives(sqlite_store: MetadataStore) -> None:
    clock, groups, topic, group = await setup(sqlite_store)
    await sqlite_store.commit_offsets(group, [offset(topic.name, 0, 5, clock.now_ms), offset(topic.name, 1, 6, clock.now_ms)])
    assert await groups.expire_offsets(everywhere) == 0  # grace starts
    clock.now_ms += RETENTION_MS + GRACE_MS
    groups.store = CommitDuringExpiry(sqlite_store, (group, [offset(topic.name, 0, 50, clock.now_ms)]))  # type: ignore[assignment]
    assert await groups.expire_offsets(everywhere) == 1
    assert await offsets(sqlite_store, group) == {0: 50}


async def test_an_empty_consumer_group_is_deleted_once_it_has_no_offsets(store: MetadataStore) -> None:  # noqa: F811
    """Kafka's cleanupGroupMetadata: the pass deletes an empty consumer group (its stored state
    with it) that never committed, and one whose offsets all expired in the same pass; a group
    with a member, or with offsets left, is kept."""
    clock, groups, topic, never_committed = await setup(store)
    committing, live = f"{never_committed}-c", f"{never_committed}-l"

    async def heartbeat(group: str, member: str, epoch: int) -> None:
        request = HeartbeatRequest(group, member, epoch, rebalance_timeout_ms=30_000, subscribed_topic_names=(topic.name,), owned={})
        assert (await groups.consumer_group_heartbeat(request if epoch == 0 else HeartbeatRequest(group, member, epoch), [topic])).error_code.value == 0

    for group in (never_committed, committing, live):
        await heartbeat(group, "m1", 0)
    for group in (never_committed, committing):
        await heartbeat(group, "m1", -1)
    await store.commit_offsets(committing, [offset(topic.name, 0, 5, clock.now_ms)])
    assert {g: await store.get_consumer_group(g) is not None for g in (never_committed, committing, live)} == {never_committed: True, committing: True, live: True}

    assert await groups.expire_offsets(everywhere) == 0
    assert [groups.consumer.is_consumer_group(g) for g in (never_committed, committing, live)] == [False, True, True]
    assert await store.get_consumer_group(never_committed) is None
    clock.now_ms += RETENTION_MS + GRACE_MS
    await heartbeat(live, "m1", 1)  # still there
    assert await groups.expire_offsets(everywhere) == 1
    assert [groups.consumer.is_consumer_group(g) for g in (committing, live)] == [False, True]
    assert (await store.get_consumer_group(committing), await offsets(store, committing)) == (None, {})
    assert await store.get_consumer_group(live) is not None
