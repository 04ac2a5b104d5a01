"""What request handlers may ask of the broker: the narrow interface they are written against.

Handlers never see the `Broker` class that composes the parts (app.py imports the handlers,
so the arrow may only point this way). They ask for a partition's leader and talk to it, ask
the topic registry for topics and topic changes, and the group shell for groups. Everything
here is a Protocol: app.py's objects satisfy them structurally, tests may pass fakes.

Only the event-loop task calls these.
"""

from __future__ import annotations

import contextvars
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from metadata import PartitionLeadership, TopicMetadata

from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from .cluster.membership import ClusterView
    from .fetch_sessions import FetchSessionCache
    from .groups import Groups
    from .partition import PartitionLeader
    from .quotas.client_quotas import ClientQuotas
    from .quotas.configs import QuotaConfigs
    from .refused_batches import RefusedBatches
    from .replica_reads import BucketReplica
    from .tiering.fetch_quota import RemoteFetchQuota
    from .security.shell import BrokerSecurity
    from .txn.inter_broker import InterBrokerClient
    from .txn.transactions import Transactions


# The peer's host ("/127.0.0.1"), for handlers that report it (JoinGroup's client_host); the
# TCP shell sets it in each connection's task.
PEER_HOST: contextvars.ContextVar[str] = contextvars.ContextVar("peer_host", default="")


@dataclass(frozen=True, slots=True)
class RequestSettings:
    """The few broker settings handlers decide with (Kafka's names in the comments)."""

    node_id: int  # node.id
    auto_create_topics_enable: bool  # auto.create.topics.enable
    num_partitions: int  # num.partitions
    default_replication_factor: int  # default.replication.factor
    topic_defaults: Mapping[str, str]  # broker-wide defaults of topic configs
    broker_configs: Mapping[str, str]  # the static broker configs DescribeConfigs reports, Kafka's names
    log_dir: str  # where partitions' local logs are (Kafka's log.dirs: one here), absolute


class TopicRegistry(Protocol):
    """The topics of the cluster and the partitions this broker leads."""

    @property
    def topics(self) -> Mapping[str, TopicMetadata]: ...

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None: ...

    def leader(self, topic: str, index: int) -> PartitionLeader | None:
        """The partition's leader object on this broker, or None if this broker does not lead it."""
        ...

    def leaders(self) -> list[PartitionLeader]:
        """Every partition this broker leads."""
        ...

    async def find_topic(self, name: str) -> TopicMetadata | None:
        """The topic, from the store if this broker has not heard of it yet."""
        ...

    async def find_topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        """The topic of this id, from the store if this broker has not heard of it yet."""
        ...

    async def until_open(self, keys: Iterable[tuple[str, int]], timeout_s: float) -> None:
        """Hold a request while any of these partitions is being opened here (returns at once,
        without yielding, when none is)."""
        ...

    def has_partition(self, topic: str, index: int) -> bool:
        """Whether the partition exists in the cluster, led here or not."""
        ...

    def offline(self, topic: str, index: int) -> bool:
        """Whether this broker leads the partition but could not open it."""
        ...

    def leadership(self, topic: str, index: int) -> tuple[int | None, int]:
        """(leader node id or None, leader epoch) as last read from the store."""
        ...

    async def create_topic(self, name: str, num_partitions: int, configs: Mapping[str, str], preferred: Sequence[int] | None = None) -> TopicMetadata:
        """`preferred`: the broker each partition is assigned to (CreateTopics' assignments)."""
        ...

    async def auto_create_topic(self, name: str) -> TopicMetadata | None:
        """auto.create.topics.enable: create `name` with the defaults; None if that failed."""
        ...

    async def delete_topic(self, name: str) -> TopicMetadata: ...

    async def create_partitions(self, name: str, count: int, preferred: Sequence[int] | None = None) -> TopicMetadata:
        """`preferred`: the broker each new partition is assigned to (CreatePartitions' assignments)."""
        ...

    def check_partition_limits(self, name: str, current: int | None, requested: int) -> None:
        """Raise PartitionPolicyViolation if growing `name` from `current` (None: a new topic)
        to `requested` partitions passes max.partitions.per.request or max.partitions."""
        ...

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> TopicMetadata: ...


def absent(broker: BrokerApi, topic: str, partition: int) -> ErrorCode:
    """The error for a partition this broker does not serve: it leads it but cannot open it
    (KAFKA_STORAGE_ERROR, as for a failed log directory), another broker leads it
    (NOT_LEADER_OR_FOLLOWER: the client refreshes its metadata), or it does not exist."""
    if broker.registry.offline(topic, partition):
        return ErrorCode.kafka_storage_error
    if broker.registry.has_partition(topic, partition):
        return ErrorCode.not_leader_or_follower
    return ErrorCode.unknown_topic_or_partition


class BrokerApi(Protocol):
    """Everything a handler may reach."""

    settings: RequestSettings
    cluster_id: str
    clock: Callable[[], int]
    registry: TopicRegistry
    groups: Groups
    transactions: Transactions  # the transaction coordinator's shell (txn/transactions.py)
    security: BrokerSecurity  # authentication state and ACL decisions (security/shell.py)
    inter_broker: InterBrokerClient  # requests to other brokers, on their inter-broker listener (txn/inter_broker.py)
    replica_reads: BucketReplica | None  # reads of partitions led elsewhere (KIP-392), when replica.selector.class is set
    remote_fetch_quota: RemoteFetchQuota  # bytes fetches read from the bucket (KIP-956, tiering/fetch_quota.py)
    refused_batches: RefusedBatches  # idempotent batches refused with a retriable error, lately (refused_batches.py)
    client_quotas: ClientQuotas  # the quotas clients are measured against (quotas/client_quotas.py)
    fetch_sessions: FetchSessionCache  # incremental fetch sessions (KIP-227, fetch_sessions.py)
    quota_configs: QuotaConfigs  # the configured client quotas, in the store (quotas/configs.py)

    @property
    def cluster(self) -> ClusterView:
        """Live brokers and the controller, as last read from the store."""
        ...

    @property
    def advertised_address(self) -> tuple[str, int]: ...

    async def allocate_producer_id(self) -> int: ...

    async def elect_leaders(self, election_type: int, partitions: list[tuple[str, int]] | None) -> dict[tuple[str, int], str]:
        """ElectLeaders: per partition (None: every one), NONE or the Kafka error's name."""
        ...

    async def reassign_partitions(self, asked: dict[tuple[str, int], list[int] | None]) -> dict[tuple[str, int], tuple[str, str | None]]:
        """AlterPartitionReassignments: per partition (replicas, None to cancel), the Kafka
        error's name and message (NONE, None when accepted)."""
        ...

    async def ongoing_reassignments(self) -> list[PartitionLeadership]:
        """ListPartitionReassignments: partitions not (yet) led by the broker they were given to."""
        ...
