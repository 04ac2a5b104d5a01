"""CreateTopics, DeleteTopics and CreatePartitions.

A topic named more than once in one request is answered once, INVALID_REQUEST "Duplicate topic
name.", and none of its copies acts; the request's other topics go on (Kafka's ControllerApis,
whose response order is followed: CreateTopics answers the duplicates after the others,
CreatePartitions before them; DeleteTopics, which Kafka shuffles, answers its refusals first).
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Collection, Hashable, Iterable, Sequence
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from diskless.wire import Request
from metadata.errors import InvalidPartitions, TopicAlreadyExists, UnknownTopic
from metadata.model import check_topic_collision, validate_topic_name

from .. import topic_configs
from ..api import BrokerApi
from ..errors import (
    AssignmentCountMismatch,
    EmptyReplicaList,
    InvalidReplicationFactor,
    InvalidRequest,
    PartitionIndexGap,
    RepeatedPartitionIndex,
    RepeatedReplica,
    ReplicaCountMismatch,
    ThrottlingQuotaExceeded,
    UnregisteredBroker,
    error_code_for,
)
from ..quotas.client_quotas import MutationQuota
from ..responses import make, response_module
from ..quotas.entities import CONTROLLER_MUTATION_RATE
from ..security.session import ANONYMOUS, SESSION
from ..security.authorizer import ALTER, DELETE, TOPIC

log = logging.getLogger(__name__)
NULL_UUID = uuid.UUID(int=0)

# Kafka's messages (ControllerApis), word for word.
DUPLICATE_NAME = "Duplicate topic name."
DUPLICATE_ID = "Duplicate topic id."
NAME_AND_ID = "You may not specify both topic name and topic id."
NO_NAME_NOR_ID = "Neither topic name nor id were specified."
NAME_OF_GIVEN_ID = "The provided topic name maps to an ID that was already supplied."

K = TypeVar("K", bound=Hashable)


def repeated(keys: Iterable[K]) -> list[K]:
    """The keys given more than once, each once, in the order they first appear."""
    return [key for key, count in Counter(keys).items() if count > 1]


async def handle_create_topics(broker: BrokerApi, request: Request) -> Any:
    body = request.body
    mod = response_module(19, request.header.api_version)
    duplicates = repeated(t.name for t in body.topics)
    quota = _mutation_quota(broker, request, strict_from=6)
    results = []
    for wanted in body.topics:
        if wanted.name in duplicates:
            continue
        error, message, topic = ErrorCode.none, None, None
        num_partitions = replication_factor = -1
        configs: dict[str, str] = {}
        try:
            broker.security.require_create_topic(wanted.name)
            num_partitions, replication_factor, preferred = _partitioning(broker, wanted)
            configs = {c.name: c.value for c in wanted.configs}
            if body.validate_only:
                validate_topic_name(wanted.name)
                if wanted.name not in broker.registry.topics:  # this broker's view: nothing is written
                    check_topic_collision(wanted.name, broker.registry.topics)
                topic_configs.validate(configs)
                if wanted.name in broker.registry.topics:
                    raise TopicAlreadyExists(wanted.name)
                if num_partitions < 1:
                    raise InvalidPartitions(wanted.name, None, num_partitions, "a topic needs at least one partition")
                broker.registry.check_partition_limits(wanted.name, None, num_partitions)
            else:
                if quota.exceeded():
                    raise ThrottlingQuotaExceeded()
                topic = await broker.registry.create_topic(wanted.name, num_partitions, configs, preferred)
                quota.record(num_partitions)
        except Exception as exc:
            error, message = error_code_for(exc, f"create topic {wanted.name}"), str(exc)
        described = ()
        if error is ErrorCode.none:
            entries = topic_configs.describe(
                topic.configs if topic else configs, broker.registry.topic_defaults, broker.registry.topic_default_levels
            )
            described = tuple(
                make(mod.CreatableTopicConfigs, name=e.name, value=e.value, read_only=False, config_source=int(e.source), is_sensitive=False)
                for e in entries
            ) if hasattr(mod, "CreatableTopicConfigs") else ()
        results.append(
            make(
                mod.CreatableTopicResult,
                name=wanted.name,
                topic_id=topic.topic_id if topic else NULL_UUID,
                error_code=error,
                error_message=message,
                topic_config_error_code=ErrorCode.none,
                num_partitions=num_partitions if error is ErrorCode.none else -1,
                replication_factor=replication_factor if error is ErrorCode.none else -1,
                configs=described,
            )
        )
    for name in duplicates:
        results.append(
            make(
                mod.CreatableTopicResult, name=name, topic_id=NULL_UUID, error_code=ErrorCode.invalid_request,
                error_message=DUPLICATE_NAME, topic_config_error_code=ErrorCode.none, num_partitions=-1,
                replication_factor=-1, configs=(),
            )
        )  # fmt: skip
    return make(mod.CreateTopicsResponse, throttle_time=quota.throttle_time(), topics=tuple(results))


def _mutation_quota(broker: BrokerApi, request: Request, strict_from: int) -> MutationQuota:
    """The request's controller_mutation_rate (KIP-599), strict from version `strict_from` on."""
    header = request.header
    strict = header.api_version >= strict_from
    quotas = broker.client_quotas
    principal = SESSION.get().principal if quotas.has(CONTROLLER_MUTATION_RATE) else ANONYMOUS
    return MutationQuota(quotas, principal, header.client_id or "", strict, broker.clock)


def _partitioning(broker: BrokerApi, wanted: Any) -> tuple[int, int, list[int] | None]:
    """(partitions, replication factor, the broker each partition is assigned to or None)."""
    if wanted.assignments:
        # Kafka's ReplicationControlManager.createTopic, its messages and order: the first
        # assignment sets the replica count, every later one must have as many; the indexes
        # are 0 .. n - 1, each once.
        if wanted.replication_factor != -1:
            raise InvalidRequest("A manual partition assignment was specified, but replication factor was not set to -1.")
        if wanted.num_partitions != -1:
            raise InvalidRequest("A manual partition assignment was specified, but numPartitions was not set to -1.")
        indexes: set[int] = set()
        registered, replication_factor = _registered(broker), None
        for a in wanted.assignments:
            if a.partition_index in indexes:
                raise RepeatedPartitionIndex(wanted.name, a.partition_index)
            indexes.add(a.partition_index)
            validate_manual_assignments(wanted.name, [a.broker_ids], registered, replication_factor)
            replication_factor = len(a.broker_ids)
        if indexes != set(range(len(indexes))):
            raise PartitionIndexGap(wanted.name)
        by_index = sorted(wanted.assignments, key=lambda a: a.partition_index)
        return len(wanted.assignments), 1, _one_replica([a.broker_ids for a in by_index])
    num_partitions = broker.settings.num_partitions if wanted.num_partitions == -1 else wanted.num_partitions
    replication_factor = broker.settings.default_replication_factor if wanted.replication_factor == -1 else wanted.replication_factor
    if replication_factor > 1:
        raise InvalidReplicationFactor(replication_factor, 1)
    if replication_factor < 1:
        raise InvalidRequest(f"replication factor must be at least 1, not {replication_factor}")
    return num_partitions, replication_factor, None


def plan_deletions(
    wanted: Sequence[tuple[str | None, uuid.UUID | None]],
) -> tuple[list[tuple[str | None, uuid.UUID | None]], list[tuple[str | None, uuid.UUID | None, str]]]:
    """Kafka's ControllerApis.deleteTopics before it looks anything up. `wanted`: each topic of
    the request as (name, id), None for what it leaves out (v6 names a topic by either; before,
    by name). A topic named by both or by neither is refused, and so is a name or an id given
    more than once (once, whatever the copies; none of them deletes). Returns the topics to go
    on with, in request order, and the refusals (name, id, message) in Kafka's order: both and
    neither as they come, then the repeated names, then the repeated ids."""
    refusals: list[tuple[str | None, uuid.UUID | None, str]] = []
    for name, topic_id in wanted:
        if name is None and topic_id is None:
            refusals.append((None, None, NO_NAME_NOR_ID))
        elif name is not None and topic_id is not None:
            refusals.append((name, topic_id, NAME_AND_ID))
    names = repeated(name for name, topic_id in wanted if name is not None and topic_id is None)
    ids = repeated(topic_id for name, topic_id in wanted if name is None and topic_id is not None)
    refusals += [(name, None, DUPLICATE_NAME) for name in names]
    refusals += [(None, topic_id, DUPLICATE_ID) for topic_id in ids]
    kept = [(n, i) for n, i in wanted if (n is None) != (i is None) and n not in names and i not in ids]
    return kept, refusals


async def handle_delete_topics(broker: BrokerApi, request: Request) -> Any:
    body = request.body
    mod = response_module(20, request.header.api_version)
    if hasattr(body, "topics"):  # v6+: the nil id (None once decoded) is no id
        wanted = [(t.name, None if t.topic_id == NULL_UUID else t.topic_id) for t in body.topics]
    else:
        wanted = [(name, None) for name in body.topic_names]
    quota = _mutation_quota(broker, request, strict_from=5)
    kept, refusals = plan_deletions(wanted)
    results = [
        make(mod.DeletableTopicResult, name=name, topic_id=topic_id or NULL_UUID, error_code=ErrorCode.invalid_request, error_message=message)
        for name, topic_id, message in refusals
    ]
    # Looked up in the store too: another broker may have made it since this one's last view.
    by_id = {topic_id: await broker.registry.find_topic_by_id(topic_id) for name, topic_id in kept if topic_id is not None}
    # A name whose topic is also given by its id deletes neither: answered once, under the name
    # (Kafka says so only to a principal that may delete the topic; others get their refusal).
    given_ids = {topic_id for topic_id, topic in by_id.items() if topic is not None}
    given_ids.update(topic_id for _, topic_id, message in refusals if message == DUPLICATE_ID)
    aliased: dict[str, uuid.UUID] = {}
    for name, _ in kept:
        if name is not None and given_ids and broker.security.allowed(DELETE, TOPIC, name):
            topic = await broker.registry.find_topic(name)
            if topic is not None and topic.topic_id in given_ids:
                aliased[name] = topic.topic_id
    for name, topic_id in kept:
        error, message = ErrorCode.none, None
        if name is None:
            topic = by_id[topic_id]
            if topic is None:
                error = ErrorCode.unknown_topic_id
            elif topic_id in aliased.values():
                continue
            name = topic.name if topic else None
        elif name in aliased:
            error, message, topic_id = ErrorCode.invalid_request, NAME_OF_GIVEN_ID, aliased[name]
        if error is ErrorCode.none:
            try:
                broker.security.require(DELETE, TOPIC, name)
                await broker.registry.find_topic(name)
                if quota.exceeded():
                    raise ThrottlingQuotaExceeded()
                deleted = await broker.registry.delete_topic(name)
                quota.record(deleted.num_partitions)
                topic_id = deleted.topic_id
            except UnknownTopic as exc:
                error, message = ErrorCode.unknown_topic_or_partition, str(exc)
            except Exception as exc:
                error, message = error_code_for(exc, f"delete topic {name}"), str(exc)
        results.append(
            make(mod.DeletableTopicResult, name=name, topic_id=topic_id or NULL_UUID, error_code=error, error_message=message)
        )
    return make(mod.DeleteTopicsResponse, throttle_time=quota.throttle_time(), responses=tuple(results))


async def handle_create_partitions(broker: BrokerApi, request: Request) -> Any:
    body = request.body
    mod = response_module(37, request.header.api_version)
    quota = _mutation_quota(broker, request, strict_from=3)
    duplicates = repeated(t.name for t in body.topics)
    results = [
        make(mod.CreatePartitionsTopicResult, name=name, error_code=ErrorCode.invalid_request, error_message=DUPLICATE_NAME)
        for name in duplicates
    ]
    for wanted in body.topics:
        if wanted.name in duplicates:
            continue
        error, message = ErrorCode.none, None
        try:
            broker.security.require(ALTER, TOPIC, wanted.name)
            topic = await broker.registry.find_topic(wanted.name)
            if topic is None:
                raise UnknownTopic(wanted.name)
            if wanted.count <= topic.num_partitions:
                raise InvalidPartitions(wanted.name, topic.num_partitions, wanted.count, "the partition count can only grow")
            added = wanted.count - topic.num_partitions
            if wanted.assignments is not None and len(wanted.assignments) != added:
                # Kafka's ReplicationControlManager.createPartitions: one assignment per new partition
                # (an empty list too: null alone means "choose for me"), with or without validate_only.
                raise AssignmentCountMismatch(wanted.name, added, len(wanted.assignments))
            preferred = None
            if wanted.assignments is not None:
                # The existing partitions have one replica each: the new ones must too.
                replicas = [a.broker_ids for a in wanted.assignments]
                validate_manual_assignments(wanted.name, replicas, _registered(broker), 1)
                preferred = _one_replica(replicas)
            if body.validate_only:
                broker.registry.check_partition_limits(wanted.name, topic.num_partitions, wanted.count)
            else:
                if quota.exceeded():
                    raise ThrottlingQuotaExceeded()
                await broker.registry.create_partitions(wanted.name, wanted.count, preferred)
                quota.record(added)
        except Exception as exc:
            error, message = error_code_for(exc, f"create partitions of {wanted.name}"), str(exc)
        results.append(make(mod.CreatePartitionsTopicResult, name=wanted.name, error_code=error, error_message=message))
    return make(mod.CreatePartitionsResponse, throttle_time=quota.throttle_time(), results=tuple(results))


def _registered(broker: BrokerApi) -> set[int]:
    """The broker ids an assignment may name: the live brokers of the cluster, and this one."""
    return {broker.settings.node_id, *broker.cluster.brokers}


def validate_manual_assignments(
    topic: str, assignments: Sequence[Sequence[int]], registered: Collection[int], replication_factor: int | None,
) -> None:
    """Kafka's ReplicationControlManager.validateManualPartitionAssignment on each assignment in
    request order; the first refusal wins. `replication_factor` is the replica count every
    assignment must have (CreatePartitions: the existing partitions'), or None for "as many as
    the assignment before it" (CreateTopics). Per assignment, as Kafka: an empty list first; then
    the ids in ascending order, each refused if not registered, else if it repeats the one
    before; then the replica count."""
    for broker_ids in assignments:
        if not broker_ids:
            raise EmptyReplicaList(topic)
        previous = None
        for broker_id in sorted(broker_ids):
            if broker_id not in registered:
                raise UnregisteredBroker(topic, broker_id)
            if broker_id == previous:
                raise RepeatedReplica(topic, broker_id)
            previous = broker_id
        if replication_factor is not None and len(broker_ids) != replication_factor:
            raise ReplicaCountMismatch(topic, len(broker_ids), replication_factor)
        replication_factor = len(broker_ids)


def _one_replica(assignments: Sequence[Sequence[int]]) -> list[int]:
    """What this broker adds to Kafka's checks, once they all passed: a partition has one
    replica (the bucket holds its data), so each assignment names one broker, which leads the
    partition and keeps it as a reassignment does (controller.py). Several brokers, which Kafka
    would accept, are INVALID_REPLICATION_FACTOR. The broker of each partition, in order."""
    for broker_ids in assignments:
        if len(broker_ids) != 1:
            raise InvalidReplicationFactor(len(broker_ids), 1)
    return [broker_ids[0] for broker_ids in assignments]