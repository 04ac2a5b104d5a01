"""Where each leadership of a partition began, and Kafka's answer to OffsetForLeaderEpoch
from that (KIP-101, KIP-320).

Kafka keeps the history in each replica's leader epoch cache (LeaderEpochFileCache): one
(leader epoch, start offset) entry per leadership, the start being the log end offset when
the leader took the partition. Here the bucket keeps it: every leader that takes a partition
at epoch E >= 2 writes the mark `T/P/epochs/E-O-I.epoch` (wal/epoch_marks.py), O the durable
end then; epoch 1 fenced nobody and has none. A broker without write-ahead objects writes no
marks; its own leaderships are in its leader-epoch-checkpoint file (epoch_checkpoint.py),
which fills in. The current leadership is known to the leader itself.

A mark that never landed (its leader died first) leaves its epoch out: the answer for the
epoch before it is then a later start, never an earlier one. A mark is the durable end when
its leadership began; a leader that kept the unacknowledged tail of its own previous
leadership (acks=1 batches, resent to the bucket) began above it, at its log end: its own
answers use that (and its checkpoint keeps it), another broker's later answers the mark. Every offset a consumer read at
epoch E lies below the start of the next leadership (it read only durable records, and the
next leader began at the durable end), so an answer from this history never reports a
truncation that did not happen, which is what a consumer validating its position after a
leader change (KIP-320) checks it for.

`end_offset_for` is sans-IO; `epoch_starts` reads the bucket (one LIST) and the checkpoint.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path

from cold_tier.layout import epochs_prefix, parse_epoch_key
from cold_tier.store import ObjectStore

from .epoch_checkpoint import leader_epochs

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


def end_offset_for(starts: Sequence[tuple[int, int]], requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
    """(leader epoch, end offset) for `requested_epoch`, as Kafka's LeaderEpochFileCache.endOffsetFor:
    the latest epoch ends at the log end; an earlier one where the next known leadership began,
    reported under the largest known epoch not above it (or the requested one if none is);
    an epoch above every known one, or UNDEFINED_EPOCH, is (-1, -1). `starts` is sorted by epoch."""
    if requested_epoch == UNDEFINED_EPOCH or not starts:
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    if requested_epoch == starts[-1][0]:
        return requested_epoch, log_end_offset
    higher = next(((epoch, start) for epoch, start in starts if epoch > requested_epoch), None)
    if higher is None:
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    floor = [epoch for epoch, _ in starts if epoch <= requested_epoch]
    return (floor[-1] if floor else requested_epoch), higher[1]


async def epoch_starts(
    bucket: ObjectStore, topic: str, index: int, topic_id: uuid.UUID | None, log_dir: Path, current: tuple[int, int],
) -> list[tuple[int, int]]:
    """(leader epoch, start offset) of every leadership of the partition known, oldest first,
    up to `current` (the leader's own). Marks of a deleted topic of the same name are left out."""
    starts: dict[int, int] = {}
    for info in await bucket.list(epochs_prefix(topic, index)):
        parsed = parse_epoch_key(info.key)
        if parsed is not None and (topic_id is None or parsed[2] == topic_id):
            starts[parsed[0]] = min(parsed[1], starts.get(parsed[0], parsed[1]))
    # This broker's own leaderships as it began them: above a mark's durable end when it kept the
    # earlier leadership's tail (whose batches carry that earlier epoch).
    starts.update(leader_epochs(log_dir))
    starts[current[0]] = current[1]
    return sorted((epoch, start) for epoch, start in starts.items() if epoch <= current[0])
