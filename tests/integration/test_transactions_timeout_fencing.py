"""A producer whose transaction the coordinator aborted for its transaction.timeout.ms is fenced,
as by Kafka (the fencing bump keeps no previous epoch, KIP-360's lastProducerEpoch is -1):
librdkafka's commit and abort fail with the fatal _FENCED, and a new producer with the same
transactional.id carries on. The previous epoch a producer's own bump keeps travels in the
coordinator's row (the offsets JSON): read back exactly from every metadata backend.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException

from metadata import MetadataStore
from metadata.transactions import COMPLETE_ABORT, EMPTY, TransactionRecord

from .conftest import ON_EVERY_METADATA_BACKEND
from .test_metadata_transactions import store  # noqa: F401 (the fixture: SQLite and PostgreSQL)
from .test_transactions_confluent import DEADLINE_S, consume_all, transactional_producer, values


@ON_EVERY_METADATA_BACKEND
def test_a_producer_whose_transaction_timed_out_is_fenced_and_a_new_one_carries_on(shared_broker, create_topic) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=1)
    transactional_id = f"tx-{uuid.uuid4().hex[:10]}"
    silent = transactional_producer(shared_broker.bootstrap, transactional_id, **{"transaction.timeout.ms": 2000})
    silent.begin_transaction()
    for i in range(5):
        silent.produce(topic, value=f"silent-{i}".encode(), partition=0)
    silent.flush(DEADLINE_S)
    deadline = time.monotonic() + DEADLINE_S
    while not any(transactional_id in line and "timed out after 2000 ms: aborting it" in line for line in shared_broker.log_text().splitlines()):
        assert time.monotonic() < deadline, "the coordinator did not abort the silent transaction"
        time.sleep(0.1)
    with pytest.raises(KafkaException) as committed:
        silent.commit_transaction(DEADLINE_S)
    error = committed.value.args[0]
    assert (error.code(), error.fatal()) == (KafkaError._FENCED, True)
    with pytest.raises(KafkaException) as aborted:
        silent.abort_transaction(DEADLINE_S)
    assert aborted.value.args[0].fatal()
    successor = transactional_producer(shared_broker.bootstrap, transactional_id)
    successor.begin_transaction()
    for i in range(3):
        successor.produce(topic, value=f"next-{i}".encode(), partition=0)
    successor.commit_transaction(DEADLINE_S)
    got = consume_all(shared_broker.bootstrap, topic, "read_committed", 3, partitions=1)
    assert values(got) == {0: [f"next-{i}" for i in range(3)]}


async def test_the_previous_producer_epoch_is_read_back_from_the_store(store: MetadataStore) -> None:  # noqa: F811 (the fixture)
    bumped = TransactionRecord("tx", 7000, 5, 60_000, EMPTY, last_update_ms=10, last_producer_epoch=4)
    fenced = TransactionRecord("tx-2", 7001, 9, 60_000, COMPLETE_ABORT, txn_start_ms=3, last_update_ms=11)
    await store.put_transaction(bumped)
    await store.put_transaction(fenced)
    assert await store.list_transactions() == [bumped, fenced]
    await store.put_transaction(TransactionRecord("tx", 7000, 6, 60_000, EMPTY, last_update_ms=12))  # a fencing bump: none kept
    assert [r.last_producer_epoch for r in await store.list_transactions()] == [-1, -1]
