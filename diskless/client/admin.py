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

SCRAM users and ACLs (admin_security.py), transactions (admin_transactions.py) and client
quotas (admin_quotas.py) are mixins of this class, sent to any broker.

Used from one event loop; methods may run concurrently.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

from . import protocol
from .cluster import NO_LEADER, Cluster
from .admin_groups import GroupAdmin
from .admin_quotas import QuotaAdmin
from .admin_security import SecurityAdmin
from .admin_transactions import TransactionAdmin
from .security import ClientSecurity
from .errors import (
    ClientClosedError,
    KafkaError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
    error_for,
)
from .retry import retrying
from .structs import (
    BrokerInfo,
    ClusterDescription,
    ConfigEntry,
    NewTopic,
    OffsetAndTimestamp,
    PartitionDescription,
    TopicDescription,
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
_TOPIC_ANSWERS = frozenset({UnknownTopicOrPartitionError.errno})  # final answers about a named topic
_SPECS = {"earliest": EARLIEST, "latest": LATEST, "max_timestamp": MAX_TIMESTAMP}


class Admin(GroupAdmin, SecurityAdmin, TransactionAdmin, QuotaAdmin):
    def __init__(
        self,
        bootstrap_servers: str = "127.0.0.1:9092",
        *,
        security: ClientSecurity | None = None,
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
            security=security,
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

    async def _retrying(self, attempt: Callable[[], Awaitable[T]], final: frozenset[int] = frozenset()) -> T:
        """Run `attempt` until it succeeds, fails for good, or the API timeout passes.

        Error codes in `final` are not retried even if Kafka calls them retriable (a topic that
        does not exist, asked about by name, is an answer, not a transient state).
        """
        self._check_open()
        if not self._started:
            await self.start()
        def retriable(exc: KafkaError) -> bool:
            return exc.retriable and getattr(exc, "errno", None) not in final and not self._closed

        async def on_retry(exc: KafkaError) -> None:
            if exc.invalid_metadata:
                try:
                    await self._cluster.refresh()
                except KafkaError:
                    pass

        return await retrying(
            attempt,
            retry_backoff_ms=self.retry_backoff_ms,
            timeout_ms=self.default_api_timeout_ms,
            retriable=retriable,
            on_retry=on_retry,
        )

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
    ) -> dict[str, int]:
        """Create topics: one name (with `num_partitions` and `configs`), or several `NewTopic`s.
        A `num_partitions` of -1 takes the broker's num.partitions, as Kafka's NewTopic without
        a count: that needs CreateTopics v4, and an older broker raises `UnsupportedVersionError`
        (`replication_factor` -1, the default, takes its default.replication.factor).

        Returns each topic's partition count as the controller answered it (CreateTopics v5
        and later; before, the count asked for, -1 where that was the broker's default).
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
        asked = dict(wanted)
        created: dict[str, int] = {}
        timeout = self.request_timeout_ms if timeout_ms is None else timeout_ms

        def make(version: int) -> Any:
            if version < 4 and any(t.num_partitions == -1 for t in wanted.values()):
                # Kafka's Admin refuses it the same way: before v4, -1 is only for manual assignments.
                raise UnsupportedVersionError(f"the broker's default partition count (num_partitions -1) needs CreateTopics v4 "
                                              f"or later; the broker speaks up to v{version}: give the number of partitions")
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

        def results(response: Any) -> list[tuple[str, int, str | None]]:
            for t in response.topics:
                if not t.error_code:
                    created[t.name] = getattr(t, "num_partitions", asked[t.name].num_partitions if t.name in asked else -1)
            return [(t.name, t.error_code, getattr(t, "error_message", None)) for t in response.topics]

        await self._per_item(lambda: self._controller_request(protocol.CREATE_TOPICS, make, timeout + 5000), results, wanted, "topic")
        return created

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

        await self._retrying(attempt, _TOPIC_ANSWERS)

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

        return await self._retrying(attempt, _TOPIC_ANSWERS)

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

    # --- brokers ---------------------------------------------------------------------------

    @property
    def brokers(self) -> tuple[BrokerInfo, ...]:
        return tuple(self._cluster.metadata.brokers.values())


