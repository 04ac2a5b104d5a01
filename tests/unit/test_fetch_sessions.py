"""Incremental fetch sessions (KIP-227, diskless/broker/fetch_sessions.py): opening, continuing,
forgetting and closing a session, its errors, the cache's eviction, and which partitions an
incremental response carries."""

from __future__ import annotations

import dataclasses
import random

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_req
from kio.schema.fetch.v12 import response as fetch_resp

from diskless.broker.fetch_sessions import FetchSessionCache


def topic(name: str, *partitions: tuple[int, int]) -> fetch_req.FetchTopic:
    return fetch_req.FetchTopic(topic=name, partitions=tuple(
        fetch_req.FetchPartition(partition=p, fetch_offset=offset, partition_max_bytes=1024) for p, offset in partitions
    ))  # fmt: skip


def forgotten(name: str, *partitions: int) -> fetch_req.ForgottenTopic:
    return fetch_req.ForgottenTopic(topic=name, partitions=partitions)


def reads(context) -> list[tuple[str, int, int]]:
    return [(t, p.partition, p.fetch_offset) for t, fetches in context.reads for p in fetches]


def opened(cache: FetchSessionCache, topics: list, now_ms: int) -> int:
    """A new session's id (0: none), made as its first answer is."""
    context = cache.context(0, 0, topics, [], now_ms)
    assert context.opening and context.session is None
    return cache.answer(context, [], replace, now_ms)[1]


def test_a_session_opens_continues_forgets_and_closes() -> None:
    cache = FetchSessionCache(rng=random.Random(7))
    first = cache.context(0, 0, [topic("a", (0, 5), (1, 0)), topic("b", (0, 9))], [], 1000)
    assert reads(first) == [("a", 0, 5), ("a", 1, 0), ("b", 0, 9)] and len(cache) == 0  # made once answered
    session_id = cache.answer(first, [], replace, 1000)[1]
    assert session_id > 0 and len(cache) == 1
    # Epoch 1 names only what changed; the others are read at their last fetch offsets.
    again = cache.context(session_id, 1, [topic("a", (0, 7))], [forgotten("b", 0)], 2000)
    assert again.session is not None and again.session.session_id == session_id
    assert reads(again) == [("a", 0, 7), ("a", 1, 0)]
    added = cache.context(session_id, 2, [topic("c", (3, 1))], [], 3000)
    assert reads(added) == [("a", 0, 7), ("a", 1, 0), ("c", 3, 1)]
    # Epoch -1 closes it and is answered in full, without a session.
    closed = cache.context(session_id, -1, [topic("a", (0, 8))], [], 4000)
    assert closed.session is None and not closed.opening and reads(closed) == [("a", 0, 8)] and len(cache) == 0
    assert cache.context(session_id, 3, [], [], 5000).error is ErrorCode.fetch_session_id_not_found


def test_a_session_whose_partitions_are_all_forgotten_ends() -> None:
    cache = FetchSessionCache()
    session_id = opened(cache, [topic("a", (0, 0))], 0)
    emptied = cache.context(session_id, 1, [], [forgotten("a", 0)], 0)
    assert (emptied.session, emptied.opening, emptied.reads, len(cache)) == (None, False, (), 0)


def test_a_wrong_epoch_or_an_unknown_id_is_an_error_and_changes_nothing() -> None:
    cache = FetchSessionCache()
    session_id = opened(cache, [topic("a", (0, 0))], 0)
    assert cache.context(session_id, 2, [topic("a", (0, 4))], [], 0).error is ErrorCode.invalid_fetch_session_epoch
    assert cache.context(session_id + 1, 1, [], [], 0).error is ErrorCode.fetch_session_id_not_found
    assert reads(cache.context(session_id, 1, [], [], 0)) == [("a", 0, 0)]
    # A new session (epoch 0) under an old id replaces it.
    reopened = opened(cache, [topic("b", (1, 2))], 0)
    assert reopened != session_id and len(cache) == 2
    cache.context(session_id, 0, [topic("b", (1, 2))], [], 0)
    assert len(cache) == 1  # the old id's session went with the new request
    assert cache.context(0, -1, [topic("x", (0, 0))], [], 0).session is None  # no session at all


def test_a_full_cache_evicts_an_idle_session_then_a_smaller_one_else_serves_without() -> None:
    cache = FetchSessionCache(slots=2, eviction_ms=120_000)
    small = opened(cache, [topic("a", (0, 0))], 0)
    large = opened(cache, [topic("b", (0, 0), (1, 0), (2, 0))], 10_000)
    # Full: the least recently used (small) is idle for 120 s only from 120000 on; before, the
    # smallest one goes if the new session is larger.
    assert opened(cache, [topic("c", (0, 0), (1, 0))], 60_000) > 0
    assert cache.context(small, 1, [], [], 60_000).error is ErrorCode.fetch_session_id_not_found
    assert opened(cache, [topic("d", (0, 0))], 61_000) == 0  # smaller than both, none idle: no session
    assert opened(cache, [topic("e", (0, 0))], 130_000) > 0  # `large` idle for 120 s
    assert cache.context(large, 1, [], [], 130_000).error is ErrorCode.fetch_session_id_not_found


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
    topics, session_id = cache.answer(full, response(partition(0, 5), partition(1, 0), partition(2, 0)), replace, 0)
    assert indexes(topics) == [0, 1, 2] and session_id > 0
    incremental = cache.context(session_id, 1, [], [], 0)
    # Nothing changed: an empty response, no topic left.
    assert cache.answer(incremental, response(partition(0, 5), partition(1, 0), partition(2, 0)), replace, 0) == ((), session_id)
    incremental = cache.context(session_id, 2, [], [], 0)
    new = cache.answer(incremental, response(partition(0, 6), partition(1, 0, records=b"r"), partition(2, 0, error=ErrorCode.not_leader_or_follower)), replace, 0)
    assert indexes(new[0]) == [0, 1, 2]  # a new high watermark, records, an error
    # Partition 1 returned records: it goes behind the others, which get the bytes first next time.
    incremental = cache.context(session_id, 3, [], [], 0)
    assert reads(incremental) == [("a", 0, 0), ("a", 2, 0), ("a", 1, 0)]
    assert indexes(cache.answer(incremental, response(partition(0, 6), partition(2, 0, error=ErrorCode.not_leader_or_follower), partition(1, 0)), replace, 0)[0]) == [2]
    sessionless = cache.context(0, -1, [topic("a", (0, 0))], [], 0)
    assert indexes(cache.answer(sessionless, response(partition(0, 6)), replace, 0)[0]) == [0]
