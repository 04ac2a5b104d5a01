"""The KIP-848 consumer group coordinator, sans-IO: ConsumerGroupHeartbeat and friends.

Follows Kafka 4.0's GroupMetadataManager.consumerGroupHeartbeat request by request: request
validation (INVALID_REQUEST, UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION), members
created on epoch 0, the member epoch checked (FENCED_MEMBER_EPOCH, with the previous epoch
accepted when the member owns a subset of its assignment: the answer bumping it was lost),
static members (KIP-345 rules in KIP-848: UNRELEASED_INSTANCE_ID, FENCED_INSTANCE_ID, epoch
-2 keeps the assignment for the session timeout so a restarted instance takes it back),
the group epoch bumped on membership, subscription and topic changes, the target assignment
computed by the group's assignor (assignors.py), and the member reconciled toward it
(consumer_group.reconcile). Regex subscriptions are resolved against the topics at every
heartbeat, with RE2's syntax and full-match semantics (google-re2: the RE2/J that Kafka uses is
its Java port), so a pattern Kafka refuses (a lookaround, a backreference, a possessive
quantifier) is refused here too.

Timers (timers.py): each member's session (`consumer.session.timeout.ms` of the group, else
`group.consumer.session.timeout.ms`) restarts at each heartbeat; a member that does not
heartbeat in time is removed and its partitions move. A member asked to revoke partitions
must do so within its rebalance timeout, else it is removed too.

A member waiting for partitions another still holds is answered with a tenth of the heartbeat
interval (Kafka answers the configured one): it takes them soon after their release.

A group's state outlives its coordinator: the shell (groups.py) writes `export`'s text to
the metadata store before it answers a heartbeat that changed it, and a coordinator that
does not know a group (after a restart, or when its coordinator slot moved here) `restore`s
it first, as Kafka replays __consumer_offsets: members go on at their epochs with their
assignments, and no partition is given while its old owner may still hold it. A group
whose last member left is kept (Empty, at its epochs) until it is deleted: DeleteGroups, a
classic member taking it over, or its offsets all expired. A group the store does not know
either answers a heartbeat with a non-zero epoch UNKNOWN_MEMBER_ID, and the member rejoins
with epoch 0. Committed offsets are kept by the shell in the store too.

One coordinator per broker, used by one task; not thread-safe.
"""

from __future__ import annotations

import functools
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import re2
from kio.schema.errors import ErrorCode

from . import group_configs
from .assignors import MemberSpec, TopicInfo, assign
from .config import GroupConfig
from . import consumer_snapshot
from .consumer_group import (
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerGroupState,
    ConsumerMember,
    MemberState,
    is_subset,
    reconcile,
)
from .responses import ListedGroup
from .timers import Timers

CONSUMER = "consumer"
UNRELEASED_SPEEDUP = 10
UNRELEASED_MIN_INTERVAL_MS = 50
Partitions = Mapping[uuid.UUID, frozenset[int]]


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """ConsumerGroupHeartbeat; None fields were not sent ("did not change")."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Partitions | None = None
    client_id: str = ""
    client_host: str = ""
    api_version: int = 1


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    error_code: ErrorCode
    error_message: str | None
    member_id: str | None
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: Partitions | None = None  # None: unchanged, not sent


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: Partitions
    target_assignment: Partitions


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription:
    group_id: str
    error_code: ErrorCode
    error_message: str | None = None
    group_state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[DescribedMember, ...] = ()


class Rejected(Exception):
    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


class ConsumerGroupCoordinator:
    def __init__(self, config: GroupConfig | None = None, *, new_member_id: Callable[[], str] | None = None) -> None:
        """`new_member_id` makes ids for ConsumerGroupHeartbeat v0 joins without one; tests pass a counter."""
        self.config = config or GroupConfig()
        self.groups: dict[str, ConsumerGroup] = {}
        self.group_configs: dict[str, dict[str, str]] = {}  # overrides set on each group id
        self.timers = Timers()
        self._new_member_id = new_member_id or (lambda: str(uuid.uuid4()))
        self._changed: set[str] = set()  # groups changed since their state was last `export`ed

    # -- ConsumerGroupHeartbeat ----------------------------------------------------------

    def heartbeat(self, r: HeartbeatRequest, topics: Mapping[str, TopicInfo], now_ms: int) -> HeartbeatResponse:
        """One ConsumerGroupHeartbeat against the cluster's `topics` (name -> TopicInfo)."""
        try:
            self._validate(r)
            if r.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(r)
            return self._heartbeat(r, topics, now_ms)
        except Rejected as rejected:
            return HeartbeatResponse(rejected.error_code, rejected.message, r.member_id or None, r.member_epoch, 0)

    def _validate(self, r: HeartbeatRequest) -> None:
        def invalid(message: str) -> Rejected:
            return Rejected(ErrorCode.invalid_request, message)

        if not r.group_id.strip():
            raise invalid("GroupId can't be empty.")
        if r.instance_id is not None and not r.instance_id.strip():
            raise invalid("InstanceId can't be empty.")
        if r.rack_id is not None and not r.rack_id.strip():
            raise invalid("RackId can't be empty.")
        if r.api_version >= 1 and not r.member_id.strip():
            raise invalid("MemberId can't be empty.")
        if r.member_epoch > 0 or r.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
            if not r.member_id.strip():
                raise invalid("MemberId can't be empty.")
        elif r.member_epoch == JOIN_GROUP_MEMBER_EPOCH:
            if r.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if r.owned is None or any(r.owned.values()):
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if r.subscribed_topic_names is None and r.subscribed_topic_regex is None:
                raise invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        elif r.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if not r.member_id.strip():
                raise invalid("MemberId can't be empty.")
            if r.instance_id is None:
                raise invalid("InstanceId can't be null.")
        else:
            raise invalid(f"MemberEpoch {r.member_epoch} is invalid.")
        if r.server_assignor is not None and r.server_assignor not in self.config.group_consumer_assignors:
            supported = ", ".join(self.config.group_consumer_assignors)
            raise Rejected(ErrorCode.unsupported_assignor, f"ServerAssignor {r.server_assignor} is not supported. Supported assignors: {supported}.")
        if r.subscribed_topic_regex:
            try:
                _pattern(r.subscribed_topic_regex)
            except re2.error as exc:
                reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
                raise Rejected(ErrorCode.invalid_regular_expression, f"SubscribedTopicRegex `{r.subscribed_topic_regex}` is not a valid regular expression: {reason}.") from None

    def _heartbeat(self, r: HeartbeatRequest, topics: Mapping[str, TopicInfo], now_ms: int) -> HeartbeatResponse:
        group = self.groups.get(r.group_id)
        if group is None:
            if r.member_epoch != JOIN_GROUP_MEMBER_EPOCH:
                raise Rejected(ErrorCode.unknown_member_id, f"Group {r.group_id} is not known to this coordinator: rejoin.")
            group = ConsumerGroup(r.group_id)
        epochs_before = (group.group_epoch, group.target_epoch)
        member_id = r.member_id or self._new_member_id()
        member, is_new = self._member(group, r, member_id)
        self.groups[group.group_id] = group  # only once the member was accepted
        member_before = consumer_snapshot.member_state(member)
        before = (member.subscribed_topic_names, member.subscribed_topic_regex, member.server_assignor)
        if r.rack_id is not None:
            member.rack_id = r.rack_id
        if r.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = r.rebalance_timeout_ms
        if r.subscribed_topic_names is not None:
            member.subscribed_topic_names = tuple(r.subscribed_topic_names)
        if r.subscribed_topic_regex is not None:
            member.subscribed_topic_regex = r.subscribed_topic_regex or None
        if r.server_assignor is not None:
            member.server_assignor = r.server_assignor
        member.client_id, member.client_host = r.client_id, r.client_host
        changed = is_new or before != (member.subscribed_topic_names, member.subscribed_topic_regex, member.server_assignor)
        metadata = self._subscription_metadata(group, topics)
        if changed or metadata != group.subscription_metadata:
            group.group_epoch += 1
            group.subscription_metadata = metadata
        if group.group_epoch > group.target_epoch:
            self._compute_target(group)
        previous_assigned = dict(member.assigned)
        self._reconcile(group, member, r.owned, now_ms)
        self.timers.schedule(_session_key(group.group_id, member.member_id), now_ms + self._session_timeout_ms(group.group_id))
        if is_new or member_before != consumer_snapshot.member_state(member) or epochs_before != (group.group_epoch, group.target_epoch):
            self._changed.add(group.group_id)
        full = r.rebalance_timeout_ms != -1 and (r.subscribed_topic_names is not None or r.subscribed_topic_regex is not None) and r.owned is not None
        send_assignment = r.member_epoch == JOIN_GROUP_MEMBER_EPOCH or full or member.assigned != previous_assigned
        return HeartbeatResponse(
            ErrorCode.none,
            None,
            member.member_id,
            member.member_epoch,
            self._answered_interval_ms(group.group_id, member),
            dict(member.assigned) if send_assignment else None,
        )

    def _answered_interval_ms(self, group_id: str, member: ConsumerMember) -> int:
        """The heartbeat interval the answer asks for. A member waiting for partitions that
        others are still revoking (UNRELEASED_PARTITIONS) is asked back ten times sooner, so it
        takes them within a tenth of an interval of their release rather than a whole one:
        a join then settles in about one interval (the others' next heartbeat). Clients (Java,
        librdkafka, ours) use the interval of each answer; the configured one returns as soon
        as the member holds its target."""
        interval_ms = self._heartbeat_interval_ms(group_id)
        if member.state is MemberState.UNRELEASED_PARTITIONS:
            return min(interval_ms, max(interval_ms // UNRELEASED_SPEEDUP, UNRELEASED_MIN_INTERVAL_MS))
        return interval_ms

    def _member(self, group: ConsumerGroup, r: HeartbeatRequest, member_id: str) -> tuple[ConsumerMember, bool]:
        """The member the heartbeat is from, created or taken over on epoch 0; raises Rejected."""
        joining = r.member_epoch == JOIN_GROUP_MEMBER_EPOCH
        if r.instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if not joining:
                    raise Rejected(ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group.group_id}.")
                return self._add_member(group, ConsumerMember(member_id, None, r.client_id, r.client_host)), True
            if not joining:
                self._check_epoch(member, r)
            return member, False
        existing_id = group.static_members.get(r.instance_id)
        if joining:
            if existing_id is None:
                member = group.members.get(member_id)
                if member is not None:
                    return member, False
                return self._add_member(group, ConsumerMember(member_id, r.instance_id, r.client_id, r.client_host)), True
            if existing_id == member_id:
                return group.members[member_id], False
            old = group.members[existing_id]
            if old.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise Rejected(
                    ErrorCode.unreleased_instance_id,
                    f"Static member {existing_id} with instance id {r.instance_id} is not released yet.",
                )
            return self._replace_static_member(group, old, member_id), False
        member = group.members.get(member_id)
        if member is None or existing_id is None:
            raise Rejected(ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group.group_id}.")
        if existing_id != member_id:
            raise Rejected(ErrorCode.fenced_instance_id, f"Static member {member_id} with instance id {r.instance_id} was fenced by member {existing_id}.")
        self._check_epoch(member, r)
        return member, False

    def _add_member(self, group: ConsumerGroup, member: ConsumerMember) -> ConsumerMember:
        if len(group.members) >= self.config.group_consumer_max_size:
            raise Rejected(ErrorCode.group_max_size_reached, f"The consumer group has reached its maximum capacity of {self.config.group_consumer_max_size} members.")
        group.members[member.member_id] = member
        if member.instance_id is not None:
            group.static_members[member.instance_id] = member.member_id
        return member

    def _replace_static_member(self, group: ConsumerGroup, old: ConsumerMember, member_id: str) -> ConsumerMember:
        """A restarted static member takes over the assignment its previous incarnation left."""
        self._cancel_timers(group.group_id, old.member_id)
        group.members.pop(old.member_id)
        group.release(old)
        target = group.target.pop(old.member_id, None)
        old.member_id = member_id
        old.member_epoch = 0
        old.previous_member_epoch = -1
        group.members[member_id] = old
        group.static_members[old.instance_id or ""] = member_id
        if target is not None:
            group.target[member_id] = target
        group.claim(old)
        self._changed.add(group.group_id)
        return old

    @staticmethod
    def _check_epoch(member: ConsumerMember, r: HeartbeatRequest) -> None:
        if r.member_epoch > member.member_epoch:
            raise Rejected(
                ErrorCode.fenced_member_epoch,
                f"The consumer group member has a greater member epoch ({r.member_epoch}) than the one known by the group "
                f"coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
            )
        if r.member_epoch < member.member_epoch:
            if r.member_epoch != member.previous_member_epoch or not is_subset(r.owned, member.assigned):
                raise Rejected(
                    ErrorCode.fenced_member_epoch,
                    f"The consumer group member has a smaller member epoch ({r.member_epoch}) than the one known by the group "
                    f"coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
                )

    def _subscription_metadata(self, group: ConsumerGroup, topics: Mapping[str, TopicInfo]) -> dict[str, tuple[uuid.UUID, int]]:
        names = set()
        for member in group.members.values():
            names |= _subscribed(member, topics)
        return {name: (topics[name].topic_id, topics[name].num_partitions) for name in sorted(names)}

    def _compute_target(self, group: ConsumerGroup) -> None:
        wanted = Counter(m.server_assignor for m in group.members.values() if m.server_assignor)
        assignor = wanted.most_common(1)[0][0] if wanted else self.config.group_consumer_assignors[0]
        infos = {topic_id: TopicInfo(topic_id, name, n) for name, (topic_id, n) in group.subscription_metadata.items()}
        ids_by_name = {name: topic_id for name, (topic_id, _) in group.subscription_metadata.items()}
        specs = {
            member_id: MemberSpec(
                frozenset(ids_by_name[name] for name in _subscribed(member, ids_by_name)),
                group.target.get(member_id, {}),
            )
            for member_id, member in group.members.items()
        }
        group.target = {member_id: dict(a) for member_id, a in assign(assignor, specs, infos).items()}
        group.assignor_name = assignor
        group.target_epoch = group.group_epoch

    def _reconcile(self, group: ConsumerGroup, member: ConsumerMember, owned: Partitions | None, now_ms: int) -> None:
        old_epoch, old_state = member.member_epoch, member.state
        epoch, state, assigned, pending = reconcile(group, member, owned)
        group.release(member)
        if epoch != member.member_epoch:
            member.previous_member_epoch = member.member_epoch
        member.member_epoch, member.state, member.assigned, member.pending_revocation = epoch, state, assigned, pending
        group.claim(member)
        key = _revocation_key(group.group_id, member.member_id)
        if state is MemberState.UNREVOKED_PARTITIONS:
            if old_state is not MemberState.UNREVOKED_PARTITIONS or old_epoch != epoch or self.timers.get(key) is None:
                self.timers.schedule(key, now_ms + member.rebalance_timeout_ms, epoch)
        else:
            self.timers.cancel(key)

    def _leave(self, r: HeartbeatRequest) -> HeartbeatResponse:
        group = self.groups.get(r.group_id)
        member = group.members.get(r.member_id) if group is not None else None
        if group is None or member is None:
            raise Rejected(ErrorCode.unknown_member_id, f"Member {r.member_id} is not a member of group {r.group_id}.")
        if r.instance_id is not None:
            existing_id = group.static_members.get(r.instance_id)
            if existing_id is None:
                raise Rejected(ErrorCode.unknown_member_id, f"Instance id {r.instance_id} is unknown.")
            if existing_id != r.member_id:
                raise Rejected(ErrorCode.fenced_instance_id, f"Static member {r.member_id} with instance id {r.instance_id} was fenced by member {existing_id}.")
        if r.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # The instance will be back: it keeps its partitions until its session expires.
            member.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH
            self.timers.cancel(_revocation_key(group.group_id, member.member_id))
            self._changed.add(group.group_id)
        else:
            self._remove_member(group, member.member_id)
        return HeartbeatResponse(ErrorCode.none, None, r.member_id, r.member_epoch, 0)

    def _remove_member(self, group: ConsumerGroup, member_id: str) -> None:
        if group.remove(member_id) is not None:
            group.group_epoch += 1
            self._changed.add(group.group_id)
        self._cancel_timers(group.group_id, member_id)

    def _cancel_timers(self, group_id: str, member_id: str) -> None:
        self.timers.cancel(_session_key(group_id, member_id))
        self.timers.cancel(_revocation_key(group_id, member_id))

    def _session_timeout_ms(self, group_id: str) -> int:
        return group_configs.effective(self.config, self.group_configs.get(group_id, {}))[group_configs.CONSUMER_SESSION_TIMEOUT_MS]

    def _heartbeat_interval_ms(self, group_id: str) -> int:
        return group_configs.effective(self.config, self.group_configs.get(group_id, {}))[group_configs.CONSUMER_HEARTBEAT_INTERVAL_MS]

    # -- time ----------------------------------------------------------------------------

    def next_deadline_ms(self) -> int | None:
        return self.timers.next_deadline_ms()

    def tick(self, now_ms: int) -> list[tuple[str, str]]:
        """Fire due timers; returns the (group id, member id) of each member removed."""
        removed = []
        started_at = self.timers.seq
        while (timer := self.timers.pop_due(now_ms, started_at)) is not None:
            kind, group_id, member_id = timer.key
            group = self.groups.get(group_id)
            member = group.members.get(member_id) if group is not None else None
            if group is None or member is None:
                continue
            if kind == "revoke" and (member.state is not MemberState.UNREVOKED_PARTITIONS or member.member_epoch != timer.payload):
                continue
            self._remove_member(group, member_id)
            removed.append((group_id, member_id))
        return removed

    # -- the rest of the group's life ----------------------------------------------------

    def is_consumer_group(self, group_id: str) -> bool:
        return group_id in self.groups

    def is_empty(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is None or not group.members

    def validate_offset_commit(
        self, group_id: str, member_id: str, member_epoch: int, api_version: int, *,
        is_transactional: bool = False, group_instance_id: str | None = None,
    ) -> ErrorCode:  # fmt: skip
        """OffsetCommit or TxnOffsetCommit to a consumer group (Kafka's
        ConsumerGroup.validateOffsetCommit)."""
        group = self.groups[group_id]
        if member_epoch < 0 and not group.members:
            return ErrorCode.none  # the admin client, or a consumer using assign()
        if is_transactional and member_epoch == -1 and member_id == "" and group_instance_id is None:
            return ErrorCode.none  # TxnOffsetCommit v0-v2, or a producer without the consumer's group metadata
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if not is_transactional and api_version < 9:
            return ErrorCode.unsupported_version
        if member_epoch != member.member_epoch:
            return ErrorCode.stale_member_epoch
        return ErrorCode.none

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode:
        """OffsetFetch v9+ from a member (Kafka's ConsumerGroup.validateOffsetFetch)."""
        group = self.groups.get(group_id)
        if member_epoch < 0 or group is None:
            return ErrorCode.none if member_epoch < 0 else ErrorCode.unknown_member_id
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch != member.member_epoch:
            return ErrorCode.stale_member_epoch
        return ErrorCode.none

    def delete_group(self, group_id: str) -> ErrorCode:
        """Forget an empty group (DeleteGroups, an offline downgrade to a classic group, or
        its offsets all expired). It stays `changed` until `export`ed (None: the shell deletes
        its stored state), as Kafka writes the group's tombstones."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found
        if group.members:
            return ErrorCode.non_empty_group
        del self.groups[group_id]
        self._changed.add(group_id)
        return ErrorCode.none

    def subscribed_topics(self, group_id: str) -> set[str]:
        """Topics the group's members subscribe to (OffsetDelete refuses their offsets)."""
        group = self.groups.get(group_id)
        return set(group.subscription_metadata) if group is not None and group.members else set()

    def list_groups(self, states_filter: Iterable[str] = (), types_filter: Iterable[str] = ()) -> list[ListedGroup]:
        states = {s.lower() for s in states_filter}
        types = {t.lower() for t in types_filter}
        if types and CONSUMER not in types:
            return []
        return [
            ListedGroup(g.group_id, CONSUMER, g.state.value, CONSUMER)
            for g in self.groups.values()
            if not states or g.state.value.lower() in states
        ]

    def describe(self, group_id: str) -> ConsumerGroupDescription:
        group = self.groups.get(group_id)
        if group is None:
            return ConsumerGroupDescription(group_id, ErrorCode.group_id_not_found, f"Group {group_id} not found.")
        members = tuple(
            DescribedMember(
                m.member_id,
                m.instance_id,
                m.rack_id,
                m.member_epoch,
                m.client_id,
                m.client_host,
                m.subscribed_topic_names,
                m.subscribed_topic_regex,
                dict(m.assigned),
                dict(group.target.get(m.member_id, {})),
            )
            for m in group.members.values()
        )
        return ConsumerGroupDescription(
            group_id, ErrorCode.none, None, group.state.value, group.group_epoch, group.target_epoch,
            group.assignor_name or self.config.group_consumer_assignors[0], members,
        )  # fmt: skip

    def changed(self, group_id: str) -> bool:
        """Whether the group changed since its state was last `export`ed (a heartbeat that
        changed nothing is answered without serialising the group)."""
        return group_id in self._changed

    def export(self, group_id: str) -> str | None:
        """The group's state as the metadata store keeps it (consumer_snapshot.py), from now
        on not `changed`; None for a group not known here (deleted). An Empty group is kept
        too, its epochs and assignor with it, as Kafka keeps its ConsumerGroupMetadata record:
        after a restart or a slot move it is still a consumer group, not a classic one known
        by its offsets."""
        self._changed.discard(group_id)
        group = self.groups.get(group_id)
        return consumer_snapshot.to_text(group) if group is not None else None

    def restore(self, group_id: str, text: str, now_ms: int) -> None:
        """Take up a group another coordinator (or this broker before a restart) `export`ed:
        its members' sessions, and the rebalance timeouts of those revoking partitions, start
        now. Raises ValueError for a text that is not a group's state."""
        group = consumer_snapshot.from_text(group_id, text)
        self.groups[group_id] = group
        for member in group.members.values():
            self.timers.schedule(_session_key(group_id, member.member_id), now_ms + self._session_timeout_ms(group_id))
            if member.state is MemberState.UNREVOKED_PARTITIONS:
                self.timers.schedule(_revocation_key(group_id, member.member_id), now_ms + member.rebalance_timeout_ms, member.member_epoch)

    def unload(self, which: Callable[[str], bool] | None = None) -> None:
        """Forget every group, or those `which` names (shutdown, a coordinator slot moved, or
        a store write failed): the next coordinator, or this one later, restores them from
        what the store holds."""
        gone = {group_id for group_id in self.groups if which is None or which(group_id)}
        for group_id in gone:
            del self.groups[group_id]
        self._changed = {group_id for group_id in self._changed if which is not None and not which(group_id)}  # deleted ones too
        self.timers.cancel_where(lambda key: isinstance(key, tuple) and len(key) > 1 and key[1] in gone)


def _subscribed(member: ConsumerMember, known: Mapping[str, object]) -> set[str]:
    """The topics of `known` that `member` subscribes to, its regex resolved."""
    names = {name for name in member.subscribed_topic_names if name in known}
    if member.subscribed_topic_regex:
        try:
            pattern = _pattern(member.subscribed_topic_regex)
        except re2.error:
            return names
        names |= {name for name in known if pattern.fullmatch(name)}
    return names


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a client's bad pattern is its error answer, not a line on stderr


@functools.lru_cache(maxsize=1024)
def _pattern(regex: str) -> re2._Regexp:  # noqa: SLF001 (google-re2 names its compiled type so)
    """A subscription's pattern, compiled once (members resolve theirs at every heartbeat)."""
    return re2.compile(regex, options=_RE2_OPTIONS)


def _session_key(group_id: str, member_id: str) -> tuple[str, str, str]:
    return ("session", group_id, member_id)


def _revocation_key(group_id: str, member_id: str) -> tuple[str, str, str]:
    return ("revoke", group_id, member_id)


__all__ = [
    "CONSUMER",
    "ConsumerGroupCoordinator",
    "ConsumerGroupDescription",
    "ConsumerGroupState",
    "DescribedMember",
    "HeartbeatRequest",
    "HeartbeatResponse",
]
