"""Consumer groups through admin clients: list, describe, committed offsets, alter, delete.

confluent-kafka's AdminClient lists and describes groups, reads and alters their committed
offsets (OffsetFetch, OffsetCommit with generation -1) and deletes them (DeleteGroups);
kafka-python's KafkaAdminClient deletes committed offsets (OffsetDelete), which
confluent-kafka's Python API does not offer. A group with members refuses deletion
(NON_EMPTY_GROUP), offset changes (UNKNOWN_MEMBER_ID) and offset deletion for the topic it
consumes (GROUP_SUBSCRIBED_TO_TOPIC). A group known only by its committed offsets (after a
broker restart) is listed and described as Empty and can be deleted.
"""

from __future__ import annotations

import struct
import time
from datetime import timedelta

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import GroupSubscribedToTopicError, NoError
from kio.schema.errors import ErrorCode
from kio.schema.join_group.v3 import request as join_group_v3
from kio.schema.offset_delete.v0 import request as offset_delete_v0
from kio.schema.sync_group.v3 import request as sync_group_v3

from .test_groups_confluent import Member, new_group, poll_until, produce

PARTITIONS = 3
PER_PARTITION = 10
TIMEOUT_S = 10
OFFSET_INVALID = -1001  # librdkafka: no committed offset


def listed(admin: AdminClient, states: set[ConsumerGroupState] | None = None) -> dict[str, ConsumerGroupState]:
    result = admin.list_consumer_groups(**({"states": states} if states else {})).result(timeout=TIMEOUT_S)
    assert result.errors == []
    return {g.group_id: g.state for g in result.valid}


def describe(admin: AdminClient, group: str):
    return admin.describe_consumer_groups([group])[group].result(timeout=TIMEOUT_S)


def offsets(admin: AdminClient, group: str, topic: str) -> dict[int, int]:
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(PARTITIONS)])
    result = admin.list_consumer_group_offsets([request])[group].result(timeout=TIMEOUT_S)
    assert all(tp.error is None for tp in result.topic_partitions)
    return {tp.partition: tp.offset for tp in result.topic_partitions}


def alter(admin: AdminClient, group: str, topic: str, new_offsets: dict[int, int]):
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p, o) for p, o in new_offsets.items()])
    return admin.alter_consumer_group_offsets([request])[group].result(timeout=TIMEOUT_S)


def delete_group_error(admin: AdminClient, group: str) -> int | None:
    """None if DeleteGroups succeeded, else the Kafka error code it failed with."""
    try:
        admin.delete_consumer_groups([group], request_timeout=TIMEOUT_S)[group].result(timeout=TIMEOUT_S)
        return None
    except KafkaException as exc:
        return exc.args[0].code()


def test_admin_lists_describes_alters_and_deletes_groups(group_broker, create_topic) -> None:
    bootstrap = group_broker.bootstrap
    topic = create_topic(bootstrap, partitions=PARTITIONS)
    produce(bootstrap, topic, PARTITIONS, PER_PARTITION)
    group, bystander = new_group(), new_group()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    kp_admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kp-admin")
    member = Member(bootstrap, group, topic, **{"client.id": "the-member"})
    try:
        poll_until([member], lambda: len(member.records) == PARTITIONS * PER_PARTITION, "every record")
        member.commit_processed()

        # --- a Stable group with one member ---
        assert listed(admin)[group] is ConsumerGroupState.STABLE
        assert group in listed(admin, {ConsumerGroupState.STABLE})
        assert group not in listed(admin, {ConsumerGroupState.EMPTY})
        description = describe(admin, group)
        assert description.state is ConsumerGroupState.STABLE
        assert description.partition_assignor == "range"
        assert description.is_simple_consumer_group is False
        (described_member,) = description.members
        assert described_member.client_id == "the-member"
        assert described_member.host == "/127.0.0.1"
        assert sorted((tp.topic, tp.partition) for tp in described_member.assignment.topic_partitions) == [
            (topic, p) for p in range(PARTITIONS)
        ]
        assert offsets(admin, group, topic) == {p: PER_PARTITION for p in range(PARTITIONS)}

        # --- what a group with members refuses ---
        assert delete_group_error(admin, group) == KafkaError.NON_EMPTY_GROUP
        (refused,) = alter(admin, group, topic, {0: 1}).topic_partitions
        assert refused.error.code() == KafkaError.UNKNOWN_MEMBER_ID
        subscribed = kp_admin.delete_group_offsets(group, [KpTopicPartition(topic, 0)])
        assert subscribed == {KpTopicPartition(topic, 0): GroupSubscribedToTopicError}
        assert offsets(admin, group, topic) == {p: PER_PARTITION for p in range(PARTITIONS)}

        # --- Empty once its member leaves ---
        member.close()
        assert listed(admin)[group] is ConsumerGroupState.EMPTY
        emptied = describe(admin, group)
        assert emptied.state is ConsumerGroupState.EMPTY
        assert emptied.members == []
        assert offsets(admin, group, topic) == {p: PER_PARTITION for p in range(PARTITIONS)}

        altered = alter(admin, group, topic, {0: 3, 2: 7})
        assert sorted((tp.partition, tp.offset, tp.error) for tp in altered.topic_partitions) == [(0, 3, None), (2, 7, None)]
        assert offsets(admin, group, topic) == {0: 3, 1: PER_PARTITION, 2: 7}
        deleted = kp_admin.delete_group_offsets(group, [KpTopicPartition(topic, 1)])
        assert deleted == {KpTopicPartition(topic, 1): NoError}
        assert offsets(admin, group, topic) == {0: 3, 1: OFFSET_INVALID, 2: 7}

        # --- a group known only by its offsets after a restart; then deleted ---
        alter(admin, bystander, topic, {1: 4})  # created by an admin commit, never had members
        group_broker.restart()
        # A fresh client: librdkafka 2.16's re-bootstrap after losing every broker can drop the
        # FindCoordinator it sent through the bootstrap connection, and describe then hangs.
        admin = AdminClient({"bootstrap.servers": bootstrap})
        assert {g: s for g, s in listed(admin).items() if g in (group, bystander)} == {
            group: ConsumerGroupState.EMPTY,
            bystander: ConsumerGroupState.EMPTY,
        }
        assert describe(admin, group).state is ConsumerGroupState.EMPTY
        assert offsets(admin, group, topic) == {0: 3, 1: OFFSET_INVALID, 2: 7}
        assert offsets(admin, bystander, topic) == {0: OFFSET_INVALID, 1: 4, 2: OFFSET_INVALID}

        assert delete_group_error(admin, group) is None
        assert group not in listed(admin)
        assert offsets(admin, group, topic) == {p: OFFSET_INVALID for p in range(PARTITIONS)}
        assert delete_group_error(admin, group) == KafkaError.GROUP_ID_NOT_FOUND
        assert offsets(admin, bystander, topic) == {0: OFFSET_INVALID, 1: 4, 2: OFFSET_INVALID}
        assert delete_group_error(admin, bystander) is None
        assert bystander not in listed(admin)
    finally:
        member.close()
        kp_admin.close()


def test_admin_offsets_of_a_group_that_never_existed(shared_group_broker, create_topic) -> None:
    bootstrap = shared_group_broker.bootstrap
    topic = create_topic(bootstrap, partitions=PARTITIONS)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    group = new_group()
    assert offsets(admin, group, topic) == {p: OFFSET_INVALID for p in range(PARTITIONS)}
    assert group not in listed(admin)
    assert delete_group_error(admin, group) == KafkaError.GROUP_ID_NOT_FOUND


# --- OffsetDelete while the group rebalances (raw requests) ---------------------------------


def subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics (int32 count, int16 strings), user data (null)."""
    body = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        body += struct.pack(">h", len(topic)) + topic.encode()
    return body + struct.pack(">i", -1)


def join(group: str, topic: str, member_id: str = ""):
    mod = join_group_v3
    return mod.JoinGroupRequest(
        group_id=group, session_timeout=timedelta(seconds=30), rebalance_timeout=timedelta(seconds=30), member_id=member_id,
        protocol_type="consumer", protocols=(mod.JoinGroupRequestProtocol(name="range", metadata=subscription(topic)),),
    )  # fmt: skip


def offset_delete(group: str, topic: str, partition: int):
    mod = offset_delete_v0
    return mod.OffsetDeleteRequest(
        group_id=group,
        topics=(mod.OffsetDeleteRequestTopic(name=topic, partitions=(mod.OffsetDeleteRequestPartition(partition_index=partition),)),),
    )


def offset_delete_errors(response) -> tuple[ErrorCode, list[ErrorCode]]:
    return response.error_code, [p.error_code for t in response.topics for p in t.partitions]


def test_offset_delete_is_refused_for_a_subscribed_topic_during_a_rebalance(shared_group_broker, create_topic, wire) -> None:
    bootstrap = shared_group_broker.bootstrap
    topic = create_topic(bootstrap, partitions=1)
    other_topic = create_topic(bootstrap, partitions=1)
    group = new_group()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    alter(admin, group, topic, {0: 5})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(other_topic, 0, 6)])
    admin.alter_consumer_group_offsets([request])[group].result(timeout=TIMEOUT_S)

    first, second, admin_wire = wire(bootstrap), wire(bootstrap), wire(bootstrap)
    joined = first.request(join(group, topic))
    assert joined.error_code is ErrorCode.none
    assignment = sync_group_v3.SyncGroupRequestAssignment(member_id=joined.member_id, assignment=b"")
    synced = first.request(
        sync_group_v3.SyncGroupRequest(
            group_id=group, generation_id=joined.generation_id, member_id=joined.member_id, group_instance_id=None, assignments=(assignment,)
        )
    )
    assert synced.error_code is ErrorCode.none
    assert admin_wire.request(offset_delete(group, topic, 0)).topics[0].partitions[0].error_code is ErrorCode.group_subscribed_to_topic

    second.send(join(group, topic))  # parked: the group waits for `first` to rejoin
    deadline = time.monotonic() + TIMEOUT_S
    while describe(admin, group).state is not ConsumerGroupState.PREPARING_REBALANCING:
        assert time.monotonic() < deadline, "the group never started rebalancing"
    assert offset_delete_errors(admin_wire.request(offset_delete(group, topic, 0))) == (ErrorCode.none, [ErrorCode.group_subscribed_to_topic])
    assert offset_delete_errors(admin_wire.request(offset_delete(group, other_topic, 0))) == (ErrorCode.none, [ErrorCode.none])
    assert offsets(admin, group, topic)[0] == 5
