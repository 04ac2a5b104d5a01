"""The `MetadataStore` protocol: cluster state as Kafka operations.

Every backend (SQLite today, PostgreSQL later) implements exactly these coroutines with the
same semantics, checked by one scenario suite run against each. Calls may come from many
tasks of one event loop at once; each call is one atomic transaction, and none blocks the
loop. A call whose task is cancelled may or may not have taken effect, like any request to a
remote database: callers retry idempotently or read back.

Written with several brokers in mind: partition ownership is explicit through leader
epochs, and every write to the remote segment catalogue (and to producer snapshots) names
the writer's `leader_epoch`, checked against the partition's current one inside the same
transaction (`FencedLeaderEpoch`, `UnknownLeaderEpoch`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from .model import (
    CommittedOffset,
    ProducerSnapshot,
    RemoteSegment,
    RemoteSegmentState,
    BrokerRegistration,
    PartitionLeadership,
    TopicMetadata,
    WalBatch,
)
from .security import AclBinding, StoredScramCredential
from .transactions import COMPLETE_ABORT, COMPLETE_COMMIT, DEAD, EMPTY, TransactionRecord

# Transaction states whose rows hold no pending offsets: every way into Empty, CompleteCommit
# and CompleteAbort clears them (diskless/broker/txn/coordinator.py); Dead, Kafka's state of an
# expiring id (never written here), holds none either.
# Backends skip these rows in SQL for `list_pending_offset_transactions`; a state not named
# here (Ongoing, PrepareCommit, PrepareAbort, PrepareEpochFence, any later one) is read.
NO_PENDING_OFFSETS_STATES = (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT, DEAD)


@runtime_checkable
class MetadataStore(Protocol):
    # --- topics ----------------------------------------------------------------------------

    async def create_topic(
        self, name: str, num_partitions: int, configs: Mapping[str, str], topic_id: uuid.UUID | None = None
    ) -> TopicMetadata:
        """Create a topic with partitions 0..num_partitions-1, each at log start offset 0 and
        leader epoch 0. A random topic id is chosen when none is given.
        Raises TopicAlreadyExists, TopicIdAlreadyExists, TopicNameCollision (another topic's
        name differs only in '.' against '_', checked against every broker's topics, also
        those being created at the same moment), InvalidTopicName, InvalidTopicId,
        InvalidPartitions."""
        ...

    async def get_topic(self, name: str) -> TopicMetadata:
        """Raises UnknownTopic."""
        ...

    async def get_topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata:
        """Raises UnknownTopicId."""
        ...

    async def list_topics(self) -> list[TopicMetadata]:
        """Every topic, ordered by name."""
        ...

    async def delete_topic(self, name: str) -> TopicMetadata:
        """Delete the topic with everything keyed on it: configs, partition state, committed
        offsets of every group, remote segment catalogue rows (whatever their state) and
        producer snapshots. Returns the topic as it was. The objects in the bucket are the
        caller's to delete, before or after. Raises UnknownTopic."""
        ...

    async def alter_topic_configs(
        self, name: str, set_configs: Mapping[str, str], delete_configs: Iterable[str]
    ) -> TopicMetadata:
        """IncrementalAlterConfigs: set some overrides, delete others (deleting an unset name
        is a no-op). Returns the topic after the change. Raises UnknownTopic,
        ConflictingConfigChanges."""
        ...

    async def create_partitions(self, name: str, new_total: int) -> TopicMetadata:
        """CreatePartitions: grow the topic to `new_total` partitions. Raises UnknownTopic,
        InvalidPartitions (new_total not above the current count)."""
        ...

    # --- partition state -------------------------------------------------------------------

    async def set_log_start_offset(
        self, topic: str, partition: int, offset: int, *, leader_epoch: int | None = None
    ) -> int:
        """Advance the partition's log start offset. It never moves back: a smaller offset
        leaves it unchanged. Returns the log start offset after the call. When
        `leader_epoch` is given, the write is fenced on it. Raises UnknownTopic,
        UnknownTopicOrPartition, InvalidOffset, FencedLeaderEpoch, UnknownLeaderEpoch."""
        ...

    async def get_log_start_offsets(self, topic: str) -> dict[int, int]:
        """{partition: log_start_offset} for every partition. Raises UnknownTopic."""
        ...

    async def partitions_with_state(self, topic: str) -> set[int]:
        """The partitions that hold rows of their own besides their leadership: catalogued
        segments (any state), write-ahead batches or aborted transactions. A new leader of any
        other partition has nothing to read back (one query per topic at start-up instead
        of several per partition). Raises UnknownTopic."""
        ...

    async def get_leader_epoch(self, topic: str, partition: int) -> int:
        """Raises UnknownTopic, UnknownTopicOrPartition."""
        ...

    async def bump_leader_epoch(self, topic: str, partition: int) -> int:
        """Take leadership: increment the partition's leader epoch and return the new one.
        Every write made under an older epoch is fenced from then on."""
        ...

    # --- consumer group offsets ------------------------------------------------------------

    # A group's coordinator writes its offsets with `coordinator`, the (slot, epoch) of the
    # group's coordinator slot it believes it holds (a transaction coordinator: its
    # transactional id's slot): the write lands only while that slot is at that epoch, checked
    # in the same transaction, else CoordinatorFenced and nothing is written (Kafka: an append
    # to __consumer_offsets fails once its broker lost the partition's leadership). None
    # writes unconditionally, for callers that coordinate nothing.

    async def commit_offsets(
        self, group_id: str, offsets: Iterable[CommittedOffset], coordinator: tuple[int, int] | None = None
    ) -> None:
        """OffsetCommit: store all of them or none. A later commit of the same partition
        replaces the earlier one. An offset may be negative, as Kafka keeps whatever a client
        commits (-1 reads back as "no position"). Raises UnknownTopic, UnknownTopicOrPartition,
        CoordinatorFenced."""
        ...

    async def fetch_offsets(
        self, group_id: str, partitions: Iterable[tuple[str, int]] | None = None
    ) -> list[CommittedOffset]:
        """OffsetFetch: the group's committed offsets for `partitions` (all of them when
        None), ordered by (topic, partition). Partitions without a committed offset, and
        unknown topics, are simply absent."""
        ...

    async def delete_offsets(
        self, group_id: str, partitions: Iterable[tuple[str, int]], coordinator: tuple[int, int] | None = None
    ) -> int:
        """OffsetDelete: forget these partitions' offsets. Returns how many existed. Fenced as
        commit_offsets."""
        ...

    async def delete_group(self, group_id: str, coordinator: tuple[int, int] | None = None) -> int:
        """DeleteGroups: the group's offsets and its consumer group state (put_consumer_group),
        in one transaction. Returns how many offsets were deleted. Fenced as commit_offsets."""
        ...

    async def list_groups_with_offsets(self) -> list[str]:
        """Ids of groups with at least one committed offset, sorted."""
        ...

    async def expire_offsets(self, older_than_ms: int) -> int:
        """offsets.retention.minutes: delete every committed offset whose
        commit_timestamp_ms is below `older_than_ms`. Returns how many were deleted. Whether
        a group is empty long enough (KIP-211) is the coordinator's decision, not this one's."""
        ...

    async def expire_group_offsets(
        self, group_id: str, older_than_ms: int, coordinator: tuple[int, int] | None = None
    ) -> int:
        """As expire_offsets, for one group: its coordinator found it empty long enough. One
        conditional delete, so an offset committed again meanwhile (a newer
        commit_timestamp_ms) stays. Returns how many were deleted. Fenced as commit_offsets."""
        ...

    # --- consumer groups (KIP-848) ---------------------------------------------------------

    # A consumer group's state as its coordinator keeps it (what Kafka writes as ConsumerGroup*
    # records to __consumer_offsets), one text per group that the store does not interpret,
    # fenced on the group's coordinator slot as its offsets are.

    async def put_consumer_group(self, group_id: str, state: str, coordinator: tuple[int, int] | None = None) -> None:
        """Write a KIP-848 consumer group's whole state (insert or replace), an opaque text
        (group/consumer_snapshot.py's text). With `coordinator` (slot, epoch), only while that
        coordinator slot is at that epoch: CoordinatorFenced."""
        ...

    async def get_consumer_group(self, group_id: str) -> str | None:
        """The group's last state put, or None."""
        ...

    async def list_consumer_groups(self) -> list[str]:
        """The ids of the groups with a state put, ordered."""
        ...

    async def delete_consumer_group(self, group_id: str, coordinator: tuple[int, int] | None = None) -> None:
        """Forget the group's state; no-op if unknown. Fenced as put_consumer_group."""
        ...

    # --- producer ids and state ------------------------------------------------------------

    async def allocate_producer_id(self) -> int:
        """InitProducerId: a producer id never handed out before, by this store or any
        earlier run on the same database. Increasing within one store."""
        ...

    async def put_producer_snapshot(
        self, topic: str, partition: int, snapshot: ProducerSnapshot, *, leader_epoch: int
    ) -> None:
        """Replace the partition's producer snapshot. Fenced on `leader_epoch`."""
        ...

    async def get_producer_snapshot(self, topic: str, partition: int) -> ProducerSnapshot | None:
        """The partition's last producer snapshot, entries ordered by producer id."""
        ...

    # --- remote segment catalogue ----------------------------------------------------------

    async def add_remote_segment(self, segment: RemoteSegment) -> RemoteSegment:
        """Catalogue a segment whose upload is starting, in state uploading (readers do not
        see it). Fenced on `segment.leader_epoch`. Raises InvalidRemoteSegment,
        RemoteSegmentAlreadyExists (same base offset and object key, or same object key)."""
        ...

    async def commit_remote_segment(
        self, topic: str, partition: int, base_offset: int, object_key: str, *, leader_epoch: int
    ) -> RemoteSegment:
        """The upload is complete: uploading -> committed; the segment becomes visible.
        Raises UnknownRemoteSegment, InvalidRemoteSegmentTransition, RemoteSegmentOverlap
        (another committed segment covers one of its offsets), FencedLeaderEpoch."""
        ...

    async def replace_remote_segments(
        self, topic: str, partition: int, base_offset: int, object_key: str, replaced: Sequence[tuple[int, str]], *,
        leader_epoch: int, forget_aborted: Sequence[int] = (),
    ) -> RemoteSegment:
        """A rewritten copy (the log cleaner's, in the bucket) takes the place of committed
        segments, in one fenced write: each `replaced` (base offset, object key) committed ->
        deleting, then the new one uploading -> committed, and the partition's aborted
        transactions whose abort marker is at one of `forget_aborted` are deleted (the copy no
        longer holds marker nor data). Raises what mark_remote_segment_deleting and
        commit_remote_segment raise; nothing changes then."""
        ...

    async def list_remote_segments(
        self,
        topic: str,
        partition: int,
        states: Iterable[RemoteSegmentState | str] = (RemoteSegmentState.COMMITTED,),
    ) -> list[RemoteSegment]:
        """Segments of the partition in any of `states`, ordered by base offset (then object
        key). Raises UnknownTopic, UnknownTopicOrPartition."""
        ...

    async def mark_remote_segment_deleting(
        self, topic: str, partition: int, base_offset: int, object_key: str, *, leader_epoch: int
    ) -> RemoteSegment:
        """Retention (or an abandoned upload): -> deleting; readers stop seeing it before its
        objects go away."""
        ...

    async def remove_remote_segment(
        self, topic: str, partition: int, base_offset: int, object_key: str, *, leader_epoch: int
    ) -> None:
        """The objects are gone: drop the row. Only a deleting segment can be removed."""
        ...

    # --- write-ahead objects ---------------------------------------------------------------

    async def commit_wal_object(self, object_key: str, batches: Sequence[WalBatch]) -> None:
        """A write-ahead object is in the bucket: record its batches as durable, all or none.
        Each batch is conditional on its partition's leader epoch (compare-and-set): one stale
        or unknown epoch raises FencedLeaderEpoch / UnknownLeaderEpoch naming that partition,
        and nothing is written. A batch whose partition (or topic) no longer exists raises
        UnknownTopicOrPartition / UnknownTopic, and nothing is written; a batch carrying a
        `topic_id` that its name no longer belongs to (the topic was deleted, perhaps made
        again) raises UnknownTopicId, checked before its epoch. A batch recorded again (a
        retried commit, or upload) replaces its row, but never a row of another leader epoch
        at the same base offset: WalBatchConflict, and nothing is written."""
        ...

    async def list_wal_batches(self, topic: str, partition: int, from_offset: int = 0) -> list[WalBatch]:
        """The partition's durable batches in write-ahead objects whose last offset is at or
        above `from_offset`, ordered by base offset. Raises UnknownTopic,
        UnknownTopicOrPartition."""
        ...

    async def delete_wal_batches_below(self, topic: str, partition: int, offset: int, *, leader_epoch: int) -> int:
        """Forget the partition's write-ahead batches whose last offset is below `offset`
        (they are inside committed segments now); returns how many. Fenced on `leader_epoch`."""
        ...

    async def list_unreferenced_wal_objects(self) -> list[str]:
        """Keys of committed write-ahead objects none of whose batches is still recorded (their
        topics were deleted or their batches are in segments): the bucket may drop them."""
        ...

    async def delete_wal_object(self, object_key: str) -> None:
        """The object is gone from the bucket: drop its row (and any batch rows left). A key
        not recorded is a no-op."""
        ...

    async def recorded_wal_objects(self, object_keys: Sequence[str]) -> set[str]:
        """Those of `object_keys` whose write-ahead object is recorded (committed and not yet
        deleted). A key in the bucket but not here was PUT and never committed (a crash
        between the PUT and the commit, or a fenced commit): garbage once no writer still
        tries to commit it."""
        ...

    # --- cluster ---------------------------------------------------------------------------

    async def get_or_create_cluster_id(self, proposed: str) -> str:
        """The cluster id every broker sharing this store reports: the one recorded, or
        `proposed` if none is (recorded then, atomically: two brokers starting at once agree)."""
        ...

    # --- membership and leadership ----------------------------------------------------------

    async def list_coordinator_slots(self) -> list[PartitionLeadership]:
        """Every coordinator slot as a leadership of COORDINATOR_SLOTS (holder, epoch), by slot."""
        ...

    async def create_coordinator_slots(self, count: int) -> int:
        """Slots 0..count-1, unheld, unless some exist already; the number of slots there is."""
        ...

    async def set_coordinator_slots(self, moves: Sequence[tuple[int, int | None, int]]) -> list[int | None]:
        """As set_partition_leaders, for (slot, holder, expected epoch) moves."""
        ...

    async def register_broker(
        self, node_id: int, host: str, port: int, rack: str | None, incarnation: str, session_timeout_ms: int,
        listeners: Sequence[tuple[str, str, int]] = (),
    ) -> None:
        """Open (or renew) the broker's session, expiring `session_timeout_ms` from now (the
        store's clock). The same incarnation, or any incarnation once the old session expired,
        may register; another live incarnation raises BrokerIdInUse. `listeners`: (name, host,
        port) of each of its listeners, for BrokerRegistration.endpoint.

        A new incarnation (another than the one registered, or none registered) also bumps the
        leader epoch of every partition the node id leads, in the same transaction, as Kafka
        fences a broker's old incarnation: the old process, perhaps alive behind a network
        partition, has write-ahead commits and uploads in flight at the epochs it held, and
        they must fail the epoch check rather than land beside (or over) the new process's
        batches at the same offsets. The same incarnation (a restart of the same data
        directory, or a lapsed session renewed) keeps its epochs: its log is the one it wrote."""
        ...

    async def heartbeat_broker(self, node_id: int, incarnation: str, session_timeout_ms: int) -> bool:
        """Extend the session; False if `incarnation` no longer holds it (expired and taken, or
        unregistered): the broker is out and must stop leading."""
        ...

    async def unregister_broker(self, node_id: int, incarnation: str) -> None:
        """Close the session now (controlled shutdown). A no-op if `incarnation` does not hold it."""
        ...

    async def list_brokers(self) -> list[BrokerRegistration]:
        """Every registered broker, by node id, with `alive` by the store's clock."""
        ...

    async def end_broker_sessions(self, node_id: int, incarnation: str) -> int:
        """End the database sessions of a broker whose session expired (PostgreSQL; a no-op
        elsewhere); the number ended. A broker cut off from the database in the middle of a
        transaction leaves it open, and its row locks hold the controller's moves of its
        partitions, until the database notices the connection is dead (hours without TCP
        keepalives, never behind a proxy that holds the bytes)."""
        ...

    async def acquire_lease(self, name: str, holder: int, duration_ms: int) -> bool:
        """Take or renew the lease `name` (e.g. "controller") for `duration_ms` if it is free,
        expired or already `holder`'s; False if another holder has it."""
        ...

    async def release_lease(self, name: str, holder: int) -> None:
        """Give the lease up now, if `holder` has it."""
        ...

    async def lease_holder(self, name: str) -> int | None:
        """Who holds the lease `name` now (None: nobody, or it expired)."""
        ...

    async def watch_cluster(self, changed: Callable[[], None]) -> None:
        """From now on call `changed()` soon after any broker changes the cluster (a broker
        joins or leaves, a leader moves, a topic is made, grown, altered or deleted). Best
        effort: a change made while the store is unreachable may go unheard (the heartbeat's
        reads see it). The embedded SQLite store serves one broker and hears nothing."""
        ...

    async def list_partition_leaders(self) -> list[PartitionLeadership]:
        """Every partition of every topic with its leader and leader epoch, by topic and partition."""
        ...

    async def set_partition_leader(self, topic: str, partition: int, leader_id: int | None, expected_epoch: int) -> int:
        """Make `leader_id` (None: nobody) the partition's leader if its epoch is still
        `expected_epoch` (compare-and-set), bumping the epoch; returns the new epoch. Every
        write of the previous leader is fenced from then on. Raises FencedLeaderEpoch if the
        epoch moved, UnknownTopic, UnknownTopicOrPartition."""
        ...

    async def set_partition_leaders(self, topic: str, moves: Sequence[tuple[int, int | None, int]]) -> list[int | None]:
        """`set_partition_leader` for many partitions of one topic in one transaction: each
        (partition, leader_id, expected_epoch) that still holds its expected epoch moves; the
        answer per move is its new epoch, or None if its epoch had moved (nothing raised)."""
        ...

    async def set_preferred_leaders(self, topic: str, preferred: Sequence[tuple[int, int | None]]) -> None:
        """Record, per (partition, node id or None), the broker a reassignment asked to lead the
        partition (`PartitionLeadership.preferred_leader`; the controller keeps it there while
        it lives). Leadership itself does not move. Raises UnknownTopic, UnknownTopicOrPartition."""
        ...

    # --- security (metadata/security.py) ------------------------------------------------------

    async def list_scram_credentials(self, users: Sequence[str] | None = None) -> list[StoredScramCredential]:
        """The SCRAM credentials of `users` (every user when None), ordered by user and mechanism."""
        ...

    async def alter_scram_credentials(
        self, upsertions: Sequence[StoredScramCredential], deletions: Sequence[tuple[str, str]]
    ) -> None:
        """Delete (user, mechanism) pairs, then insert or replace credentials, in one transaction."""
        ...

    async def list_acls(self) -> list[AclBinding]:
        """Every ACL binding, sorted."""
        ...

    async def create_acls(self, bindings: Sequence[AclBinding]) -> None:
        """Add bindings; one that exists already is left as it is."""
        ...

    async def delete_acls(self, bindings: Sequence[AclBinding]) -> int:
        """Remove exactly these bindings; how many existed."""
        ...

    # --- configs of other resources (GROUP configs) --------------------------------------------

    async def list_resource_configs(self, resource_type: str) -> dict[str, dict[str, str]]:
        """Every resource of `resource_type` ("group") with configs set: name -> {config: value}."""
        ...

    async def set_resource_configs(self, resource_type: str, resource_name: str, configs: Mapping[str, str]) -> None:
        """Replace the whole set of configs of one resource (an empty mapping removes them all)."""
        ...

    # --- transactions (metadata/transactions.py) ----------------------------------------------

    async def put_transaction(self, record: TransactionRecord, coordinator: tuple[int, int] | None = None) -> None:
        """Write a transactional id's whole state (insert or replace). With `coordinator`
        (slot, epoch), only while that coordinator slot is at that epoch: CoordinatorFenced."""
        ...

    async def list_transactions(self) -> list[TransactionRecord]:
        """Every transactional id's state, ordered by id."""
        ...

    async def list_pending_offset_transactions(self, group_id: str) -> list[TransactionRecord]:
        """The transactional ids' states that may hold pending offsets (TxnOffsetCommit) of
        `group_id`, ordered by id: those in a state not in NO_PENDING_OFFSETS_STATES with at
        least one pending offset of exactly that group. OffsetFetch with require_stable
        (KIP-447) reads these instead of every transactional id; the caller decides which
        states make an offset unstable."""
        ...

    async def delete_transaction(self, transactional_id: str, coordinator: tuple[int, int] | None = None) -> None:
        """Forget a transactional id (transactional.id.expiration.ms); no-op if unknown.
        Fenced as put_transaction."""
        ...

    async def put_aborted_transactions(
        self, topic: str, partition: int, entries: Sequence[tuple[int, int, int]], *, delete_below: int, leader_epoch: int
    ) -> None:
        """Record a partition's aborted transactions, (producer id, first offset, abort marker
        offset) each, replacing any at the same marker offset, and forget those whose marker
        is below `delete_below` (the log start offset). Fenced on `leader_epoch`."""
        ...

    async def list_aborted_transactions(self, topic: str, partition: int) -> list[tuple[int, int, int]]:
        """The partition's recorded aborted transactions, by marker offset. Raises UnknownTopic."""
        ...

    # --- lifecycle -------------------------------------------------------------------------

    async def close(self) -> None:
        """Finish the calls already made, then release the database. Idempotent; later calls
        raise MetadataStoreClosed."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...
