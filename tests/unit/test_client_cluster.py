"""The client's view of the cluster, fed with Metadata responses as kio parses them."""

from __future__ import annotations

import uuid

import pytest

from diskless.client import protocol
from diskless.client.cluster import NO_LEADER, ClusterMetadata, parse_bootstrap_servers
from diskless.client.structs import BrokerInfo

RESPONSE = protocol.response_class(protocol.METADATA, 12)
BROKER = protocol.nested(RESPONSE, "MetadataResponseBroker")
TOPIC = protocol.nested(RESPONSE, "MetadataResponseTopic")
PARTITION = protocol.nested(RESPONSE, "MetadataResponsePartition")
TOPIC_ID = uuid.UUID("12345678-1234-5678-1234-567812345678")


def partition(index: int, leader: int, error_code: int = 0):
    return PARTITION(
        error_code=error_code, partition_index=index, leader_id=leader, leader_epoch=4,
        replica_nodes=(leader,), isr_nodes=(leader,), offline_replicas=(),
    )  # fmt: skip


def response(*topics, brokers=((1, "127.0.0.1", 9092),)):
    return RESPONSE(
        throttle_time=protocol.ms(0),
        brokers=tuple(BROKER(node_id=n, host=h, port=p, rack=None) for n, h, p in brokers),
        cluster_id="c-1",
        controller_id=1,
        topics=topics,
    )


def topic(name: str, *partitions, error_code: int = 0, topic_id=TOPIC_ID):
    return TOPIC(error_code=error_code, name=name, topic_id=topic_id, is_internal=False, partitions=partitions,
                 topic_authorized_operations=-2147483648)  # fmt: skip


def test_update_learns_brokers_topics_and_leaders() -> None:
    meta = ClusterMetadata()
    meta.update(response(topic("orders", partition(1, 1), partition(0, 1))), all_topics=False, now=5)
    assert meta.brokers == {1: BrokerInfo(1, "127.0.0.1", 9092)}
    assert (meta.cluster_id, meta.controller_id, meta.updated_ms) == ("c-1", 1, 5)
    assert meta.partition_count("orders") == 2
    assert [p.partition for p in meta.topics["orders"].partitions] == [0, 1]
    assert meta.topics["orders"].topic_id == TOPIC_ID
    assert meta.leader("orders", 1) == 1 and meta.leader_epoch("orders", 1) == 4
    assert meta.available_partitions("orders") == (0, 1)


def test_a_leader_that_is_not_a_known_broker_counts_as_unknown() -> None:
    meta = ClusterMetadata()
    meta.update(response(topic("t", partition(0, 7), partition(1, 1))), all_topics=False, now=0)
    assert meta.leader("t", 0) == NO_LEADER
    assert meta.leader("t", 5) == NO_LEADER
    assert meta.leader("nope", 0) == NO_LEADER
    assert meta.available_partitions("t") == (1,)


def test_topic_errors_are_remembered_and_partial_updates_keep_other_topics() -> None:
    meta = ClusterMetadata()
    meta.update(response(topic("a", partition(0, 1))), all_topics=False, now=0)
    meta.update(response(topic("b", error_code=3)), all_topics=False, now=1)
    assert meta.partition_count("a") == 1
    assert meta.partition_count("b") is None and meta.topic_errors == {"b": 3}
    meta.update(response(topic("c", partition(0, 1))), all_topics=True, now=2)
    assert set(meta.topics) == {"c"} and meta.topic_errors == {}


def test_a_zero_topic_id_means_none() -> None:
    meta = ClusterMetadata()
    meta.update(response(topic("t", partition(0, 1), topic_id=uuid.UUID(int=0))), all_topics=False, now=0)
    assert meta.topics["t"].topic_id is None


def test_bootstrap_servers_parse() -> None:
    assert parse_bootstrap_servers("a:1, b:2") == [("a", 1), ("b", 2)]
    assert parse_bootstrap_servers("[::1]:9092") == [("::1", 9092)]
    for bad in ("", "host", "host:port", ","):
        with pytest.raises(ValueError):
            parse_bootstrap_servers(bad)
