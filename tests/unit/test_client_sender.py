"""The sender's retry decision for OUT_OF_ORDER_SEQUENCE (Java's canRetry): a batch that is not
the next sequence after the last acknowledged one overtook an earlier batch still unanswered
(e.g. at the partition's old leader) and is retried; the next one fails. No event loop: the
sender is built with a stub loop and its response handling is called directly."""

from __future__ import annotations

from typing import Any

import pytest

from diskless.client import sender as sender_module
from diskless.client.accumulator import Accumulator, AccumulatorParams
from diskless.client.cluster import now_ms
from diskless.client.config import ProducerConfig
from diskless.client.errors import OutOfOrderSequenceNumberError
from diskless.client.sender import Sender
from diskless.client.structs import TopicPartition

A0 = TopicPartition("a", 0)
VALUE = b"v" * 100


class Outcome:
    """Stands in for a batch's delivery future."""

    def __init__(self) -> None:
        self.result: Any = None
        self.error: BaseException | None = None

    def done(self) -> bool:
        return self.result is not None or self.error is not None

    def set_result(self, value: Any) -> None:
        self.result = value

    def set_exception(self, error: BaseException) -> None:
        self.error = error


def two_batches_in_flight(monkeypatch: pytest.MonkeyPatch) -> tuple[Sender, Accumulator, Any, Any]:
    monkeypatch.setattr(sender_module.asyncio, "get_running_loop", lambda: None)
    acc = Accumulator(AccumulatorParams(200, 0, 1 << 20, 0, True, 5))
    acc.reset_producer_id(7, 0)
    for _ in range(2):
        batch, *_rest = acc.append(A0, 0, None, VALUE, (), now=now_ms())  # the sender's clock: within the delivery timeout
        batch.future = Outcome()
    sender = Sender(ProducerConfig(retry_backoff_ms=0), acc, None, lambda batch: None)  # type: ignore[arg-type]
    sender._need_producer_id = False  # the producer id is known
    (first,) = acc.drain(0, [1], lambda tp: 1)[1]  # to the old leader, still unanswered
    (second,) = acc.drain(0, [2], lambda tp: 2)[2]  # to the new leader
    assert (first.base_sequence, second.base_sequence) == (0, 1)
    return sender, acc, first, second


def test_out_of_order_while_an_earlier_batch_is_unanswered_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    sender, acc, first, second = two_batches_in_flight(monkeypatch)
    sender._retry_or_fail(second, OutOfOrderSequenceNumberError("out of order", topic="a", partition=0))
    assert second.future.error is None and list(acc.partitions[A0].queue) == [second]
    assert not acc.is_next_sequence(second)
    sender._succeed(first, 0, -1)
    assert acc.is_next_sequence(second)


def test_out_of_order_for_the_next_sequence_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    sender, acc, first, second = two_batches_in_flight(monkeypatch)
    sender._succeed(first, 0, -1)
    error = OutOfOrderSequenceNumberError("out of order", topic="a", partition=0)
    sender._retry_or_fail(second, error)
    assert second.future.error is error and not acc.partitions[A0].queue


def test_a_new_producer_id_resets_the_acknowledged_sequence() -> None:
    acc = Accumulator(AccumulatorParams(1000, 0, 1 << 20, 0, True, 5))
    acc.reset_producer_id(7, 0)
    acc.append(A0, 0, None, VALUE, (), now=0)
    (batch,) = acc.drain(0, [1], lambda tp: 1)[1]
    acc.completed(batch, acknowledged=True)
    assert acc.partitions[A0].acked_sequence == 1
    acc.reset_producer_id(7, 1)
    acc.append(A0, 0, None, VALUE, (), now=0)
    (batch,) = acc.drain(0, [1], lambda tp: 1)[1]
    assert batch.base_sequence == 0 and acc.is_next_sequence(batch)
