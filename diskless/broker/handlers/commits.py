"""OffsetCommit, OffsetFetch and OffsetDelete: committed offsets of consumer groups.

As in groups.py, committed offsets are reached only through `broker.groups`, and an exception
while serving a group is logged once and answered with `coordinator_error`'s code.

OffsetFetch with require_stable (KIP-447) answers UNSTABLE_OFFSET_COMMIT for a partition whose
offset an open or committing transaction (Ongoing, PrepareCommit) holds. Kafka's group
coordinator holds such pending offsets itself; here the transactional id's coordinator does
(txn/transactions.py: the group's coordinator hands TxnOffsetCommit on to it), and that is
usually another broker. Its state is asked where it is authoritative: in process for the
transactional ids this broker coordinates, and in the metadata store for the others, since a
coordinator writes every transition there (the pending offsets a TxnOffsetCommit added
included) before it answers, and writes CompleteCommit only after the offsets. Nothing is
remembered between requests, and a group whose coordinator moved still sees the pending
offsets its previous coordinator handed on. The transaction state is read before the
committed offsets: a transaction seen complete has already written its offsets. The cost: one
read of the store while this broker does not coordinate every slot, of the rows of transactions
not idle that hold offsets of the group (store.list_pending_offset_transactions: the idle
transactional ids, most of them, are skipped in SQL); the store failing answers the group's
coordinator error (retriable), never a stale offset.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

from kio.schema.errors import ErrorCode

from diskless.wire import Request
from metadata.transactions import ONGOING, PREPARE_COMMIT, TransactionRecord

from ..api import BrokerApi
from ..responses import NO_THROTTLE, make, response_module
from ..security.authorizer import DELETE, DESCRIBE, GROUP, READ, TOPIC
from ..security.errors import GroupAuthorizationFailed
from ..security.session import SESSION
from .groups import answers_failure, coordinator_error, is_coordinator


def _offset_commit_response(request: Request, codes: Iterator[ErrorCode]) -> Any:
    """The response with `codes` given to the request's partitions in order."""
    mod = response_module(8, request.header.api_version)
    topics = tuple(
        make(
            mod.OffsetCommitResponseTopic,
            name=topic.name,
            partitions=tuple(make(mod.OffsetCommitResponsePartition, partition_index=p.partition_index, error_code=next(codes)) for p in topic.partitions),
        )
        for topic in request.body.topics
    )
    return make(mod.OffsetCommitResponse, throttle_time=NO_THROTTLE, topics=topics)


def _offset_commit_failed(request: Request, error: ErrorCode) -> Any:
    return _offset_commit_response(request, itertools.repeat(error))


@answers_failure("OffsetCommit", lambda body: (body.group_id,), _offset_commit_failed)
async def handle_offset_commit(broker: BrokerApi, request: Request) -> Any:
    body, version = request.body, request.header.api_version
    # READ on the group was checked by answers_failure; READ on each topic here (Kafka's order).
    readable = {t.name: broker.security.allowed(READ, TOPIC, t.name) for t in body.topics}
    offsets = [
        (topic.name, p.partition_index, p.committed_offset, _epoch(getattr(p, "committed_leader_epoch", -1)), p.committed_metadata)
        for topic in body.topics
        if readable[topic.name]
        for p in topic.partitions
    ]
    committed = iter(await broker.groups.commit_offsets(
        body.group_id,
        body.generation_id_or_member_epoch,
        body.member_id,
        getattr(body, "group_instance_id", None),
        version,
        offsets,
        known=lambda topic, partition: _exists(broker, topic, partition),
    ))
    codes = (next(committed) if readable[t.name] else ErrorCode.topic_authorization_failed for t in body.topics for _p in t.partitions)
    return _offset_commit_response(request, codes)


def _exists(broker: BrokerApi, topic: str, partition: int) -> bool:
    """As Kafka: a commit needs the partition to exist, not to be led by the coordinator."""
    found = broker.registry.topics.get(topic)
    return found is not None and 0 <= partition < found.num_partitions


def _epoch(value: int) -> int | None:
    return None if value < 0 else value


def _offset_fetch_partition(mod: Any, partition_cls: str, partition: int, found: Any, error: ErrorCode) -> Any:
    return make(
        getattr(mod, partition_cls),
        partition_index=partition,
        committed_offset=found.offset if found else -1,
        committed_leader_epoch=found.leader_epoch if found and found.leader_epoch is not None else -1,
        metadata=found.metadata if found else "",
        error_code=error,
    )


async def _fetch_group(
    broker: BrokerApi, mod: Any, group_id: str, topics: Any, partition_cls: str, topic_cls: str, require_stable: bool = False
) -> tuple:
    """With `require_stable` (KIP-447), a partition whose offset an open transaction is about to
    commit answers UNSTABLE_OFFSET_COMMIT (retriable) instead of the offset it will replace."""
    if not broker.security.allowed(DESCRIBE, GROUP, group_id):
        raise GroupAuthorizationFailed(SESSION.get().principal, "DESCRIBE", "GROUP", group_id)
    unstable = await _unstable_partitions(broker, group_id) if require_stable else set()  # before the offsets (module header)
    wanted = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    committed = {(o.topic, o.partition): o for o in await broker.groups.fetch_offsets(group_id, wanted)}
    if wanted is None:  # as Kafka: every committed offset of the topics the principal may DESCRIBE
        wanted = [tp for tp in sorted(committed) if broker.security.allowed(DESCRIBE, TOPIC, tp[0])]
    by_topic: dict[str, list[Any]] = defaultdict(list)
    for topic, partition in wanted:
        if not broker.security.allowed(DESCRIBE, TOPIC, topic):
            by_topic[topic].append(_offset_fetch_partition(mod, partition_cls, partition, None, ErrorCode.topic_authorization_failed))
            continue
        if (topic, partition) in unstable:
            by_topic[topic].append(_offset_fetch_partition(mod, partition_cls, partition, None, ErrorCode.unstable_offset_commit))
            continue
        by_topic[topic].append(_offset_fetch_partition(mod, partition_cls, partition, committed.get((topic, partition)), ErrorCode.none))
    return tuple(make(getattr(mod, topic_cls), name=topic, partitions=tuple(parts)) for topic, parts in by_topic.items())


def pending_offset_partitions(records: Iterable[TransactionRecord], group_id: str) -> set[tuple[str, int]]:
    """The partitions whose offsets in `group_id` a transaction of `records` holds while it is
    open or committing (an aborting or complete one holds none)."""
    return {
        (o.topic, o.partition)
        for r in records if r.state in (ONGOING, PREPARE_COMMIT)
        for g, o in r.pending_offsets if g == group_id
    }  # fmt: skip


async def _unstable_partitions(broker: BrokerApi, group_id: str) -> set[tuple[str, int]]:
    """The group's partitions a transaction is about to commit offsets for: each transaction as
    its coordinator holds it, in process here, from the store when another broker coordinates
    it (module header). A single broker, or one holding every slot, reads no store."""
    await broker.transactions.ensure_loaded()  # the slots held here are in process
    unstable = broker.transactions.core.pending_offset_partitions(group_id)
    node = broker.settings.node_id
    if any(s.leader_id != node for s in broker.cluster.slots.values()):
        records = await broker.transactions.store.list_pending_offset_transactions(group_id)
        records = [r for r in records if not is_coordinator(broker, r.transactional_id)]
        unstable |= pending_offset_partitions(records, group_id)
    return unstable


def _refusal(broker: BrokerApi, group_id: str) -> ErrorCode:
    """Why this broker does not answer a group's offsets: the principal may not DESCRIBE the
    group. Any broker answers them from the store, where every commit is, not only the group's
    coordinator as in Kafka: while a coordinator slot moves the brokers' views differ for a
    moment, and librdkafka's committed() fails at a NOT_COORDINATOR rather than asking again."""
    if not broker.security.allowed(DESCRIBE, GROUP, group_id):
        return ErrorCode.group_authorization_failed
    return ErrorCode.none


async def handle_offset_fetch(broker: BrokerApi, request: Request) -> Any:
    body, version = request.body, request.header.api_version
    mod = response_module(9, version)
    if version >= 8:
        groups = []
        for group in body.groups:  # each group answered by its own coordinator check (KIP-709)
            error, topics = _refusal(broker, group.group_id), ()
            try:
                if error is ErrorCode.none and version >= 9:  # a consumer-protocol member fetches with its member epoch (KIP-848)
                    error = await broker.groups.validate_offset_fetch(group.group_id, group.member_id, group.member_epoch)
                if error is ErrorCode.none:
                    topics = await _fetch_group(
                        broker, mod, group.group_id, group.topics, "OffsetFetchResponsePartitions", "OffsetFetchResponseTopics", body.require_stable
                    )
            except Exception as exc:
                error = coordinator_error(exc, "OffsetFetch", (group.group_id,), request)
            groups.append(make(mod.OffsetFetchResponseGroup, group_id=group.group_id, topics=topics, error_code=error))
        return make(mod.OffsetFetchResponse, throttle_time=NO_THROTTLE, groups=tuple(groups))
    error = _refusal(broker, body.group_id)
    if error is ErrorCode.none:
        try:
            topics = await _fetch_group(
                broker, mod, body.group_id, body.topics, "OffsetFetchResponsePartition", "OffsetFetchResponseTopic", getattr(body, "require_stable", False)
            )
            return make(mod.OffsetFetchResponse, throttle_time=NO_THROTTLE, topics=topics, error_code=ErrorCode.none)
        except Exception as exc:
            error = coordinator_error(exc, "OffsetFetch", (body.group_id,), request)
    if version >= 2:
        return make(mod.OffsetFetchResponse, throttle_time=NO_THROTTLE, topics=(), error_code=error)
    # v1 has no group-level error: Kafka puts it on every partition asked for.
    topics = tuple(
        make(
            mod.OffsetFetchResponseTopic,
            name=t.name,
            partitions=tuple(_offset_fetch_partition(mod, "OffsetFetchResponsePartition", p, None, error) for p in t.partition_indexes),
        )
        for t in body.topics
    )
    return make(mod.OffsetFetchResponse, throttle_time=NO_THROTTLE, topics=topics, error_code=ErrorCode.none)


def _offset_delete_failed(request: Request, error: ErrorCode) -> Any:
    mod = response_module(47, request.header.api_version)
    return make(mod.OffsetDeleteResponse, error_code=error, throttle_time=NO_THROTTLE, topics=())


@answers_failure("OffsetDelete", lambda body: (body.group_id,), _offset_delete_failed, acl=DELETE)
async def handle_offset_delete(broker: BrokerApi, request: Request) -> Any:
    body = request.body
    mod = response_module(47, request.header.api_version)
    wanted = [(t.name, p.partition_index) for t in body.topics for p in t.partitions if broker.security.allowed(READ, TOPIC, t.name)]
    error, errors = await broker.groups.delete_offsets(body.group_id, wanted)
    errors = {**{(t.name, p.partition_index): ErrorCode.topic_authorization_failed for t in body.topics for p in t.partitions
                 if not broker.security.allowed(READ, TOPIC, t.name)}, **errors}  # fmt: skip
    topics = tuple(
        make(
            mod.OffsetDeleteResponseTopic,
            name=t.name,
            partitions=tuple(
                make(mod.OffsetDeleteResponsePartition, partition_index=p.partition_index, error_code=errors.get((t.name, p.partition_index), ErrorCode.none))
                for p in t.partitions
            ),
        )
        for t in body.topics
    ) if error is ErrorCode.none else ()
    return make(mod.OffsetDeleteResponse, error_code=error, throttle_time=NO_THROTTLE, topics=topics)
