"""Transactions in a cluster of three brokers (PostgreSQL, moto's S3 server): the coordinator
writes the markers of partitions other brokers lead with WriteTxnMarkers, and read_committed
consumers read exactly the committed records from every leader."""

from __future__ import annotations

from .test_cluster import DEADLINE_S, Cluster, cluster, create, leaders, moto_bucket, wait_until  # noqa: F401 (fixtures)
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
