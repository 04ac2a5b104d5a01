"""Write-ahead commits fenced across a topic's deletion and a broker's new incarnation.

- A topic deleted and made again under its name starts its partitions at the same leader
  epochs, so the epoch alone would let the deleted topic's late commit (still retried behind a
  slow bucket or store) land in the new topic at the same offsets. A batch carrying its topic's
  id is refused (UnknownTopicId) and the new topic's rows stay as they were: SQLite and
  PostgreSQL alike, and through the writer, which fails only the deleted topic's batches of an
  object holding both.
- A broker registering under a node id with a new incarnation (a replacement, while the old
  process may live on behind a network partition) bumps the epochs of the partitions the node
  id leads, in the registration's transaction: the old process's late commits are fenced. The
  same incarnation registering again keeps them.
- A write-ahead row is never replaced by a batch of another leader epoch at its base offset
  (WalBatchConflict, nothing written); the same epoch still rewrites it (a retried upload).
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from diskless.broker.wal.writer import WalSettings, WalWriter
from metadata import (
    BrokerIdInUse,
    FencedLeaderEpoch,
    MetadataStore,
    PartitionLeadership,
    UnknownTopicId,
    WalBatch,
    WalBatchConflict,
    open_metadata_store,
    sqlite_url,
)

from .test_metadata_store import BACKENDS, Backend, name, wal, wal_key
from .test_wal_garbage import batch_bytes

NOW_MS = 1_800_000_000_000


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MetadataStore]:
    """A fresh, empty store of each backend (as test_metadata_store's)."""
    backend: Backend = request.param
    url = request.getfixturevalue("postgres_database") if backend.name == "postgresql" else sqlite_url(tmp_path / "metadata.db")
    opened = await open_metadata_store(url)
    yield opened
    await opened.close()


def of_topic(batch: WalBatch, topic_id: uuid.UUID) -> WalBatch:
    return dataclasses.replace(batch, topic_id=topic_id)


def listed(batch: WalBatch) -> WalBatch:
    """`batch` as list_wal_batches returns it (without the topic id)."""
    return dataclasses.replace(batch, topic_id=None)


# --- a topic deleted and made again ------------------------------------------------------------


async def test_a_deleted_topics_late_wal_commit_is_refused_after_it_is_made_again(store: MetadataStore) -> None:
    topic = name()
    old = await store.create_topic(topic, 2, {})
    assert await store.bump_leader_epoch(topic, 0) == 1
    # The old leader's object is in the bucket; its commit is held up (a slow bucket or store).
    late_key = wal_key()
    late = of_topic(wal(topic, 0, 0, 9, late_key, epoch=1), old.topic_id)
    await store.delete_topic(topic)
    new = await store.create_topic(topic, 2, {})
    assert await store.bump_leader_epoch(topic, 0) == 1  # the very epoch the old leader held
    key = wal_key()
    acked = of_topic(wal(topic, 0, 0, 4, key, epoch=1), new.topic_id)
    await store.commit_wal_object(key, [acked])
    # The late commit at last: refused, whole, naming the deleted topic's id.
    with pytest.raises(UnknownTopicId) as refused:
        await store.commit_wal_object(late_key, [late])
    assert refused.value.topic_id == old.topic_id
    with pytest.raises(UnknownTopicId):  # beside a batch of the new topic: nothing of it either
        await store.commit_wal_object(late_key, [of_topic(wal(topic, 1, 0, 3, late_key, position=640), new.topic_id), late])
    assert await store.list_wal_batches(topic, 0) == [listed(acked)]
    assert await store.list_wal_batches(topic, 1) == []
    assert await store.recorded_wal_objects([key, late_key]) == {key}
    # The new topic's own batches still commit (a retry of the same object too).
    more = wal_key()
    batches = [of_topic(wal(topic, 0, 5, 9, more, epoch=1), new.topic_id), of_topic(wal(topic, 1, 0, 3, more, position=320), new.topic_id)]
    await store.commit_wal_object(more, batches)
    await store.commit_wal_object(more, batches)
    assert await store.list_wal_batches(topic, 0) == [listed(acked), listed(batches[0])]
    # Deleted and not made again: refused by id as well.
    await store.delete_topic(topic)
    with pytest.raises(UnknownTopicId):
        await store.commit_wal_object(late_key, [late])


class MemoryBucket:
    """Just what the writer's PUTs need."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    async def put(self, key: str, data: bytes, if_none_match: bool = False) -> None:
        self.objects[key] = data


async def test_the_writer_fails_only_the_deleted_topics_batches_of_an_object(tmp_path: Path) -> None:
    metadata = await open_metadata_store(sqlite_url(tmp_path / "metadata.db"))
    writer = WalWriter(MemoryBucket(), metadata, 1, lambda: NOW_MS, WalSettings(commit_interval_ms=1))  # type: ignore[arg-type]
    writer.start()
    try:
        topic = name()
        old = await metadata.create_topic(topic, 1, {})
        await metadata.bump_leader_epoch(topic, 0)
        await metadata.delete_topic(topic)
        new = await metadata.create_topic(topic, 1, {})
        await metadata.bump_leader_epoch(topic, 0)
        # One object: the deleted topic's batch (its leader not closed yet) and the new one's.
        stale = writer.submit(topic, 0, 1, 0, 9, batch_bytes(0, 10), topic_id=old.topic_id)
        fresh = writer.submit(topic, 0, 1, 0, 4, batch_bytes(0, 5), topic_id=new.topic_id)
        async with asyncio.timeout(10):
            await asyncio.wait([stale, fresh])
        assert isinstance(stale.exception(), UnknownTopicId) and stale.exception().topic_id == old.topic_id
        assert fresh.result() is None
        [recorded] = await metadata.list_wal_batches(topic, 0)
        assert (recorded.base_offset, recorded.last_offset, recorded.leader_epoch) == (0, 4, 1)
        assert writer.objects_committed == 1
    finally:
        await writer.stop()
        await metadata.close()


# --- a new incarnation of a node id ------------------------------------------------------------


async def leaderships(store: MetadataStore, topic: str) -> list[PartitionLeadership]:
    return [p for p in await store.list_partition_leaders() if p.topic == topic]


async def until_expired(store: MetadataStore, node_id: int) -> None:
    async with asyncio.timeout(10):
        while any(b.alive for b in await store.list_brokers() if b.node_id == node_id):
            await asyncio.sleep(0.01)  # the session's expiry: the store's clock, nothing to wait on


async def test_a_new_incarnation_fences_the_epochs_its_node_id_held(store: MetadataStore) -> None:
    topic = name()
    await store.create_topic(topic, 3, {})
    node, other = 101, 102
    await store.register_broker(node, "127.0.0.1", 9092, None, "old", 1)
    assert await store.set_partition_leaders(topic, [(0, node, 0), (1, node, 0), (2, other, 0)]) == [1, 1, 1]
    # The old process, cut off from the store, has an object's commit in flight at epoch 1.
    late_key = wal_key()
    late = [wal(topic, 0, 0, 9, late_key, epoch=1), wal(topic, 1, 0, 9, late_key, epoch=1, position=640)]
    await until_expired(store, node)
    # Its replacement registers under the node id: the node's partitions move to epoch 2.
    await store.register_broker(node, "127.0.0.1", 9093, None, "new", 60_000)
    assert [(p.partition, p.leader_id, p.leader_epoch) for p in await leaderships(store, topic)] == [
        (0, node, 2), (1, node, 2), (2, other, 1),
    ]  # fmt: skip
    key = wal_key()
    acked = wal(topic, 0, 0, 4, key, epoch=2)
    await store.commit_wal_object(key, [acked])
    # The old process reconnects: its commit is fenced, whole.
    with pytest.raises(FencedLeaderEpoch) as fenced:
        await store.commit_wal_object(late_key, late)
    assert (fenced.value.partition, fenced.value.leader_epoch, fenced.value.current_leader_epoch) == (0, 1, 2)
    assert await store.list_wal_batches(topic, 0) == [acked]
    assert await store.list_wal_batches(topic, 1) == []
    assert await store.recorded_wal_objects([key, late_key]) == {key}
    # The same incarnation registering again (a retried registration, a lapsed session renewed) keeps the epochs.
    await store.register_broker(node, "127.0.0.1", 9093, None, "new", 60_000)
    assert [p.leader_epoch for p in await leaderships(store, topic)] == [2, 2, 1]
    # The old one cannot take the node id back while the new one lives.
    with pytest.raises(BrokerIdInUse):
        await store.register_broker(node, "127.0.0.1", 9092, None, "old", 60_000)
    assert [p.leader_epoch for p in await leaderships(store, topic)] == [2, 2, 1]


async def test_a_new_incarnation_fences_the_coordinator_slots_its_node_id_held(store: MetadataStore) -> None:
    """Transaction and group state writes are conditional on the coordinator slot's epoch: the
    old process's must fail once a new incarnation holds the node id."""
    node, other = 111, 112
    await store.create_coordinator_slots(4)
    await store.register_broker(node, "127.0.0.1", 9092, None, "old", 1)
    before = {s.partition: s.leader_epoch for s in await store.list_coordinator_slots()}
    assert await store.set_coordinator_slots([(0, node, before[0]), (1, other, before[1])]) == [before[0] + 1, before[1] + 1]
    await until_expired(store, node)
    await store.register_broker(node, "127.0.0.1", 9093, None, "new", 60_000)
    after = {s.partition: (s.leader_id, s.leader_epoch) for s in await store.list_coordinator_slots()}
    assert (after[0], after[1]) == ((node, before[0] + 2), (other, before[1] + 1))


async def test_a_wal_row_is_never_replaced_by_another_epochs_batch(store: MetadataStore) -> None:
    topic = name()
    await store.create_topic(topic, 2, {})
    first = wal_key()
    durable = wal(topic, 0, 0, 9, first)
    await store.commit_wal_object(first, [durable])
    assert await store.bump_leader_epoch(topic, 0) == 1
    second = wal_key()
    beside = wal(topic, 1, 0, 3, second)
    with pytest.raises(WalBatchConflict) as conflict:
        await store.commit_wal_object(second, [beside, wal(topic, 0, 10, 14, second, epoch=1), wal(topic, 0, 0, 4, second, epoch=1)])
    assert (conflict.value.topic, conflict.value.partition, conflict.value.base_offset) == (topic, 0, 0)
    assert (conflict.value.leader_epoch, conflict.value.recorded_leader_epoch) == (1, 0)
    # Nothing of it was written.
    assert await store.list_wal_batches(topic, 0) == [durable]
    assert await store.list_wal_batches(topic, 1) == []
    assert await store.recorded_wal_objects([first, second]) == {first}
    # The same epoch rewrites its own row (a retried upload, another object).
    third = wal_key()
    rewritten = wal(topic, 1, 0, 3, third, position=128)
    await store.commit_wal_object(second, [beside])
    await store.commit_wal_object(third, [rewritten])
    assert await store.list_wal_batches(topic, 1) == [rewritten]
