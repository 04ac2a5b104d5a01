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


class TwoCoordinators:
    """The transaction coordinator is node 1, the group's node 2; node 2 first answers
    TxnOffsetCommit NOT_COORDINATOR, then with `commit_error`. Requests are built at v3."""

    def __init__(self, commit_error: int = 0) -> None:
        self.sent: list[tuple[int, int, Any]] = []
        self.looked_up: list[tuple[str, int]] = []
        self.forgotten: list[tuple[str, int]] = []
        self.commit_errors = [16, commit_error]

    async def coordinator(self, key: str, key_type: int) -> int:
        self.looked_up.append((key, key_type))
        return 1 if key_type == 1 else 2

    def forget_coordinator(self, key: str, key_type: int) -> None:
        self.forgotten.append((key, key_type))

    async def request_coordinator(self, node: int, api_key: int, make: Any) -> Any:
        self.sent.append((node, api_key, make(3)))
        if api_key == protocol.INIT_PRODUCER_ID:
            return SimpleNamespace(error_code=0, producer_id=42, producer_epoch=0)
        if api_key == protocol.TXN_OFFSET_COMMIT:
            code = self.commit_errors.pop(0)
            return SimpleNamespace(topics=(SimpleNamespace(partitions=(SimpleNamespace(error_code=code),)),))
        return SimpleNamespace(error_code=0)


def run_with_sleeps(coroutine: Any) -> Any:
    """Run a coroutine whose only waits are the retry backoff's sleeps (skipped)."""
    while True:
        try:
            coroutine.send(None)
        except StopIteration as done:
            return done.value


def test_offsets_go_to_the_group_coordinator_with_the_consumers_generation() -> None:
    from diskless.client import ConsumerGroupMetadata, TopicPartition

    cluster = TwoCoordinators()
    txn = TransactionManager("tx", 60000, cluster, 0, 1000)  # type: ignore[arg-type]
    run(txn.init())
    txn.begin()
    cluster.sent.clear()
    meta = ConsumerGroupMetadata("g", 5, "member-1", "instance-1")
    run_with_sleeps(txn.send_offsets({TopicPartition("in", 0): 7}, meta))
    (add_node, add_api, add), *commits = cluster.sent
    assert (add_node, add_api, add.group_id) == (1, protocol.ADD_OFFSETS_TO_TXN, "g")
    assert [(node, api) for node, api, _ in commits] == [(2, protocol.TXN_OFFSET_COMMIT)] * 2  # NOT_COORDINATOR, then again
    assert ("g", 0) in cluster.forgotten and ("tx", 1) not in cluster.forgotten
    request = commits[-1][2]
    assert (request.generation_id, request.member_id, request.group_instance_id) == (5, "member-1", "instance-1")
    assert request.topics[0].partitions[0].committed_offset == 7


def test_a_group_id_alone_commits_as_a_simple_group_and_a_stale_generation_is_abortable() -> None:
    from diskless.client import TopicPartition
    from diskless.client.errors import IllegalGenerationError

    cluster = TwoCoordinators(commit_error=22)
    txn = TransactionManager("tx", 60000, cluster, 0, 1000)  # type: ignore[arg-type]
    run(txn.init())
    txn.begin()
    with pytest.raises(IllegalGenerationError):
        run_with_sleeps(txn.send_offsets({TopicPartition("in", 0): 7}, "g"))
    request = cluster.sent[-1][2]
    assert (request.group_id, request.generation_id, request.member_id) == ("g", -1, "")
    with pytest.raises(TransactionAbortableError):
        run(txn.end(commit=True))
