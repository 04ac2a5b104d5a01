"""The async shell around the sans-IO group coordinators, and committed offsets.

Two coordinators share the group ids: the classic one (JoinGroup/SyncGroup, group/
coordinator.py) and KIP-848's (ConsumerGroupHeartbeat, group/consumer_coordinator.py). A
group id belongs to one of them at a time; an empty group changes hands when a member of the
other protocol joins (Kafka's offline upgrade and downgrade), its committed offsets kept.

The classic coordinator parks JoinGroup and SyncGroup requests as tickets; this shell keeps a future
per ticket, resolves futures from every completion the coordinator hands back, and runs one
timer task that calls `tick` at the coordinator's next deadline (session timeouts, rebalance
timeouts, the initial rebalance delay). Committed offsets live in the metadata store.

This class is the one door to group state: handlers call its methods and never reach the
coordinator or the store behind it. A group the coordinator does not know but whose committed
offsets exist (after a restart, or committed by a simple consumer) is an Empty consumer group,
as Kafka loads it from __consumer_offsets (group/views.py decides how it is shown).

Error codes are kio's `ErrorCode`. Metadata-store failures propagate as exceptions; the
handler answering the request turns them into an error code.

Every write of committed offsets is fenced by the group's coordinator slot: it carries the
(slot, epoch) this broker holds by its last cluster view (`coordinator_of`), and the store
writes only while the slot is still at that epoch. A broker whose view is stale (a stall)
after the controller moved the slot on gets CoordinatorFenced and answers NOT_COORDINATOR
(clients look the coordinator up again), so its members cannot overwrite the offsets committed
through the new coordinator, as Kafka's old coordinator fails to append to __consumer_offsets
once it lost the partition's leadership.

KIP-848 groups' state is in the store too (`_load`, `_persist`): written before the answer
to each heartbeat that changed it, fenced by the coordinator slot as offsets are, and read
back when a coordinator first meets the group (after a restart or a slot move), so members go
on at their epochs and no partition has two owners across the move. An Empty consumer group
keeps its row (its type and epochs), as Kafka keeps its ConsumerGroupMetadata record, until
it is deleted: DeleteGroups, a classic member taking it over (`join_group`), or the offsets
expiry finding it with no offsets left (Kafka's cleanupGroupMetadata). A classic group's
Stable generation is kept in the same row (`_store_classic`, group/classic_snapshot.py), written
before the answers of the call that made it, so its members heartbeat on at a new coordinator
without a rebalance; a failed write is only logged (the in-memory group stays right here, and
a coordinator taking it up from an older generation makes its members rejoin).

Only the event-loop task calls this class.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from kio.schema.errors import ErrorCode

from metadata import CommittedOffset, CoordinatorFenced, MetadataStore

from .group import classic_snapshot, group_configs
from .group.assignors import TopicInfo
from .group.consumer_coordinator import (
    ConsumerGroupCoordinator,
    ConsumerGroupDescription,
    HeartbeatRequest,
    HeartbeatResponse,
)
from .group import (
    Completion,
    GroupConfig,
    GroupCoordinator,
    GroupDescription,
    GroupState,
    JoinGroupResponse,
    LeaveGroupResponse,
    ListedGroup,
    Outcome,
    SyncGroupResponse,
)
from .errors import NotGroupCoordinator
from .group.views import described_with_offsets, listed_with_offsets

log = logging.getLogger(__name__)

OFFSET_METADATA_MAX_BYTES = 4096  # offset.metadata.max.bytes
GROUP_RESOURCE = "group"  # the metadata store's resource type of GROUP configs
GROUP_CONFIGS_REFRESH_S = 5.0


class Groups:
    def __init__(
        self,
        config: GroupConfig,
        store: MetadataStore,
        clock: Callable[[], int],
        offsets_retention_ms: int,
        coordinator_of: Callable[[str], tuple[int, int] | None] | None = None,
    ) -> None:
        """`coordinator_of`: the (slot, epoch) of a group id's coordinator slot while this broker
        holds it, else None. Without it (a store with no coordinator slots, as some tests run
        it) offset writes are not fenced."""
        self.config = config
        self.coordinator = GroupCoordinator(config)
        self.consumer = ConsumerGroupCoordinator(config)
        self.store = store
        self.clock = clock
        self.offsets_retention_ms = offsets_retention_ms
        self._coordinator_of = coordinator_of
        self._waiters: dict[Any, asyncio.Future[Any]] = {}
        self._timer_changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._configs_task: asyncio.Task[None] | None = None
        # Offsets expiry (expire_offsets): when a member of a group was last seen here, and
        # since when the expiry passes have found this broker coordinating a group.
        self._members_seen_ms: dict[str, int] = {}
        self._coordinated_since_ms: dict[str, int] = {}
        # KIP-848 state: the group ids the store was found to have no state of (not read again
        # while coordinated here), one lock per group so its reads and writes go out in order
        # (dropped with the group: a read or write that spans an unload applies nothing), and
        # the background reads of slots taken up.
        self._absent: set[str] = set()
        self._locks: dict[str, asyncio.Lock] = {}
        self._taking_up: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run_timers(), name="group-timers")
        self._configs_task = asyncio.create_task(self._refresh_group_configs(), name="group-configs")

    def unload(self, which: Callable[[str], bool]) -> None:
        """Forget the groups `which` names: their coordinator slot moved away, came here, or
        came back at another epoch (what this broker knew of them may be stale)."""
        self._deliver(self.coordinator.unload(self.clock(), which))
        self.consumer.unload(which)
        self._coordinated_since_ms = {g: t for g, t in self._coordinated_since_ms.items() if not which(g)}
        self._absent = {g for g in self._absent if not which(g)}
        self._locks = {g: lock for g, lock in self._locks.items() if not which(g)}

    def take_up(self, which: Callable[[str], bool]) -> None:
        """Read the stored KIP-848 groups `which` names (their coordinator slot came here), in
        the background, as Kafka loads a partition's groups when it becomes its coordinator:
        their members' sessions run from now, also of members that never come back. A group
        asked for before its turn is read then (`_load`)."""
        task = asyncio.create_task(self._take_up(which), name="group-take-up")
        self._taking_up.add(task)
        task.add_done_callback(self._taking_up.discard)

    async def _take_up(self, which: Callable[[str], bool]) -> None:
        try:
            for group_id in await self.store.list_consumer_groups():
                if which(group_id):
                    try:
                        await self._load(group_id)
                    except NotGroupCoordinator:
                        pass  # moved on meanwhile
        except Exception as exc:  # the store is down: each group is read when first asked for
            log.warning("reading the consumer groups of coordinator slots taken up failed: %s", exc)

    async def stop(self) -> None:
        self._deliver(self.coordinator.unload(self.clock()))
        self.consumer.unload()
        for task in (self._task, self._configs_task, *self._taking_up):
            if task is not None:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass

    # --- membership ----------------------------------------------------------------------

    async def join_group(self, **request: Any) -> JoinGroupResponse:
        group_id = request["group_id"]
        self._seen_members(group_id)
        await self._load(group_id)
        if self.consumer.is_consumer_group(group_id):
            if not self.consumer.is_empty(group_id):
                return JoinGroupResponse(error_code=ErrorCode.inconsistent_group_protocol, member_id=request["member_id"])
            self.consumer.delete_group(group_id)  # offline downgrade: offsets stay, its stored state goes
            error = await self._persist(group_id)
            if error is not None:  # the store still holds the consumer group: the member tries again
                return JoinGroupResponse(error_code=error, member_id=request["member_id"])
            if self.consumer.is_consumer_group(group_id):  # a member of the new protocol made it anew meanwhile
                return JoinGroupResponse(error_code=ErrorCode.inconsistent_group_protocol, member_id=request["member_id"])
            log.info("consumer group %s, empty, converted to a classic group", group_id)
        outcome = self.coordinator.join_group(**request, now_ms=self.clock())
        response = await self._settle(outcome, group_id)
        return response or JoinGroupResponse(error_code=ErrorCode.unknown_member_id, member_id=request["member_id"])

    async def sync_group(self, **request: Any) -> SyncGroupResponse:
        self._seen_members(request["group_id"])
        await self._load(request["group_id"])
        outcome = self.coordinator.sync_group(**request, now_ms=self.clock())
        response = await self._settle(outcome, request["group_id"])
        return response or SyncGroupResponse(error_code=ErrorCode.unknown_member_id)

    async def heartbeat(self, **request: Any) -> ErrorCode:
        self._seen_members(request["group_id"])
        await self._load(request["group_id"])
        error = self.coordinator.heartbeat(**request, now_ms=self.clock())
        self._timer_changed.set()
        return error

    async def leave_group(self, group_id: str, members: list[tuple[str, str | None]]) -> LeaveGroupResponse:
        self._seen_members(group_id)  # the group may become empty now
        await self._load(group_id)
        return await self._settle(self.coordinator.leave_group(group_id, members, now_ms=self.clock()), group_id)

    async def consumer_group_heartbeat(self, request: HeartbeatRequest, topics: Iterable[Any]) -> HeartbeatResponse:
        """ConsumerGroupHeartbeat; `topics` are the cluster's TopicMetadata. Answered once
        what it changed is in the store."""
        await self._load(request.group_id)
        now = self.clock()
        self._seen_members(request.group_id)
        if request.member_epoch == 0 and not self.consumer.is_consumer_group(request.group_id):
            classic = self.coordinator.group_overview(request.group_id)
            if classic is not None:
                if classic.state is not GroupState.EMPTY:
                    return HeartbeatResponse(
                        ErrorCode.group_id_not_found,
                        f"Group {request.group_id} is not a consumer group: it has classic members (no online upgrade).",
                        request.member_id, request.member_epoch, 0,
                    )  # fmt: skip
                self.coordinator.delete_group(request.group_id, now)  # offline upgrade: offsets stay
                log.info("classic group %s, empty, converted to a consumer group", request.group_id)
        infos = {t.name: TopicInfo(t.topic_id, t.name, t.num_partitions) for t in topics}
        response = self.consumer.heartbeat(request, infos, now)
        self._timer_changed.set()
        error = await self._persist(request.group_id)
        if error is not None:
            return HeartbeatResponse(error, None, request.member_id or None, request.member_epoch, 0)
        return response

    async def consumer_group_describe(self, group_ids: Iterable[str], *, strict: bool = True) -> list[ConsumerGroupDescription]:
        """ConsumerGroupDescribe; not `strict` (the console), a group this broker does not
        coordinate is described as not found instead of raising NotGroupCoordinator."""
        described = []
        for group_id in group_ids:
            await self._load(group_id, strict=strict)
            d = self.consumer.describe(group_id)
            if d.error_code is ErrorCode.group_id_not_found and self.coordinator.group_overview(group_id) is not None:
                d = ConsumerGroupDescription(group_id, ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")
            described.append(d)
        return described

    # --- group configs (the GROUP resource) -------------------------------------------------

    # Group configs live in the metadata store (resource type "group"), so they survive a
    # restart and every broker sees them; the coordinator heartbeats with a copy refreshed every
    # GROUP_CONFIGS_REFRESH_S (at once for changes made through this broker).

    async def describe_group_configs(self, group_id: str) -> list[group_configs.GroupConfigEntry]:
        return group_configs.describe(self.config, await self._stored_group_configs(group_id))

    async def alter_group_configs(self, group_id: str, ops: list[tuple[str, int, str | None]] | None, replace: list[tuple[str, str | None]] | None, validate_only: bool) -> None:
        """IncrementalAlterConfigs (`ops`) or AlterConfigs (`replace`) of a group; raises
        group_configs.InvalidGroupConfig or ValueError. Applies to the next heartbeats."""
        current = await self._stored_group_configs(group_id)
        if ops is not None:
            updated = group_configs.apply_incremental(self.config, current, ops)
        else:
            updated = group_configs.replace_all(self.config, replace or [])
        if validate_only:
            return
        await self.store.set_resource_configs(GROUP_RESOURCE, group_id, updated)
        if updated:
            self.consumer.group_configs[group_id] = updated
        else:
            self.consumer.group_configs.pop(group_id, None)

    async def _stored_group_configs(self, group_id: str) -> dict[str, str]:
        return (await self.store.list_resource_configs(GROUP_RESOURCE)).get(group_id, {})

    async def _refresh_group_configs(self) -> None:
        while True:
            try:
                self.consumer.group_configs = await self.store.list_resource_configs(GROUP_RESOURCE)
            except Exception as exc:  # the store is down: keep the last copy, try again
                log.warning("reading group configs from the metadata store failed: %s", exc)
            await asyncio.sleep(GROUP_CONFIGS_REFRESH_S)

    async def _settle(self, outcome: Outcome[Any], group_id: str) -> Any:
        """Write the classic group's state if the call changed what the store keeps, then
        deliver what the call completed for others and return its own answer, waiting if
        parked (the caller's ticket is listened for before the write: another call may
        complete it meanwhile)."""
        future = None
        if outcome.ticket is not None:
            future = self._waiters[outcome.ticket] = asyncio.get_running_loop().create_future()
        try:
            self._timer_changed.set()
            try:
                if self.coordinator.is_unstored(group_id):
                    await self._store_classic(group_id)
            finally:
                self._deliver(outcome.completions)  # also if this call is cancelled: the others are answered
            return outcome.response if future is None else await future
        finally:
            if outcome.ticket is not None:
                self._waiters.pop(outcome.ticket, None)

    def _deliver(self, completions: Iterable[Completion]) -> None:
        for completion in completions:
            future = self._waiters.pop(completion.ticket, None)
            if future is not None and not future.done():
                # None: Kafka would never answer. One request at a time per connection means
                # silence would stall the connection, so the caller answers with an error.
                future.set_result(completion.response)

    def _next_deadline_ms(self) -> int | None:
        deadlines = [d for d in (self.coordinator.next_deadline_ms(), self.consumer.next_deadline_ms()) if d is not None]
        return min(deadlines) if deadlines else None

    async def _run_timers(self) -> None:
        while True:
            deadline = self._next_deadline_ms()
            self._timer_changed.clear()
            timeout = None if deadline is None else max(0.0, (deadline - self.clock()) / 1000)
            try:
                await asyncio.wait_for(self._timer_changed.wait(), timeout)
                continue
            except TimeoutError:
                pass
            now = self.clock()
            while (deadline := self.coordinator.next_deadline_ms()) is not None and deadline <= now:
                self._deliver(self.coordinator.tick(now))
            await asyncio.gather(*(self._store_classic(group_id) for group_id in self.coordinator.unstored_groups()))
            while (deadline := self.consumer.next_deadline_ms()) is not None and deadline <= now:
                expired = self.consumer.tick(now)
                for group_id, member_id in expired:
                    log.info("consumer group %s: member %s fenced (session or rebalance timeout expired)", group_id, member_id)
                await asyncio.gather(*(self._persist(group_id) for group_id in dict.fromkeys(g for g, _ in expired)))

    # --- KIP-848 groups' state in the store ------------------------------------------------

    def _lock(self, group_id: str) -> asyncio.Lock:
        return self._locks.setdefault(group_id, asyncio.Lock())

    async def _load(self, group_id: str, *, strict: bool = True) -> None:
        """Take up a KIP-848 group from the store if this coordinator does not know it yet;
        a store failure propagates. Only at the group's coordinator, whose slot is taken up
        and whose session is valid (`coordinator_of`): elsewhere a copy would be stale by the
        time the slot came, and requests answer NOT_COORDINATOR (NotGroupCoordinator) unless
        not `strict` (listings), as they do when the slot moves during the read."""
        if self._coordinator_of is not None and self._coordinator_of(group_id) is None:
            if strict:
                raise NotGroupCoordinator(group_id)
            return
        if self.consumer.is_consumer_group(group_id) or group_id in self._absent or self.coordinator.group_overview(group_id) is not None:
            return
        lock = self._lock(group_id)
        async with lock:
            if self.consumer.is_consumer_group(group_id) or group_id in self._absent or self.coordinator.group_overview(group_id) is not None:
                return  # read by the call before, or made here meanwhile
            text = await self.store.get_consumer_group(group_id)
            if self._locks.get(group_id) is not lock:  # unloaded meanwhile: what was read may be stale
                raise NotGroupCoordinator(group_id)
            if text is None:
                self._absent.add(group_id)
                return
            classic = classic_snapshot.is_classic(text)
            try:
                if classic:
                    self.coordinator.restore(group_id, text, self.clock())
                else:
                    self.consumer.restore(group_id, text, self.clock())
            except ValueError as exc:  # its members rejoin; the new group's first write replaces the row
                log.error("%s group %s: its stored state is unreadable (%s); its members rejoin", "classic" if classic else "consumer", group_id, exc)
                self._absent.add(group_id)
                return
            self._timer_changed.set()
            if classic:
                group = self.coordinator.groups[group_id]
                log.info("classic group %s taken up from the metadata store (%d member(s), generation %d)", group_id, len(group.members), group.generation_id)
            else:
                log.info("consumer group %s taken up from the metadata store (%d member(s), group epoch %d)",
                         group_id, len(self.consumer.groups[group_id].members), self.consumer.groups[group_id].group_epoch)  # fmt: skip

    async def _persist(self, group_id: str) -> ErrorCode | None:
        """Write the group's state if it changed (a group deleted here has its row deleted),
        before the caller answers. On failure the group is dropped here, to be read again from
        what the store holds, and the error for the caller's answer is returned: NOT_COORDINATOR
        when the slot moved on, COORDINATOR_NOT_AVAILABLE when the store failed. A heartbeat
        that changed nothing is answered at once: what it answers was written before."""
        if not self.consumer.changed(group_id):
            return None
        group = self.consumer.groups.get(group_id)
        lock = self._lock(group_id)
        async with lock:
            if self.consumer.groups.get(group_id) is not group or self._locks.get(group_id) is not lock:
                return ErrorCode.not_coordinator  # dropped meanwhile (a failed write, a slot move)
            if not self.consumer.changed(group_id):
                return None  # written by the write before, this change in it
            text = self.consumer.export(group_id)
            try:
                if text is None:
                    await self.store.delete_consumer_group(group_id, self._fence(group_id))
                else:
                    await self.store.put_consumer_group(group_id, text, self._fence(group_id))
            except Exception as exc:
                if self._locks.get(group_id) is lock and self.consumer.groups.get(group_id) is group:
                    self.consumer.unload(lambda g: g == group_id)  # what the store holds is the truth now
                    self._absent.discard(group_id)
                if isinstance(exc, CoordinatorFenced):
                    log.info("consumer group %s: writing its state fenced (%s); answering NOT_COORDINATOR", group_id, exc)
                    return ErrorCode.not_coordinator
                log.warning("consumer group %s: writing its state to the metadata store failed: %s", group_id, exc)
                return ErrorCode.coordinator_not_available
            if self._locks.get(group_id) is not lock:
                return ErrorCode.not_coordinator  # its slot moved meanwhile: the next coordinator reads what was written
            self._absent.discard(group_id)
            return None

    async def _store_classic(self, group_id: str) -> None:
        """Write what the store must hold of a classic group (`unstored`), fenced by its
        coordinator slot. A failure is logged and leaves the group as it is here: this broker
        still coordinates it (a fenced write: until its view moves the slot on), and the next
        change writes again; a coordinator taking it up meanwhile reads an older generation,
        and its members rejoin."""
        lock = self._lock(group_id)
        async with lock:
            unstored = self.coordinator.unstored(group_id)
            if unstored is None or self._locks.get(group_id) is not lock:
                return  # written by the write before, or unloaded meanwhile
            group, (version, text) = self.coordinator.groups[group_id], unstored
            try:
                if text is None:
                    await self.store.delete_consumer_group(group_id, self._fence(group_id))
                else:
                    await self.store.put_consumer_group(group_id, text, self._fence(group_id))
            except CoordinatorFenced as exc:
                log.info("classic group %s: writing its state fenced (%s)", group_id, exc)
                return
            except Exception as exc:
                log.warning("classic group %s: writing its state to the metadata store failed: %s", group_id, exc)
                return
            if self._locks.get(group_id) is lock:
                self.coordinator.stored(group, version, text)
                self._absent.discard(group_id)

    # --- describing and listing ----------------------------------------------------------

    async def list_groups_with_offsets(self) -> list[str]:
        """Ids of the groups that have committed offsets in the metadata store."""
        return list(await self.store.list_groups_with_offsets())

    async def describe_groups(self, group_ids: Iterable[str], api_version: int) -> list[GroupDescription]:
        """DescribeGroups, one description per id in the order given."""
        with_offsets = set(await self.store.list_groups_with_offsets())
        described = []
        for group_id in group_ids:
            await self._load(group_id, strict=False)  # the console describes every group listed
            if self.consumer.is_consumer_group(group_id):
                # Not a classic group: Dead, or GROUP_ID_NOT_FOUND from v6, as Kafka.
                d = self.coordinator.describe_group(group_id, api_version=api_version)
                if d.error_code is ErrorCode.group_id_not_found:
                    d = replace(d, error_message=f"Group {group_id} is not a classic group.")
                described.append(d)
            else:
                d = self.coordinator.describe_group(group_id, api_version=api_version)
                described.append(described_with_offsets(d, group_id in with_offsets))
        return described

    async def list_groups(self, states_filter: Iterable[str] = (), types_filter: Iterable[str] = ()) -> list[ListedGroup]:
        """ListGroups, sorted by group id; both filters match case-insensitively, and a group
        known only by its offsets is a classic one (as Kafka loads it)."""
        states, types = tuple(states_filter), tuple(types_filter)
        stored = await self.store.list_consumer_groups()
        for group_id in stored:  # as Kafka lists its slots' groups, loaded or not
            try:
                await self._load(group_id, strict=False)
            except NotGroupCoordinator:
                pass  # its slot moved meanwhile: listed by the next coordinator
        known = {g.group_id for g in self.coordinator.list_groups()} | set(self.consumer.groups)
        # A stored group not taken up here (its slot not, or not yet, coordinated here: the
        # moment after a restart or a slot move) is not the classic Empty group its offsets
        # alone would make it: its coordinator lists it once it has read it.
        untaken = {g for g in stored if g not in known and g not in self._absent}
        with_offsets = [g for g in await self.store.list_groups_with_offsets() if g not in untaken]
        if types and "classic" not in {t.lower() for t in types}:
            with_offsets = []
        return listed_with_offsets(
            self.coordinator.list_groups(states, types) + self.consumer.list_groups(states, types), known, with_offsets, states
        )

    # --- offsets -------------------------------------------------------------------------

    async def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        api_version: int,
        offsets: list[tuple[str, int, int, int | None, str | None]],
        known: Callable[[str, int], bool],
    ) -> list[ErrorCode]:
        """OffsetCommit: one error per (topic, partition, offset, leader_epoch, metadata) given."""
        await self._load(group_id)
        now = self.clock()
        error = self._validate_offset_commit(group_id, generation_id, member_id, group_instance_id, now, api_version, is_transactional=False)
        if error is not ErrorCode.none:
            return [error] * len(offsets)
        errors, accepted = [], []
        for topic, partition, offset, leader_epoch, metadata in offsets:
            if not known(topic, partition):
                errors.append(ErrorCode.unknown_topic_or_partition)
            elif metadata is not None and len(metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
                errors.append(ErrorCode.offset_metadata_too_large)
            else:
                errors.append(ErrorCode.none)
                accepted.append(CommittedOffset(topic, partition, offset, leader_epoch, metadata or "", now))
        if accepted:
            try:
                await self.store.commit_offsets(group_id, accepted, self._fence(group_id))
            except CoordinatorFenced as exc:
                log.info("OffsetCommit of group %s fenced: %s; answering NOT_COORDINATOR", group_id, exc)
                return [ErrorCode.not_coordinator if e is ErrorCode.none else e for e in errors]
        return errors

    def _fence(self, group_id: str) -> tuple[int, int] | None:
        """The coordinator (slot, epoch) the group's offset writes are conditional on; raises
        CoordinatorFenced once the last view no longer gives this broker the slot."""
        if self._coordinator_of is None:
            return None
        coordinator = self._coordinator_of(group_id)
        if coordinator is None:
            raise CoordinatorFenced(-1, -1, None)  # the view lost the slot since the request was checked (slot unknown here)
        return coordinator

    async def validate_txn_offset_commit(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None) -> ErrorCode:
        """TxnOffsetCommit v3+ (KIP-447), checked by the group's coordinator before the offsets go
        to the transaction's: Kafka's validateTransactionalOffsetCommit. As OffsetCommit, except
        that a group that does not exist answers ILLEGAL_GENERATION to a generation >= 0, a
        classic group in CompletingRebalance accepts, and a consumer group's stale member epoch
        answers ILLEGAL_GENERATION (what transactional producers know). Generation -1 with no
        member id (v0-v2, or a producer not given the consumer's group metadata) is not checked
        against members, as Kafka; it creates an unknown group Empty, as Kafka does."""
        await self._load(group_id)
        error = self._validate_offset_commit(group_id, generation_id, member_id, group_instance_id, self.clock(), is_transactional=True)
        return ErrorCode.illegal_generation if error is ErrorCode.stale_member_epoch else error

    def _validate_offset_commit(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None, now_ms: int,
        api_version: int = 0, *, is_transactional: bool,
    ) -> ErrorCode:  # fmt: skip
        """The member check of OffsetCommit and TxnOffsetCommit, by the group's protocol;
        `api_version` is OffsetCommit's (the cores ignore it for a transactional commit)."""
        if self.consumer.is_consumer_group(group_id):
            return self.consumer.validate_offset_commit(
                group_id, member_id, generation_id, api_version, is_transactional=is_transactional, group_instance_id=group_instance_id
            )
        return self.coordinator.validate_offset_commit(
            group_id, generation_id, member_id, group_instance_id, now_ms, is_transactional=is_transactional, api_version=api_version
        )

    async def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode:
        """OffsetFetch v9+: a consumer-protocol member fetches with its member epoch."""
        if member_epoch < 0 and not member_id:
            return ErrorCode.none
        await self._load(group_id)
        if not self.consumer.is_consumer_group(group_id):
            # Kafka: a classic group is fetched from without member checks by classic members.
            return ErrorCode.none if member_epoch < 0 else ErrorCode.unknown_member_id
        return self.consumer.validate_offset_fetch(group_id, member_id, member_epoch)

    async def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None) -> list[CommittedOffset]:
        return await self.store.fetch_offsets(group_id, partitions)

    async def delete_group(self, group_id: str) -> ErrorCode:
        await self._load(group_id)
        if self.consumer.is_consumer_group(group_id):
            error = self.consumer.delete_group(group_id)
        else:
            error = self.coordinator.delete_group(group_id, self.clock())
        if error is ErrorCode.group_id_not_found and group_id in await self.store.list_groups_with_offsets():
            error = ErrorCode.none  # known only by its offsets (e.g. after a restart)
        if error is ErrorCode.none:
            try:
                async with self._lock(group_id):  # after any write of the group's state already under way
                    await self.store.delete_group(group_id, self._fence(group_id))
            except CoordinatorFenced as exc:
                log.info("DeleteGroups of group %s fenced: %s; answering NOT_COORDINATOR", group_id, exc)
                return ErrorCode.not_coordinator
            self._absent.add(group_id)  # the store's delete_group took its state too
            self.consumer.export(group_id)  # so written: a later write of the id (a classic group's) must not delete it again
            log.info("deleted group %s", group_id)
        return error

    async def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        """OffsetDelete: refused per partition while members of the group consume its topic,
        and for the whole group while members of a non-consumer group (e.g. Connect) exist."""
        await self._load(group_id)
        if self.consumer.is_consumer_group(group_id):
            subscribed = self.consumer.subscribed_topics(group_id)
            overview = None
        else:
            overview = self.coordinator.group_overview(group_id)
            if overview is None and group_id not in await self.store.list_groups_with_offsets():
                return ErrorCode.group_id_not_found, {}
            subscribed = set()
        if overview is not None and overview.state not in (GroupState.EMPTY, GroupState.DEAD):
            if overview.protocol_type != "consumer":
                return ErrorCode.non_empty_group, {}
            # Every member's subscription, also mid-rebalance, when DescribeGroups shows none.
            for metadata in self.coordinator.member_protocol_metadata(group_id):
                subscribed |= consumer_subscription(metadata)
        errors = {tp: ErrorCode.group_subscribed_to_topic if tp[0] in subscribed else ErrorCode.none for tp in partitions}
        deletable = [tp for tp, error in errors.items() if error is ErrorCode.none]
        if deletable:
            try:
                await self.store.delete_offsets(group_id, deletable, self._fence(group_id))
            except CoordinatorFenced as exc:
                log.info("OffsetDelete of group %s fenced: %s; answering NOT_COORDINATOR", group_id, exc)
                return ErrorCode.not_coordinator, {}
        return ErrorCode.none, errors

    # --- offsets expiry (offsets.retention.minutes, KIP-211) ------------------------------

    # Only a group's coordinator expires its offsets, and only while the group has no members:
    # the offsets of a group that became Empty expire once both their commit and the moment it
    # became empty are older than the retention. That moment is known here only as a lower
    # bound: the last time this coordinator saw a member (any membership request, or a pass
    # finding members); before that, after a restart or a slot move, it is the commit time.
    # A group whose slot just came here is given a grace of the longest session timeout, the
    # time its live members take to find the new coordinator, before it counts as empty.

    def _seen_members(self, group_id: str) -> None:
        self._members_seen_ms[group_id] = self.clock()

    def _has_members(self, group_id: str) -> bool:
        if not self.consumer.is_empty(group_id):
            return True
        overview = self.coordinator.group_overview(group_id)
        return overview is not None and overview.state not in (GroupState.EMPTY, GroupState.DEAD)

    async def expire_offsets(self, coordinates: Callable[[str], bool]) -> int:
        """Delete the committed offsets older than offsets.retention.minutes of the groups this
        broker `coordinates` that have been empty as long (see above). The delete is
        conditional on the commit time in the store: a commit landing meanwhile survives."""
        now = self.clock()
        cutoff = now - self.offsets_retention_ms
        grace_ms = max(self.config.group_max_session_timeout_ms, self.config.group_consumer_max_session_timeout_ms)
        groups = await self.store.list_groups_with_offsets()
        removed = 0
        for group_id in groups:
            if not coordinates(group_id):
                self._coordinated_since_ms.pop(group_id, None)
                continue
            since_ms = self._coordinated_since_ms.setdefault(group_id, now)
            if self._has_members(group_id):
                self._members_seen_ms[group_id] = now
                continue
            if now - since_ms < grace_ms or self._members_seen_ms.get(group_id, cutoff) > cutoff:
                continue
            try:
                removed += await self.store.expire_group_offsets(group_id, cutoff, self._fence(group_id))
            except CoordinatorFenced as exc:  # the slot moved on: the next coordinator expires them
                log.info("expiring the offsets of group %s fenced: %s", group_id, exc)
        await self._delete_empty_consumer_groups(coordinates)
        # Forget what no longer decides anything: groups without offsets, members seen too long ago.
        listed = set(groups)
        self._coordinated_since_ms = {g: t for g, t in self._coordinated_since_ms.items() if g in listed}
        self._members_seen_ms = {g: t for g, t in self._members_seen_ms.items() if t > cutoff}
        if removed:
            log.info("expired %d committed offsets older than offsets.retention.minutes", removed)
        return removed

    async def _delete_empty_consumer_groups(self, coordinates: Callable[[str], bool]) -> None:
        """Kafka's cleanupGroupMetadata: a consumer group coordinated here that has no members
        and no committed offsets (never had any, or all expired) is deleted, its stored state
        with it. A member joining meanwhile keeps it (`delete_group` refuses, or its heartbeat
        writes the group again after the delete)."""
        if not self.consumer.groups:
            return
        with_offsets = set(await self.store.list_groups_with_offsets())
        empty = [g for g in self.consumer.groups if coordinates(g) and self.consumer.is_empty(g) and g not in with_offsets]
        for group_id in empty:
            if self.consumer.delete_group(group_id) is ErrorCode.none and await self._persist(group_id) is None:
                log.info("consumer group %s, empty and without committed offsets, deleted", group_id)


def consumer_subscription(metadata: bytes) -> set[str]:
    """Topics of a ConsumerProtocolSubscription (int16 version, then an array of int16 strings)."""
    try:
        (count,) = struct.unpack_from(">i", metadata, 2)
        position, topics = 6, set()
        for _ in range(count):
            (length,) = struct.unpack_from(">h", metadata, position)
            topics.add(metadata[position + 2 : position + 2 + length].decode())
            position += 2 + length
        return topics
    except (struct.error, UnicodeDecodeError):
        return set()
