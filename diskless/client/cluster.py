"""What the client knows about the cluster (brokers, topics, leaders) and its connections.

`ClusterMetadata` is the pure part: it takes Metadata responses in and answers "who leads
this partition" and "how many partitions has this topic". `Cluster` is the shell: it opens one
connection per broker (the bootstrap servers first, under negative node ids as the Java client
does), refreshes metadata when asked (coalescing concurrent asks into one request) and every
`metadata_max_age_ms` in the background, and finds group coordinators.

Used from one event loop; every method may be called by any task of that loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from . import protocol
from .connection import Connection
from .errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    NoBrokersAvailable,
    UnknownTopicOrPartitionError,
    error_for,
)
from .retry import retrying
from .security import ClientSecurity
from .structs import BrokerInfo

log = logging.getLogger(__name__)

NO_LEADER = -1


def parse_bootstrap_servers(bootstrap_servers: str) -> list[tuple[str, int]]:
    """'host:port,host2:port2' -> [(host, port), ...]; IPv6 hosts go in brackets."""
    servers = []
    for item in bootstrap_servers.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"bootstrap server {item!r} is not host:port")
        servers.append((host.strip("[]"), int(port)))
    if not servers:
        raise ValueError(f"no bootstrap servers in {bootstrap_servers!r}")
    return servers


# A coordinator's requests travel on a connection of their own, as the Java client's do (it
# connects to "node Integer.MAX_VALUE - id"): a broker answers a connection's requests in order,
# so a JoinGroup it holds until the whole group has rejoined would hold back every fetch queued
# behind it on a shared connection (up to a heartbeat interval at each rebalance).
COORDINATOR_CONNECTION = 2**31 - 1


def is_coordinator_connection(node_id: int) -> bool:
    return node_id > COORDINATOR_CONNECTION // 2


def now_ms() -> int:
    return int(time.monotonic() * 1000)


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error_code: int


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    topic_id: uuid.UUID | None
    is_internal: bool
    partitions: tuple[PartitionMetadata, ...]  # indexed by partition number


class ClusterMetadata:
    """The latest Metadata answers, merged. Pure; mutated only through `update`."""

    def __init__(self) -> None:
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicMetadata] = {}
        self.topic_errors: dict[str, int] = {}  # topics the last answer reported an error for
        self.cluster_id: str | None = None
        self.controller_id = NO_LEADER
        self.updated_ms = -1
        self._available: dict[str, tuple[int, ...]] = {}

    def update(self, response: Any, *, all_topics: bool, now: int) -> None:
        """Merge one Metadata response. With `all_topics`, topics it lacks are forgotten."""
        self.brokers = {b.node_id: BrokerInfo(b.node_id, b.host, b.port, getattr(b, "rack", None)) for b in response.brokers}
        self.cluster_id = getattr(response, "cluster_id", None)
        self.controller_id = getattr(response, "controller_id", NO_LEADER)
        if all_topics:
            self.topics = {}
            self.topic_errors = {}
        for topic in response.topics:
            name = topic.name
            if topic.error_code:
                self.topic_errors[name] = topic.error_code
                self.topics.pop(name, None)
                continue
            self.topic_errors.pop(name, None)
            partitions = sorted(
                (
                    PartitionMetadata(
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
            topic_id = getattr(topic, "topic_id", None)
            self.topics[name] = TopicMetadata(
                name, None if topic_id is None or topic_id.int == 0 else topic_id, topic.is_internal, tuple(partitions)
            )
        self.updated_ms = now
        self._available = {}

    def partition_count(self, topic: str) -> int | None:
        found = self.topics.get(topic)
        return None if found is None else len(found.partitions)

    def leader(self, topic: str, partition: int) -> int:
        """The leader's node id, or NO_LEADER when unknown."""
        found = self.topics.get(topic)
        if found is None or partition >= len(found.partitions):
            return NO_LEADER
        leader = found.partitions[partition].leader
        return leader if leader in self.brokers else NO_LEADER

    def leader_epoch(self, topic: str, partition: int) -> int:
        found = self.topics.get(topic)
        if found is None or partition >= len(found.partitions):
            return -1
        return found.partitions[partition].leader_epoch

    def available_partitions(self, topic: str) -> tuple[int, ...]:
        """Partitions of `topic` whose leader is known (cached until the next update)."""
        cached = self._available.get(topic)
        if cached is None:
            found = self.topics.get(topic)
            cached = () if found is None else tuple(p.partition for p in found.partitions if p.leader in self.brokers)
            self._available[topic] = cached
        return cached


class Cluster:
    """Connections to the brokers of one cluster and the metadata to route requests."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        client_id: str,
        request_timeout_ms: int = 30000,
        metadata_max_age_ms: int = 300000,
        retry_backoff_ms: int = 100,
        allow_auto_topic_creation: bool = False,
        security: ClientSecurity | None = None,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.security = security  # TLS and SASL for every connection (security.py); None: PLAINTEXT
        # Producers and consumers ask brokers with auto.create.topics.enable to create the
        # topics they name, as the Java clients do; Admin never does.
        self.allow_auto_topic_creation = allow_auto_topic_creation
        self._bootstrap = parse_bootstrap_servers(bootstrap_servers)
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.metadata = ClusterMetadata()
        self.topics_of_interest: set[str] = set()
        self.want_all_topics = False
        self._connections: dict[int, Connection] = {}
        self._connecting: dict[int, asyncio.Future[Connection]] = {}
        self._refreshing: asyncio.Future[None] | None = None
        self._refresh_topics: frozenset[str] | None = None
        self._refresh_wanted = asyncio.Event()
        self._coordinators: dict[tuple[int, str], int] = {}
        self._background: asyncio.Task[None] | None = None
        self._closed = False

    async def start(self) -> None:
        """Reach a bootstrap server and learn the brokers; start the background refresh."""
        await self.refresh()
        self._background = asyncio.create_task(self._refresh_loop(), name="metadata-refresh")

    async def close(self) -> None:
        self._closed = True
        if self._background is not None:
            self._background.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._background
        for future in self._connecting.values():
            future.cancel()
        for connection in list(self._connections.values()):
            connection.close("the client is closing")
        self._connections.clear()

    # --- connections -----------------------------------------------------------------------

    def _address(self, node_id: int) -> tuple[str, int]:
        if node_id < 0 and -node_id - 1 < len(self._bootstrap):
            return self._bootstrap[-node_id - 1]
        if is_coordinator_connection(node_id):
            node_id = COORDINATOR_CONNECTION - node_id
        broker = self.metadata.brokers.get(node_id)
        if broker is None:
            raise KafkaConnectionError("?", -1, f"node {node_id} is not in the cluster metadata")
        return broker.host, broker.port

    def connection_nowait(self, node_id: int) -> Connection | None:
        """The open connection to `node_id`, or None (then `connection()` opens one)."""
        connection = self._connections.get(node_id)
        if connection is not None and not connection.closed:
            return connection
        return self._alias(node_id)

    def _alias(self, node_id: int) -> Connection | None:
        """An open connection to the address of `node_id` (typically the bootstrap connection
        to that very broker), registered under `node_id` too: no second connection, and no
        second ApiVersions round trip. A coordinator's connection is never shared."""
        if is_coordinator_connection(node_id):
            return None
        try:
            address = self._address(node_id)
        except KafkaConnectionError:
            return None
        for existing in list(self._connections.values()):
            if not existing.closed and (existing.host, existing.port) == address and not is_coordinator_connection(existing.node_id):
                self._connections[node_id] = existing
                existing.on_close(lambda c, node=node_id: self._forget(node, c))
                return existing
        return None

    async def connection(self, node_id: int) -> Connection:
        """The open connection to `node_id`, connecting if needed."""
        connection = self.connection_nowait(node_id)
        if connection is not None:
            return connection
        pending = self._connecting.get(node_id)
        if pending is None:
            pending = asyncio.ensure_future(self._connect(node_id))
            self._connecting[node_id] = pending
            pending.add_done_callback(lambda _f, node=node_id: self._connecting.pop(node, None))
        return await asyncio.shield(pending)

    async def _connect(self, node_id: int) -> Connection:
        existing = self._alias(node_id)
        if existing is not None:
            return existing
        host, port = self._address(node_id)
        connection = await Connection.open(
            host, port, client_id=self.client_id, request_timeout_ms=self.request_timeout_ms, node_id=node_id, security=self.security
        )
        self._connections[node_id] = connection
        connection.on_close(lambda c, node=node_id: self._forget(node, c))
        return connection

    def _forget(self, node_id: int, connection: Connection) -> None:
        if self._connections.get(node_id) is connection:
            del self._connections[node_id]

    async def any_connection(self) -> Connection:
        """A connection to some broker: an open one with the fewest requests in flight, else a new one."""
        open_ = [c for c in self._connections.values() if not c.closed and not is_coordinator_connection(c.node_id)]
        if open_:
            return min(open_, key=lambda c: c.in_flight)
        candidates = list(self.metadata.brokers) or []
        random.shuffle(candidates)
        candidates += [-index - 1 for index in range(len(self._bootstrap))]
        errors = []
        for node_id in candidates:
            try:
                return await self.connection(node_id)
            except KafkaConnectionError as exc:
                errors.append(str(exc))
        raise NoBrokersAvailable(self.bootstrap_servers, "; ".join(errors) or "no brokers known")

    async def request_any(self, api_key: int, make: Any, *, timeout_ms: int | None = None) -> Any:
        """Send `make(version)` to any broker; for requests that need no particular node."""
        connection = await self.any_connection()
        return await connection.request(make(connection.version(api_key)), timeout_ms=timeout_ms)

    async def request_node(self, node_id: int, api_key: int, make: Any, *, timeout_ms: int | None = None) -> Any:
        connection = await self.connection(node_id)
        return await connection.request(make(connection.version(api_key)), timeout_ms=timeout_ms)

    async def request_coordinator(self, node_id: int, api_key: int, make: Any, *, timeout_ms: int | None = None) -> Any:
        """Send to the coordinator on broker `node_id`, on its own connection (COORDINATOR_CONNECTION)."""
        return await self.request_node(COORDINATOR_CONNECTION - node_id, api_key, make, timeout_ms=timeout_ms)

    # --- metadata --------------------------------------------------------------------------

    def add_topics(self, topics: Iterable[str]) -> bool:
        """Track `topics` from now on; True if any was new (the caller may want a refresh)."""
        before = len(self.topics_of_interest)
        self.topics_of_interest.update(topics)
        return len(self.topics_of_interest) != before

    def request_refresh(self) -> None:
        """Ask the background task for a refresh soon (after retry_backoff_ms)."""
        self._refresh_wanted.set()

    async def refresh(self, topics: Iterable[str] | None = None, *, all_topics: bool | None = None) -> None:
        """Refresh metadata for the topics of interest plus `topics` (or for every topic).

        Calls made while a refresh that covers their topics is in flight share its answer.
        """
        everything = self.want_all_topics if all_topics is None else all_topics
        wanted = None if everything else frozenset(self.topics_of_interest.union(topics or ()))
        while True:
            current = self._refreshing
            if current is None:
                break
            covered = self._refresh_topics is None or (wanted is not None and wanted <= self._refresh_topics)
            await asyncio.shield(current)
            if covered:
                return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._refreshing, self._refresh_topics = future, wanted
        try:
            await self.fetch_metadata(wanted)
        except BaseException as exc:
            future.set_exception(exc if isinstance(exc, Exception) else KafkaError("metadata refresh cancelled"))
            future.exception()  # retrieved: the waiters see it through shield
            raise
        else:
            future.set_result(None)
        finally:
            self._refreshing = None
            self._refresh_topics = None

    async def fetch_metadata(self, topics: Iterable[str] | None) -> Any:
        """Send one Metadata request (None: every topic), merge the answer and return it."""
        topics = None if topics is None else frozenset(topics)

        def make(version: int) -> Any:
            cls = protocol.request_class(protocol.METADATA, version)
            topic_cls = protocol.nested(cls, "MetadataRequestTopic")
            listed = None if topics is None else tuple(protocol.build(topic_cls, name=t, topic_id=None) for t in sorted(topics))
            return protocol.build(
                cls,
                topics=listed,
                allow_auto_topic_creation=self.allow_auto_topic_creation and not self.want_all_topics,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )

        response = await self.request_any(protocol.METADATA, make)
        self.metadata.update(response, all_topics=topics is None, now=now_ms())
        return response

    async def wait_for_topic(self, topic: str, timeout_ms: int) -> int:
        """The partition count of `topic`, refreshing metadata until it is known or time runs out."""
        count = self.metadata.partition_count(topic)
        if count is not None:
            return count
        self.add_topics([topic])
        deadline = time.monotonic() + timeout_ms / 1000

        async def attempt() -> int:
            try:
                await asyncio.wait_for(self.refresh([topic]), max(deadline - time.monotonic(), 0.001))
            except (KafkaError, asyncio.TimeoutError):
                pass
            count = self.metadata.partition_count(topic)
            if count is None:
                raise UnknownTopicOrPartitionError(f"topic {topic!r} is not in the cluster metadata yet")
            return count

        def timed_out(_exc: KafkaError) -> KafkaTimeoutError:
            error = self.metadata.topic_errors.get(topic)
            why = f" (last error {error_for(error).name})" if error else ""
            return KafkaTimeoutError(f"finding topic {topic!r} in the cluster metadata{why}", timeout_ms)

        return await retrying(
            attempt, retry_backoff_ms=self.retry_backoff_ms, deadline=deadline, on_deadline=timed_out
        )

    async def _refresh_loop(self) -> None:
        while not self._closed:
            age_ms = now_ms() - self.metadata.updated_ms
            wait_s = max(self.metadata_max_age_ms - age_ms, 0) / 1000
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._refresh_wanted.wait(), wait_s)
            self._refresh_wanted.clear()
            try:
                await self.refresh()
            except KafkaError as exc:
                log.warning("metadata refresh failed: %s", exc)
            await asyncio.sleep(self.retry_backoff_ms / 1000)

    # --- coordinators ----------------------------------------------------------------------

    async def coordinator(self, key: str, key_type: int = 0) -> int:
        """The node id of the coordinator of group `key` (key_type 0) or transaction (1)."""
        cached = self._coordinators.get((key_type, key))
        if cached is not None:
            return cached

        def make(version: int) -> Any:
            return protocol.build(protocol.request_class(protocol.FIND_COORDINATOR, version), key=key, key_type=key_type)

        response = await self.request_any(protocol.FIND_COORDINATOR, make)
        if response.error_code:
            raise error_for(response.error_code, getattr(response, "error_message", None), group=key)
        node_id = response.node_id
        if node_id not in self.metadata.brokers or self.metadata.brokers[node_id].host != response.host:
            self.metadata.brokers[node_id] = BrokerInfo(node_id, response.host, response.port)
        self._coordinators[(key_type, key)] = node_id
        return node_id

    def forget_coordinator(self, key: str, key_type: int = 0) -> None:
        self._coordinators.pop((key_type, key), None)
