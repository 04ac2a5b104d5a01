"""Incremental fetch sessions (KIP-227), as Kafka's FetchSession and FetchSessionCache keep them.
Sans-IO: the caller passes the time; one owner, the event loop.

A consumer with many partitions need not name them all in every Fetch, nor read all of them
back in every response. Its first Fetch (session id 0, epoch 0) names its partitions and gets
a session id; later ones (that id, epochs 1, 2, ...) name only partitions whose fetch offset
or limits changed, and those to forget (`forgotten_topics_data`), and their responses carry
only partitions with something new: records, an error, a changed high watermark, last stable
offset, log start offset or preferred read replica. Epoch -1 ends the session (the request is
then answered in full, without one); id 0 with epoch -1 is a fetch without a session (before
v7, every fetch).

An unknown id is FETCH_SESSION_ID_NOT_FOUND and an epoch other than the expected one
INVALID_FETCH_SESSION_EPOCH, both with no partitions: the client then starts a new session.
The cache holds at most `slots` sessions (max.incremental.fetch.session.cache.slots, Kafka's
1000). When full, a new session takes the slot of the one used least recently if that one has
been idle for `eviction_ms` (Kafka's 120 s), else of the smallest one if it has fewer
partitions than the new one; else the fetch is answered without a session (session id 0).
Sessions are the broker's, not a connection's, as in Kafka.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INT32_MAX = 2**31 - 1

PartitionKey = tuple[str, int]


@dataclass(slots=True)
class _Sent:
    """What the session last told the client of a partition, and how the client fetches it."""

    fetch: Any  # the request's FetchPartition: fetch_offset, partition_max_bytes, current_leader_epoch
    high_watermark: int | None = None
    last_stable_offset: int | None = None
    log_start_offset: int | None = None
    preferred_read_replica: int | None = None


@dataclass(slots=True)
class FetchSession:
    session_id: int
    epoch: int  # the epoch the next request must carry
    partitions: dict[PartitionKey, _Sent] = field(default_factory=dict)
    last_used_ms: int = 0


@dataclass(frozen=True, slots=True)
class FetchContext:
    """How to answer one Fetch: what to read; the session it continues (`session`, answered
    incrementally: only partitions with something new) or whether it opens one once answered
    (`opening`); or a session error."""

    reads: tuple[tuple[str, tuple[Any, ...]], ...] = ()  # (topic, its FetchPartitions), in order
    session: FetchSession | None = None
    opening: bool = False
    error: ErrorCode = ErrorCode.none


def _grouped(pairs: Iterable[tuple[PartitionKey, Any]]) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    topics: dict[str, list[Any]] = {}
    for (topic, _), fetch in pairs:
        topics.setdefault(topic, []).append(fetch)
    return tuple((topic, tuple(fetches)) for topic, fetches in topics.items())


class FetchSessionCache:
    def __init__(self, slots: int = 1000, eviction_ms: int = 120_000, rng: random.Random | None = None) -> None:
        self.slots = slots
        self.eviction_ms = eviction_ms
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()  # least recently used first
        self._rng = rng or random.Random()

    def __len__(self) -> int:
        return len(self._sessions)

    def context(self, session_id: int, epoch: int, topics: Sequence[Any], forgotten: Sequence[Any], now_ms: int) -> FetchContext:
        """The context of a Fetch with these session fields, `topics` (FetchTopic) and
        `forgotten` (ForgottenTopic); a session it opens or continues is updated here."""
        asked = [((t.topic, p.partition), p) for t in topics for p in t.partitions]
        if epoch == FINAL_EPOCH:
            self._sessions.pop(session_id, None)
            return FetchContext(reads=_grouped(asked))
        if epoch == INITIAL_EPOCH:  # the session is made when the answer is (a fetch cancelled in its long poll makes none)
            self._sessions.pop(session_id, None)
            return FetchContext(reads=_grouped(asked), opening=True)
        session = self._sessions.get(session_id)
        if session is None:
            return FetchContext(error=ErrorCode.fetch_session_id_not_found)
        if epoch != session.epoch:
            return FetchContext(error=ErrorCode.invalid_fetch_session_epoch)
        for key, fetch in asked:
            sent = session.partitions.get(key)
            if sent is None:
                session.partitions[key] = _Sent(fetch)
            else:
                sent.fetch = fetch
        for topic in forgotten:
            for index in topic.partitions:
                session.partitions.pop((topic.topic, index), None)
        if not session.partitions:  # as Kafka: a session left with no partition ends, answered without one
            del self._sessions[session_id]
            return FetchContext()
        session.epoch = 1 if epoch == INT32_MAX else epoch + 1
        session.last_used_ms = now_ms
        self._sessions.move_to_end(session_id)
        return FetchContext(reads=_grouped((key, sent.fetch) for key, sent in session.partitions.items()), session=session)

    def _open(self, partitions: dict[PartitionKey, Any], now_ms: int) -> FetchSession | None:
        if len(self._sessions) >= self.slots and not self._evict_for(len(partitions), now_ms):
            return None
        session_id = self._rng.randint(1, INT32_MAX)
        while session_id in self._sessions:
            session_id = self._rng.randint(1, INT32_MAX)
        session = FetchSession(session_id, 1, {key: _Sent(fetch) for key, fetch in partitions.items()}, now_ms)
        self._sessions[session_id] = session
        return session

    def _evict_for(self, size: int, now_ms: int) -> bool:
        if not self._sessions:
            return False
        oldest = next(iter(self._sessions.values()))
        if now_ms - oldest.last_used_ms >= self.eviction_ms:
            del self._sessions[oldest.session_id]
            return True
        smallest = min(self._sessions.values(), key=lambda s: len(s.partitions))
        if len(smallest.partitions) < size:
            del self._sessions[smallest.session_id]
            return True
        return False


    def answer(self, context: FetchContext, topics: Sequence[Any], replace: Any, now_ms: int) -> tuple[tuple[Any, ...], int]:
        """The response's topics (FetchableTopicResponse) and session id for `context`: every
        partition read without a session or for one it opens; for one it continues, only the
        partitions with something new. Notes what was sent in the session, and moves each
        partition that returned records behind the others (as Kafka), so that partitions
        later in the session get the response's bytes in turn. `replace(topic_response,
        partitions)` rebuilds one topic's response."""
        if context.opening:
            partitions = {(topic, fetch.partition): fetch for topic, fetches in context.reads for fetch in fetches}
            session = self._open(partitions, now_ms)
            if session is not None:
                for topic in topics:
                    for data in topic.partitions:
                        sent = session.partitions.get((topic.topic, data.partition_index))
                        if sent is not None:
                            _note(sent, data)
            return tuple(topics), 0 if session is None else session.session_id
        session = context.session
        if session is None:
            return tuple(topics), 0
        kept = []
        rotated = []
        for topic in topics:
            partitions = []
            for data in topic.partitions:
                key = (topic.topic, data.partition_index)
                sent = session.partitions.get(key)
                if sent is None:  # forgotten meanwhile: answered as read
                    partitions.append(data)
                    continue
                has_records = len(data.records or b"") > 0
                changed = (
                    has_records
                    or data.error_code is not ErrorCode.none
                    or sent.high_watermark != data.high_watermark
                    or sent.last_stable_offset != data.last_stable_offset
                    or sent.log_start_offset != data.log_start_offset
                    or sent.preferred_read_replica != getattr(data, "preferred_read_replica", -1)
                )
                _note(sent, data)
                if has_records:
                    rotated.append(key)
                if changed:
                    partitions.append(data)
            if partitions:
                kept.append(topic if len(partitions) == len(topic.partitions) else replace(topic, tuple(partitions)))
        for key in rotated:
            session.partitions[key] = session.partitions.pop(key)
        return tuple(kept), session.session_id


def _note(sent: _Sent, data: Any) -> None:
    sent.high_watermark, sent.last_stable_offset = data.high_watermark, data.last_stable_offset
    sent.log_start_offset, sent.preferred_read_replica = data.log_start_offset, getattr(data, "preferred_read_replica", -1)
