"""Fetch: long polling over the hot tier, record bytes sent from segment files (zero copy).

The response holds `FileRecords` standing for byte ranges of segment files; the server shell
sends them with sendfile. A fetch that finds fewer than `min_bytes` waits, without polling,
for an append to any of its partitions or for `max_wait` to pass, then reads again.

With `replica.selector.class` set (replica_reads.py, KIP-392), a consumer in another rack is
told its preferred read replica instead of records, and partitions led elsewhere are served
from the bucket (polled for new durable batches while the fetch waits).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from diskless.wire import FileRecords, Request

from .. import metrics
from ..api import BrokerApi, absent
from ..errors import error_code_for
from ..fetch_sessions import FINAL_EPOCH
from ..quotas.client_quotas import user_of
from ..quotas.entities import CONSUMER_BYTE_RATE
from ..security.session import SESSION
from ..partition import PartitionLeader
from ..replica_reads import VIEW_MAX_AGE_S, BucketReplica, preferred_read_replica, transaction_free_prefix
from ..responses import NO_THROTTLE, make, response_module
from ..security.authorizer import READ, TOPIC


MAX_RESPONSE_BYTES = 2**31 - 1
READ_COMMITTED = 1  # isolation_level: read up to the last stable offset, told of aborted transactions


async def handle_fetch(broker: BrokerApi, request: Request) -> Any:
    body = request.body
    mod = response_module(1, request.header.api_version)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + body.max_wait.total_seconds()
    max_bytes = getattr(body, "max_bytes", MAX_RESPONSE_BYTES)
    if getattr(body, "replica_id", -1) < 0 and broker.client_quotas.has(CONSUMER_BYTE_RATE):
        quota_bytes = broker.client_quotas.max_fetch_bytes(user_of(SESSION.get().principal), request.header.client_id or "")
        max_bytes = max_bytes if quota_bytes is None else min(max_bytes, quota_bytes)
    min_bytes = min(body.min_bytes, max_bytes)  # as Kafka, when a quota lowered max_bytes
    # KIP-227: a session's partitions are read, not only those this request names (fetch_sessions.py).
    context = broker.fetch_sessions.context(
        getattr(body, "session_id", 0), getattr(body, "session_epoch", FINAL_EPOCH), body.topics, getattr(body, "forgotten_topics_data", ()),
        broker.clock(),
    )  # fmt: skip
    if context.error is not ErrorCode.none:
        return make(mod.FetchResponse, throttle_time=NO_THROTTLE, error_code=context.error, session_id=0, responses=())
    # A partition this broker is opening holds the request rather than refusing it (opening_gate.py).
    await broker.registry.until_open([(topic, p.partition) for topic, fetches in context.reads for p in fetches], body.max_wait.total_seconds())
    while True:
        topics, total_bytes, failed, waiting, polling = await _read(broker, body, context.reads, mod, max_bytes)
        remaining = deadline - loop.time()
        if total_bytes >= min_bytes or failed or remaining <= 0 or not (waiting or polling):
            break
        wakes = [p.appended() for p in waiting]
        if polling:  # read from the bucket: nothing tells of new durable batches but a new look
            wakes.append(asyncio.ensure_future(asyncio.sleep(VIEW_MAX_AGE_S)))
        done, _ = await asyncio.wait(wakes, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        if polling:
            wakes[-1].cancel()
        if not done:
            break  # max_wait ran out and no high watermark moved: what was read stands (no second read of every partition)
    responses, session_id = broker.fetch_sessions.answer(
        context, topics, lambda topic, partitions: dataclasses.replace(topic, partitions=partitions), broker.clock()
    )  # fmt: skip
    metrics.FETCH_SESSIONS.set(len(broker.fetch_sessions))
    return make(mod.FetchResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, session_id=session_id, responses=responses)


async def _read(
    broker: BrokerApi, body: Any, reads: Sequence[tuple[str, Sequence[Any]]], mod: Any, max_bytes: int,
) -> tuple[list[Any], int, bool, list[PartitionLeader], bool]:
    topics = []
    total_bytes = 0
    failed = polling = False
    waiting: list[PartitionLeader] = []
    read_committed = getattr(body, "isolation_level", 0) == READ_COMMITTED
    # A consumer's fetch may be served by a broker of its rack (KIP-392, replica_reads.py).
    replicas = broker.replica_reads if getattr(body, "replica_id", -1) < 0 else None
    rack = getattr(body, "rack_id", "") or ""
    for topic, fetches in reads:
        results = []
        for fetch in fetches:
            partition = broker.registry.leader(topic, fetch.partition)
            error, records = ErrorCode.none, b""
            high_watermark = log_start_offset = last_stable_offset = -1
            aborted = None
            preferred = -1
            if not broker.security.allowed(READ, TOPIC, topic):
                error = ErrorCode.topic_authorization_failed
            elif partition is None and replicas is not None and broker.registry.has_partition(topic, fetch.partition):
                error, records, high_watermark, log_start_offset, size = await _read_replica(
                    broker, replicas, topic, fetch, max(0, min(fetch.partition_max_bytes, max_bytes - total_bytes)), total_bytes == 0,
                    read_committed,
                )  # fmt: skip
                last_stable_offset = high_watermark
                total_bytes += size
                polling = polling or (error is ErrorCode.none and size == 0)
            elif partition is None:
                error = absent(broker, topic, fetch.partition)
            elif replicas is not None and rack and partition.readable_elsewhere and (not read_committed or partition.known_transaction_free) and (
                target := preferred_read_replica(broker.cluster.brokers.values(), broker.settings.node_id, rack, topic, fetch.partition)
            ) is not None:
                # As Kafka's leader: no records, the replica to fetch from next.
                high_watermark, log_start_offset = partition.high_watermark, partition.log_start_offset
                last_stable_offset, preferred = partition.last_stable_offset, target
            else:
                # The whole log's start (bucket and DeleteRecords included), not the local one's.
                high_watermark, log_start_offset = partition.high_watermark, partition.log_start_offset
                last_stable_offset = partition.last_stable_offset
                error = _check_leader_epoch(getattr(fetch, "current_leader_epoch", -1), partition.leader_epoch)
                remote = fetch.fetch_offset < partition.local_log_start_offset
                if error is ErrorCode.none and remote and broker.remote_fetch_quota.exceeded(time.monotonic()):
                    # KIP-956: no history from the bucket for now; the fetch waits as for a partition with nothing new.
                    metrics.REMOTE_FETCH_THROTTLED.labels(topic).inc()
                    waiting.append(partition)
                elif error is ErrorCode.none:
                    if read_committed:
                        # Taken in the step the read picks its segment in: the cleaner swaps a copy
                        # without an abort marker in and forgets its transaction in one step too.
                        aborted = _aborted(mod, partition, fetch.fetch_offset, last_stable_offset)
                    try:
                        data = await partition.read(
                            fetch.fetch_offset,
                            max(0, min(fetch.partition_max_bytes, max_bytes - total_bytes)),
                            min_one_batch=total_bytes == 0,
                            max_offset=last_stable_offset if read_committed else None,
                        )
                    except Exception as exc:
                        error = error_code_for(exc, f"fetch from {topic}-{fetch.partition}")
                        aborted = None
                    else:
                        waiting.append(partition)
                        if data is None:
                            pass
                        elif isinstance(data, bytes):
                            records = data
                            total_bytes += len(data)
                            if remote:
                                broker.remote_fetch_quota.record(len(data), time.monotonic())
                        else:
                            records = FileRecords(data, data.size_bytes)
                            total_bytes += data.size_bytes
            failed = failed or error is not ErrorCode.none
            results.append(
                make(
                    mod.PartitionData,
                    partition_index=fetch.partition,
                    error_code=error,
                    high_watermark=high_watermark,
                    last_stable_offset=last_stable_offset,
                    log_start_offset=log_start_offset,
                    aborted_transactions=aborted,
                    preferred_read_replica=preferred,
                    records=records,
                )
            )
        topics.append(make(mod.FetchableTopicResponse, topic=topic, partitions=tuple(results)))
    return topics, total_bytes, failed, waiting, polling


async def _read_replica(
    broker: BrokerApi, replicas: BucketReplica, topic: str, fetch: Any, max_bytes: int, first: bool, read_committed: bool
) -> tuple[ErrorCode, bytes, int, int, int]:
    """A partition led elsewhere, from the bucket: (error, records, high watermark, log start,
    bytes); read_committed only up to its first transactional batch (replica_reads.py)."""
    _, epoch = broker.registry.leadership(topic, fetch.partition)
    error = _check_leader_epoch(getattr(fetch, "current_leader_epoch", -1), epoch)
    if error is not ErrorCode.none:
        return error, b"", -1, -1, 0
    try:
        data, view = await replicas.read(topic, fetch.partition, fetch.fetch_offset, max_bytes, min_one_batch=first)
    except Exception as exc:
        return error_code_for(exc, f"fetch of {topic}-{fetch.partition} from the bucket"), b"", -1, -1, 0
    if data and read_committed:
        data = data[: transaction_free_prefix(data)]
        if not data:  # transactional from here on: the leader serves it
            return ErrorCode.not_leader_or_follower, b"", -1, -1, 0
    if data:
        metrics.REPLICA_READ_BYTES.labels(topic).inc(len(data))
        broker.remote_fetch_quota.record(len(data), time.monotonic())  # counted, not held back: the view answers here
    return ErrorCode.none, data or b"", view.durable_end, view.log_start_offset, len(data or b"")


def _aborted(mod: Any, partition: PartitionLeader, fetch_offset: int, last_stable_offset: int) -> tuple[Any, ...]:
    """The aborted transactions a read_committed consumer needs for what it may read from
    `fetch_offset`: their producer id and first offset (it drops their batches)."""
    return tuple(
        make(mod.AbortedTransaction, producer_id=a.producer_id, first_offset=a.first_offset)
        for a in partition.txns.aborted_between(fetch_offset, last_stable_offset)
    )


def _check_leader_epoch(requested: int, current: int) -> ErrorCode:
    if requested < 0 or requested == current:
        return ErrorCode.none
    return ErrorCode.fenced_leader_epoch if requested < current else ErrorCode.unknown_leader_epoch
