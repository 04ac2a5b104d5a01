"""OffsetFetch in a cluster of three brokers (PostgreSQL, moto's S3 server): any broker answers a
group's committed offsets from the store (per group in the v8+ multi-group form, v7 and v1
alike), so a client whose view of the coordinator is a moment old while a slot moves is not
refused (librdkafka's committed() gives up at a NOT_COORDINATOR). Admin clients, which find
the coordinator first, list a group's offsets through any bootstrap broker.
"""

from __future__ import annotations

import uuid

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient
from kio.schema.errors import ErrorCode
from kio.schema.offset_commit.v8 import request as offset_commit_v8
from kio.schema.offset_fetch.v1 import request as offset_fetch_v1
from kio.schema.offset_fetch.v7 import request as offset_fetch_v7
from kio.schema.offset_fetch.v8 import request as offset_fetch_v8

from .conftest import WireClient
from .test_cluster import DEADLINE_S, Cluster, cluster, create, moto_bucket, wait_until  # noqa: F401 (fixtures)
from .test_cluster_coordinators import coordinators


def _commit(wire: WireClient, group: str, topic: str, offsets: dict[int, int]) -> None:
    mod = offset_commit_v8
    (answer,) = wire.request(mod.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=(mod.OffsetCommitRequestTopic(name=topic, partitions=tuple(
            mod.OffsetCommitRequestPartition(partition_index=p, committed_offset=o, committed_leader_epoch=-1, committed_metadata="")
            for p, o in offsets.items()
        )),),
    )).topics  # fmt: skip
    assert {p.error_code for p in answer.partitions} == {ErrorCode.none}


def _fetch_v8(wire: WireClient, groups: list[str], topic: str) -> dict[str, tuple[ErrorCode, dict[int, int]]]:
    mod = offset_fetch_v8
    answer = wire.request(mod.OffsetFetchRequest(
        groups=tuple(mod.OffsetFetchRequestGroup(group_id=g, topics=(mod.OffsetFetchRequestTopics(name=topic, partition_indexes=(0, 1)),))
                     for g in groups),
        require_stable=True,
    ))  # fmt: skip
    return {g.group_id: (g.error_code, {p.partition_index: p.committed_offset for t in g.topics for p in t.partitions}) for g in answer.groups}


def test_any_broker_answers_a_groups_offsets(cluster: Cluster) -> None:  # noqa: F811 (the fixture)
    # Two groups coordinated by brokers 2 and 3; broker 1 coordinates neither.
    keys = [f"fetch-{uuid.uuid4().hex[:8]}" for _ in range(60)]
    found = wait_until(lambda: (seen := coordinators(cluster.brokers[1].bootstrap, keys)) and set(seen.values()) == {1, 2, 3} and seen,
                       "coordinators on every broker")  # fmt: skip
    at_2 = next(k for k, node in found.items() if node == 2)
    at_3 = next(k for k, node in found.items() if node == 3)
    topic = create(cluster.bootstrap, 2)
    wire = {node: WireClient(cluster.brokers[node].bootstrap) for node in (1, 2, 3)}
    try:
        _commit(wire[2], at_2, topic, {0: 3, 1: 4})
        _commit(wire[3], at_3, topic, {0: 7})

        expected = {at_2: (ErrorCode.none, {0: 3, 1: 4}), at_3: (ErrorCode.none, {0: 7, 1: -1})}
        for node in (1, 2, 3):  # v8, two groups at once, to each broker
            assert _fetch_v8(wire[node], [at_2, at_3], topic) == expected

        # v7 (one group) and v1, to a broker that coordinates neither group.
        v7 = offset_fetch_v7
        request = v7.OffsetFetchRequest(group_id=at_3, topics=(v7.OffsetFetchRequestTopic(name=topic, partition_indexes=(0,)),), require_stable=False)
        answered = wire[1].request(request)
        assert answered.error_code is ErrorCode.none and answered.topics[0].partitions[0].committed_offset == 7
        v1 = offset_fetch_v1
        answer = wire[1].request(v1.OffsetFetchRequest(group_id=at_2, topics=(v1.OffsetFetchRequestTopic(name=topic, partition_indexes=(0, 1)),)))
        assert [(p.error_code, p.committed_offset) for p in answer.topics[0].partitions] == [(ErrorCode.none, 3), (ErrorCode.none, 4)]
    finally:
        for client in wire.values():
            client.close()

    # Admin clients find the coordinator first: any bootstrap broker will do.
    admin = AdminClient({"bootstrap.servers": cluster.brokers[1].bootstrap})
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(at_3, [TopicPartition(topic, 0)])])[at_3].result(DEADLINE_S)
    assert [(tp.partition, tp.offset) for tp in listed.topic_partitions] == [(0, 7)]
    python_admin = KafkaAdminClient(bootstrap_servers=cluster.brokers[1].bootstrap, request_timeout_ms=int(DEADLINE_S * 1000))
    try:
        by_group = python_admin.list_group_offsets([at_2, at_3])  # one OffsetFetch v8+ per coordinator
    finally:
        python_admin.close()
    assert {g: {tp.partition: meta.offset for tp, meta in found.items()} for g, found in by_group.items()} == {at_2: {0: 3, 1: 4}, at_3: {0: 7}}
