"""Membership: this broker's session in the store, the controller's passes, the cluster view.

Every `broker.heartbeat.interval.ms` the broker renews its session (the store expires it after
`broker.session.timeout.ms` without one), tries to take or renew the controller lease, runs a
controller pass if it holds it (controller.py: every partition without a live leader gets
one), and reads the cluster back: live brokers, topics, each partition's leader and epoch. The
registry then opens the partitions this broker now leads and closes those it lost.

Fencing, the rule that prevents split brain: a broker may acknowledge writes only while its
session is certainly alive in the store. It counts its session as valid until the time it
*sent* its last successful heartbeat plus half the session timeout (a margin for clock rates
and for the store's answer in flight), so it stops writing before the store can expire it
and the controller can give its partitions to another broker (which bumps their epochs, so
any late write of this broker is refused by the store's epoch check anyway). A heartbeat the
store refuses (the session was taken over) closes every partition at once.

Between beats, the store tells of changes (PostgreSQL's LISTEN/NOTIFY, `watch_cluster`): a
leader moved, a broker left or joined, a topic changed. The broker beats at once then (bursts
coalesced over `NUDGE_COALESCE_S`), so a handed-over partition opens on its new leader within
round trips, not within a heartbeat interval at each of its steps. The controller also beats
when another broker's session is due to run out (the store says how long each has left), and
the other brokers when the controller's is, so a killed broker's partitions (and a killed
controller's lease) move at its session timeout.

The beat never waits for the registry: opening a partition may rebuild its tail from the
bucket for seconds, longer than the session timeout, and a heartbeat held up behind it would
let this broker's own session expire (every partition lost, split in the middle of a
takeover). Views go to a task of their own (`_applier`) that applies the newest one each time,
skipping views that were overtaken while it was busy.

Nor does it wait long for the controller's moves: a move waits on its partition rows, which
a transaction of a broker cut off from the store can hold. Held up past the session, the
controller's own session expired, it gave up every partition, rejoined, and the next
controller waited the same way: a cluster that stopped acknowledging for minutes. The passes
get what is left of the session's write window (`_pass_budget_s`); moves not made by then
are made at a later beat. And before it moves a dead broker's partitions, the controller ends
that broker's database sessions (`end_broker_sessions`): a transaction it left open
mid-statement is not idle, so the store's idle-in-transaction timeout never ends it, and its
locks would hold the moves.

Controlled shutdown (`leave`): stop writing, let the write-ahead writer finish, give every
partition up (leader None, epoch bumped), give the controller lease up, close the session:
the controller hands the partitions to the others within one pass.

Only the event-loop task calls this class.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from metadata import BrokerIdInUse, BrokerRegistration, MetadataStore, PartitionLeadership, TopicMetadata
from metadata.errors import MetadataError, UnknownTopic

from .controller import Move, imbalanced, is_reassigning, plan_balance, plan_election, plan_homecoming, plan_leaders, plan_reassignment
from .slots import DEFAULT_SLOTS

log = logging.getLogger(__name__)

CONTROLLER_LEASE = "controller"
NUDGE_COALESCE_S = 0.01  # a burst of changes (a controller moving many topics) gives one beat
# How long Metadata still lists a broker after it left. A broker dropped from Metadata in the
# same answer that moves its partitions makes librdkafka decommission it while it migrates them,
# and the partitions fall back to "no leader" for another second (its next topic scan); listed a
# little longer, they migrate first and the broker is dropped by a later answer.
DEPARTED_LISTED_S = 5.0
# The controller beats this long after the earliest other broker's session would run out
# unrenewed (the others, after the controller's, to take its lease): a killed broker's
# partitions move at its session timeout, not up to a heartbeat interval later (the beat then
# finds the session renewed, or expired).
SESSION_END_GRACE_S = 0.05
MIN_PASS_BUDGET_S = 0.2  # a controller pass always gets this long, however late the beat


@dataclass(frozen=True, slots=True)
class MembershipSettings:
    node_id: int
    host: str  # the advertised listener clients reach
    port: int
    rack: str | None  # broker.rack
    incarnation: str  # stable for a data directory: a restart of the same directory is the same broker
    session_timeout_ms: int = 9000  # broker.session.timeout.ms
    heartbeat_interval_ms: int = 500  # broker.heartbeat.interval.ms (Kafka's default is 2000)
    auto_leader_rebalance: bool = True  # auto.leader.rebalance.enable
    imbalance_check_interval_s: float = 300.0  # leader.imbalance.check.interval.seconds
    imbalance_percentage: int = 10  # leader.imbalance.per.broker.percentage
    listeners: tuple[tuple[str, str, int], ...] = ()  # (name, advertised host, port) of each listener
    coordinator_slots: int = DEFAULT_SLOTS  # offsets.topic.num.partitions, used by the first controller only


@dataclass(frozen=True, slots=True)
class ClusterView:
    """The cluster as last read from the store."""

    brokers: dict[int, BrokerRegistration] = field(default_factory=dict)  # live ones, by node id
    topics: dict[str, TopicMetadata] = field(default_factory=dict)
    leaders: dict[tuple[str, int], PartitionLeadership] = field(default_factory=dict)
    controller_id: int | None = None
    read_at: float = 0.0  # monotonic time the reads began: what changed locally after it is newer than the view
    # Brokers that left (session expired, or shut down) within DEPARTED_LISTED_S: Metadata still
    # lists them, see DEPARTED_LISTED_S.
    departed: dict[int, BrokerRegistration] = field(default_factory=dict)
    slots: dict[int, PartitionLeadership] = field(default_factory=dict)  # coordinator slots (slots.py), by slot


class Membership:
    def __init__(
        self,
        store: MetadataStore,
        settings: MembershipSettings,
        apply: Callable[[ClusterView], Awaitable[None]],
        fenced: Callable[[], Awaitable[None]],
    ) -> None:
        self.store = store
        self.settings = settings
        self._apply = apply  # the registry's reconcile
        self._fenced = fenced  # close every partition: the session was lost
        self.view = ClusterView()
        self._valid_until = 0.0  # monotonic seconds: writes are allowed before it
        self._task: asyncio.Task[None] | None = None
        self._applier: asyncio.Task[None] | None = None
        self._view_ready = asyncio.Event()  # a view the registry has not applied yet
        self._leaving = False
        self._joined = False  # the first view applied (join returned)
        self._nudged = asyncio.Event()  # the store told of a change since the last beat
        self._balance_checked_at: dict[str, float] = {}  # monotonic time of the controller's last balance check, by kind
        self._brokers_seen: dict[str, set[int]] = {}  # live brokers at the controller's last look, by kind
        self._departed: dict[int, tuple[BrokerRegistration, float]] = {}  # left, and until when listed
        self._next_session_end: float | None = None  # monotonic: the controller's extra beat, see SESSION_END_GRACE_S
        self._sessions_ended: set[tuple[int, str]] = set()  # (node id, incarnation) of expired brokers, see _end_sessions_of_the_dead

    # --- what leaders and handlers ask ------------------------------------------------------

    def may_write(self) -> bool:
        return not self._leaving and time.monotonic() < self._valid_until

    def stop_writing(self) -> None:
        """Controlled shutdown begins: every append is refused from now on (NOT_LEADER_OR_FOLLOWER)."""
        self._leaving = True

    @property
    def is_controller(self) -> bool:
        return self.view.controller_id == self.settings.node_id

    async def elect_leaders(self, election_type: int, asked: list[tuple[str, int]] | None) -> dict[tuple[str, int], str]:
        """ElectLeaders (controller.plan_election) on the store's current leaderships and live
        brokers, whichever broker is asked (the moves are compare-and-set, as the controller's
        and `diskless partitions` make them); per partition, NONE or a Kafka error name."""
        leaderships = await self.store.list_partition_leaders()
        live = [b.node_id for b in await self.store.list_brokers() if b.alive]
        election = plan_election(leaderships, live, election_type, asked)
        results = dict(election.unmoved)
        for topic, batch in _by_topic(election.moves).items():
            epochs = await self.store.set_partition_leaders(topic, batch)
            for (partition, leader_id, _), epoch in zip(batch, epochs):
                # A lost compare-and-set: the controller (or another election) moved it meanwhile.
                results[(topic, partition)] = "NONE" if epoch is not None else "ELECTION_NOT_NEEDED"
                if epoch is not None:
                    log.info("elected broker %d leader of %s:%d (epoch %d), as asked by ElectLeaders", leader_id, topic, partition, epoch)
        if election.moves:
            self._nudged.set()  # apply the new leaderships here now, not at the next beat
        return results

    async def reassign_partitions(self, asked: dict[tuple[str, int], list[int] | None]) -> dict[tuple[str, int], tuple[str, str | None]]:
        """AlterPartitionReassignments (controller.plan_reassignment) on the store's current
        leaderships and brokers, whichever broker is asked: the preferences are recorded
        first (a move the controller sees is already kept), then the moves are made by
        compare-and-set (one lost to the controller is made by its next balance check)."""
        leaderships = await self.store.list_partition_leaders()
        registered = {b.node_id: b.alive for b in await self.store.list_brokers()}
        plan = plan_reassignment(leaderships, registered, asked)
        by_topic: dict[str, list[tuple[int, int | None]]] = {}
        for topic, partition, node in plan.preferred:
            by_topic.setdefault(topic, []).append((partition, node))
        results = dict(plan.results)
        gone: set[str] = set()
        for topic, preferred in by_topic.items():
            try:
                await self.store.set_preferred_leaders(topic, preferred)
            except UnknownTopic:  # deleted since the read
                gone.add(topic)
                results.update({(topic, p): ("UNKNOWN_TOPIC_OR_PARTITION", f"Unable to find partition {topic}-{p}.") for p, _ in preferred})
        for topic, batch in _by_topic([m for m in plan.moves if m.topic not in gone]).items():
            for (partition, leader_id, _), epoch in zip(batch, await self.store.set_partition_leaders(topic, batch)):
                if epoch is not None:
                    log.info("reassigned %s:%d to broker %d (epoch %d), as asked by AlterPartitionReassignments", topic, partition, leader_id, epoch)
        if plan.preferred:
            self._nudged.set()  # apply the new leaderships here now, not at the next beat
        return results

    async def ongoing_reassignments(self) -> list[PartitionLeadership]:
        """ListPartitionReassignments: partitions not (yet) led by the broker they were given to."""
        return [p for p in await self.store.list_partition_leaders() if is_reassigning(p)]

    # --- life cycle -------------------------------------------------------------------------

    async def join(self) -> None:
        """Register (waiting out an older session of this node id), then take the first view."""
        s = self.settings
        await self.store.watch_cluster(self._nudged.set)
        waited = False
        deadline = time.monotonic() + s.session_timeout_ms / 1000 + 5
        while True:
            sent = time.monotonic()
            try:
                await self.store.register_broker(s.node_id, s.host, s.port, s.rack, s.incarnation, s.session_timeout_ms, s.listeners)
                break
            except BrokerIdInUse as exc:
                if time.monotonic() > deadline:
                    raise
                if not waited:
                    log.warning("%s; waiting for it to expire", exc)
                    waited = True
                await asyncio.sleep(s.heartbeat_interval_ms / 1000)
        self._valid_until = sent + s.session_timeout_ms / 2000
        await self.beat(heartbeat=False)
        self._view_ready.clear()
        # Heartbeats go on while the first view is applied: opening thousands of partitions
        # (or rebuilding long tails from the bucket) can take longer than the session timeout.
        self._task = asyncio.create_task(self._run(), name="membership")
        await self._apply(self.view)  # the partitions this broker leads are open before it says it is ready
        self._joined = True

    def start(self) -> None:
        """After `join`: views of later beats are applied beside them."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="membership")
        self._applier = asyncio.create_task(self._apply_views(), name="membership-apply")

    async def stop(self) -> None:
        tasks = [t for t in (self._task, self._applier) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def leave(self, leaderships: list[tuple[str, int, int]]) -> None:
        """Controlled shutdown: give up `leaderships` (topic, partition, epoch), the controller
        lease and the session. The caller stopped writing and made what was written durable."""
        self._leaving = True
        await self.stop()
        s = self.settings
        by_topic: dict[str, list[tuple[int, int | None, int]]] = {}
        for topic, partition, epoch in leaderships:
            by_topic.setdefault(topic, []).append((partition, None, epoch))
        for topic, batch in by_topic.items():
            try:
                await self.store.set_partition_leaders(topic, batch)
            except MetadataError as exc:
                log.info("partitions of %s were not handed over (%s)", topic, exc)
        held = [(slot.partition, None, slot.leader_epoch) for slot in self.view.slots.values() if slot.leader_id == s.node_id]
        if held:
            try:
                await self.store.set_coordinator_slots(held)
                log.info("handed %d coordinator slot(s) over to the other brokers", len(held))
            except MetadataError as exc:
                log.info("coordinator slots were not handed over (%s)", exc)
        try:
            await self.store.release_lease(CONTROLLER_LEASE, s.node_id)
            await self.store.unregister_broker(s.node_id, s.incarnation)
        except MetadataError as exc:
            log.warning("could not leave the cluster cleanly (%s); the session expires by itself", exc)
        if leaderships:
            log.info("handed %d partition(s) over to the other brokers", len(leaderships))
            if any(node_id != s.node_id for node_id in self.view.brokers):  # someone to take them
                await self._follow_successors({(topic, partition) for topic, partition, _ in leaderships})

    async def _follow_successors(self, handed: set[tuple[str, int]]) -> None:
        """Read the cluster until every partition handed over has its next leader (the
        controller hears of the change and acts at once), within a session timeout. Metadata
        answered here until the process exits then sends clients to the new leaders; with the
        old view they would come back here, be refused, and back off for longer each time."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.session_timeout_ms / 1000
        while True:
            self._nudged.clear()
            try:
                self.view = await self._read_view(time.monotonic(), controller=False)
                await self._apply(self.view)
            except MetadataError as exc:
                log.info("could not follow the partitions handed over (%s)", exc)
                return
            led = self.view.leaders
            if all(key not in led or led[key].leader_id is not None for key in handed) or loop.time() > deadline:
                return
            try:
                async with asyncio.timeout(min(self.settings.heartbeat_interval_ms / 1000, max(deadline - loop.time(), 0.0))):
                    await self._nudged.wait()
            except TimeoutError:
                pass

    # --- the beat ---------------------------------------------------------------------------

    async def _run(self) -> None:
        interval = self.settings.heartbeat_interval_ms / 1000
        while True:
            wait = interval
            if self._next_session_end is not None:
                wait = min(wait, max(self._next_session_end - time.monotonic(), 0.0))
            try:
                async with asyncio.timeout(wait):
                    await self._nudged.wait()
                await asyncio.sleep(NUDGE_COALESCE_S)
            except TimeoutError:
                pass
            self._nudged.clear()
            self._next_session_end = None  # set again by a successful beat
            try:
                await self.beat()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("cluster heartbeat failed (%s); writes stop once the session may have expired", exc)

    async def _apply_views(self) -> None:
        """Apply the newest view, one at a time, beside the beat."""
        while True:
            await self._view_ready.wait()
            self._view_ready.clear()
            try:
                await self._apply(self.view)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("applying the cluster view failed; the next beat retries")

    async def beat(self, heartbeat: bool = True) -> None:
        s = self.settings
        sent = read_at = time.monotonic()
        if heartbeat:
            if not await self.store.heartbeat_broker(s.node_id, s.incarnation, s.session_timeout_ms):
                log.error("broker %d's session in the metadata store expired (or another process took it); giving up every partition and rejoining", s.node_id)
                self._valid_until = 0.0
                await self._fenced()
                await self.store.register_broker(s.node_id, s.host, s.port, s.rack, s.incarnation, s.session_timeout_ms, s.listeners)
        self._valid_until = sent + s.session_timeout_ms / 2000
        controller = await self.store.acquire_lease(CONTROLLER_LEASE, s.node_id, s.session_timeout_ms)
        if heartbeat and not controller and not self._joined:
            return  # the first view is still being applied: reading more (every partition's leader) only slows it
        self.view = self._with_departed(await self._read_view(read_at, controller))
        self._view_ready.set()

    def _with_departed(self, view: ClusterView) -> ClusterView:
        now = time.monotonic()
        for node_id, registration in self.view.brokers.items():
            if node_id not in view.brokers:
                self._departed[node_id] = (registration, now + DEPARTED_LISTED_S)
        self._departed = {n: (b, until) for n, (b, until) in self._departed.items() if until > now and n not in view.brokers}
        return replace(view, departed={n: b for n, (b, _) in self._departed.items()})

    async def _read_view(self, read_at: float, controller: bool) -> ClusterView:
        """The cluster as the store has it now; the controller's pass first, if this broker is it."""
        registered = await self.store.list_brokers()
        brokers = {b.node_id: b for b in registered if b.alive}
        listed_at = time.monotonic()
        leaderships = await self.store.list_partition_leaders()
        slots = await self.store.list_coordinator_slots()
        # The controller watches every other broker's session; the others watch the controller's
        # (its lease is renewed just after its session, so it runs out just after too).
        controller_id = self.settings.node_id if controller else await self._controller_id()
        watched = [b.session_remaining_ms for b in brokers.values()
                   if b.node_id != self.settings.node_id and (controller or b.node_id == controller_id)]  # fmt: skip
        self._next_session_end = listed_at + min(watched) / 1000 + SESSION_END_GRACE_S if watched else None
        if controller:
            await self._end_sessions_of_the_dead(registered)
            try:
                async with asyncio.timeout(self._pass_budget_s()):
                    leaderships = await self._controller_pass(leaderships, brokers)
                    slots = await self._slots_pass(slots, brokers)
            except TimeoutError:
                log.warning("controller: pass cut short after %.1f s (the metadata store holds its moves up); they are retried at the next beat",
                            time.monotonic() - read_at)  # fmt: skip
                leaderships = await self.store.list_partition_leaders()
                slots = await self.store.list_coordinator_slots()
        topics = {t.name: t for t in await self.store.list_topics()}
        return ClusterView(
            brokers, topics, {(p.topic, p.partition): p for p in leaderships}, controller_id, read_at,
            slots={slot.partition: slot for slot in slots},
        )  # fmt: skip

    async def _end_sessions_of_the_dead(self, registered: list[BrokerRegistration]) -> None:
        """End the database sessions of each broker whose session expired, once per
        incarnation, before its partitions move: a transaction it left open would hold them."""
        for b in registered:
            if b.alive:  # back (the same incarnation may renew a lapsed session): end them again if it dies again
                self._sessions_ended.discard((b.node_id, b.incarnation))
                continue
            if (b.node_id, b.incarnation) in self._sessions_ended:
                continue
            try:
                ended = await self.store.end_broker_sessions(b.node_id, b.incarnation)
            except MetadataError as exc:
                log.warning("controller: ending the database sessions of broker %d failed (%s); retried at the next beat", b.node_id, exc)
                continue
            self._sessions_ended.add((b.node_id, b.incarnation))
            if ended:
                log.warning("controller: ended %d database session(s) broker %d left behind when its session expired", ended, b.node_id)

    def _pass_budget_s(self) -> float:
        """How long a controller pass may take: until two heartbeat intervals before this
        broker's write window closes (the wait for the next beat, then its heartbeat), so the
        next heartbeat renews the session in time."""
        left = self._valid_until - time.monotonic() - 2 * self.settings.heartbeat_interval_ms / 1000
        return max(left, MIN_PASS_BUDGET_S)

    async def _slots_pass(self, slots: list[PartitionLeadership], brokers: dict[int, BrokerRegistration]) -> list[PartitionLeadership]:
        """Coordinator slots are planned as partitions of their own: made by the first
        controller, given a holder when theirs is gone, evened out with the partitions."""
        if not slots:
            count = await self.store.create_coordinator_slots(self.settings.coordinator_slots)
            log.info("controller: %d coordinator slots made", count)
            slots = await self.store.list_coordinator_slots()
        moves = plan_leaders(slots, brokers)
        if not moves and self._balance_due(brokers, "slots") and imbalanced(slots, brokers, self.settings.imbalance_percentage):
            moves = plan_balance(slots, brokers)
        if not moves:
            return slots
        moved = await self.store.set_coordinator_slots([(m.partition, m.leader_id, m.expected_epoch) for m in moves])
        log.info("controller: %d coordinator slot(s) given a holder among brokers %s", sum(e is not None for e in moved), sorted(brokers))
        return await self.store.list_coordinator_slots()

    async def _controller_pass(self, leaderships: list[PartitionLeadership], brokers: dict[int, BrokerRegistration]) -> list[PartitionLeadership]:
        moves = plan_leaders(leaderships, brokers) + plan_homecoming(leaderships, brokers)
        if not moves and self._balance_due(brokers, "partitions"):
            if imbalanced(leaderships, brokers, self.settings.imbalance_percentage):
                moves = plan_balance(leaderships, brokers)
                if moves:  # none when reassigned partitions alone make the imbalance
                    log.info("controller: leadership is off balance over brokers %s; moving %d partition(s)", sorted(brokers), len(moves))
        if not moves:
            return leaderships
        moved = 0
        for topic, batch in _by_topic(moves).items():
            try:
                moved += sum(epoch is not None for epoch in await self.store.set_partition_leaders(topic, batch))
            except MetadataError as exc:  # the topic was deleted meanwhile, or the store failed
                log.info("controller: partitions of %s not moved (%s)", topic, exc)
        log.info("controller: %d partition(s) given a leader among brokers %s", moved, sorted(brokers))
        return await self.store.list_partition_leaders()

    def _balance_due(self, brokers: dict[int, BrokerRegistration], kind: str) -> bool:
        """auto.leader.rebalance.enable: check when a broker joined since the last pass that
        looked (for partitions, or for slots), and every leader.imbalance.check.interval.seconds."""
        s = self.settings
        joined = not set(brokers) <= self._brokers_seen.get(kind, set())
        self._brokers_seen[kind] = set(brokers)
        now = time.monotonic()
        if not s.auto_leader_rebalance or not (joined or now - self._balance_checked_at.get(kind, 0.0) >= s.imbalance_check_interval_s):
            return False
        self._balance_checked_at[kind] = now
        return True

    async def _controller_id(self) -> int | None:
        return await self.store.lease_holder(CONTROLLER_LEASE)


def _by_topic(moves: list[Move]) -> dict[str, list[tuple[int, int | None, int]]]:
    """Moves as `set_partition_leaders` takes them: (partition, leader, expected epoch) by topic."""
    by_topic: dict[str, list[tuple[int, int | None, int]]] = {}
    for move in moves:
        by_topic.setdefault(move.topic, []).append((move.partition, move.leader_id, move.expected_epoch))
    return by_topic
