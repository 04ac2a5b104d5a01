"""The consumer-group half of the admin client: list, describe and delete groups, and read or
reset their committed offsets. Requests go to each group's coordinator (FindCoordinator);
NOT_COORDINATOR and friends make the next attempt ask for the coordinator again.

A mixin of `Admin` (admin.py), which supplies `_cluster` and `_retrying`.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

from . import protocol
from .cluster import Cluster
from .consumer_protocol import decode_assignment
from .errors import KafkaError, UnsupportedByBroker, error_for
from .offsets import committed_offsets, offset_fetch_request
from .structs import (
    BrokerInfo,
    ConsumerGroupDescription,
    ConsumerGroupMemberDescription,
    GroupDescription,
    GroupListing,
    MemberDescription,
    OffsetAndMetadata,
    TopicPartition,
)

T = TypeVar("T")
_COORDINATOR_ERRORS = (14, 15, 16)  # loading, not available, not coordinator


class GroupAdmin:
    _cluster: Cluster

    async def _retrying(self, attempt: Callable[[], Awaitable[T]], final: frozenset[int] = frozenset()) -> T:
        """Admin's retries through retry.retrying (this class is a mixin of Admin, which defines it)."""
        ...

    async def _group_request(self, group_id: str, api_key: int, make: Callable[[int], Any]) -> Any:
        node = await self._cluster.coordinator(group_id)
        try:
            return await self._cluster.request_node(node, api_key, make)
        except KafkaError:
            self._cluster.forget_coordinator(group_id)
            raise

    def _check_group_error(self, group_id: str, code: int, message: str | None = None) -> None:
        if code:
            if code in _COORDINATOR_ERRORS:  # ask for the coordinator again
                self._cluster.forget_coordinator(group_id)
            raise error_for(code, message, group=group_id)

    async def group_coordinator(self, group_id: str) -> BrokerInfo:
        """The broker coordinating `group_id` (FindCoordinator), as kafka-consumer-groups
        --describe --state shows it."""

        async def attempt() -> BrokerInfo:
            broker = self._cluster.metadata.brokers.get(await self._cluster.coordinator(group_id))
            if broker is None:  # a cached coordinator the metadata no longer lists: ask again
                self._cluster.forget_coordinator(group_id)
                broker = self._cluster.metadata.brokers[await self._cluster.coordinator(group_id)]  # FindCoordinator records it
            return broker

        return await self._retrying(attempt)

    async def list_groups(self, *, states: Iterable[str] = (), types: Iterable[str] = ()) -> list[GroupListing]:
        """Every group on every broker, sorted by id; `states` ("Stable", "Empty", ...) and
        `types` ("classic", "consumer") keep only the groups that match (case-insensitively).
        A broker without ListGroups v4 (states) or v5 (types) refuses a filter it cannot apply."""
        states_filter, types_filter = tuple(states), tuple(types)

        async def attempt() -> list[GroupListing]:
            await self._cluster.fetch_metadata(())
            nodes = list(self._cluster.metadata.brokers)

            def make(version: int) -> Any:
                if (states_filter and version < 4) or (types_filter and version < 5):
                    raise UnsupportedByBroker("ListGroups with a states (v4) or types (v5) filter", (4 if not types_filter else 5, 5), (0, version))
                return protocol.build(
                    protocol.request_class(protocol.LIST_GROUPS, version), states_filter=states_filter, types_filter=types_filter
                )

            responses = await asyncio.gather(*(self._cluster.request_node(n, protocol.LIST_GROUPS, make) for n in nodes))
            groups = []
            for response in responses:
                if response.error_code:
                    raise error_for(response.error_code)
                groups += [
                    GroupListing(g.group_id, g.protocol_type, getattr(g, "group_state", None), getattr(g, "group_type", None))
                    for g in response.groups
                ]
            return sorted(groups, key=lambda g: g.group_id)

        return await self._retrying(attempt)

    async def describe_groups(self, group_ids: str | Iterable[str]) -> dict[str, GroupDescription]:
        ids = [group_ids] if isinstance(group_ids, str) else list(group_ids)

        async def describe(group_id: str) -> GroupDescription:
            async def attempt() -> GroupDescription:
                def make(version: int) -> Any:
                    cls = protocol.request_class(protocol.DESCRIBE_GROUPS, version)
                    return protocol.build(cls, groups=(group_id,), include_authorized_operations=False)

                response = await self._group_request(group_id, protocol.DESCRIBE_GROUPS, make)
                group = response.groups[0]
                self._check_group_error(group_id, group.error_code)
                members = []
                for m in group.members:
                    assignment: tuple[TopicPartition, ...] = ()
                    if group.protocol_type == "consumer" and m.member_assignment:
                        try:
                            assignment = decode_assignment(m.member_assignment).partitions
                        except Exception:
                            assignment = ()
                    members.append(
                        MemberDescription(m.member_id, getattr(m, "group_instance_id", None), m.client_id, m.client_host, assignment)
                    )
                return GroupDescription(group.group_id, group.group_state, group.protocol_type, group.protocol_data, tuple(members))

            return await self._retrying(attempt)

        described = await asyncio.gather(*(describe(g) for g in ids))
        return dict(zip(ids, described, strict=True))

    async def describe_consumer_groups(self, group_ids: str | Iterable[str]) -> dict[str, ConsumerGroupDescription]:
        """ConsumerGroupDescribe (KIP-848 groups); GROUP_ID_NOT_FOUND for a classic group."""
        ids = [group_ids] if isinstance(group_ids, str) else list(group_ids)

        def partitions(assignment: Any) -> tuple[TopicPartition, ...]:
            return tuple(sorted(TopicPartition(t.topic_name, p) for t in assignment.topic_partitions for p in t.partitions))

        async def describe(group_id: str) -> ConsumerGroupDescription:
            async def attempt() -> ConsumerGroupDescription:
                def make(version: int) -> Any:
                    cls = protocol.request_class(protocol.CONSUMER_GROUP_DESCRIBE, version)
                    return cls(group_ids=(group_id,), include_authorized_operations=False)

                group = (await self._group_request(group_id, protocol.CONSUMER_GROUP_DESCRIBE, make)).groups[0]
                self._check_group_error(group_id, group.error_code, group.error_message)
                members = tuple(
                    ConsumerGroupMemberDescription(
                        m.member_id, m.instance_id, m.client_id, m.client_host, m.member_epoch, tuple(m.subscribed_topic_names),
                        m.subscribed_topic_regex, partitions(m.assignment), partitions(m.target_assignment),
                    )  # fmt: skip
                    for m in group.members
                )
                return ConsumerGroupDescription(
                    group.group_id, group.group_state, group.group_epoch, group.assignment_epoch, group.assignor_name, members
                )

            return await self._retrying(attempt)

        described = await asyncio.gather(*(describe(g) for g in ids))
        return dict(zip(ids, described, strict=True))

    async def delete_groups(self, group_ids: str | Iterable[str]) -> None:
        """Delete empty groups and their committed offsets (NON_EMPTY_GROUP while members remain)."""
        ids = [group_ids] if isinstance(group_ids, str) else list(group_ids)

        async def delete(group_id: str) -> None:
            async def attempt() -> None:
                def make(version: int) -> Any:
                    return protocol.request_class(protocol.DELETE_GROUPS, version)(groups_names=(group_id,))

                response = await self._group_request(group_id, protocol.DELETE_GROUPS, make)
                self._check_group_error(group_id, response.results[0].error_code)

            await self._retrying(attempt)

        await asyncio.gather(*(delete(g) for g in ids))

    async def list_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The committed offsets of a group (all of them, or of `partitions`); uncommitted are left out."""
        wanted = None if partitions is None else sorted(set(partitions))

        def make(version: int) -> Any:
            return offset_fetch_request(version, group_id, wanted, require_stable=False)

        async def attempt() -> dict[TopicPartition, OffsetAndMetadata]:
            response = await self._group_request(group_id, protocol.OFFSET_FETCH, make)
            try:
                return committed_offsets(response, group_id)
            except KafkaError as exc:
                if getattr(exc, "errno", None) in _COORDINATOR_ERRORS:
                    self._cluster.forget_coordinator(group_id)
                raise

        return await self._retrying(attempt)

    async def alter_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int | OffsetAndMetadata]) -> None:
        """Commit offsets for a group that has no active members (as kafka-consumer-groups --reset-offsets)."""

        def make(version: int) -> Any:
            cls = protocol.request_class(protocol.OFFSET_COMMIT, version)
            topic_cls = protocol.nested(cls, "OffsetCommitRequestTopic")
            partition_cls = protocol.nested(cls, "OffsetCommitRequestPartition")
            by_topic: dict[str, list[Any]] = defaultdict(list)
            for tp, value in offsets.items():
                meta = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value)
                by_topic[tp.topic].append(
                    protocol.build(
                        partition_cls,
                        partition_index=tp.partition,
                        committed_offset=meta.offset,
                        committed_leader_epoch=meta.leader_epoch,
                        committed_metadata=meta.metadata,
                        commit_timestamp=-1,
                    )
                )
            return protocol.build(
                cls,
                group_id=group_id,
                generation_id_or_member_epoch=-1,
                member_id="",
                group_instance_id=None,
                retention_time=-1,
                topics=tuple(topic_cls(name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
            )

        async def attempt() -> None:
            response = await self._group_request(group_id, protocol.OFFSET_COMMIT, make)
            for t in response.topics:
                for p in t.partitions:
                    if p.error_code:
                        self._check_group_error(group_id, p.error_code)

        await self._retrying(attempt)
