"""KIP-890 part 1 on the produce path: a transactional batch the coordinator did not verify is
answered with the verification's own error code, not one code for all. NOT_ENOUGH_REPLICAS
(the coordinator elsewhere could not be asked) is retriable, so the producer retries instead
of failing its transaction; the others are the coordinator's verdict.

Produce is driven through its handler against a stand-in broker whose partition runs the
leader's own check (PartitionLeader._check_transactional), once with the coordinator's answer
coming from another broker (handlers/transactions.verify_elsewhere) and once in process
(broker.transactions.verify)."""

from __future__ import annotations

import asyncio
import datetime
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from diskless.broker.errors import OutOfOrderSequence, TxnVerificationFailed, error_code_for
from diskless.broker.handlers import produce
from diskless.broker.partition.leader import PartitionLeader
from diskless.broker.refused_batches import RefusedBatches
from diskless.broker.txn.produce_turns import ProduceTurns
from hot_tier import AppendInfo
from hot_tier.records import Record, encode_batch, read_header
from hot_tier.records.transactions import PartitionTxns

TOPIC, INDEX, PRODUCER_ID, PRODUCER_EPOCH = "orders", 0, 7, 2
OUTCOMES = [ErrorCode.not_enough_replicas, ErrorCode.invalid_producer_epoch, ErrorCode.invalid_producer_id_mapping, ErrorCode.invalid_txn_state]


class Partition:
    """A leader with no transaction open for the producer: its first batch must be verified."""

    topic, index = TOPIC, INDEX

    def __init__(self) -> None:
        self.txns = PartitionTxns()

    def append(self, records: bytes, now_ms: int, verify: Any) -> Any:
        PartitionLeader._check_transactional(self, read_header(records, 0, check_crc=False), verify)  # type: ignore[arg-type]
        raise AssertionError("the batch was verified")


class Appending(Partition):
    """One that appends a verified batch at offset 0."""

    log_start_offset = 0

    def append(self, records: bytes, now_ms: int, verify: Any) -> Any:
        PartitionLeader._check_transactional(self, read_header(records, 0, check_crc=False), verify)  # type: ignore[arg-type]
        self.txns.on_data(PRODUCER_ID, 0)
        return AppendInfo(0, 0, now_ms, -1, 0, 0)


def broker(partition: Partition, in_process: ErrorCode) -> Any:
    async def until_open(keys: Any, timeout_s: float) -> None:
        return None

    registry = SimpleNamespace(until_open=until_open, partition=partition)
    registry.leader = lambda topic, index: registry.partition if (topic, index) == (TOPIC, INDEX) else None
    return SimpleNamespace(
        registry=registry,
        security=SimpleNamespace(allowed=lambda *args: True),
        transactions=SimpleNamespace(verify=lambda producer_id, epoch, topic, index: in_process, produce_turns=ProduceTurns()),
        refused_batches=RefusedBatches(),
        clock=lambda: 1_000,
    )


def request() -> Any:
    batch = encode_batch([Record(0, 1_000, b"k", b"v")], base_offset=0, producer_id=PRODUCER_ID, producer_epoch=PRODUCER_EPOCH,
                         base_sequence=0, is_transactional=True)  # fmt: skip
    body = SimpleNamespace(
        transactional_id="tx", acks=1, timeout=datetime.timedelta(seconds=5),
        topic_data=[SimpleNamespace(name=TOPIC, partition_data=[SimpleNamespace(index=INDEX, records=batch)])],
    )  # fmt: skip
    return SimpleNamespace(header=SimpleNamespace(api_version=9, client_id="producer-1"), body=body)


def error_of(response: Any) -> ErrorCode:
    [topic] = response.responses
    [answer] = topic.partition_responses
    assert answer.base_offset == -1
    return answer.error_code


@pytest.mark.parametrize("code", OUTCOMES, ids=lambda c: c.name)
async def test_produce_answers_the_code_the_coordinator_elsewhere_returned(code: ErrorCode, monkeypatch: pytest.MonkeyPatch) -> None:
    asked = []

    async def verify_elsewhere(broker: Any, transactional_id: str, batches: list[tuple[str, int, int, int]]) -> dict[tuple[str, int], ErrorCode]:
        asked.append((transactional_id, batches))
        return {(TOPIC, INDEX): code}

    monkeypatch.setattr(produce.transactions, "verify_elsewhere", verify_elsewhere)
    response = await produce.handle_produce(broker(Partition(), in_process=ErrorCode.none), request())
    assert asked == [("tx", [(TOPIC, INDEX, PRODUCER_ID, PRODUCER_EPOCH)])]
    assert error_of(response) is code


@pytest.mark.parametrize("code", OUTCOMES, ids=lambda c: c.name)
async def test_produce_answers_the_code_the_coordinator_here_returned(code: ErrorCode, monkeypatch: pytest.MonkeyPatch) -> None:
    async def verify_elsewhere(broker: Any, transactional_id: str, batches: list[tuple[str, int, int, int]]) -> dict[tuple[str, int], ErrorCode]:
        return {}  # the coordinator is this broker

    monkeypatch.setattr(produce.transactions, "verify_elsewhere", verify_elsewhere)
    response = await produce.handle_produce(broker(Partition(), in_process=code), request())
    assert error_of(response) is code


def test_not_enough_replicas_stays_retriable_and_an_unknown_code_falls_back() -> None:
    assert error_code_for(TxnVerificationFailed(TOPIC, INDEX, PRODUCER_ID, ErrorCode.not_enough_replicas)).retriable
    assert error_code_for(TxnVerificationFailed(TOPIC, INDEX, PRODUCER_ID, int(ErrorCode.invalid_producer_epoch))) is ErrorCode.invalid_producer_epoch
    assert error_code_for(TxnVerificationFailed(TOPIC, INDEX, PRODUCER_ID, "refused")) is ErrorCode.invalid_txn_state
    assert error_code_for(TxnVerificationFailed(TOPIC, INDEX, PRODUCER_ID, ErrorCode.none)) is ErrorCode.invalid_txn_state


async def test_a_verification_a_marker_overtook_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    """The coordinator elsewhere answered that the transaction holds the partition, but the
    producer's marker (the end of that transaction, say an abort) reached the partition while
    it was asked: the answer is stale (Kafka's VerificationGuard). Appended, the batch would
    open a transaction no marker ends; the producer is told to retry instead, and verified again."""
    target = Appending()
    during: list[Any] = []

    async def verify_elsewhere(broker: Any, transactional_id: str, batches: list[tuple[str, int, int, int]]) -> dict[tuple[str, int], ErrorCode]:
        for event in during:
            event()
        return {(TOPIC, INDEX): ErrorCode.none}

    monkeypatch.setattr(produce.transactions, "verify_elsewhere", verify_elsewhere)
    stand_in = broker(target, in_process=ErrorCode.none)
    during.append(lambda: target.txns.on_marker(PRODUCER_ID, 5, False, 0))
    assert error_of(await produce.handle_produce(stand_in, request())) is ErrorCode.not_enough_replicas
    during[:] = [lambda: setattr(stand_in.registry, "partition", Appending())]  # a new leadership meanwhile
    assert error_of(await produce.handle_produce(stand_in, request())) is ErrorCode.not_enough_replicas
    during.clear()
    stand_in.registry.partition = target
    [topic] = (await produce.handle_produce(stand_in, request())).responses
    [answer] = topic.partition_responses
    assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 0)
    assert target.txns.is_ongoing(PRODUCER_ID) and target.txns._verifying == {}  # the guard went with the request


class Sequencing(Partition):
    """A leader that checks sequences as the producer state does, and records what it appended."""

    log_start_offset = 0

    def __init__(self) -> None:
        super().__init__()
        self.appended: list[int] = []

    def append(self, records: bytes, now_ms: int, verify: Any) -> Any:
        header = read_header(records, 0, check_crc=False)
        if not self.txns.is_ongoing(PRODUCER_ID):
            PartitionLeader._check_transactional(self, header, verify)  # type: ignore[arg-type]
        expected = self.appended[-1] + 1 if self.appended else 0
        if header.base_sequence != expected:
            raise OutOfOrderSequence(PRODUCER_ID, PRODUCER_EPOCH, header.base_sequence, expected - 1, expected)
        self.appended.append(header.base_sequence)
        self.txns.on_data(PRODUCER_ID, len(self.appended) - 1)
        return AppendInfo(len(self.appended) - 1, len(self.appended) - 1, now_ms, -1, 0, 0)


def request_at(sequence: int) -> Any:
    made = request()
    made.body.topic_data[0].partition_data[0].records = encode_batch(
        [Record(0, 1_000, b"k", b"v")], base_offset=0, producer_id=PRODUCER_ID, producer_epoch=PRODUCER_EPOCH,
        base_sequence=sequence, is_transactional=True,
    )  # fmt: skip
    return made


async def test_pipelined_requests_verified_elsewhere_append_in_the_order_they_came(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first two batches of a partition, pipelined: each would open the transaction there,
    so each asks the coordinator elsewhere (one connection each). The second's answer comes
    first; it still waits for the first to append, and then needs no verification at all."""
    target = Sequencing()
    answers: dict[int, asyncio.Future[None]] = {}
    asked: list[int] = []

    async def verify_elsewhere(broker: Any, transactional_id: str, batches: list[tuple[str, int, int, int]]) -> dict[tuple[str, int], ErrorCode]:
        if not batches:
            return {}
        asked.append(len(asked))
        await answers.setdefault(len(asked) - 1, asyncio.get_running_loop().create_future())
        return {(TOPIC, INDEX): ErrorCode.none}

    monkeypatch.setattr(produce.transactions, "verify_elsewhere", verify_elsewhere)
    stand_in = broker(target, in_process=ErrorCode.none)
    first = asyncio.ensure_future(produce.handle_produce(stand_in, request_at(0)))
    second = asyncio.ensure_future(produce.handle_produce(stand_in, request_at(1)))
    await asyncio.sleep(0)
    for index in sorted(answers, reverse=True):  # the later answer first
        answers[index].set_result(None)
    responses = await asyncio.wait_for(asyncio.gather(first, second), 5)
    assert asked == [0]  # the second waited for its turn, then had nothing to verify
    assert target.appended == [0, 1]
    assert [r.responses[0].partition_responses[0].error_code for r in responses] == [ErrorCode.none, ErrorCode.none]
    assert len(stand_in.transactions.produce_turns) == 0
