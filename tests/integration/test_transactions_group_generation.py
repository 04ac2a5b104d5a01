"""TxnOffsetCommit (KIP-447) is checked against the group by its coordinator, as OffsetCommit
is (Kafka's validateTransactionalOffsetCommit): a stale generation answers ILLEGAL_GENERATION,
an unknown member UNKNOWN_MEMBER_ID, and nothing of theirs is committed; the current member's
offsets are, with the transaction. A consumer-protocol group (KIP-848) is checked by member
epoch, a stale one answering ILLEGAL_GENERATION too. Generation -1 with no member id (a producer
without the consumer's group metadata) is not checked.

Raw requests (kio bodies over a socket) against a real broker: a zombie whose partitions a
rebalance moved away is one that still holds the previous generation.
"""

from __future__ import annotations

import struct
import time
import uuid
from datetime import timedelta

from kio.schema.add_offsets_to_txn.v3 import request as add_offsets_v3
from kio.schema.consumer_group_heartbeat.v0 import request as heartbeat_v0
from kio.schema.end_txn.v3 import request as end_txn_v3
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4 import request as init_producer_id_v4
from kio.schema.join_group.v3 import request as join_group_v3
from kio.schema.offset_fetch.v8 import request as offset_fetch_v8
from kio.schema.sync_group.v3 import request as sync_group_v3
from kio.schema.txn_offset_commit.v3 import request as txn_offset_commit_v3

DEADLINE_S = 10.0


def _subscription(topic: str) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics (int32 count, int16 strings), user data (null)."""
    return struct.pack(">hih", 0, 1, len(topic)) + topic.encode() + struct.pack(">i", -1)


def _join_and_sync(wire, group: str, topic: str, member_id: str = "") -> tuple[str, int]:
    """(member id, generation) of a classic member alone in `group`, once synced (Stable)."""
    joined = wire.request(join_group_v3.JoinGroupRequest(
        group_id=group, session_timeout=timedelta(seconds=30), rebalance_timeout=timedelta(seconds=30), member_id=member_id,
        protocol_type="consumer", protocols=(join_group_v3.JoinGroupRequestProtocol(name="range", metadata=_subscription(topic)),),
    ))  # fmt: skip
    assert joined.error_code is ErrorCode.none
    synced = wire.request(sync_group_v3.SyncGroupRequest(
        group_id=group, generation_id=joined.generation_id, member_id=joined.member_id, group_instance_id=None,
        assignments=(sync_group_v3.SyncGroupRequestAssignment(member_id=joined.member_id, assignment=b""),),
    ))  # fmt: skip
    assert synced.error_code is ErrorCode.none
    return joined.member_id, joined.generation_id


class _Transaction:
    """A transactional producer's side of the protocol, with offsets of `group` added to its
    open transaction."""

    def __init__(self, wire, group: str) -> None:
        self.wire, self.group = wire, group
        self.transactional_id = f"tx-{uuid.uuid4().hex[:10]}"
        init = wire.request(init_producer_id_v4.InitProducerIdRequest(transactional_id=self.transactional_id, transaction_timeout=timedelta(seconds=30)))
        assert init.error_code is ErrorCode.none
        self.producer_id, self.producer_epoch = init.producer_id, init.producer_epoch
        added = wire.request(add_offsets_v3.AddOffsetsToTxnRequest(
            transactional_id=self.transactional_id, producer_id=self.producer_id, producer_epoch=self.producer_epoch, group_id=group,
        ))  # fmt: skip
        assert added.error_code is ErrorCode.none

    def commit_offset(self, topic: str, offset: int, generation_id: int, member_id: str) -> ErrorCode:
        mod = txn_offset_commit_v3
        partition = mod.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=offset, committed_metadata="")
        (answer,) = self.wire.request(mod.TxnOffsetCommitRequest(
            transactional_id=self.transactional_id, group_id=self.group, producer_id=self.producer_id, producer_epoch=self.producer_epoch,
            generation_id=generation_id, member_id=member_id, topics=(mod.TxnOffsetCommitRequestTopic(name=topic, partitions=(partition,)),),
        )).topics  # fmt: skip
        return answer.partitions[0].error_code

    def end(self, committed: bool = True) -> None:
        ended = self.wire.request(end_txn_v3.EndTxnRequest(
            transactional_id=self.transactional_id, producer_id=self.producer_id, producer_epoch=self.producer_epoch, committed=committed,
        ))  # fmt: skip
        assert ended.error_code is ErrorCode.none


def _committed_offset(wire, group: str, topic: str) -> int:
    """The group's offset of partition 0 once no transaction is about to change it (require_stable)."""
    mod = offset_fetch_v8
    request = mod.OffsetFetchRequest(
        groups=(mod.OffsetFetchRequestGroup(group_id=group, topics=(mod.OffsetFetchRequestTopics(name=topic, partition_indexes=(0,)),)),),
        require_stable=True,
    )
    deadline = time.monotonic() + DEADLINE_S
    while True:
        (found,) = wire.request(request).groups
        partition = found.topics[0].partitions[0]
        if found.error_code is ErrorCode.none and partition.error_code is ErrorCode.none:
            return partition.committed_offset
        assert partition.error_code is ErrorCode.unstable_offset_commit, partition.error_code
        assert time.monotonic() < deadline, "the transaction's offsets never became stable"


def test_a_stale_generation_or_unknown_member_commits_nothing_in_a_transaction(shared_group_broker, create_topic, wire) -> None:
    bootstrap = shared_group_broker.bootstrap
    topic, group = create_topic(bootstrap, partitions=1), f"g-{uuid.uuid4().hex[:12]}"
    client = wire(bootstrap)
    member_id, first = _join_and_sync(client, group, topic)
    rejoined, current = _join_and_sync(client, group, topic, member_id)  # a rebalance: generation `first` is stale
    assert (rejoined, current) == (member_id, first + 1)

    zombie = _Transaction(client, group)
    assert zombie.commit_offset(topic, 5, first, member_id) is ErrorCode.illegal_generation
    assert zombie.commit_offset(topic, 6, current, "zombie-member") is ErrorCode.unknown_member_id
    zombie.end()  # even committed, its transaction holds none of the refused offsets
    assert _committed_offset(client, group, topic) == -1

    transaction = _Transaction(client, group)
    assert transaction.commit_offset(topic, 7, current, member_id) is ErrorCode.none
    transaction.end()
    assert _committed_offset(client, group, topic) == 7

    unchecked = _Transaction(client, group)  # no group metadata given: generation -1, no member id
    assert unchecked.commit_offset(topic, 9, -1, "") is ErrorCode.none
    unchecked.end()
    assert _committed_offset(client, group, topic) == 9


def test_a_stale_member_epoch_commits_nothing_in_a_transaction(shared_group_broker, create_topic, wire) -> None:
    bootstrap = shared_group_broker.bootstrap
    topic, group = create_topic(bootstrap, partitions=1), f"g-{uuid.uuid4().hex[:12]}"
    client = wire(bootstrap)
    joined = client.request(heartbeat_v0.ConsumerGroupHeartbeatRequest(
        group_id=group, member_id="", member_epoch=0, rebalance_timeout=timedelta(seconds=30),
        subscribed_topic_names=(topic,), topic_partitions=(),
    ))  # fmt: skip
    assert joined.error_code is ErrorCode.none and joined.member_epoch > 0

    transaction = _Transaction(client, group)
    assert transaction.commit_offset(topic, 5, joined.member_epoch - 1, joined.member_id) is ErrorCode.illegal_generation
    assert transaction.commit_offset(topic, 6, joined.member_epoch, "zombie-member") is ErrorCode.unknown_member_id
    assert transaction.commit_offset(topic, 7, joined.member_epoch, joined.member_id) is ErrorCode.none
    assert transaction.commit_offset(topic, 8, -1, "") is ErrorCode.none  # not checked, as Kafka
    transaction.end()
    assert _committed_offset(client, group, topic) == 8
