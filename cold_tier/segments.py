"""Segment objects in the bucket: upload, delete, list, and find garbage. The protocol is
layout.py's (read its module docstring); this is the thin async shell that runs it.

Upload (`upload_segment`): PUT the .log (exactly its first `size_bytes`), .index,
.timeindex, .txnindex and (when the caller has one) .snapshot concurrently, HEAD the .log to make sure the store holds exactly the size the
commit key will claim (readers trust that size for their chunk arithmetic), then PUT the
empty commit object LAST with `if_none_match`. A crash or
error at any step before the commit leaves data objects that no commit names: invisible to
readers, found by `find_orphans`. Calling `upload_segment` again with the same `upload_id`
is idempotent: if the commit already exists nothing is uploaded again, and a commit PUT that
answers PreconditionFailed (our own earlier try landed, its answer was lost) counts as done
when the commit object is there and empty.

Delete (`delete_segment`, `delete_topic_objects`): commit objects first, then data objects,
so the bucket never holds a commit whose data is gone, and a crash half-way leaves only
garbage. Both are idempotent. A reader that listed before the delete may still find the data
gone: RemoteLogReader raises RemoteSegmentMissing then.

Garbage collection (`find_orphans`): data objects of uploads without a commit object. An
upload in progress looks the same, so a caller deletes a key only once it has been an orphan
for longer than any upload takes (remember when each was first seen; a later pass deletes
those still orphaned after the grace period).

Every function takes the store as its first argument and may run on any task of the store's
event loop; none keeps state.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from .errors import InvalidSegmentKey, ObjectNotFound, PreconditionFailed, StoreUnavailable
from .layout import (
    COMMIT_SUFFIX,
    COMMITS_DIRECTORY,
    MAX_PARTITION,
    CommittedSegment,
    commits_prefix,
    new_upload_id,
    parse_catalogue,
    parse_commit_key,
    parse_segment_object_key,
    partition_prefix,
    topic_id_key,
    topic_prefix,
)
from .remote_errors import SegmentFileMismatch
from .store import DEFAULT_PART_BYTES, ObjectStore

_COPY_BUFFER_BYTES = 1024 * 1024


async def upload_segment(
    store: ObjectStore,
    *,
    topic: str,
    partition: int,
    log_path: str | os.PathLike[str],
    index_path: str | os.PathLike[str],
    timeindex_path: str | os.PathLike[str],
    base_offset: int,
    last_offset: int,
    base_timestamp: int,
    max_timestamp: int,
    size_bytes: int,
    leader_epoch: int,
    upload_id: str | None = None,
    part_bytes: int = DEFAULT_PART_BYTES,
    txn_index: bytes = b"",
    producer_snapshot: bytes | None = None,
) -> CommittedSegment:
    """Upload one rolled segment and commit it; return what its commit key says.

    Only the first `size_bytes` of the .log are uploaded (the broker passes the rolled size);
    a .log shorter than that raises SegmentFileMismatch. Store errors pass through; after any
    error nothing is committed unless the commit itself landed (then a retry with the same
    `upload_id` returns at once).
    """
    segment = CommittedSegment(
        topic=topic,
        partition=partition,
        base_offset=base_offset,
        last_offset=last_offset,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        size_bytes=size_bytes,
        leader_epoch=leader_epoch,
        upload_id=new_upload_id() if upload_id is None else upload_id,
    )
    if upload_id is not None and await _is_committed(store, segment.commit_key):
        return segment
    return await _upload(store, segment, log_path, index_path, timeindex_path, part_bytes, txn_index, producer_snapshot)


async def upload_committed(
    store: ObjectStore,
    segment: CommittedSegment,
    *,
    log_path: str | os.PathLike[str],
    index_path: str | os.PathLike[str],
    timeindex_path: str | os.PathLike[str],
    part_bytes: int = DEFAULT_PART_BYTES,
    txn_index: bytes = b"",
    producer_snapshot: bytes | None = None,
) -> CommittedSegment:
    """`upload_segment` for a descriptor the caller already made (and catalogued): a retry
    of the same descriptor whose commit landed returns at once."""
    if await _is_committed(store, segment.commit_key):
        return segment
    return await _upload(store, segment, log_path, index_path, timeindex_path, part_bytes, txn_index, producer_snapshot)


async def _upload(
    store: ObjectStore,
    segment: CommittedSegment,
    log_path: str | os.PathLike[str],
    index_path: str | os.PathLike[str],
    timeindex_path: str | os.PathLike[str],
    part_bytes: int,
    txn_index: bytes,
    producer_snapshot: bytes | None,
) -> CommittedSegment:
    size_bytes = segment.size_bytes
    small = [store.put(segment.txn_index_key, txn_index)]
    if producer_snapshot is not None:
        small.append(store.put(segment.producer_snapshot_key, producer_snapshot))
    async with _exact_prefix(log_path, segment.log_key, size_bytes) as log_source:
        await _all_or_none(
            store.put_file(segment.log_key, log_source, part_bytes=part_bytes),
            store.put_file(segment.index_key, index_path, part_bytes=part_bytes),
            store.put_file(segment.time_index_key, timeindex_path, part_bytes=part_bytes),
            *small,
        )
    uploaded = await store.head(segment.log_key)
    if uploaded is None:
        raise ObjectNotFound(segment.log_key)  # deleted behind our back: a GC without grace period
    if uploaded.size_bytes != size_bytes:
        raise SegmentFileMismatch(log_path, segment.log_key, size_bytes, uploaded.size_bytes)
    await _commit(store, segment.commit_key)
    return segment


async def delete_segment(store: ObjectStore, segment: CommittedSegment) -> None:
    """Delete a committed segment: its commit object first, then its data objects."""
    await store.delete(segment.commit_key)
    await store.delete_many(segment.data_keys)


async def list_catalogue(store: ObjectStore, topic: str, partition: int) -> list[CommittedSegment]:
    """The partition's committed segments, sorted by base offset: one LIST of its commits."""
    infos = await store.list(commits_prefix(topic, partition))
    return parse_catalogue(info.key for info in infos)


async def list_topic_partitions(store: ObjectStore, topic: str) -> list[int]:
    """The partitions that hold any object of `topic`, ascending. One LIST of the topic's
    whole prefix (every object of every partition), so it costs a page per 1000 objects."""
    prefix = topic_prefix(topic)
    partitions: set[int] = set()
    for info in await store.list(prefix):
        name, slash, _ = info.key[len(prefix) :].partition("/")
        if slash and _is_partition(name):
            partitions.add(int(name))
    return sorted(partitions)


async def delete_topic_objects(store: ObjectStore, topic: str) -> int:
    """Delete every object under the topic's prefix, commit objects first; return how many
    there were. Run it once nothing uploads to the topic any more (the topic is deleted)."""
    keys = [info.key for info in await store.list(topic_prefix(topic))]
    commits = [key for key in keys if _is_commit_key(key)]
    await store.delete_many(commits)
    await store.delete_many(key for key in keys if not _is_commit_key(key))
    return len(keys)


async def put_topic_id(store: ObjectStore, topic: str, topic_id: uuid.UUID) -> None:
    """Name the topic that `topic` now is (layout.topic_id_key): after delete_topic_objects of
    any older topic of the name, before its first write."""
    await store.put(topic_id_key(topic), str(topic_id).encode())


async def find_orphans(
    store: ObjectStore, topic: str, partition: int, committed: Iterable[CommittedSegment]
) -> list[str]:
    """Data and index keys of the partition that no commit names, sorted: neither a segment in
    `committed` nor any commit object in the bucket (losers of overlap resolution included,
    so their data is not taken from under their commit). Keys outside the layout are left
    alone. See the module docstring for the grace period a caller must apply."""
    named = {(segment.base_offset, segment.upload_id) for segment in committed}
    data_keys: list[tuple[str, tuple[int, str]]] = []
    for info in await store.list(partition_prefix(topic, partition)):
        key = info.key
        if _is_commit_key(key):
            if key.endswith(COMMIT_SUFFIX):
                listed = parse_commit_key(key)  # a bad commit key raises: it may name live data
                named.add((listed.base_offset, listed.upload_id))
            continue
        try:
            parsed = parse_segment_object_key(key)
        except InvalidSegmentKey:
            continue  # not one of ours
        data_keys.append((key, (parsed.base_offset, parsed.upload_id)))
    return sorted(key for key, upload in data_keys if upload not in named)


async def _is_committed(store: ObjectStore, commit_key: str) -> bool:
    info = await store.head(commit_key)
    return info is not None and info.size_bytes == 0


async def _commit(store: ObjectStore, commit_key: str) -> None:
    try:
        await store.put(commit_key, b"", if_none_match=True)
    except PreconditionFailed:
        # Commit keys carry a unique upload id: the object there is our own earlier try
        # (retried after a lost answer) if it is empty; anything else is a real clash.
        if not await _is_committed(store, commit_key):
            raise
    except StoreUnavailable:
        # Outcome unknown: the commit may have landed.
        try:
            committed = await _is_committed(store, commit_key)
        except StoreUnavailable:
            committed = False
        if not committed:
            raise


async def _all_or_none(*uploads: Coroutine[Any, Any, None]) -> None:
    """Run the uploads concurrently; on the first failure cancel the rest and raise it as is
    (not wrapped in an ExceptionGroup, so callers catch the store's own error types)."""
    tasks = [asyncio.ensure_future(upload) for upload in uploads]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


@asynccontextmanager
async def _exact_prefix(path: str | os.PathLike[str], key: str, size_bytes: int) -> AsyncIterator[Path]:
    """`path` itself when it is exactly `size_bytes` long, else a temporary copy of its first
    `size_bytes` (stores upload whole files)."""
    actual = os.path.getsize(path)
    if actual < size_bytes:
        raise SegmentFileMismatch(path, key, size_bytes, actual)
    if actual == size_bytes:
        yield Path(path)
        return
    descriptor, temp_name = tempfile.mkstemp(prefix="diskless-upload-", suffix=".log")
    try:
        await asyncio.to_thread(_copy_prefix, path, descriptor, key, size_bytes)
        yield Path(temp_name)
    finally:
        os.unlink(temp_name)


def _copy_prefix(path: str | os.PathLike[str], descriptor: int, key: str, size_bytes: int) -> None:
    with open(path, "rb") as source, os.fdopen(descriptor, "wb") as target:
        remaining = size_bytes
        while remaining:
            block = source.read(min(_COPY_BUFFER_BYTES, remaining))
            if not block:
                raise SegmentFileMismatch(path, key, size_bytes, size_bytes - remaining)
            target.write(block)
            remaining -= len(block)


def _is_commit_key(key: str) -> bool:
    parts = key.split("/")
    return len(parts) == 4 and parts[2] == COMMITS_DIRECTORY


def _is_partition(name: str) -> bool:
    return name.isdigit() and name.isascii() and (name == "0" or name[0] != "0") and int(name) <= MAX_PARTITION
