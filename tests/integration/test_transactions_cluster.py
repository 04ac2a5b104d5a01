"""Transactions in a cluster of three brokers (PostgreSQL, moto's S3 server): the coordinator
writes the markers of partitions other brokers lead with WriteTxnMarkers, and read_committed
consumers read exactly the committed records from every leader; a consume-transform-produce
whose group and transactional id are coordinated by different brokers commits its offsets
with its transactions (the group's coordinator hands TxnOffsetCommit on)."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition

from .test_cluster import DEADLINE_S, Cluster, cluster, create, leaders, moto_bucket, wait_until  # noqa: F401 (fixtures)
from .test_cluster_coordinators import TRANSACTION_KEY, coordinators
from .test_transactions_confluent import consume_all, tid, transactional_producer, values

PARTITIONS = 6


def test_transactions_over_partitions_of_every_broker(cluster: Cluster) -> None:
    topic = create(cluster.bootstrap, PARTITIONS)
    led = wait_until(lambda: l if len(set((l := leaders(cluster.bootstrap, topic)).values())) == 3 else None, "leaders on every broker")
    assert sorted(set(led.values())) == [1, 2, 3]
    producer = transactional_producer(cluster.bootstrap, tid())
    committed: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    everything: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    for txn in range(4):
        producer.begin_transaction()
        for i in range(30):
            value = f"{txn}-{i}"
            producer.produce(topic, value=value.encode(), partition=i % PARTITIONS)
            everything[i % PARTITIONS].append(value)
            if txn != 2:
                committed[i % PARTITIONS].append(value)
        if txn == 2:
            producer.flush(DEADLINE_S)
            producer.abort_transaction(DEADLINE_S)
        else:
            producer.commit_transaction(DEADLINE_S)
    assert values(consume_all(cluster.bootstrap, topic, "read_committed", 90, partitions=PARTITIONS)) == committed
    assert values(consume_all(cluster.bootstrap, topic, "read_uncommitted", 120, partitions=PARTITIONS)) == everything


def test_offsets_sent_to_a_transaction_whose_coordinator_is_not_the_groups(cluster: Cluster) -> None:
    """librdkafka sends TxnOffsetCommit to the group's coordinator; here another broker
    coordinates the transactional id. Every input record comes out once, the group's offsets
    end at the input's end, and an aborted transaction's offsets are not committed."""
    keys = [f"ctp-{uuid.uuid4().hex[:8]}" for _ in range(40)]
    groups = wait_until(lambda: (seen := coordinators(cluster.brokers[1].bootstrap, keys)) and set(seen.values()) == {1, 2, 3} and seen, "coordinators on every broker")
    transactional = coordinators(cluster.brokers[1].bootstrap, keys, TRANSACTION_KEY)
    group = keys[0]
    transactional_id = next(k for k in keys if transactional[k] != groups[group])
    source, sink = create(cluster.bootstrap, PARTITIONS), create(cluster.bootstrap, PARTITIONS)
    count = 300
    plain = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True})
    for i in range(count):
        plain.produce(source, value=str(i).encode(), partition=i % PARTITIONS)
    assert plain.flush(DEADLINE_S) == 0
    consumer = Consumer({
        "bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "isolation.level": "read_committed",
    })  # fmt: skip
    consumer.subscribe([source])
    producer = transactional_producer(cluster.bootstrap, transactional_id)
    done = transactions = 0
    try:
        deadline = time.monotonic() + 3 * DEADLINE_S
        while done < count:
            assert time.monotonic() < deadline, f"{done} of {count} records transformed"
            batch = consumer.consume(50, 1.0)
            if not batch:
                continue
            producer.begin_transaction()
            for message in batch:
                assert message.error() is None
                producer.produce(sink, value=b"out-" + message.value(), partition=message.partition())
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), DEADLINE_S)
            transactions += 1
            if transactions == 2:  # aborted: its offsets are not committed; back to the committed ones
                producer.abort_transaction(DEADLINE_S)
                committed = consumer.committed([TopicPartition(source, p) for p in range(PARTITIONS)], timeout=DEADLINE_S)
                for tp in committed:
                    consumer.seek(TopicPartition(source, tp.partition, tp.offset if tp.offset >= 0 else 0))
                continue
            producer.commit_transaction(DEADLINE_S)
            done += len(batch)
    finally:
        consumer.close()
    assert done == count
    out = sorted(int(v.removeprefix("out-")) for vs in values(consume_all(cluster.bootstrap, sink, "read_committed", count, partitions=PARTITIONS)).values() for v in vs)
    assert out == list(range(count))
    checker = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    try:
        offsets = checker.committed([TopicPartition(source, p) for p in range(PARTITIONS)], timeout=DEADLINE_S)
        assert [tp.offset for tp in offsets] == [count // PARTITIONS] * PARTITIONS
    finally:
        checker.close()


def test_a_partition_not_added_to_the_transaction_is_refused_by_every_leader(cluster: Cluster) -> None:
    """KIP-890 part 1 on every broker: a transactional batch for a partition its transaction
    did not add is refused INVALID_TXN_STATE by the partition's leader, whether the
    transactional id's coordinator is that broker (asked in process) or another one (asked
    with DescribeTransactions); a partition that was added is accepted everywhere."""
    from kio.schema.add_partitions_to_txn.v3 import request as add_v3
    from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
    from kio.schema.errors import ErrorCode
    from kio.schema.produce.v9 import request as produce_v9

    from hot_tier.records import Record, encode_batch

    from .conftest import WireClient
    from .test_broker_wire import ms

    topic = create(cluster.bootstrap, PARTITIONS)
    led = wait_until(lambda: l if len(set((l := leaders(cluster.bootstrap, topic)).values())) == 3 else None, "leaders on every broker")
    transactional_id = tid()
    producer = transactional_producer(cluster.bootstrap, transactional_id)
    producer.begin_transaction()
    producer.produce(topic, value=b"added", partition=0)
    assert producer.flush(DEADLINE_S) == 0  # partition 0 is in the transaction
    coordinator = coordinators(cluster.brokers[1].bootstrap, [transactional_id], TRANSACTION_KEY)[transactional_id]
    wire = WireClient(cluster.brokers[coordinator].bootstrap)
    try:
        (state,) = wire.request(DescribeTransactionsRequest(transactional_ids=(transactional_id,))).transaction_states
        pid, epoch = state.producer_id, state.producer_epoch

        def produce(partition: int) -> ErrorCode:
            batch = encode_batch([Record(0, int(time.time() * 1000), None, b"raw", ())], producer_id=pid, producer_epoch=epoch,
                                 base_sequence=0, is_transactional=True)  # fmt: skip
            request = produce_v9.ProduceRequest(
                acks=-1, timeout=ms(5000), transactional_id=transactional_id,
                topic_data=(produce_v9.TopicProduceData(name=topic, partition_data=(produce_v9.PartitionProduceData(index=partition, records=batch),)),),
            )  # fmt: skip
            leader = WireClient(cluster.brokers[led[partition]].bootstrap)
            try:
                (answer,) = leader.request(request).responses[0].partition_responses
            finally:
                leader.close()
            return answer.error_code

        refused = {p: produce(p) for p in range(1, PARTITIONS)}
        assert refused == {p: ErrorCode.invalid_txn_state for p in range(1, PARTITIONS)}
        assert {led[p] == coordinator for p in refused} == {True, False}  # asked in process and across brokers
        added = wire.request(add_v3.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=transactional_id, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=(add_v3.AddPartitionsToTxnTopic(name=topic, partitions=tuple(range(1, PARTITIONS))),),
        ))  # fmt: skip
        assert {p.partition_error_code for t in added.results_by_topic_v3_and_below for p in t.results_by_partition} == {ErrorCode.none}
        assert {p: produce(p) for p in range(1, PARTITIONS)} == {p: ErrorCode.none for p in range(1, PARTITIONS)}
    finally:
        wire.close()
    producer.abort_transaction(DEADLINE_S)  # every partition's raw record aborted with the rest
    assert values(consume_all(cluster.bootstrap, topic, "read_committed", 0, partitions=PARTITIONS)) == {p: [] for p in range(PARTITIONS)}
