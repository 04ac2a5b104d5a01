"""Incremental fetch sessions (KIP-227, diskless/broker/fetch_sessions.py): opening, continuing,
forgetting and closing a session, its errors, the cache's eviction, and which partitions an
incremental response carries."""

from __future__ import annotations

import dataclasses
import random

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_req
from kio.schema.fetch.v12 import response as fetch_resp

from diskless.broker.fetch_sessions import FetchSessionCache, answered


def topic(name: str, *partitions: tuple[int, int]) -> fetch_req.FetchTopic:
    return fetch_req.FetchTopic(topic=name, partitions=tuple(
        fetch_req.FetchPartition(partition=p, fetch_offset=offset, partition_max_bytes=1024) for p, offset in partitions
    ))  # fmt: skip


def forgotten(name: str, *partitions: int) -> fetch_req.ForgottenTopic:
    return fetch_req.ForgottenTopic(topic=name, partitions=partitions)


def reads(context) -> list[tuple[str, int, int]]:
    return [(t, p.partition, p.fetch_offset) for t, fetches in context.reads for p in fetches]


def test_a_session_opens_continues_forgets_and_closes() -> None:
    cache = FetchSessionCache(rng=random.Random(7))
    opened = cache.context(0, 0, [topic("a", (0, 5), (1, 0)), topic("b", (0, 9))], [], 1000)
    assert opened.session_id > 0 and not opened.incremental and opened.error is ErrorCode.none
    assert reads(opened) == [("a", 0, 5), ("a", 1, 0), ("b", 0, 9)]
    # Epoch 1 names only what changed; the others are read at their last fetch offsets.
    again = cache.context(opened.session_id, 1, [topic("a", (0, 7))], [forgotten("b", 0)], 2000)
    assert again.incremental and again.session_id == opened.session_id
    assert reads(again) == [("a", 0, 7), ("a", 1, 0)]
    added = cache.context(opened.session_id, 2, [topic("c", (3, 1))], [], 3000)
    assert reads(added) == [("a", 0, 7), ("a", 1, 0), ("c", 3, 1)]
    # Epoch -1 closes it and is answered in full, without a session.
    closed = cache.context(opened.session_id, -1, [topic("a", (0, 8))], [], 4000)
    assert closed.session is None and reads(closed) == [("a", 0, 8)] and len(cache) == 0
    assert cache.context(opened.session_id, 3, [], [], 5000).error is ErrorCode.fetch_session_id_not_found


def test_a_wrong_epoch_or_an_unknown_id_is_an_error_and_changes_nothing() -> None:
    cache = FetchSessionCache()
    opened = cache.context(0, 0, [topic("a", (0, 0))], [], 0)
    assert cache.context(opened.session_id, 2, [topic("a", (0, 4))], [], 0).error is ErrorCode.invalid_fetch_session_epoch
    assert cache.context(opened.session_id + 1, 1, [], [], 0).error is ErrorCode.fetch_session_id_not_found
    assert reads(cache.context(opened.session_id, 1, [], [], 0)) == [("a", 0, 0)]
    # A new session (epoch 0) under an old id replaces it.
    reopened = cache.context(opened.session_id, 0, [topic("b", (1, 2))], [], 0)
    assert reopened.session_id != opened.session_id and len(cache) == 1
    assert cache.context(0, -1, [topic("x", (0, 0))], [], 0).session is None  # no session at all


def test_a_full_cache_evicts_an_idle_session_then_a_smaller_one_else_serves_without() -> None:
    cache = FetchSessionCache(slots=2, eviction_ms=120_000)
    small = cache.context(0, 0, [topic("a", (0, 0))], [], 0).session_id
    large = cache.context(0, 0, [topic("b", (0, 0), (1, 0), (2, 0))], [], 10_000).session_id
    # Full: the least recently used (small) is idle for 120 s only from 120000 on; before, the
    # smallest one goes if the new session is larger.
    bigger = cache.context(0, 0, [topic("c", (0, 0), (1, 0))], [], 60_000)
    assert bigger.session_id > 0
    assert cache.context(small, 1, [], [], 60_000).error is ErrorCode.fetch_session_id_not_found
    none = cache.context(0, 0, [topic("d", (0, 0))], [], 61_000)  # smaller than both, none idle
    assert none.session is None and reads(none) == [("d", 0, 0)]
    idle = cache.context(0, 0, [topic("e", (0, 0))], [], 130_000)  # `large` idle for 120 s
    assert idle.session_id > 0 and cache.context(large, 1, [], [], 130_000).error is ErrorCode.fetch_session_id_not_found


def partition(index: int, high_watermark: int, records: bytes = b"", error: ErrorCode = ErrorCode.none) -> fetch_resp.PartitionData:
    return fetch_resp.PartitionData(
        partition_index=index, error_code=error, high_watermark=high_watermark, last_stable_offset=high_watermark, log_start_offset=0,
        diverging_epoch=fetch_resp.EpochEndOffset(epoch=-1, end_offset=-1), current_leader=fetch_resp.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1),
        snapshot_id=fetch_resp.SnapshotId(end_offset=-1, epoch=-1), aborted_transactions=None, preferred_read_replica=-1, records=records,
    )  # fmt: skip


def response(*partitions: fetch_resp.PartitionData) -> list[fetch_resp.FetchableTopicResponse]:
    return [fetch_resp.FetchableTopicResponse(topic="a", partitions=partitions)]


def replace(topic_response, partitions):
    return dataclasses.replace(topic_response, partitions=partitions)


def indexes(topics) -> list[int]:
    return [p.partition_index for t in topics for p in t.partitions]


def test_incremental_responses_carry_only_partitions_with_something_new() -> None:
    cache = FetchSessionCache()
    full = cache.context(0, 0, [topic("a", (0, 0), (1, 0), (2, 0))], [], 0)
    assert indexes(answered(full, response(partition(0, 5), partition(1, 0), partition(2, 0)), replace)) == [0, 1, 2]
    incremental = cache.context(full.session_id, 1, [], [], 0)
    # Nothing changed: an empty response, no topic left.
    assert answered(incremental, response(partition(0, 5), partition(1, 0), partition(2, 0)), replace) == ()
    incremental = cache.context(full.session_id, 2, [], [], 0)
    new = answered(incremental, response(partition(0, 6), partition(1, 0, records=b"r"), partition(2, 0, error=ErrorCode.not_leader_or_follower)), replace)
    assert indexes(new) == [0, 1, 2]  # a new high watermark, records, an error
    incremental = cache.context(full.session_id, 3, [], [], 0)
    assert indexes(answered(incremental, response(partition(0, 6), partition(1, 0), partition(2, 0, error=ErrorCode.not_leader_or_follower)), replace)) == [2]
    sessionless = cache.context(0, -1, [topic("a", (0, 0))], [], 0)
    assert indexes(answered(sessionless, response(partition(0, 6)), replace)) == [0]
