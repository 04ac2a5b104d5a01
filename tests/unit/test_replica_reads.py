"""Reads from any broker (KIP-392): which broker a consumer's rack is sent to, the write-ahead
batches that continue a partition's segments, and how far a read_committed read may go."""

from __future__ import annotations

from diskless.broker.replica_reads import contiguous, preferred_read_replica, transaction_free_prefix
from hot_tier.records import Record, encode_batch
from metadata import BrokerRegistration, WalBatch


def broker(node: int, rack: str | None) -> BrokerRegistration:
    return BrokerRegistration(node, "127.0.0.1", 9090 + node, rack, f"i{node}", True)


def test_the_preferred_read_replica_is_a_broker_of_the_consumers_rack() -> None:
    brokers = [broker(1, "a"), broker(2, "b"), broker(3, "b"), broker(4, None)]
    chosen = {preferred_read_replica(brokers, 1, "b", "t", p) for p in range(40)}
    assert chosen == {2, 3}  # partitions spread over the rack's brokers
    assert preferred_read_replica(brokers, 1, "b", "t", 7) == preferred_read_replica(brokers, 4, "b", "t", 7)  # every leader agrees
    assert preferred_read_replica(brokers, 2, "b", "t", 7) is None  # the leader is in that rack: it serves
    assert preferred_read_replica(brokers, 1, "c", "t", 7) is None  # nobody in that rack
    assert preferred_read_replica(brokers, 1, "", "t", 7) is None  # no client.rack


def wal(base: int, last: int, key: str = "k") -> WalBatch:
    return WalBatch("t", 0, base, last, 0, key, base * 10, 10)


def test_write_ahead_batches_continue_the_log_up_to_the_first_gap() -> None:
    batches = [wal(10, 14), wal(0, 9), wal(15, 15), wal(20, 29), wal(16, 19)]
    assert contiguous(batches, 10) == (wal(10, 14), wal(15, 15), wal(16, 19), wal(20, 29))
    assert contiguous(batches, 12) == (wal(10, 14), wal(15, 15), wal(16, 19), wal(20, 29))  # the log start inside a batch
    assert contiguous([wal(10, 14), wal(16, 19)], 10) == (wal(10, 14),)  # a hole: the tail ends before it
    assert contiguous([wal(11, 14)], 10) == ()
    assert contiguous([], 10) == ()


def data_batch(base: int, count: int, **kwargs) -> bytes:
    return encode_batch([Record(base + i, 0, None, b"v") for i in range(count)], base_offset=base, **kwargs)


def test_read_committed_stops_before_the_first_transactional_or_control_batch() -> None:
    plain = data_batch(0, 3) + data_batch(3, 2)
    transactional = data_batch(5, 2, is_transactional=True, producer_id=7, producer_epoch=0)
    marker = encode_batch([Record(7, 0, b"\x00\x00\x00\x00", b"\x00\x00")], base_offset=7, is_control=True,
                          is_transactional=True, producer_id=7, producer_epoch=0)  # fmt: skip
    assert transaction_free_prefix(plain) == len(plain)
    assert transaction_free_prefix(plain + transactional + data_batch(7, 1)) == len(plain)
    assert transaction_free_prefix(plain + marker) == len(plain)
    assert transaction_free_prefix(transactional + plain) == 0
    assert transaction_free_prefix(b"") == 0
