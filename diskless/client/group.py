"""Consumer group membership (Kafka's classic protocol, as Java's ConsumerCoordinator).

A member finds its coordinator (FindCoordinator), joins (JoinGroup, with its subscription in
the "consumer" embedded protocol for every assignment strategy it supports), and the leader
the coordinator picks runs the chosen assignor over every member's subscription; SyncGroup
hands each member its partitions. A background task then heartbeats every
`heartbeat_interval_ms`; REBALANCE_IN_PROGRESS in an answer, or a change in the subscribed
topics' partitions, starts the next rebalance.

Eager strategies (range, roundrobin) revoke every partition before joining; cooperative-sticky
(KIP-429) keeps its partitions through the rebalance, revokes only those the new assignment
takes away, and then rejoins so that they can go to their new owner. Before partitions are
revoked, consumed offsets are committed (with auto-commit) and the listener is told.

Offsets are committed with the member's generation, so a member that was kicked out cannot
overwrite the offsets of the partitions' new owner. A consumer with `assign()` and a group_id
commits with generation -1 (a "simple" group, as Kafka allows).

Used from the consumer's event loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from typing import Any

from . import protocol
from .assignors import ASSIGNORS, MemberSubscription
from .cluster import Cluster
from .config import ConsumerConfig
from .consumer_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_generation,
    decode_subscription,
    encode_assignment,
    encode_generation,
    encode_subscription,
)
from .errors import KafkaError, RebalanceInProgressError, error_for
from .offsets import committed_offsets, offset_fetch_request
from .retry import is_retriable, retrying
from .structs import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
from .subscription import SubscriptionState

log = logging.getLogger(__name__)

UNJOINED, REBALANCING, STABLE = "unjoined", "rebalancing", "stable"
_COORDINATOR_ERRORS = {14, 15, 16}  # loading, not available, not coordinator
_MEMBER_ERRORS = {22, 25, 82}  # illegal generation, unknown member id, fenced instance id
_REBALANCE_IN_PROGRESS = 27
_MEMBER_ID_REQUIRED = 79
_UNSTABLE_OFFSET_COMMIT = 88


class RebalanceListener:
    """Told about assignment changes. Override what you need; methods may be coroutines."""

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
        """Before partitions go (offsets already committed with auto-commit)."""

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
        """After partitions arrived (for cooperative-sticky: only the newly added ones)."""

    def on_partitions_lost(self, lost: set[TopicPartition]) -> Any:
        """The member was dropped from the group; others may already own these partitions."""
        return self.on_partitions_revoked(lost)


async def _call(callback: Callable[[set[TopicPartition]], Any], partitions: set[TopicPartition]) -> None:
    try:
        result = callback(partitions)
        if inspect.isawaitable(result):
            await result
    except Exception:
        log.exception("rebalance listener %s failed", getattr(callback, "__name__", callback))


class GroupMember:
    def __init__(
        self,
        config: ConsumerConfig,
        cluster: Cluster,
        subscription: SubscriptionState,
        consumed_offsets: Callable[[], dict[TopicPartition, int]],
        on_assignment: Callable[[], None],
    ) -> None:
        assert config.group_id is not None
        self.config = config
        self.group_id = config.group_id
        self.cluster = cluster
        self.subscription = subscription
        self._consumed_offsets = consumed_offsets
        self._on_assignment = on_assignment
        self.listener = RebalanceListener()
        self.errors: deque[Exception] = deque()
        self.member_id = ""
        self.generation_id = -1
        self.protocol_name: str | None = None
        self.state = UNJOINED
        self._rejoin = asyncio.Event()
        self._joined_snapshot: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None
        self._auto_commit_task: asyncio.Task[None] | None = None
        self._closed = False
        self.cooperative = config.partition_assignment_strategy == ("cooperative-sticky",)
        if config.enable_auto_commit:
            self._auto_commit_task = asyncio.create_task(self._auto_commit_loop(), name="auto-commit")

    # --- the consumer's side ---------------------------------------------------------------

    def subscription_changed(self, listener: RebalanceListener | None) -> None:
        if listener is not None:
            self.listener = listener
        self._rejoin.set()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"group-{self.group_id}")

    def unsubscribe(self) -> None:
        revoked = set(self.subscription.assignment)
        self.subscription.set_group_assignment(())
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self.state = UNJOINED
        asyncio.ensure_future(self._leave_after(revoked))

    async def _leave_after(self, revoked: set[TopicPartition]) -> None:
        if revoked:
            await _call(self.listener.on_partitions_revoked, revoked)
        await self._leave()

    async def close(self) -> None:
        self._closed = True
        for task in (self._task, self._auto_commit_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if self.config.enable_auto_commit and (self.state == STABLE or not self.subscription.subscribed):
            try:
                await self.commit({tp: OffsetAndMetadata(o) for tp, o in self._consumed_offsets().items()})
            except KafkaError as exc:
                log.warning("committing offsets on close failed: %s", exc)
        if self.subscription.subscribed and self.subscription.assignment:
            await _call(self.listener.on_partitions_revoked, set(self.subscription.assignment))
        await self._leave()

    # --- offsets ---------------------------------------------------------------------------

    async def commit(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        if not offsets:
            return
        identity = self._commit_identity() if self.subscription.subscribed else (-1, "")

        def make(version: int) -> Any:
            self._check_offset_commit_version(version)
            generation, member_id = identity
            cls = protocol.request_class(protocol.OFFSET_COMMIT, version)
            topic_cls = protocol.nested(cls, "OffsetCommitRequestTopic")
            partition_cls = protocol.nested(cls, "OffsetCommitRequestPartition")
            by_topic: dict[str, list[Any]] = defaultdict(list)
            for tp, meta in sorted(offsets.items()):
                by_topic[tp.topic].append(
                    protocol.build(
                        partition_cls,
                        partition_index=tp.partition,
                        committed_offset=meta.offset,
                        committed_leader_epoch=meta.leader_epoch,
                        committed_metadata=meta.metadata,
                    )
                )
            return protocol.build(
                cls,
                group_id=self.group_id,
                generation_id_or_member_epoch=generation,
                member_id=member_id,
                group_instance_id=self.config.group_instance_id,
                retention_time=-1,
                topics=tuple(topic_cls(name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
            )

        async def attempt() -> None:
            nonlocal identity
            if self.subscription.subscribed:
                identity = self._commit_identity()  # a retry commits with the member's latest epoch
            response = await self._coordinator_request(protocol.OFFSET_COMMIT, make)
            for t in response.topics:
                for p in t.partitions:
                    if p.error_code:
                        self._member_error(p.error_code)
                        raise error_for(p.error_code, None, group=self.group_id, topic=t.name, partition=p.partition_index)

        await self._with_retries(attempt, retriable=self._commit_retriable)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The member's current generation and id (KIP-447), for TxnOffsetCommit; a member
        that is not subscribed commits as a simple group (generation -1)."""
        generation, member_id = self._current_identity() if self.subscription.subscribed else (-1, "")
        return ConsumerGroupMetadata(self.group_id, generation, member_id, self.config.group_instance_id)

    def _current_identity(self) -> tuple[int, str]:
        return self.generation_id, self.member_id

    def _commit_identity(self) -> tuple[int, str]:
        """(generation or member epoch, member id) to commit with; raises while that is unsettled."""
        if self.state != STABLE:
            raise RebalanceInProgressError("the group is rebalancing: commit after the new assignment", group=self.group_id)
        return self.generation_id, self.member_id

    def _check_offset_commit_version(self, version: int) -> None:
        """Classic members commit with any version; KIP-848 members need v9 (membership.py)."""

    def _commit_retriable(self, exc: KafkaError) -> bool:
        return exc.retriable

    async def fetch_committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata]:
        wanted = sorted(set(partitions))
        if not wanted:
            return {}

        def make(version: int) -> Any:
            return offset_fetch_request(version, self.group_id, wanted, require_stable=True)

        async def attempt() -> dict[TopicPartition, OffsetAndMetadata]:
            return committed_offsets(await self._coordinator_request(protocol.OFFSET_FETCH, make), self.group_id)

        return await self._with_retries(attempt)

    async def fetch_committed_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: meta.offset for tp, meta in (await self.fetch_committed(partitions)).items()}

    async def _auto_commit_loop(self) -> None:
        interval = self.config.auto_commit_interval_ms / 1000
        last: dict[TopicPartition, int] = {}
        while True:
            await asyncio.sleep(interval)
            if self.subscription.subscribed and self.state != STABLE:
                continue
            offsets = {tp: o for tp, o in self._consumed_offsets().items() if last.get(tp) != o}
            if not offsets:
                continue
            try:
                await self.commit({tp: OffsetAndMetadata(o) for tp, o in offsets.items()})
                last.update(offsets)
            except KafkaError as exc:
                log.warning("auto-commit of group %s failed: %s", self.group_id, exc)

    # --- requests to the coordinator -------------------------------------------------------

    async def _coordinator_request(self, api_key: int, make: Callable[[int], Any], timeout_ms: int | None = None) -> Any:
        node = await self.cluster.coordinator(self.group_id)
        try:
            return await self.cluster.request_coordinator(node, api_key, make, timeout_ms=timeout_ms)
        except KafkaError:
            self.cluster.forget_coordinator(self.group_id)
            raise

    async def _with_retries(self, attempt: Callable[[], Any], retriable: Callable[[KafkaError], bool] = is_retriable) -> Any:
        def on_retry(exc: KafkaError) -> None:
            if getattr(exc, "errno", None) in _COORDINATOR_ERRORS:
                self.cluster.forget_coordinator(self.group_id)

        return await retrying(
            attempt,
            retry_backoff_ms=self.config.retry_backoff_ms,
            timeout_ms=self.config.request_timeout_ms,
            retriable=retriable,
            on_retry=on_retry,
        )

    def _member_error(self, code: int) -> None:
        """React to an answer saying our membership is stale."""
        if code == _REBALANCE_IN_PROGRESS:
            self._rejoin.set()
        elif code in _MEMBER_ERRORS:
            if code == 25:
                self.member_id = ""
            self.generation_id = -1
            self.state = UNJOINED
            self._rejoin.set()

    # --- membership ------------------------------------------------------------------------

    async def _run(self) -> None:
        backoff = self.config.retry_backoff_ms / 1000
        while not self._closed:
            try:
                if not self.subscription.subscribed:
                    return
                if self.state != STABLE or self._rejoin.is_set():
                    self._rejoin.clear()
                    await self._rebalance()
                    backoff = self.config.retry_backoff_ms / 1000
                    continue
                await self._heartbeat()
                if self._topics_changed():
                    self._rejoin.set()
                    continue
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._rejoin.wait(), self.config.heartbeat_interval_ms / 1000)
            except asyncio.CancelledError:
                raise
            except KafkaError as exc:
                code = getattr(exc, "errno", None)
                if code in _COORDINATOR_ERRORS or isinstance(exc, (ConnectionError,)) or exc.retriable:
                    self.cluster.forget_coordinator(self.group_id)
                    log.info("group %s: %s; retrying", self.group_id, exc)
                elif code in _MEMBER_ERRORS or code == _REBALANCE_IN_PROGRESS:
                    await self._lose_partitions(code)
                else:
                    log.error("group %s: %s", self.group_id, exc)
                    self.errors.append(exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
            except Exception:
                log.exception("group %s: unexpected error; retrying", self.group_id)
                await asyncio.sleep(backoff)

    async def _lose_partitions(self, code: int | None) -> None:
        if code != _REBALANCE_IN_PROGRESS:
            lost = set(self.subscription.assignment)
            self.subscription.set_group_assignment(())
            self._on_assignment()
            if lost:
                await _call(self.listener.on_partitions_lost, lost)
        if code is not None:
            self._member_error(code)
        self._rejoin.set()

    async def _heartbeat(self) -> None:
        def make(version: int) -> Any:
            return protocol.build(
                protocol.request_class(protocol.HEARTBEAT, version),
                group_id=self.group_id,
                generation_id=self.generation_id,
                member_id=self.member_id,
                group_instance_id=self.config.group_instance_id,
            )

        response = await self._coordinator_request(protocol.HEARTBEAT, make)
        if response.error_code:
            if response.error_code == _REBALANCE_IN_PROGRESS:
                self._rejoin.set()
                return
            raise error_for(response.error_code, None, group=self.group_id)

    def _subscribed_topics(self) -> dict[str, int]:
        """The subscribed topics the cluster has, with their partition counts."""
        meta = self.cluster.metadata
        if self.subscription.pattern is not None:
            names = [t for t, d in meta.topics.items() if self.subscription.matches(t) and not d.is_internal]
        else:
            names = list(self.subscription.topics)
        return {t: n for t in names if (n := meta.partition_count(t)) is not None}

    def _topics_changed(self) -> bool:
        return self._subscribed_topics() != self._joined_snapshot

    async def _rebalance(self) -> None:
        owned = set(self.subscription.assignment)
        if owned and not self.cooperative:
            await self._revoke(owned)
            self.subscription.set_group_assignment(())
            self._on_assignment()
        self.state = REBALANCING
        await self.cluster.refresh(self.subscription.topics)
        topics = self._subscribed_topics()
        self._joined_snapshot = topics
        join = await self._join(sorted(set(topics) | set(self.subscription.topics)), owned if self.cooperative else set())
        assignments = await self._assign(join) if join.leader == self.member_id else {}
        assigned = await self._sync(assignments)
        assigned = {tp for tp in assigned if self.subscription.matches(tp.topic)}
        if self.cooperative:
            self.state = STABLE  # the new generation is valid: revoked partitions commit with it
            revoked = owned - assigned
            if revoked:
                await self._revoke(revoked)
                self._rejoin.set()  # so that the revoked partitions can move on
            self.subscription.set_group_assignment(sorted(assigned))
            self._on_assignment()
            await _call(self.listener.on_partitions_assigned, assigned - owned)
        else:
            self.subscription.set_group_assignment(sorted(assigned))
            self._on_assignment()
            self.state = STABLE
            await _call(self.listener.on_partitions_assigned, assigned)
        log.info("group %s generation %d: member %s has %d partitions", self.group_id, self.generation_id, self.member_id, len(assigned))

    async def _revoke(self, revoked: set[TopicPartition]) -> None:
        for tp in revoked:  # from now on the application gets no more of their records
            state = self.subscription.assignment.get(tp)
            if state is not None:
                state.revoking = True
        if self.config.enable_auto_commit and self.state == STABLE:
            offsets = {tp: OffsetAndMetadata(o) for tp, o in self._consumed_offsets().items() if tp in revoked}
            try:
                await self.commit(offsets)
            except KafkaError as exc:
                log.warning("committing offsets of revoked partitions failed: %s", exc)
        await _call(self.listener.on_partitions_revoked, revoked)

    async def _join(self, topics: list[str], owned: set[TopicPartition]) -> Any:
        metadata = encode_subscription(
            Subscription(
                topics=tuple(topics),
                user_data=encode_generation(self.generation_id) if self.cooperative else None,
                owned_partitions=tuple(sorted(owned)),
                generation_id=self.generation_id if self.cooperative else -1,
            )
        )
        timeout_ms = self.config.max_poll_interval_ms + 5000  # the broker holds JoinGroup until all rejoined
        while True:

            def make(version: int) -> Any:
                cls = protocol.request_class(protocol.JOIN_GROUP, version)
                protocol_cls = protocol.nested(cls, "JoinGroupRequestProtocol")
                return protocol.build(
                    cls,
                    group_id=self.group_id,
                    session_timeout=protocol.ms(self.config.session_timeout_ms),
                    rebalance_timeout=protocol.ms(self.config.max_poll_interval_ms),
                    member_id=self.member_id,
                    group_instance_id=self.config.group_instance_id,
                    protocol_type="consumer",
                    protocols=tuple(protocol_cls(name=n, metadata=metadata) for n in self.config.partition_assignment_strategy),
                    reason=None,
                )

            response = await self._coordinator_request(protocol.JOIN_GROUP, make, timeout_ms)
            code = response.error_code
            if code == _MEMBER_ID_REQUIRED:
                self.member_id = response.member_id  # KIP-394: join again with the id given
                continue
            if code == 25:  # unknown member id: join as a new member
                self.member_id = ""
                continue
            if code:
                raise error_for(code, None, group=self.group_id)
            self.member_id = response.member_id
            self.generation_id = response.generation_id
            self.protocol_name = response.protocol_name
            return response

    async def _assign(self, join: Any) -> dict[str, bytes]:
        name = join.protocol_name
        assignor = ASSIGNORS.get(name)
        if assignor is None:
            raise error_for(23, f"the group chose strategy {name!r}, which this client does not know", group=self.group_id)
        members = {}
        for m in join.members:
            sub = decode_subscription(m.metadata)
            generation = sub.generation_id if sub.generation_id >= 0 else decode_generation(sub.user_data)
            members[m.member_id] = MemberSubscription(
                m.member_id, sub.topics, sub.owned_partitions, generation, getattr(m, "group_instance_id", None)
            )
        all_topics = sorted({t for m in members.values() for t in m.topics})
        await self.cluster.refresh(all_topics)
        counts = {t: n for t in all_topics if (n := self.cluster.metadata.partition_count(t)) is not None}
        result = assignor(members, counts)
        log.info("group %s: leader %s assigned with %s: %s", self.group_id, self.member_id, name, {m: len(p) for m, p in result.items()})
        return {
            member_id: encode_assignment(
                Assignment(tuple(partitions), encode_generation(join.generation_id) if name == "cooperative-sticky" else None)
            )
            for member_id, partitions in result.items()
        }

    async def _sync(self, assignments: dict[str, bytes]) -> set[TopicPartition]:
        def make(version: int) -> Any:
            cls = protocol.request_class(protocol.SYNC_GROUP, version)
            assignment_cls = protocol.nested(cls, "SyncGroupRequestAssignment")
            return protocol.build(
                cls,
                group_id=self.group_id,
                generation_id=self.generation_id,
                member_id=self.member_id,
                group_instance_id=self.config.group_instance_id,
                protocol_type="consumer",
                protocol_name=self.protocol_name,
                assignments=tuple(assignment_cls(member_id=m, assignment=a) for m, a in assignments.items()),
            )

        response = await self._coordinator_request(protocol.SYNC_GROUP, make, self.config.max_poll_interval_ms + 5000)
        if response.error_code:
            raise error_for(response.error_code, None, group=self.group_id)
        return set(decode_assignment(response.assignment).partitions)

    async def _leave(self) -> None:
        if not self.member_id or self.config.group_instance_id is not None:
            return  # static members keep their place until the session times out

        def make(version: int) -> Any:
            cls = protocol.request_class(protocol.LEAVE_GROUP, version)
            if protocol.has_field(cls, "members"):
                member_cls = protocol.nested(cls, "MemberIdentity")
                members = (protocol.build(member_cls, member_id=self.member_id, group_instance_id=None, reason="the consumer is closing"),)
                return cls(group_id=self.group_id, members=members)
            return cls(group_id=self.group_id, member_id=self.member_id)

        try:
            response = await self._coordinator_request(protocol.LEAVE_GROUP, make)
            if response.error_code:
                log.info("leaving group %s: %s", self.group_id, error_for(response.error_code))
        except KafkaError as exc:
            log.info("leaving group %s failed: %s", self.group_id, exc)
        self.member_id = ""
        self.generation_id = -1
        self.state = UNJOINED
