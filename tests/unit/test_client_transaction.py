"""The transaction manager's error states: a batch that fails for good makes the transaction
abortable (commit refused, abort then a new epoch), a fenced producer is fatal. The manager's
coroutines are driven by hand against a stub coordinator that answers at once: no event loop."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from diskless.client import protocol
from diskless.client.errors import MessageSizeTooLargeError, TransactionAbortableError, error_for
from diskless.client.transaction import TransactionManager


class StubCoordinator:
    """Answers every request with no error; InitProducerId bumps the epoch, as a coordinator does."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, Any]] = []
        self.epoch = -1

    async def coordinator(self, key: str, key_type: int) -> int:
        return 1

    async def request_coordinator(self, node: int, api_key: int, make: Any) -> Any:
        self.sent.append((api_key, make(0)))
        if api_key == protocol.INIT_PRODUCER_ID:
            self.epoch += 1
            return SimpleNamespace(error_code=0, producer_id=42, producer_epoch=self.epoch)
        return SimpleNamespace(error_code=0, results_by_topic_v3_and_below=())


def run(coroutine: Any) -> Any:
    """Run a coroutine that never suspends (the stub answers at once)."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError("the coroutine waited")


def manager() -> tuple[TransactionManager, StubCoordinator]:
    cluster = StubCoordinator()
    txn = TransactionManager("tx", 60000, cluster, 10, 1000)  # type: ignore[arg-type]
    assert run(txn.init()) == (42, 0)
    return txn, cluster


def test_a_failed_batch_refuses_commit_until_abort_which_takes_a_new_epoch() -> None:
    txn, cluster = manager()
    txn.begin()
    run(txn.add_partition("t", 0))
    failure = MessageSizeTooLargeError("too large", topic="t")
    txn.batch_failed(failure)
    with pytest.raises(TransactionAbortableError) as info:
        run(txn.end(commit=True))
    assert info.value.error is failure and info.value.__cause__ is failure
    with pytest.raises(TransactionAbortableError):
        run(txn.add_partition("t", 1))
    with pytest.raises(TransactionAbortableError):
        txn.begin()
    cluster.sent.clear()
    assert run(txn.end(commit=False)) is True
    (end_api, end_request), (init_api, init_request) = cluster.sent
    assert end_api == protocol.END_TXN and end_request.committed is False
    assert init_api == protocol.INIT_PRODUCER_ID and init_request.transactional_id == "tx"
    assert (txn.producer_id, txn.producer_epoch, txn.error) == (42, 1, None)
    txn.begin()
    run(txn.add_partition("t", 0))
    assert run(txn.end(commit=True)) is False


def test_a_fenced_batch_is_fatal() -> None:
    txn, _cluster = manager()
    txn.begin()
    fenced = error_for(90)
    txn.batch_failed(fenced)
    with pytest.raises(type(fenced)):
        run(txn.end(commit=False))
    with pytest.raises(type(fenced)):
        txn.begin()
