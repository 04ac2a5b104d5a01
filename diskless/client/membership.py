"""Consumer group membership with KIP-848's protocol (`group_protocol="consumer"`), as Java's
ConsumerMembershipManager and librdkafka's cgrp with `group.protocol=consumer`.

There is no JoinGroup, SyncGroup or group leader: the member sends ConsumerGroupHeartbeat
(API 68) every `heartbeat_interval_ms` the coordinator gives it, and the coordinator computes
every member's assignment with its own assignor (`group_remote_assignor`: "uniform" or
"range"). A heartbeat says:

  member epoch   0 to join; the epoch of the last answer after that; -1 to leave
                 (-2 for a static member, which keeps its partitions for a session timeout)
  subscription   topic names, or a regular expression the broker resolves (re.fullmatch);
                 sent when joining and when it changed, null ("unchanged") otherwise
  owned          the partitions the member holds now, by topic id: how it tells the
                 coordinator it let revoked partitions go

and its answer carries the member's epoch and, when it changed, its whole assignment. The
member reconciles to it incrementally (`Reconciliation`): partitions it holds that are no
longer assigned are revoked first (consumed offsets committed with auto-commit, the
listener told), then the new ones are taken, and the next heartbeat, sent at once, reports
what it owns. The coordinator hands a partition to its next owner only after that report,
so no partition is consumed by two members at once.

Offsets are committed with OffsetCommit v9, the member epoch in place of the generation; a
commit answered STALE_MEMBER_EPOCH (an epoch bumped by a heartbeat in flight) is retried with
the new epoch. UNKNOWN_MEMBER_ID or FENCED_MEMBER_EPOCH (the member missed its session) loses
every partition (on_partitions_lost) and rejoins with epoch 0 under the same member id.

The offset and commit machinery is GroupMember's (group.py); this module replaces the
membership half. Used from the consumer's event loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from . import protocol
from .errors import KafkaError, UnsupportedByBroker, error_for
from .group import STABLE, UNJOINED, GroupMember, _call
from .structs import TopicPartition

log = logging.getLogger(__name__)

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
LEAVE_STATIC_EPOCH = -2
_COORDINATOR_ERRORS = {14, 15, 16}  # loading, not available, not coordinator
_FENCED = {25, 110}  # unknown member id, fenced member epoch: rejoin from epoch 0
_STALE_MEMBER_EPOCH = 113
_OFFSET_COMMIT_MIN_VERSION = 9  # the first that carries a member epoch
_RETRY_BACKOFF_MAX_S = 1.0  # Java's retry.backoff.max.ms: a member finds a restarted coordinator soon


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """One step from the partitions a member holds toward the assignment it was given. Pure."""

    revoke: frozenset[TopicPartition]
    add: frozenset[TopicPartition]
    keep: frozenset[TopicPartition]

    @classmethod
    def of(cls, owned: Iterable[TopicPartition], assigned: Iterable[TopicPartition]) -> Reconciliation:
        owned_set, assigned_set = frozenset(owned), frozenset(assigned)
        return cls(owned_set - assigned_set, assigned_set - owned_set, owned_set & assigned_set)

    @property
    def changes(self) -> bool:
        return bool(self.revoke or self.add)

    @property
    def assignment(self) -> list[TopicPartition]:
        return sorted(self.keep | self.add)


def resolve_assignment(
    assignment: Mapping[uuid.UUID, Iterable[int]], topic_names: Mapping[uuid.UUID, str]
) -> tuple[set[TopicPartition], set[uuid.UUID]]:
    """The assignment by topic name, and the topic ids the metadata does not know yet. Pure."""
    resolved, unknown = set(), set()
    for topic_id, partitions in assignment.items():
        name = topic_names.get(topic_id)
        if name is None:
            unknown.add(topic_id)
        else:
            resolved |= {TopicPartition(name, p) for p in partitions}
    return resolved, unknown


class ConsumerGroupMember(GroupMember):
    """A KIP-848 member; the same face to the consumer as GroupMember (group.py)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.member_id = str(uuid.uuid4())  # v1: the member names itself, once, for its whole life
        self.member_epoch = JOIN_EPOCH
        self.heartbeat_interval_ms = self.config.heartbeat_interval_ms
        self._target: dict[uuid.UUID, frozenset[int]] | None = None  # the last assignment given, by topic id
        self._sent_subscription: tuple[tuple[str, ...] | None, str | None] | None = None
        self._send_full = True

    # --- what the consumer sees ----------------------------------------------------------

    def subscription_changed(self, listener: Any) -> None:
        self._send_full = True
        super().subscription_changed(listener)

    def unsubscribe(self) -> None:
        revoked = set(self.subscription.assignment)
        self.subscription.set_group_assignment(())
        if self._task is not None:
            self._task.cancel()
            self._task = None
        asyncio.ensure_future(self._leave_after(revoked))

    async def close(self) -> None:
        """Let a heartbeat in flight finish first: cancelled, its answer would be lost while the
        coordinator has already moved the member to a new epoch, and the closing commit would
        then be refused (STALE_MEMBER_EPOCH) until the session expired."""
        self._closed = True
        self._rejoin.set()
        if self._task is not None and not self._task.done():
            with contextlib.suppress(Exception, asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._task), self.config.request_timeout_ms / 1000)
        await super().close()

    def _commit_identity(self) -> tuple[int, str]:
        return self.member_epoch, self.member_id

    def _current_identity(self) -> tuple[int, str]:
        return self.member_epoch, self.member_id

    def _check_offset_commit_version(self, version: int) -> None:
        if version < _OFFSET_COMMIT_MIN_VERSION:
            low, high = protocol.CLIENT_VERSIONS[protocol.OFFSET_COMMIT][1:]
            raise UnsupportedByBroker("OffsetCommit with a member epoch (v9)", (_OFFSET_COMMIT_MIN_VERSION, high), (low, version))

    def _commit_retriable(self, exc: KafkaError) -> bool:
        return exc.retriable or getattr(exc, "errno", None) == _STALE_MEMBER_EPOCH

    def _member_error(self, code: int) -> None:
        if code in _FENCED:
            self._rejoin.set()

    # --- the heartbeat loop --------------------------------------------------------------

    async def _run(self) -> None:
        backoff = self.config.retry_backoff_ms / 1000
        while not self._closed:
            try:
                if not self.subscription.subscribed:
                    return
                self._rejoin.clear()
                sent_at = time.monotonic()
                changed = await self._heartbeat_and_reconcile()
                backoff = self.config.retry_backoff_ms / 1000
                if changed:
                    continue  # tell the coordinator at once what we own now
                # The interval runs from the heartbeat's sending, as in Java's HeartbeatRequestState.
                wait_s = self.heartbeat_interval_ms / 1000 - (time.monotonic() - sent_at)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._rejoin.wait(), max(wait_s, 0))
            except asyncio.CancelledError:
                raise
            except KafkaError as exc:
                self._send_full = True  # the answer may be lost: have the assignment sent again
                code = getattr(exc, "errno", None)
                if code in _FENCED:
                    log.info("group %s: member %s epoch %d: %s; rejoining", self.group_id, self.member_id, self.member_epoch, exc)
                    await self._lose_all()
                    continue
                if code in _COORDINATOR_ERRORS or exc.retriable:
                    self.cluster.forget_coordinator(self.group_id)
                    log.info("group %s: %s; retrying", self.group_id, exc)
                else:
                    log.error("group %s: %s", self.group_id, exc)
                    self.errors.append(exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _RETRY_BACKOFF_MAX_S)
            except Exception:
                log.exception("group %s: unexpected error; retrying", self.group_id)
                await asyncio.sleep(backoff)

    async def _lose_all(self) -> None:
        lost = set(self.subscription.assignment)
        self.subscription.set_group_assignment(())
        self._on_assignment()
        self.member_epoch = JOIN_EPOCH
        self._target = None
        self.state = UNJOINED
        if lost:
            await _call(self.listener.on_partitions_lost, lost)

    def _subscription_fields(self) -> tuple[tuple[str, ...] | None, str | None]:
        if self.subscription.pattern is not None:
            return None, self.subscription.pattern.pattern
        return tuple(sorted(self.subscription.topics)), None

    async def _heartbeat_and_reconcile(self) -> bool:
        """One heartbeat and what its answer asks for; True if the assignment changed."""
        joining = self.member_epoch == JOIN_EPOCH
        full = joining or self._send_full
        subscription = self._subscription_fields()
        send_subscription = full or subscription != self._sent_subscription
        owned = () if joining else sorted(self.subscription.assignment)
        topic_ids = {name: t.topic_id for name, t in self.cluster.metadata.topics.items() if t.topic_id is not None}
        by_topic: dict[uuid.UUID, list[int]] = {}
        for tp in owned:
            topic_id = topic_ids.get(tp.topic)
            if topic_id is not None:
                by_topic.setdefault(topic_id, []).append(tp.partition)
        epoch = self.member_epoch

        def make(version: int) -> Any:
            cls = protocol.request_class(protocol.CONSUMER_GROUP_HEARTBEAT, version)
            tp_cls = protocol.nested(cls, "TopicPartitions")
            names, regex = subscription if send_subscription else (None, None)
            return protocol.build(
                cls,
                group_id=self.group_id,
                member_id=self.member_id if version >= 1 or not joining else "",
                member_epoch=epoch,
                instance_id=self.config.group_instance_id,
                rack_id=None,
                rebalance_timeout=protocol.ms(self.config.max_poll_interval_ms if full else -1),
                subscribed_topic_names=names if send_subscription and regex is None else None,
                subscribed_topic_regex=regex,
                server_assignor=self.config.group_remote_assignor if full else None,
                topic_partitions=tuple(tp_cls(topic_id=t, partitions=tuple(ps)) for t, ps in sorted(by_topic.items())),
            )

        response = await self._coordinator_request(protocol.CONSUMER_GROUP_HEARTBEAT, make)
        if response.error_code:
            if response.error_code in _COORDINATOR_ERRORS:
                self.cluster.forget_coordinator(self.group_id)
            raise error_for(response.error_code, response.error_message, group=self.group_id)
        if self.member_epoch != epoch:  # left or fenced while the heartbeat was in flight
            return False
        self._send_full = False
        self._sent_subscription = subscription
        if response.member_id:
            self.member_id = response.member_id
        self.member_epoch = response.member_epoch
        self.heartbeat_interval_ms = max(round(response.heartbeat_interval.total_seconds() * 1000), 1)
        self.state = STABLE
        if response.assignment is not None:
            self._target = {tp.topic_id: frozenset(tp.partitions) for tp in response.assignment.topic_partitions}
        if self._target is None:
            return False
        return await self._reconcile(self._target)

    async def _reconcile(self, target: Mapping[uuid.UUID, frozenset[int]]) -> bool:
        assigned, unknown = resolve_assignment(target, self._topic_names())
        if unknown:
            await self.cluster.refresh(all_topics=True)
            assigned, unknown = resolve_assignment(target, self._topic_names())
            if unknown:
                log.info("group %s: topic ids %s are not in the metadata yet", self.group_id, sorted(map(str, unknown)))
        step = Reconciliation.of(self.subscription.assignment, assigned)
        if not step.changes:
            return False
        if step.revoke:
            await self._revoke(set(step.revoke))
        self.subscription.set_group_assignment(step.assignment)
        self._on_assignment()
        if step.add:
            await _call(self.listener.on_partitions_assigned, set(step.add))
        log.info(
            "group %s epoch %d: member %s revoked %d, added %d, holds %d partitions",
            self.group_id, self.member_epoch, self.member_id, len(step.revoke), len(step.add), len(step.assignment),
        )  # fmt: skip
        return True

    def _topic_names(self) -> dict[uuid.UUID, str]:
        return {t.topic_id: name for name, t in self.cluster.metadata.topics.items() if t.topic_id is not None}

    async def _leave(self) -> None:
        """ConsumerGroupHeartbeat with epoch -1 (a static member: -2, keeping its place)."""
        if self.member_epoch <= JOIN_EPOCH:
            self.state = UNJOINED
            return
        epoch = LEAVE_EPOCH if self.config.group_instance_id is None else LEAVE_STATIC_EPOCH

        def make(version: int) -> Any:
            return protocol.build(
                protocol.request_class(protocol.CONSUMER_GROUP_HEARTBEAT, version),
                group_id=self.group_id,
                member_id=self.member_id,
                member_epoch=epoch,
                instance_id=self.config.group_instance_id,
                rack_id=None,
                rebalance_timeout=protocol.ms(-1),
                subscribed_topic_names=None,
                subscribed_topic_regex=None,
                server_assignor=None,
                topic_partitions=None,
            )

        try:
            response = await self._coordinator_request(protocol.CONSUMER_GROUP_HEARTBEAT, make)
            if response.error_code:
                log.info("leaving group %s: %s", self.group_id, error_for(response.error_code, response.error_message))
        except KafkaError as exc:
            log.info("leaving group %s failed: %s", self.group_id, exc)
        self.member_epoch = JOIN_EPOCH
        self._target = None
        self.state = UNJOINED


__all__ = ["ConsumerGroupMember", "Reconciliation", "resolve_assignment"]
