"""The record accumulator: batching, readiness, draining, retries in sequence order, expiry."""

from __future__ import annotations

from hot_tier.records import decode_batch

from diskless.client.accumulator import NO_LEADER, Accumulator, AccumulatorParams
from diskless.client.structs import TopicPartition

A0 = TopicPartition("a", 0)
A1 = TopicPartition("a", 1)
B0 = TopicPartition("b", 0)
VALUE = b"v" * 100


def make(batch_size=1000, linger_ms=10, max_request_size=1 << 20, idempotent=False, max_in_flight=5) -> Accumulator:
    return Accumulator(AccumulatorParams(batch_size, linger_ms, max_request_size, 0, idempotent, max_in_flight))


def leader_one(_tp: TopicPartition) -> int:
    return 1


def test_records_of_a_partition_share_a_batch_until_it_is_full() -> None:
    acc = make(batch_size=1000)
    batches = set()
    fills = 0
    for i in range(20):
        batch, index, _created, filled = acc.append(A0, 1000 + i, None, VALUE, (), now=0)
        batches.add(id(batch))
        fills += filled
    queue = acc.partitions[A0].queue
    assert len(queue) == len(batches) >= 2
    assert all(b.builder.size_bytes <= 1000 for b in queue)
    assert sum(b.record_count for b in queue) == 20
    assert all(b.full for b in list(queue)[:-1])
    assert fills == len(queue) - 1  # each closed batch was reported once, as it filled


def test_a_record_larger_than_batch_size_gets_its_own_batch() -> None:
    acc = make(batch_size=100)
    batch, index, created, filled = acc.append(A0, 0, None, b"x" * 500, (), now=0)
    assert created and filled and index == 0 and batch.full


def test_buffered_bytes_count_records_until_released() -> None:
    acc = make()
    acc.append(A0, 0, b"k", VALUE, (), now=0)
    acc.append(A1, 0, None, VALUE, (), now=0)
    held = acc.buffered_bytes
    assert held > 200
    drained = acc.drain(100, [1], leader_one)
    for batch in drained[1]:
        acc.completed(batch)
    assert acc.buffered_bytes == 0


def test_a_partial_batch_is_ready_after_linger() -> None:
    acc = make(linger_ms=10)
    acc.append(A0, 0, None, VALUE, (), now=100)
    nodes, next_check, unknown = acc.ready(105, leader_one)
    assert nodes == set() and next_check == 5 and unknown == set()
    nodes, _next, _unknown = acc.ready(110, leader_one)
    assert nodes == {1}


def test_a_full_batch_or_a_flush_is_ready_at_once() -> None:
    acc = make(batch_size=300, linger_ms=1000)
    for _ in range(4):
        acc.append(A0, 0, None, VALUE, (), now=0)
    assert acc.ready(0, leader_one)[0] == {1}
    acc2 = make(linger_ms=1000)
    acc2.append(A0, 0, None, VALUE, (), now=0)
    assert acc2.ready(0, leader_one)[0] == set()
    acc2.flushing += 1
    assert acc2.ready(0, leader_one)[0] == {1}


def test_unknown_leaders_are_reported_by_topic() -> None:
    acc = make(linger_ms=0)
    acc.append(B0, 0, None, VALUE, (), now=0)
    nodes, _next, unknown = acc.ready(0, lambda tp: NO_LEADER)
    assert nodes == set() and unknown == {"b"}


def test_drain_takes_one_batch_per_partition_and_groups_by_leader() -> None:
    acc = make(batch_size=300, linger_ms=0)
    for _ in range(6):
        acc.append(A0, 0, None, VALUE, (), now=0)
    acc.append(A1, 0, None, VALUE, (), now=0)
    acc.append(B0, 0, None, VALUE, (), now=0)
    leaders = {A0: 1, A1: 2, B0: 1}
    drained = acc.drain(0, [1, 2], leaders.__getitem__)
    assert sorted(b.tp for b in drained[1]) == [A0, B0]
    assert [b.tp for b in drained[2]] == [A1]
    assert len(acc.partitions[A0].queue) >= 1  # the next batches of A0 wait their turn


def test_drain_respects_max_request_size_but_always_sends_one() -> None:
    acc = make(batch_size=10000, linger_ms=0, max_request_size=500)
    for tp in (A0, A1, B0):
        for _ in range(3):
            acc.append(tp, 0, None, VALUE, (), now=0)
    drained = acc.drain(0, [1], leader_one)
    assert len(drained[1]) == 1  # each batch is ~420 bytes: a second would pass 500


def test_without_idempotence_max_in_flight_one_keeps_one_batch_per_partition_in_flight() -> None:
    acc = make(batch_size=200, linger_ms=0, max_in_flight=1)
    for _ in range(3):
        acc.append(A0, 0, None, VALUE, (), now=0)
    first = acc.drain(0, [1], leader_one)[1]
    assert len(first) == 1
    assert acc.drain(0, [1], leader_one) == {}
    acc.completed(first[0])
    assert len(acc.drain(0, [1], leader_one)[1]) == 1


def test_idempotent_batches_get_consecutive_sequences_in_drain_order() -> None:
    acc = make(batch_size=300, linger_ms=0, idempotent=True)
    acc.reset_producer_id(77, 2)
    for _ in range(6):
        acc.append(A0, 0, None, VALUE, (), now=0)
    sent = []
    while True:
        drained = acc.drain(0, [1], leader_one)
        if not drained:
            break
        sent += drained[1]
    assert len(sent) >= 2
    expected = 0
    for batch in sent:
        header = decode_batch(batch.data).header
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 2, expected)
        expected += batch.record_count
    assert expected == 6


def test_a_retried_batch_goes_back_in_sequence_order_and_waits_for_the_partition_to_be_idle() -> None:
    acc = make(batch_size=200, linger_ms=0, idempotent=True)
    acc.reset_producer_id(5, 0)
    for _ in range(4):
        acc.append(A0, 0, None, VALUE, (), now=0)
    in_flight = []
    for _ in range(3):
        in_flight += acc.drain(0, [1], leader_one)[1]
    first, second, third = in_flight
    # The first fails; the second and third come back out of order because of it.
    acc.reenqueue(first, now=0, backoff_ms=0)
    assert acc.drain(0, [1], leader_one) == {}  # two still in flight: the retry waits
    acc.reenqueue(third, now=0, backoff_ms=0)
    acc.reenqueue(second, now=0, backoff_ms=0)
    queue = list(acc.partitions[A0].queue)
    assert [b.base_sequence for b in queue[:3]] == [first.base_sequence, second.base_sequence, third.base_sequence]
    resent = acc.drain(0, [1], leader_one)[1]
    assert resent == [first]
    assert decode_batch(first.data).header.base_sequence == 0  # the same sequence as before


def test_retry_backoff_delays_readiness() -> None:
    acc = make(linger_ms=0)
    acc.append(A0, 0, None, VALUE, (), now=0)
    (batch,) = acc.drain(0, [1], leader_one)[1]
    acc.reenqueue(batch, now=1000, backoff_ms=100)
    nodes, next_check, _ = acc.ready(1050, leader_one)
    assert nodes == set() and next_check == 50
    assert acc.ready(1100, leader_one)[0] == {1}
    assert batch.attempts == 1


def test_a_new_producer_id_restarts_sequences() -> None:
    acc = make(linger_ms=0, idempotent=True)
    acc.reset_producer_id(1, 0)
    acc.append(A0, 0, None, VALUE, (), now=0)
    (batch,) = acc.drain(0, [1], leader_one)[1]
    acc.completed(batch)
    acc.append(A0, 0, None, VALUE, (), now=0)
    acc.reset_producer_id(2, 0)
    (batch,) = acc.drain(0, [1], leader_one)[1]
    header = decode_batch(batch.data).header
    assert (header.producer_id, header.base_sequence) == (2, 0)


def test_expire_removes_queued_batches_past_the_delivery_timeout() -> None:
    acc = make(linger_ms=1000)
    acc.append(A0, 0, None, VALUE, (), now=0)
    acc.append(A1, 0, None, VALUE, (), now=500)
    expired = acc.expire(1000, delivery_timeout_ms=1000)
    assert [b.tp for b in expired] == [A0]
    assert not acc.partitions[A0].queue and acc.partitions[A1].queue
    assert acc.buffered_bytes == acc.partitions[A1].queue[0].buffered_bytes


def test_abort_all_empties_every_queue() -> None:
    acc = make()
    acc.append(A0, 0, None, VALUE, (), now=0)
    acc.append(B0, 0, None, VALUE, (), now=0)
    assert len(acc.abort_all()) == 2
    assert not acc.has_unsent() and acc.buffered_bytes == 0


def test_records_after_an_expired_batch_go_to_a_new_batch() -> None:
    acc = make(linger_ms=1000)
    first, _index, _created, _filled = acc.append(A0, 0, None, VALUE, (), now=0)
    assert acc.expire(5000, delivery_timeout_ms=1000) == [first]
    second, index, created, _filled = acc.append(A0, 0, None, VALUE, (), now=5000)
    assert created and index == 0 and second is not first
    assert list(acc.partitions[A0].queue) == [second]


def _state(acc: Accumulator) -> list:
    return [
        (tp, [(b.record_count, bytes(b.builder.body), b.builder.base_timestamp, b.builder.max_timestamp, b.full)
              for b in state.queue], state.open is None or state.open.record_count)
        for tp, state in acc.partitions.items()
    ] + [acc.buffered_bytes]  # fmt: skip


def test_a_record_the_builder_rejects_leaves_the_accumulator_as_it_was() -> None:
    # Issue O: a str value used to open (and queue) a new, empty batch before the builder raised.
    acc = make(batch_size=1000)
    acc.append(A0, 1000, None, VALUE, (), now=0)
    before = _state(acc)
    for bad in ("text", 42):
        for key, value in ((None, bad), (bad, VALUE)):
            try:
                acc.append(A0, 5000, key, value, (), now=0)
            except TypeError:
                pass
            else:
                raise AssertionError(f"{key!r}, {value!r} was accepted")
            assert _state(acc) == before
    try:
        acc.append(B0, 1000, None, "text", (), now=0)  # a partition with no batch yet
    except TypeError:
        pass
    assert [b.record_count for b in acc.partitions[B0].queue] == []
    assert acc.partitions[B0].open is None
    # A full batch: the rejected record would have opened the next one.
    for i in range(8):
        acc.append(A1, 1000 + i, None, VALUE, (), now=0)
    before = _state(acc)
    try:
        acc.append(A1, 9000, None, "x" * 200, (), now=0)
    except TypeError:
        pass
    assert _state(acc) == before
    batch, index, _created, _filled = acc.append(A0, 1001, None, b"good", (), now=0)
    assert (index, batch.record_count) == (1, 2)
    records = decode_batch(batch.builder.build()).records
    assert [(r.offset, r.timestamp, r.value) for r in records] == [(0, 1000, VALUE), (1, 1001, b"good")]


def test_a_batch_built_but_left_behind_by_max_request_size_takes_no_more_records() -> None:
    # Two partitions on one broker; the second batch is built (sequence given, bytes encoded)
    # but does not fit in the request. Records appended afterwards must not go into it: its
    # bytes and sequence range are fixed, so they would be reported delivered but never sent.
    acc = make(batch_size=10000, linger_ms=0, max_request_size=500, idempotent=True)
    acc.reset_producer_id(5, 0)
    for tp in (A0, A1):
        for _ in range(3):
            acc.append(tp, 0, None, VALUE, (), now=0)
    first = acc.drain(0, [1], leader_one)[1]
    assert len(first) == 1
    left = next(tp for tp in (A0, A1) if tp != first[0].tp)
    later, index, _created, _filled = acc.append(left, 0, None, b"late", (), now=0)
    sent = {}
    while True:
        drained = acc.drain(0, [1], leader_one)
        if not drained:
            break
        for batch in drained[1]:
            sent[batch.tp] = sent.get(batch.tp, []) + [batch]
            acc.completed(batch)
    wire = [r.value for batch in sent[left] for r in decode_batch(batch.data).records]
    assert wire == [VALUE, VALUE, VALUE, b"late"]
    assert sum(batch.record_count for batch in sent[left]) == 4
    header = decode_batch(later.data).header
    assert header.base_sequence + index == 3  # the late record's sequence follows the first three
