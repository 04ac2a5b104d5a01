"""ApiVersions, Metadata, DescribeCluster and ElectLeaders."""

from __future__ import annotations

import re
from typing import Any

from kio.schema.errors import ErrorCode

from diskless.wire import SUPPORTED, Request, advertised_range
from metadata.errors import InvalidTopicName
from metadata.model import validate_topic_name

from ..api import BrokerApi
from ..responses import NO_THROTTLE, make, response_module
from ..cluster.controller import PREFERRED, UNCLEAN
from ..security.authorizer import ALTER, CLUSTER, DESCRIBE, TOPIC
from ..security.session import SESSION
from ..security.shell import ALL_OPERATIONS_UNKNOWN

# Kafka's pattern for ApiVersions' client_software_name and client_software_version (KIP-511).
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


async def handle_api_versions(broker: BrokerApi, request: Request) -> Any:
    version = request.header.api_version
    if request.body is None:
        # An unknown version: answer as v0 with UNSUPPORTED_VERSION and our ranges, as Kafka
        # does, so the client retries with a version it and we both know.
        version = 0
        error = ErrorCode.unsupported_version
    elif version >= 3 and not (_SOFTWARE.fullmatch(request.body.client_software_name) and _SOFTWARE.fullmatch(request.body.client_software_version)):
        # As Kafka (ApiVersionsRequest.isValid): the client names itself in these characters.
        return make(response_module(18, version).ApiVersionsResponse, error_code=ErrorCode.invalid_request, api_keys=(), throttle_time=NO_THROTTLE)
    else:
        error = ErrorCode.none
    mod = response_module(18, version)
    api_keys = tuple(
        mod.ApiVersion(api_key=key, min_version=low, max_version=high)
        for key in sorted(SUPPORTED)
        for low, high in [advertised_range(key)]
    )
    return make(mod.ApiVersionsResponse, error_code=error, api_keys=api_keys, throttle_time=NO_THROTTLE)


async def handle_metadata(broker: BrokerApi, request: Request) -> Any:
    version = request.header.api_version
    body = request.body
    mod = response_module(3, version)
    registry = broker.registry
    security = broker.security
    if body.topics is None or (version == 0 and not body.topics):
        # As Kafka: a request for every topic lists only those the principal may DESCRIBE.
        names = [name for name in sorted(registry.topics) if security.allowed(DESCRIBE, TOPIC, name)]
        requested: list[tuple[str | None, Any]] = [(name, None) for name in names]
    else:
        requested = [(t.name, getattr(t, "topic_id", None)) for t in body.topics]
    auto_create = broker.settings.auto_create_topics_enable and getattr(body, "allow_auto_topic_creation", True)
    topics = []
    for name, topic_id in requested:
        topic = None
        if name is not None and _legal(name) and not security.allowed(DESCRIBE, TOPIC, name):
            topics.append(make(mod.MetadataResponseTopic, error_code=ErrorCode.topic_authorization_failed, name=name,
                               topic_id=topic_id, is_internal=False, partitions=()))  # fmt: skip
            continue
        if name is not None:
            topic = await registry.find_topic(name) if _legal(name) else None
            if topic is None and auto_create and security.may_create_topic(name):
                topic = await registry.auto_create_topic(name)
        elif topic_id is not None:
            topic = registry.topic_by_id(topic_id)
        if topic is None:
            error = ErrorCode.unknown_topic_or_partition if name is not None else ErrorCode.unknown_topic_id
            if name is not None and not _legal(name):
                error = ErrorCode.invalid_topic_exception
            # Before v12 a response topic's name cannot be null: an unknown topic id gets "".
            shown = name if name is not None or version >= 12 else ""
            topics.append(
                make(mod.MetadataResponseTopic, error_code=error, name=shown, topic_id=topic_id, is_internal=False, partitions=())
            )
            continue
        topic_partitions = tuple(_partition(broker, mod, topic.name, index) for index in range(topic.num_partitions))
        topics.append(
            make(
                mod.MetadataResponseTopic,
                error_code=ErrorCode.none,
                name=topic.name,
                topic_id=topic.topic_id,
                is_internal=False,
                partitions=topic_partitions,
                topic_authorized_operations=security.authorized_operations(TOPIC, topic.name)
                if getattr(body, "include_topic_authorized_operations", False) else ALL_OPERATIONS_UNKNOWN,
            )
        )
    return make(
        mod.MetadataResponse,
        throttle_time=NO_THROTTLE,
        brokers=tuple(make(mod.MetadataResponseBroker, node_id=n, host=h, port=p, rack=r) for n, h, p, r in _brokers(broker, departed=True)),
        cluster_id=broker.cluster_id,
        controller_id=_controller(broker),
        topics=tuple(topics),
        cluster_authorized_operations=security.authorized_operations(CLUSTER)
        if getattr(body, "include_cluster_authorized_operations", False) else ALL_OPERATIONS_UNKNOWN,
    )


def _partition(broker: BrokerApi, mod: Any, topic: str, index: int) -> Any:
    """One partition as Kafka shows a single-replica one: the leader alone is replica and ISR."""
    leader_id, epoch = broker.registry.leadership(topic, index)
    if broker.registry.offline(topic, index):  # led here, its log unreadable: Kafka's offline partition
        me = broker.settings.node_id
        return make(
            mod.MetadataResponsePartition, error_code=ErrorCode.kafka_storage_error, partition_index=index, leader_id=me,
            leader_epoch=epoch, replica_nodes=(me,), isr_nodes=(me,), offline_replicas=(me,),
        )  # fmt: skip
    leader = broker.cluster.brokers.get(leader_id) if leader_id is not None and leader_id != broker.settings.node_id else None
    if leader_id is None or (leader_id != broker.settings.node_id and leader is None):
        # No live leader yet (the controller is moving it): clients retry after a refresh.
        return make(
            mod.MetadataResponsePartition, error_code=ErrorCode.leader_not_available, partition_index=index, leader_id=-1,
            leader_epoch=epoch, replica_nodes=(), isr_nodes=(), offline_replicas=(),
        )  # fmt: skip
    if leader is not None and leader.endpoint(SESSION.get().listener.name) is None:
        # As Kafka: the leader has no listener of the name this client came in on.
        return make(
            mod.MetadataResponsePartition, error_code=ErrorCode.listener_not_found, partition_index=index, leader_id=-1,
            leader_epoch=epoch, replica_nodes=(), isr_nodes=(), offline_replicas=(),
        )  # fmt: skip
    return make(
        mod.MetadataResponsePartition, error_code=ErrorCode.none, partition_index=index, leader_id=leader_id,
        leader_epoch=epoch, replica_nodes=(leader_id,), isr_nodes=(leader_id,), offline_replicas=(),
    )  # fmt: skip


def _brokers(broker: BrokerApi, departed: bool = False) -> list[tuple[int, str, int, str | None]]:
    """Every live broker (node id, host, port, rack) at its address on the listener the client
    came in on (as Kafka, a broker without that listener is left out); this one always, as it
    answers. With `departed`, also those that left moments ago (membership.py's
    DEPARTED_LISTED_S: clients move their partitions before they drop the broker)."""
    me = broker.settings.node_id
    host, port = broker.advertised_address
    listener = SESSION.get().listener.name
    listed = [*broker.cluster.brokers.values(), *(broker.cluster.departed.values() if departed else ())]
    reachable = [(b, b.endpoint(listener)) for b in listed if b.node_id != me]
    others = [(b.node_id, *endpoint, b.rack) for b, endpoint in reachable if endpoint is not None]
    mine = broker.cluster.brokers.get(me)
    return sorted([(me, host, port, mine.rack if mine else None), *others])


def _controller(broker: BrokerApi) -> int:
    controller = broker.cluster.controller_id
    return -1 if controller is None else controller


def _legal(name: str) -> bool:
    try:
        validate_topic_name(name)
    except InvalidTopicName:
        return False
    return True


async def handle_describe_cluster(broker: BrokerApi, request: Request) -> Any:
    mod = response_module(60, request.header.api_version)
    allowed = broker.security.cluster_allowed(DESCRIBE)
    return make(
        mod.DescribeClusterResponse,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none if allowed else ErrorCode.cluster_authorization_failed,
        error_message=None,
        endpoint_type=getattr(request.body, "endpoint_type", 1),
        cluster_id=broker.cluster_id,
        controller_id=_controller(broker),
        brokers=tuple(make(mod.DescribeClusterBroker, broker_id=n, host=h, port=p, rack=r) for n, h, p, r in _brokers(broker))
        if allowed else (),
        cluster_authorized_operations=broker.security.authorized_operations(CLUSTER)
        if allowed and request.body.include_cluster_authorized_operations else ALL_OPERATIONS_UNKNOWN,
    )


async def handle_elect_leaders(broker: BrokerApi, request: Request) -> Any:
    """kafka-leader-election.sh and AdminClient.elect_leaders: controller.plan_election. As
    Kafka: ALTER on the cluster is required; v0 means PREFERRED; a request for every partition
    (null) answers only for those an election concerned, not ELECTION_NOT_NEEDED ones."""
    version = request.header.api_version
    body = request.body
    mod = response_module(43, version)
    election_type = getattr(body, "election_type", PREFERRED)
    asked = None if body.topic_partitions is None else [(t.topic, p) for t in body.topic_partitions for p in t.partitions]
    if not broker.security.cluster_allowed(ALTER):
        error, results = ErrorCode.cluster_authorization_failed, dict.fromkeys(asked or (), "CLUSTER_AUTHORIZATION_FAILED")
    elif election_type not in (PREFERRED, UNCLEAN):
        error, results = ErrorCode.invalid_request, dict.fromkeys(asked or (), "INVALID_REQUEST")
    else:
        error, results = ErrorCode.none, await broker.elect_leaders(election_type, asked)
        if asked is None:
            results = {tp: name for tp, name in results.items() if name != "ELECTION_NOT_NEEDED"}
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), name in results.items():
        code = ErrorCode[name.lower()]
        message = None if code == ErrorCode.none else _ELECTION_MESSAGES.get(name)
        by_topic.setdefault(topic, []).append(make(mod.PartitionResult, partition_id=partition, error_code=code, error_message=message))
    topics = tuple(make(mod.ReplicaElectionResult, topic=topic, partition_result=tuple(parts)) for topic, parts in by_topic.items())
    return make(mod.ElectLeadersResponse, throttle_time=NO_THROTTLE, error_code=error, replica_election_results=topics)


async def handle_alter_partition_reassignments(broker: BrokerApi, request: Request) -> Any:
    """kafka-reassign-partitions.sh --execute and AdminClient.alterPartitionReassignments:
    controller.plan_reassignment (one replica per partition: the broker named leads it, and
    keeps it while it lives). As Kafka: ALTER on the cluster is required; `timeout` is not
    needed (the store's writes are done when this answers)."""
    mod = response_module(45, request.header.api_version)
    asked = {(t.name, p.partition_index): (None if p.replicas is None else list(p.replicas)) for t in request.body.topics for p in t.partitions}
    if not broker.security.cluster_allowed(ALTER):
        error: ErrorCode = ErrorCode.cluster_authorization_failed
        results = dict.fromkeys(asked, ("CLUSTER_AUTHORIZATION_FAILED", None))
    else:
        error, results = ErrorCode.none, await broker.reassign_partitions(asked)
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), (name, message) in results.items():
        by_topic.setdefault(topic, []).append(
            make(mod.ReassignablePartitionResponse, partition_index=partition, error_code=ErrorCode[name.lower()], error_message=message)
        )  # fmt: skip
    return make(
        mod.AlterPartitionReassignmentsResponse, throttle_time=NO_THROTTLE, error_code=error,
        error_message="Cluster authorization failed." if error is not ErrorCode.none else None,
        responses=tuple(make(mod.ReassignableTopicResponse, name=topic, partitions=tuple(parts)) for topic, parts in by_topic.items()),
    )  # fmt: skip


async def handle_list_partition_reassignments(broker: BrokerApi, request: Request) -> Any:
    """kafka-reassign-partitions.sh --verify and AdminClient.listPartitionReassignments: the
    partitions (of those asked for; null: all) not yet led by the broker they were given to
    (replicas: that broker; adding it, removing the leader). DESCRIBE on the cluster."""
    mod = response_module(46, request.header.api_version)
    if not broker.security.cluster_allowed(DESCRIBE):
        return make(mod.ListPartitionReassignmentsResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.cluster_authorization_failed,
                    error_message="Cluster authorization failed.", topics=())  # fmt: skip
    wanted = None if request.body.topics is None else {(t.name, p) for t in request.body.topics for p in t.partition_indexes}
    by_topic: dict[str, list[Any]] = {}
    for p in await broker.ongoing_reassignments():
        if wanted is None or (p.topic, p.partition) in wanted:
            by_topic.setdefault(p.topic, []).append(make(
                mod.OngoingPartitionReassignment, partition_index=p.partition, replicas=(p.preferred_leader,),
                adding_replicas=(p.preferred_leader,), removing_replicas=() if p.leader_id is None else (p.leader_id,),
            ))  # fmt: skip
    return make(
        mod.ListPartitionReassignmentsResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
        topics=tuple(make(mod.OngoingTopicReassignment, name=topic, partitions=tuple(parts)) for topic, parts in by_topic.items()),
    )  # fmt: skip


_ELECTION_MESSAGES = {
    "ELECTION_NOT_NEEDED": "Leader election not needed for topic partition.",
    "PREFERRED_LEADER_NOT_AVAILABLE": "No live broker to elect: the partition stays without a leader until one joins.",
    "ELIGIBLE_LEADERS_NOT_AVAILABLE": "No live broker to elect: the partition stays without a leader until one joins.",
    "UNKNOWN_TOPIC_OR_PARTITION": "This server does not host this topic-partition.",
    "CLUSTER_AUTHORIZATION_FAILED": "Cluster authorization failed.",
    "INVALID_REQUEST": "Unknown election type: 0 is PREFERRED, 1 is UNCLEAN.",
}
