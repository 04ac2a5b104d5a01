"""A producer-state snapshot that cannot be written (a full or failing disk) at a roll does not
cut an append between the local log and the write-ahead log.

Raised out of the append after the batch was in the local log, it left the batch unsubmitted
to the write-ahead log and unrecorded in the producer state: the high watermark passed it once
later batches were durable (a gap no other broker could rebuild), and the producer's retry was
appended a second time. Now the append completes and the snapshot is written at the next one."""

from __future__ import annotations

import asyncio
import errno
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from diskless.broker.partition import leader as leader_module
from diskless.broker.partition.leader import PartitionLeader
from diskless.broker.partition.producer_snapshots import write_producer_snapshot
from diskless.broker.partition.rules import PartitionRules
from hot_tier import Log, LogConfig
from hot_tier.records import Record, encode_batch

PRODUCER_ID = 7


class Wal:
    """Records each submitted batch; its future stays pending (durability is not the point)."""

    def __init__(self) -> None:
        self.submitted: list[tuple[int, int]] = []

    def check_room(self) -> None:
        pass

    def submit(self, topic, partition, leader_epoch, base_offset, last_offset, data, topic_id=None):
        self.submitted.append((base_offset, last_offset))
        return asyncio.get_running_loop().create_future()


def batch(sequence: int) -> bytes:
    return encode_batch([Record(0, 0, None, b"v" * 200)], producer_id=PRODUCER_ID, producer_epoch=0, base_sequence=sequence)


async def test_a_failed_snapshot_at_a_roll_leaves_the_append_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=1024), 0, log_start_offset=None)
    rules = PartitionRules(max_message_bytes=1 << 20, log_append_time=False, tiered=True, retention=(-1, -1), local_retention=(-1, -1))
    uploads = SimpleNamespace(check_disk=lambda: None, rolled=lambda: None, wake=lambda: None)
    wal = Wal()
    leader = PartitionLeader(
        "t", uuid.uuid4(), 0, log, rules, SimpleNamespace(start_offset=None, end_offset=0), None, uploads, wal,
        leader_epoch=1, log_start_offset=0, high_watermark=0, producer_id_expiration_ms=10**9,
    )  # fmt: skip
    failures: list[int] = []

    def disk_full(dir, manager, keep_above=None):
        failures.append(manager.map_end_offset)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(leader_module, "write_producer_snapshot", disk_full)
    offsets = []
    sequence = 0
    while log.active_base_offset == 0:  # until the log rolls, every snapshot failing
        offsets.append(leader.append(batch(sequence), 0).first_offset)
        sequence += 1
    assert failures  # the roll tried to snapshot, and failed
    assert offsets == list(range(sequence))
    assert wal.submitted == [(o, o) for o in offsets]  # every batch went on to the write-ahead log
    # The producer state recorded each: a retry of the last batch is a duplicate, not appended again.
    retry = leader.append(batch(sequence - 1), 0)
    assert (retry.first_offset, log.log_end_offset, len(wal.submitted)) == (sequence - 1, sequence, sequence)
    # The disk has room again: the next append writes the snapshot the roll missed.
    monkeypatch.setattr(leader_module, "write_producer_snapshot", write_producer_snapshot)
    assert leader.append(batch(sequence), 0).first_offset == sequence
    assert sorted(int(p.name.split(".")[0]) for p in log.dir.glob("*.snapshot")) == [sequence + 1]
    log.close()
