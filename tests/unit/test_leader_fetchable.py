"""What a leader answers about offsets appended but not yet durable (above the high watermark),
as Kafka's leader does: ListOffsets by timestamp (and MAX_TIMESTAMP) finds only fetchable
records, below the high watermark (the last stable offset for read_committed), and a fetch
between the high watermark and the log end is answered nothing rather than out of range.
Answered otherwise, a consumer seeking to such an offset got OFFSET_OUT_OF_RANGE and applied
auto.offset.reset (a replay from the start, or skipped records).

And when a leader may send a consumer to a replica (KIP-392): only for partitions whose every
batch is in the bucket, and, for read_committed, none transactional as far as it saw them all."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from diskless.broker.partition.leader import PartitionLeader
from diskless.broker.partition.rules import PartitionRules
from hot_tier import Log, LogConfig, OffsetOutOfRange
from hot_tier.records import Record, encode_batch


class Wal:
    def __init__(self) -> None:
        self.futures: list[asyncio.Future[None]] = []

    def check_room(self) -> None:
        pass

    def submit(self, topic, partition, leader_epoch, base_offset, last_offset, data, topic_id=None):
        self.futures.append(asyncio.get_running_loop().create_future())
        return self.futures[-1]


def leader(tmp_path: Path, wal: Wal | None, *, tiered: bool = True, local_start: int = 0, log_start: int = 0) -> PartitionLeader:
    log = Log.open(tmp_path / "t-0", LogConfig(), local_start, log_start_offset=None)
    if local_start:
        log.truncate_fully_and_start_at(local_start)
    rules = PartitionRules(max_message_bytes=1 << 20, log_append_time=False, tiered=tiered, retention=(-1, -1), local_retention=(-1, -1))
    uploads = SimpleNamespace(check_disk=lambda: None, rolled=lambda: None, wake=lambda: None)
    return PartitionLeader(
        "t", uuid.uuid4(), 0, log, rules, SimpleNamespace(start_offset=None, end_offset=0, may_hold_timestamp=lambda ts: False, max_timestamp=lambda: None),
        None, uploads, wal, leader_epoch=1, log_start_offset=log_start, high_watermark=local_start, producer_id_expiration_ms=10**9,
    )  # fmt: skip


def batch(timestamp: int) -> bytes:
    return encode_batch([Record(0, timestamp, None, b"v")])


async def test_records_not_yet_durable_are_not_found_by_timestamp_nor_out_of_range(tmp_path: Path) -> None:
    wal = Wal()
    partition = leader(tmp_path, wal)
    for timestamp in (1_000, 2_000, 3_000):
        partition.append(batch(timestamp), 0)
    wal.futures[0].set_result(None)
    await asyncio.sleep(0)  # the durable callback
    assert (partition.high_watermark, partition.log_end_offset) == (1, 3)
    assert await partition.offset_for_timestamp(500) == (1_000, 0)
    assert await partition.offset_for_timestamp(1_500) is None  # offset 1: appended, not durable
    assert await partition.max_timestamp_offset() is None  # 3_000 at offset 2, not durable
    assert await partition.offset_for_timestamp(500, fetchable_below=0) is None  # read_committed below a last stable offset of 0
    assert await partition.read(1, 1 << 20, min_one_batch=True) is None  # nothing yet, not out of range
    assert await partition.read(3, 1 << 20, min_one_batch=True) is None
    with pytest.raises(OffsetOutOfRange):
        await partition.read(4, 1 << 20, min_one_batch=True)
    for future in wal.futures[1:]:
        future.set_result(None)
    await asyncio.sleep(0)
    assert await partition.offset_for_timestamp(1_500) == (2_000, 1)
    assert await partition.max_timestamp_offset() == (3_000, 2)
    assert await partition.read(1, 1 << 20, min_one_batch=True) is not None
    partition.close()


def test_only_a_partition_wholly_in_the_bucket_is_read_elsewhere(tmp_path: Path) -> None:
    assert leader(tmp_path / "a", Wal()).readable_elsewhere
    assert not leader(tmp_path / "b", Wal(), tiered=False).readable_elsewhere  # its log is on this broker only
    assert not leader(tmp_path / "c", None).readable_elsewhere  # no write-ahead objects: its tail is local


def test_a_leader_that_opened_above_the_bucket_cannot_vouch_for_no_transactions(tmp_path: Path) -> None:
    assert leader(tmp_path / "a", Wal()).known_transaction_free
    # Opened with its local log from 500, the log from 0: batches 0-499 are only in the bucket,
    # and committed transactions there leave no trace in the store.
    assert not leader(tmp_path / "b", Wal(), local_start=500, log_start=0).known_transaction_free
    assert leader(tmp_path / "c", Wal(), local_start=500, log_start=500).known_transaction_free
