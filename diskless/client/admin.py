"""The admin client: topics, configs, offsets, records and consumer groups.

    async with Admin(bootstrap_servers="127.0.0.1:9092") as admin:
        await admin.create_topics("orders", num_partitions=3, configs={"retention.ms": "3600000"})
        await admin.describe_topics(["orders"])        # {"orders": TopicDescription(...)}
        await admin.alter_configs("orders", {"retention.ms": "600000", "segment.bytes": None})
        await admin.list_offsets("orders", "latest")   # {0: OffsetAndTimestamp(...), ...}

Every method raises the typed error of the first failure it meets (a `BrokerResponseError`
subclass carrying the broker's message and the topic, partition or group it is about). Topic
and partition changes go to the controller; per-partition requests (ListOffsets,
DeleteRecords) to each partition's leader; group requests to the group's coordinator.
Retriable failures (a broken connection, NOT_CONTROLLER, a stale leader) are retried with
backoff until `default_api_timeout_ms` runs out.

Used from one event loop; methods may run concurrently.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

from . import protocol
from .cluster import NO_LEADER, Cluster
from .consumer_protocol import decode_assignment
from .errors import (
    ClientClosedError,
    KafkaError,
    UnknownTopicOrPartitionError,
    error_for,
)
from .structs import (
    BrokerInfo,
    ClusterDescription,
    ConfigEntry,
    GroupDescription,
    GroupListing,
    MemberDescription,
    NewTopic,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    PartitionDescription,
    TopicDescription,
    TopicPartition,
)

T = TypeVar("T")

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
CONFIG_SOURCE_DEFAULT = 5
_OP_SET, _OP_DELETE = 0, 1
EARLIEST = -2
LATEST = -1
MAX_TIMESTAMP = -3
_ZERO_UUID = uuid.UUID(int=0)
_SPECS = {"earliest": EARLIEST, "latest": LATEST, "max_timestamp": MAX_TIMESTAMP}


class Admin:
    def __init__(
        self,
        bootstrap_servers: str = "127.0.0.1:9092",
        *,
        client_id: str = "diskless-admin",
        request_timeout_ms: int = 30000,
        default_api_timeout_ms: int = 60000,
        retry_backoff_ms: int = 100,
        metadata_max_age_ms: int = 300000,
    ) -> None:
        self._cluster = Cluster(
            bootstrap_servers,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            metadata_max_age_ms=metadata_max_age_ms,
            retry_backoff_ms=retry_backoff_ms,
        )
        self.request_timeout_ms = request_timeout_ms
        self.default_api_timeout_ms = default_api_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self._started = False
        self._closed = False

    async def start(self) -> None:
        self._check_open()
        if not self._started:
            await self._cluster.start()
            self._started = True

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._cluster.close()

    async def __aenter__(self) -> Admin:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("admin client")

    async def _retrying(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """Run `attempt` until it succeeds, fails for good, or the API timeout passes."""
        self._check_open()
        if not self._started:
            await self.start()
        deadline = time.monotonic() + self.default_api_timeout_ms / 1000
        backoff = self.retry_backoff_ms / 1000
        while True:
            try:
                return await attempt()
            except KafkaError as exc:
                if not exc.retriable or time.monotonic() + backoff > deadline or self._closed:
                    raise
                if exc.invalid_metadata:
                    try:
                        await self._cluster.refresh()
                    except KafkaError:
                        pass
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    async def _controller_request(self, api_key: int, make: Callable[[int], Any], timeout_ms: int | None = None) -> Any:
        controller = self._cluster.metadata.controller_id
        if controller in self._cluster.metadata.brokers:
            return await self._cluster.request_node(controller, api_key, make, timeout_ms=timeout_ms)
        return await self._cluster.request_any(api_key, make, timeout_ms=timeout_ms)

    # --- cluster ---------------------------------------------------------------------------

    async def describe_cluster(self) -> ClusterDescription:
        async def attempt() -> ClusterDescription:
            await self._cluster.fetch_metadata(())
            meta = self._cluster.metadata
            return ClusterDescription(meta.cluster_id, meta.controller_id, tuple(sorted(meta.brokers.values(), key=lambda b: b.node_id)))

        return await self._retrying(attempt)

    # --- topics ----------------------------------------------------------------------------

    async def create_topics(
        self,
        topics: str | NewTopic | Iterable[str | NewTopic],
        num_partitions: int = 1,
        configs: Mapping[str, str] | None = None,
        *,
        replication_factor: int = -1,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> None:
        """Create topics: one name (with `num_partitions` and `configs`), or several `NewTopic`s.

        Raises `TopicAlreadyExistsError`, `InvalidConfigError`, `InvalidPartitionsError`, ...
        for the first topic the controller refused.
        """
        if isinstance(topics, (str, NewTopic)):
            topics = [topics]
        wanted = {}
        for item in topics:
            if isinstance(item, str):
                item = NewTopic(item, num_partitions, replication_factor, tuple((configs or {}).items()))
            wanted[item.name] = item
        timeout = self.request_timeout_ms if timeout_ms is None else timeout_ms

        def make(version: int) -> Any:
            cls = protocol.request_class(protocol.CREATE_TOPICS, version)
            topic_cls = protocol.nested(cls, "CreatableTopic")
            config_cls = protocol.nested(cls, "CreatableTopicConfig")
            return protocol.build(
                cls,
                topics=tuple(
                    protocol.build(
                        topic_cls,
                        name=t.name,
                        num_partitions=t.num_partitions,
                        replication_factor=t.replication_factor,
                        assignments=(),
                        configs=tuple(protocol.build(config_cls, name=k, value=v) for k, v in t.configs),
                    )
                    for t in wanted.values()
                ),
                timeout=protocol.ms(timeout),
                validate_only=validate_only,
            )

        await self._per_item(
            lambda: self._controller_request(protocol.CREATE_TOPICS, make, timeout + 5000),
            lambda response: [(t.name, t.error_code, getattr(t, "error_message", None)) for t in response.topics],
            wanted,
            "topic",
        )

    async def _per_item(
        self,
        send: Callable[[], Awaitable[Any]],
        results: Callable[[Any], list[tuple[str, int, str | None]]],
        wanted: dict[str, Any],
        what: str,
    ) -> None:
        """Send a request about many named items; retry the items that failed retriably."""

        async def attempt() -> None:
            response = await send()
            failures = []
            for name, code, message in results(response):
                if code == 0:
                    wanted.pop(name, None)
                else:
                    failures.append(error_for(code, message, **{what: name}))
            for error in failures:
                if not error.retriable:
                    raise error
            if failures:
                raise failures[0]

        await self._retrying(attempt)

    async def delete_topics(self, topics: str | Iterable[str], *, timeout_ms: int | None = None) -> None:
        """Delete topics; raises `UnknownTopicOrPartitionError` for a topic that does not exist."""
        deleted = [topics] if isinstance(topics, str) else list(topics)
        wanted = {name: name for name in deleted}
        timeout = self.request_timeout_ms if timeout_ms is None else timeout_ms

        def make(version: int) -> Any:
            cls = protocol.request_class(protocol.DELETE_TOPICS, version)
            if protocol.has_field(cls, "topics"):
                state_cls = protocol.nested(cls, "DeleteTopicState")
                return protocol.build(
                    cls, topics=tuple(state_cls(name=n, topic_id=_ZERO_UUID) for n in wanted), timeout=protocol.ms(timeout)
                )
            return protocol.build(cls, topic_names=tuple(wanted), timeout=protocol.ms(timeout))

        await self._per_item(
            lambda: self._controller_request(protocol.DELETE_TOPICS, make, timeout + 5000),
            lambda response: [(r.name, r.error_code, getattr(r, "error_message", None)) for r in response.responses],
            wanted,
            "topic",
        )
        for name in deleted:
            self._cluster.metadata.topics.pop(name, None)

    async def list_topics(self, *, include_internal: bool = False) -> list[str]:
        """The names of every topic, sorted."""
        descriptions = await self.describe_topics(None)
        return sorted(name for name, d in descriptions.items() if include_internal or not d.is_internal)

    async def describe_topics(self, topics: str | Iterable[str] | None = None) -> dict[str, TopicDescription]:
        """Partitions, leaders and topic ids of `topics` (None: every topic).

        Raises `UnknownTopicOrPartitionError` for a named topic that does not exist.
        """
        names = None if topics is None else ([topics] if isinstance(topics, str) else list(topics))

        async def attempt() -> dict[str, TopicDescription]:
            response = await self._cluster.fetch_metadata(names)
            found = {}
            for topic in response.topics:
                if topic.error_code:
                    raise error_for(topic.error_code, None, topic=topic.name)
                topic_id = getattr(topic, "topic_id", None)
                found[topic.name] = TopicDescription(
                    name=topic.name,
                    topic_id=None if topic_id is None or topic_id.int == 0 else topic_id,
                    is_internal=topic.is_internal,
                    partitions=tuple(
                        sorted(
                            (
                                PartitionDescription(
                                    p.partition_index,
                                    p.leader_id,
                                    getattr(p, "leader_epoch", -1),
                                    tuple(p.replica_nodes),
                                    tuple(p.isr_nodes),
                                    int(p.error_code),
                                )
                                for p in topic.partitions
                            ),
                            key=lambda p: p.partition,
                        )
                    ),
                )
            for name in names or ():
                if name not in found:
                    raise UnknownTopicOrPartitionError(None, topic=name)
            return found

        return await self._retrying(attempt)

    async def create_partitions(
        self, topic: str, total_count: int, *, validate_only: bool = False, timeout_ms: int | None = None
    ) -> None:
        """Grow `topic` to `total_count` partitions (Kafka never shrinks a topic)."""
        timeout = self.request_timeout_ms if timeout_ms is None else timeout_ms

        def make(version: int) -> Any:
            cls = protocol.request_class(protocol.CREATE_PARTITIONS, version)
            topic_cls = protocol.nested(cls, "CreatePartitionsTopic")
            return protocol.build(
                cls,
                topics=(topic_cls(name=topic, count=total_count, assignments=None),),
                timeout=protocol.ms(timeout),
                validate_only=validate_only,
            )

        await self._per_item(
            lambda: self._controller_request(protocol.CREATE_PARTITIONS, make, timeout + 5000),
            lambda response: [(r.name, r.error_code, r.error_message) for r in response.results],
            {topic: topic},
            "topic",
        )

    # --- configs ---------------------------------------------------------------------------

    async def describe_configs(
        self, name: str, keys: Iterable[str] | None = None, *, resource_type: int = RESOURCE_TOPIC
    ) -> dict[str, ConfigEntry]:
        """The configs of topic `name` (or of broker `name` with RESOURCE_BROKER), by config name."""
        wanted = None if keys is None else tuple(keys)

        def make(version: int) -> Any:
            cls = protocol.request_class(protocol.DESCRIBE_CONFIGS, version)
            resource_cls = protocol.nested(cls, "DescribeConfigsResource")
            return protocol.build(
                cls,
                resources=(resource_cls(resource_type=resource_type, resource_name=name, configuration_keys=wanted),),
                include_synonyms=False,
                include_documentation=False,
            )

        async def attempt() -> dict[str, ConfigEntry]:
            response = await self._config_request(protocol.DESCRIBE_CONFIGS, make, name, resource_type)
            result = response.results[0]
            if result.error_code:
                raise error_for(result.error_code, result.error_message, resource=name)
            return {
                c.name: ConfigEntry(
                    c.name, c.value, c.read_only, c.config_source == CONFIG_SOURCE_DEFAULT, c.is_sensitive, c.config_source
                )
                for c in result.configs
            }

        return await self._retrying(attempt)

    async def alter_configs(
        self,
        name: str,
        configs: Mapping[str, str | None],
        *,
        validate_only: bool = False,
        resource_type: int = RESOURCE_TOPIC,
    ) -> None:
        """Change configs incrementally: a value sets it, None reverts it to its default.

        Configs not named keep their values (IncrementalAlterConfigs, KIP-339).
        """

        def make(version: int) -> Any:
            cls = protocol.request_class(protocol.INCREMENTAL_ALTER_CONFIGS, version)
            resource_cls = protocol.nested(cls, "AlterConfigsResource")
            config_cls = protocol.nested(cls, "AlterableConfig")
            return protocol.build(
                cls,
                resources=(
                    resource_cls(
                        resource_type=resource_type,
                        resource_name=name,
                        configs=tuple(
                            config_cls(name=k, config_operation=_OP_DELETE if v is None else _OP_SET, value=v)
                            for k, v in configs.items()
                        ),
                    ),
                ),
                validate_only=validate_only,
            )

        async def attempt() -> None:
            response = await self._config_request(protocol.INCREMENTAL_ALTER_CONFIGS, make, name, resource_type)
            result = response.responses[0]
            if result.error_code:
                raise error_for(result.error_code, result.error_message, resource=name)

        await self._retrying(attempt)

    async def _config_request(self, api_key: int, make: Callable[[int], Any], name: str, resource_type: int) -> Any:
        if resource_type == RESOURCE_BROKER and name.lstrip("-").isdigit():
            return await self._cluster.request_node(int(name), api_key, make)
        return await self._cluster.request_any(api_key, make)

    # --- offsets and records ---------------------------------------------------------------

    async def _partitions(self, topic: str, partitions: Iterable[int] | None) -> list[int]:
        await self._cluster.fetch_metadata([topic])  # fresh: partitions may have been added
        count = self._cluster.metadata.partition_count(topic)
        if count is None:
            code = self._cluster.metadata.topic_errors.get(topic, UnknownTopicOrPartitionError.errno)
            raise error_for(code, None, topic=topic)
        return list(range(count)) if partitions is None else list(partitions)

    async def _by_leader(
        self,
        topic: str,
        partitions: list[int],
        api_key: int,
        make: Callable[[int, list[int]], Any],
        read: Callable[[Any], list[tuple[int, int, T]]],
    ) -> dict[int, T]:
        """Send one request per leader for `partitions` of `topic`; merge the per-partition answers."""
        results: dict[int, T] = {}

        async def attempt() -> dict[int, T]:
            remaining = [p for p in partitions if p not in results]
            meta = self._cluster.metadata
            if any(meta.leader(topic, p) == NO_LEADER for p in remaining):
                await self._cluster.fetch_metadata([topic])
            groups: dict[int, list[int]] = defaultdict(list)
            for p in remaining:
                leader = meta.leader(topic, p)
                if leader == NO_LEADER:
                    if meta.partition_count(topic) is not None and p >= meta.partition_count(topic):  # type: ignore[operator]
                        raise UnknownTopicOrPartitionError(None, topic=topic, partition=p)
                    raise error_for(meta.topic_errors.get(topic, 5), None, topic=topic, partition=p)
                groups[leader].append(p)
            responses = await asyncio.gather(
                *(self._cluster.request_node(node, api_key, lambda v, ps=ps: make(v, ps)) for node, ps in groups.items())
            )
            errors = []
            for response in responses:
                for partition, code, value in read(response):
                    if code:
                        errors.append(error_for(code, None, topic=topic, partition=partition))
                    else:
                        results[partition] = value
            errors.sort(key=lambda e: e.retriable)
            if errors:
                raise errors[0]
            return results

        return await self._retrying(attempt)

    async def list_offsets(
        self, topic: str, spec: str | int = "latest", partitions: Iterable[int] | None = None
    ) -> dict[int, OffsetAndTimestamp | None]:
        """Per partition: the "earliest" or "latest" offset, or the first offset at or after a
        timestamp in ms (None when no record is that recent)."""
        timestamp = _SPECS[spec] if isinstance(spec, str) else spec
        wanted = await self._partitions(topic, partitions)

        def make(version: int, ps: list[int]) -> Any:
            cls = protocol.request_class(protocol.LIST_OFFSETS, version)
            topic_cls = protocol.nested(cls, "ListOffsetsTopic")
            partition_cls = protocol.nested(cls, "ListOffsetsPartition")
            return protocol.build(
                cls,
                replica_id=-1,
                isolation_level=0,
                topics=(
                    topic_cls(
                        name=topic,
                        partitions=tuple(
                            protocol.build(partition_cls, partition_index=p, current_leader_epoch=-1, timestamp=timestamp)
                            for p in ps
                        ),
                    ),
                ),
            )

        def read(response: Any) -> list[tuple[int, int, OffsetAndTimestamp | None]]:
            out = []
            for t in response.topics:
                for p in t.partitions:
                    found = None if p.offset < 0 else OffsetAndTimestamp(p.offset, p.timestamp, getattr(p, "leader_epoch", -1))
                    out.append((p.partition_index, p.error_code, found))
            return out

        return await self._by_leader(topic, wanted, protocol.LIST_OFFSETS, make, read)

    async def delete_records(self, topic: str, before_offsets: Mapping[int, int]) -> dict[int, int]:
        """Delete the records of each partition below its offset (-1: the high watermark).

        Returns each partition's new log start offset (its low watermark).
        """

        def make(version: int, ps: list[int]) -> Any:
            cls = protocol.request_class(protocol.DELETE_RECORDS, version)
            topic_cls = protocol.nested(cls, "DeleteRecordsTopic")
            partition_cls = protocol.nested(cls, "DeleteRecordsPartition")
            return cls(
                topics=(
                    topic_cls(name=topic, partitions=tuple(partition_cls(partition_index=p, offset=before_offsets[p]) for p in ps)),
                ),
                timeout=protocol.ms(self.request_timeout_ms),
            )

        def read(response: Any) -> list[tuple[int, int, int]]:
            return [(p.partition_index, p.error_code, p.low_watermark) for t in response.topics for p in t.partitions]

        await self._partitions(topic, None)
        return await self._by_leader(topic, list(before_offsets), protocol.DELETE_RECORDS, make, read)

    # --- consumer groups -------------------------------------------------------------------

    async def _group_request(self, group_id: str, api_key: int, make: Callable[[int], Any]) -> Any:
        node = await self._cluster.coordinator(group_id)
        try:
            return await self._cluster.request_node(node, api_key, make)
        except KafkaError:
            self._cluster.forget_coordinator(group_id)
            raise

    def _check_group_error(self, group_id: str, code: int, message: str | None = None) -> None:
        if code:
            if code in (14, 15, 16):  # loading, not available, not coordinator: ask again
                self._cluster.forget_coordinator(group_id)
            raise error_for(code, message, group=group_id)

    async def list_groups(self) -> list[GroupListing]:
        """Every group on every broker, sorted by id."""

        async def attempt() -> list[GroupListing]:
            await self._cluster.fetch_metadata(())
            nodes = list(self._cluster.metadata.brokers)

            def make(version: int) -> Any:
                return protocol.build(protocol.request_class(protocol.LIST_GROUPS, version), states_filter=())

            responses = await asyncio.gather(*(self._cluster.request_node(n, protocol.LIST_GROUPS, make) for n in nodes))
            groups = []
            for response in responses:
                if response.error_code:
                    raise error_for(response.error_code)
                groups += [GroupListing(g.group_id, g.protocol_type, getattr(g, "group_state", None)) for g in response.groups]
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
            cls = protocol.request_class(protocol.OFFSET_FETCH, version)
            topic_cls = protocol.nested(cls, "OffsetFetchRequestTopic")
            topics = None
            if wanted is not None:
                by_topic: dict[str, list[int]] = defaultdict(list)
                for tp in wanted:
                    by_topic[tp.topic].append(tp.partition)
                topics = tuple(topic_cls(name=t, partition_indexes=tuple(ps)) for t, ps in by_topic.items())
            return protocol.build(cls, group_id=group_id, topics=topics, require_stable=False)

        async def attempt() -> dict[TopicPartition, OffsetAndMetadata]:
            response = await self._group_request(group_id, protocol.OFFSET_FETCH, make)
            self._check_group_error(group_id, getattr(response, "error_code", 0))
            found = {}
            for t in response.topics:
                for p in t.partitions:
                    if p.error_code:
                        raise error_for(p.error_code, None, group=group_id, topic=t.name, partition=p.partition_index)
                    if p.committed_offset >= 0:
                        found[TopicPartition(t.name, p.partition_index)] = OffsetAndMetadata(
                            p.committed_offset, p.metadata or "", getattr(p, "committed_leader_epoch", -1)
                        )
            return found

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

    # --- brokers ---------------------------------------------------------------------------

    @property
    def brokers(self) -> tuple[BrokerInfo, ...]:
        return tuple(self._cluster.metadata.brokers.values())


