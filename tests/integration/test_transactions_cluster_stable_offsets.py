"""OffsetFetch with require_stable (KIP-447) in a cluster of three brokers (PostgreSQL, moto's
S3 server): the group's coordinator answers UNSTABLE_OFFSET_COMMIT for a partition whose
offset an open transaction has committed with TxnOffsetCommit, when that transaction's
coordinator is another broker; the other partitions answer their committed offsets, and once
the transaction commits, the partition answers its new offset.

Raw requests (kio bodies over a socket), each sent to the broker Kafka's client would send it
to: InitProducerId, AddOffsetsToTxn and EndTxn to the transactional id's coordinator,
TxnOffsetCommit, OffsetCommit and OffsetFetch to the group's.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from kio.schema.add_offsets_to_txn.v3 import request as add_offsets_v3
from kio.schema.end_txn.v3 import request as end_txn_v3
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4 import request as init_producer_id_v4
from kio.schema.offset_commit.v8 import request as offset_commit_v8
from kio.schema.offset_fetch.v8 import request as offset_fetch_v8
from kio.schema.txn_offset_commit.v3 import request as txn_offset_commit_v3

from .conftest import WireClient
from .test_cluster import DEADLINE_S, Cluster, cluster, create, moto_bucket, wait_until  # noqa: F401 (fixtures)
from .test_cluster_coordinators import TRANSACTION_KEY, coordinators


def _apart(brokers: Cluster) -> tuple[str, int, str, int]:
    """(group, its coordinator, transactional id, its coordinator): two keys whose slots two
    different brokers hold."""
    keys = [f"stable-{uuid.uuid4().hex[:8]}" for _ in range(40)]
    groups = wait_until(lambda: (seen := coordinators(brokers.brokers[1].bootstrap, keys)) and set(seen.values()) == {1, 2, 3} and seen,
                        "coordinators on every broker")  # fmt: skip
    transactional = coordinators(brokers.brokers[1].bootstrap, keys, TRANSACTION_KEY)
    group = keys[0]
    transactional_id = next(k for k in keys if transactional[k] != groups[group])
    return group, groups[group], transactional_id, transactional[transactional_id]


def _fetch(wire: WireClient, group: str, topic: str) -> dict[int, tuple[ErrorCode, int]]:
    """(error code, committed offset) of partitions 0 and 1 of `topic`, with require_stable."""
    mod = offset_fetch_v8
    (found,) = wire.request(mod.OffsetFetchRequest(
        groups=(mod.OffsetFetchRequestGroup(group_id=group, topics=(mod.OffsetFetchRequestTopics(name=topic, partition_indexes=(0, 1)),)),),
        require_stable=True,
    )).groups  # fmt: skip
    assert found.error_code is ErrorCode.none, found.error_code
    return {p.partition_index: (p.error_code, p.committed_offset) for t in found.topics for p in t.partitions}


def test_an_open_transactions_offsets_are_unstable_at_the_groups_coordinator(cluster: Cluster) -> None:  # noqa: F811 (the fixture)
    group, group_node, transactional_id, txn_node = _apart(cluster)
    assert group_node != txn_node
    topic = create(cluster.bootstrap, 2)
    at_group, at_txn = WireClient(cluster.brokers[group_node].bootstrap), WireClient(cluster.brokers[txn_node].bootstrap)
    try:
        commit = offset_commit_v8
        (committed,) = at_group.request(commit.OffsetCommitRequest(
            group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
            topics=(commit.OffsetCommitRequestTopic(name=topic, partitions=(
                commit.OffsetCommitRequestPartition(partition_index=0, committed_offset=3, committed_leader_epoch=-1, committed_metadata=""),
                commit.OffsetCommitRequestPartition(partition_index=1, committed_offset=4, committed_leader_epoch=-1, committed_metadata=""),
            )),),
        )).topics  # fmt: skip
        assert {p.error_code for p in committed.partitions} == {ErrorCode.none}

        init = at_txn.request(init_producer_id_v4.InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout=timedelta(seconds=60)))
        assert init.error_code is ErrorCode.none
        pid, epoch = init.producer_id, init.producer_epoch
        added = at_txn.request(add_offsets_v3.AddOffsetsToTxnRequest(transactional_id=transactional_id, producer_id=pid, producer_epoch=epoch, group_id=group))
        assert added.error_code is ErrorCode.none
        mod = txn_offset_commit_v3
        (answer,) = at_group.request(mod.TxnOffsetCommitRequest(
            transactional_id=transactional_id, group_id=group, producer_id=pid, producer_epoch=epoch, generation_id=-1, member_id="",
            topics=(mod.TxnOffsetCommitRequestTopic(name=topic, partitions=(
                mod.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=10, committed_metadata=""),
            )),),
        )).topics  # fmt: skip
        assert answer.partitions[0].error_code is ErrorCode.none  # handed on to the transactional id's coordinator

        # Open: partition 0 is about to change, partition 1 is not.
        assert _fetch(at_group, group, topic) == {0: (ErrorCode.unstable_offset_commit, -1), 1: (ErrorCode.none, 4)}

        ended = at_txn.request(end_txn_v3.EndTxnRequest(transactional_id=transactional_id, producer_id=pid, producer_epoch=epoch, committed=True))
        assert ended.error_code is ErrorCode.none
        stable = wait_until(lambda: (f := _fetch(at_group, group, topic))[0][0] is not ErrorCode.unstable_offset_commit and f,
                            "the transaction's offsets to become stable")  # fmt: skip
        assert stable == {0: (ErrorCode.none, 10), 1: (ErrorCode.none, 4)}
    finally:
        at_group.close()
        at_txn.close()
