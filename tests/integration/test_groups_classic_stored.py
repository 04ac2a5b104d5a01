"""A classic group outlives its coordinator's process: its Stable generation is in the metadata
store, so after a restart (SIGKILL or SIGTERM) the coordinator takes the group up as it was and
its members heartbeat on at their generation, with their assignments, without a rebalance, as
Kafka's coordinator replays the group from __consumer_offsets (raw requests, exact answers).

A dynamic member `a` (JoinGroup v3) and a static member `b` (v5, group.instance.id), on both
metadata backends.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from kio.schema.describe_groups.v5 import request as describe_groups_v5
from kio.schema.errors import ErrorCode
from kio.schema.heartbeat.v3 import request as heartbeat_v3
from kio.schema.join_group.v3 import request as join_group_v3
from kio.schema.join_group.v5 import request as join_group_v5
from kio.schema.leave_group.v3 import request as leave_group_v3
from kio.schema.offset_commit.v7 import request as offset_commit_v7
from kio.schema.sync_group.v3 import request as sync_group_v3

from .conftest import ON_EVERY_METADATA_BACKEND, WireClient
from .test_groups_admin import subscription

pytestmark = ON_EVERY_METADATA_BACKEND

DEADLINE_S = 30.0
INSTANCE = "instance-b"


def join(group: str, topic: str, member_id: str = "", instance: str | None = None) -> Any:
    mod = join_group_v5 if instance is not None else join_group_v3
    fields = {"group_instance_id": instance} if instance is not None else {}
    return mod.JoinGroupRequest(
        group_id=group, session_timeout=timedelta(seconds=30), rebalance_timeout=timedelta(seconds=30), member_id=member_id,
        protocol_type="consumer", protocols=(mod.JoinGroupRequestProtocol(name="range", metadata=subscription(topic)),), **fields,
    )  # fmt: skip


def sync(client: WireClient, group: str, generation: int, member_id: str, assignments: dict[str, bytes] | None = None,
         instance: str | None = None) -> tuple[ErrorCode, bytes]:  # fmt: skip
    mod = sync_group_v3
    answer = client.request(mod.SyncGroupRequest(
        group_id=group, generation_id=generation, member_id=member_id, group_instance_id=instance,
        assignments=tuple(mod.SyncGroupRequestAssignment(member_id=m, assignment=a) for m, a in (assignments or {}).items()),
    ))  # fmt: skip
    return answer.error_code, answer.assignment


def heartbeat(client: WireClient, group: str, generation: int, member_id: str, instance: str | None = None) -> ErrorCode:
    request = heartbeat_v3.HeartbeatRequest(group_id=group, generation_id=generation, member_id=member_id, group_instance_id=instance)
    return client.request(request).error_code


def heartbeat_once_coordinating(bootstrap: str, group: str, generation: int, member_id: str, instance: str | None = None) -> ErrorCode:
    """The first answer of a restarted broker that is not about it being (not yet) the coordinator."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        client = WireClient(bootstrap)
        try:
            error = heartbeat(client, group, generation, member_id, instance)
        finally:
            client.close()
        if error not in (ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available):
            return error
        assert time.monotonic() < deadline, f"the broker never coordinated {group}: {error!r}"
        time.sleep(0.05)  # its slots are being taken up: retry as a client would


def commit(client: WireClient, group: str, generation: int, member_id: str, topic: str, offset: int) -> ErrorCode:
    mod = offset_commit_v7
    answer = client.request(mod.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=generation, member_id=member_id, group_instance_id=None,
        topics=(mod.OffsetCommitRequestTopic(name=topic, partitions=(
            mod.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset, committed_leader_epoch=-1, committed_metadata=""),
        )),),
    ))  # fmt: skip
    return answer.topics[0].partitions[0].error_code


def described(client: WireClient, group: str) -> tuple[str, int, str, dict[str, tuple[str | None, bytes]]]:
    """DescribeGroups: (state, protocol type, protocol, member id -> (instance id, assignment))."""
    [d] = client.request(describe_groups_v5.DescribeGroupsRequest(groups=(group,), include_authorized_operations=False)).groups
    assert d.error_code is ErrorCode.none, d
    return d.group_state, d.protocol_type, d.protocol_data, {m.member_id: (m.group_instance_id, m.member_assignment) for m in d.members}


def test_a_classic_group_goes_on_at_its_generation_after_its_coordinator_restarts(group_broker, create_topic, wire) -> None:
    bootstrap = group_broker.bootstrap
    topic = create_topic(bootstrap, partitions=2)
    group = f"g-{topic}"
    a_conn, b_conn = wire(bootstrap), wire(bootstrap)
    joined = a_conn.request(join(group, topic))
    assert (joined.error_code, joined.generation_id, joined.leader) == (ErrorCode.none, 1, joined.member_id)
    a = joined.member_id
    assert sync(a_conn, group, 1, a, {a: b"A1"}) == (ErrorCode.none, b"A1")
    # b (static) joins: a rejoins, generation 2, a leads and assigns.
    b_conn.send(join(group, topic, instance=INSTANCE))
    deadline = time.monotonic() + DEADLINE_S
    while (error := heartbeat(a_conn, group, 1, a)) is ErrorCode.none:
        assert time.monotonic() < deadline, "b's JoinGroup never started a rebalance"
        time.sleep(0.02)  # b's request is on its way: heartbeat as a member would
    assert error is ErrorCode.rebalance_in_progress
    rejoined = a_conn.request(join(group, topic, a))
    b_joined = b_conn.recv(join(group, topic, instance=INSTANCE))
    assert (rejoined.error_code, rejoined.generation_id, rejoined.leader) == (ErrorCode.none, 2, a)
    assert (b_joined.error_code, b_joined.generation_id) == (ErrorCode.none, 2)
    b = b_joined.member_id
    assert sync(a_conn, group, 2, a, {a: b"A2", b: b"B2"}) == (ErrorCode.none, b"A2")
    assert sync(b_conn, group, 2, b, instance=INSTANCE) == (ErrorCode.none, b"B2")
    assert commit(a_conn, group, 2, a, topic, 7) is ErrorCode.none

    group_broker.kill()
    group_broker.start()
    # Taken up as it was: both members heartbeat on at generation 2, nobody rejoins.
    assert heartbeat_once_coordinating(bootstrap, group, 2, a) is ErrorCode.none
    client = wire(bootstrap)
    assert heartbeat(client, group, 2, b, INSTANCE) is ErrorCode.none
    assert sync(client, group, 2, b, instance=INSTANCE) == (ErrorCode.none, b"B2")  # a follower asking again
    assert described(client, group) == ("Stable", "consumer", "range", {a: (None, b"A2"), b: (INSTANCE, b"B2")})
    assert commit(client, group, 2, a, topic, 9) is ErrorCode.none
    assert commit(client, group, 1, a, topic, 9) is ErrorCode.illegal_generation
    assert "classic group %s taken up from the metadata store (2 member(s), generation 2)" % group in group_broker.log_text()

    # b leaves for good: a rejoins alone, generation 3, and that is what the next restart finds.
    leave = leave_group_v3.LeaveGroupRequest(group_id=group, members=(leave_group_v3.MemberIdentity(member_id=b, group_instance_id=INSTANCE),))
    assert client.request(leave).error_code is ErrorCode.none
    assert heartbeat(client, group, 2, a) is ErrorCode.rebalance_in_progress
    assert client.request(join(group, topic, a)).generation_id == 3
    assert sync(client, group, 3, a, {a: b"A3"}) == (ErrorCode.none, b"A3")
    group_broker.restart()
    assert heartbeat_once_coordinating(bootstrap, group, 3, a) is ErrorCode.none
    client = wire(bootstrap)
    assert heartbeat(client, group, 2, b, INSTANCE) is ErrorCode.unknown_member_id
    assert described(client, group) == ("Stable", "consumer", "range", {a: (None, b"A3")})

    # a leaves: the group is Empty and nothing of its members is kept.
    leave = leave_group_v3.LeaveGroupRequest(group_id=group, members=(leave_group_v3.MemberIdentity(member_id=a, group_instance_id=None),))
    assert client.request(leave).error_code is ErrorCode.none
    group_broker.restart()
    assert heartbeat_once_coordinating(bootstrap, group, 3, a) is ErrorCode.unknown_member_id
    assert described(wire(bootstrap), group) == ("Empty", "consumer", "", {})
