"""A late transaction marker of a fenced producer epoch (a coordinator that lost its slot and
has not heard yet) is refused by the partition leader with INVALID_PRODUCER_EPOCH, as Kafka's
appendEndTxnMarker refuses it, and does not end the transaction the newer epoch has open."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers.v1.request import WritableTxnMarker, WritableTxnMarkerTopic, WriteTxnMarkersRequest

from .broker_process import BrokerProcess
from .conftest import WireClient

DEADLINE_S = 30.0


def test_a_marker_of_a_fenced_epoch_is_refused_and_ends_nothing(tmp_path) -> None:
    broker = BrokerProcess(tmp_path / "data", "--group-initial-rebalance-delay-ms", "0").start()
    try:
        topic = f"t-{uuid.uuid4().hex[:12]}"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(DEADLINE_S)
        transactional_id = f"tx-{uuid.uuid4().hex[:8]}"
        config = {"bootstrap.servers": broker.bootstrap, "transactional.id": transactional_id}
        Producer(config).init_transactions(DEADLINE_S)  # epoch 0
        producer = Producer(config)
        producer.init_transactions(DEADLINE_S)  # epoch 1: the first is fenced
        producer.begin_transaction()
        producer.produce(topic, b"kept")
        assert producer.flush(DEADLINE_S) == 0

        wire = WireClient(broker.bootstrap)
        try:
            (state,) = wire.request(DescribeTransactionsRequest(transactional_ids=(transactional_id,))).transaction_states
            assert (state.error_code, state.transaction_state, state.producer_epoch) == (ErrorCode.none, "Ongoing", 1)
            stale = WritableTxnMarker(
                producer_id=state.producer_id, producer_epoch=0, transaction_result=False, coordinator_epoch=0,
                topics=(WritableTxnMarkerTopic(name=topic, partition_indexes=(0,)),),
            )  # fmt: skip
            (answer,) = wire.request(WriteTxnMarkersRequest(markers=(stale,))).markers
        finally:
            wire.close()
        assert [(t.name, p.partition_index, p.error_code) for t in answer.topics for p in t.partitions] == [
            (topic, 0, ErrorCode.invalid_producer_epoch)
        ]
        producer.commit_transaction(DEADLINE_S)  # the transaction the stale marker did not end
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                             "auto.offset.reset": "earliest", "isolation.level": "read_committed"})  # fmt: skip
        consumer.subscribe([topic])
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + DEADLINE_S
        try:
            while not got and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    got.append((message.offset(), message.value()))
        finally:
            consumer.close()
        assert got == [(0, b"kept")]  # committed, not aborted by the stale marker
    finally:
        broker.close()
