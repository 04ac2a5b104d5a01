"""An Empty KIP-848 consumer group's state stays in the metadata store (Kafka keeps its
ConsumerGroupMetadata record), so the broker that takes its coordinator slot up, after a
restart or from another broker, still has a consumer group: ListGroups lists it as type
`consumer`, ConsumerGroupDescribe answers it Empty at its epochs, DescribeGroups does not
describe it as a classic group. It goes only with the group: a classic member taking it over
(the offline downgrade) deletes it before it is answered.

The broker's `Groups` shell over a real metadata store, on every backend, with the cluster
view of each broker held by the test (test_offsets_coordinator_fencing's harness).
"""

from __future__ import annotations

import json
import uuid

from kio.schema.errors import ErrorCode

from diskless.broker.group.consumer_coordinator import HeartbeatRequest
from diskless.broker.group.responses import ListedGroup
from diskless.broker.groups import Groups
from metadata import MetadataStore, PartitionLeadership
from metadata.model import COORDINATOR_SLOTS

from .test_metadata_store import backend, store, url  # noqa: F401 (fixtures: every backend)
from .test_offsets_coordinator_fencing import CONFIG, RETENTION_MS, SLOTS, View, broker, group_of_broker_1, joining, offset, offset_commit


def leaving(group: str, member: str) -> HeartbeatRequest:
    return HeartbeatRequest(group, member, -1)


def listed(groups: list[ListedGroup], group: str) -> list[tuple[str, str, str]]:
    return [(g.protocol_type, g.group_state, g.group_type) for g in groups if g.group_id == group]


async def test_an_empty_consumer_group_is_taken_up_elsewhere_as_a_consumer_group(store: MetadataStore) -> None:  # noqa: F811
    topic, group, slot = await group_of_broker_1(store)
    clock = [1_000]
    slots = [PartitionLeadership(COORDINATOR_SLOTS, s, 1, 1 if s == slot else 0) for s in range(SLOTS)]
    a = broker(store, View(1, slots), topic.name, clock)
    joined = await a.groups.consumer_group_heartbeat(joining(group, "m1", topic.name), [topic])
    assert (joined.error_code, joined.member_epoch) == (ErrorCode.none, 1)
    assert (await a.groups.consumer_group_heartbeat(leaving(group, "m1"), [topic])).error_code is ErrorCode.none
    assert await offset_commit(a, group, topic.name, {0: 4, 1: 6}) == [ErrorCode.none] * 2  # an admin's reset of the empty group
    stored = json.loads(await store.get_consumer_group(group))
    assert (stored["group_epoch"], stored["target_epoch"], stored["members"]) == (2, 1, [])
    assert listed(await a.groups.list_groups(), group) == [("consumer", "Empty", "consumer")]

    # Broker 2 takes the slot (broker 1 stopped, or restarted as another incarnation). The
    # moment its view has the slot but its groups are not taken up yet, the group is not
    # listed as the classic Empty group its offsets alone would make it.
    assert await store.set_coordinator_slots([(slot, 2, 1)]) == [2]
    b_view = View(2, [PartitionLeadership(COORDINATOR_SLOTS, s, 2, 2 if s == slot else 0) for s in range(SLOTS)])
    b_view._coordinating_epochs = {}
    b = broker(store, b_view, topic.name, clock)
    assert listed(await b.groups.list_groups(), group) == []
    b_view._coordinating_epochs = {slot: 2}  # taken up (`_apply_view`)
    assert listed(await b.groups.list_groups(), group) == [("consumer", "Empty", "consumer")]
    assert listed(await b.groups.list_groups(types_filter=["classic"]), group) == []
    [d] = await b.groups.consumer_group_describe([group])
    assert (d.error_code, d.group_state, d.group_epoch, d.assignment_epoch, d.members) == (ErrorCode.none, "Empty", 2, 1, ())
    [v5] = await b.groups.describe_groups([group], api_version=5)
    [v6] = await b.groups.describe_groups([group], api_version=6)
    assert (v5.error_code, v5.group_state) == (ErrorCode.none, "Dead")
    assert (v6.error_code, v6.error_message) == (ErrorCode.group_id_not_found, f"Group {group} is not a classic group.")
    # The next member joins it at the epoch after the kept one.
    rejoined = await b.groups.consumer_group_heartbeat(joining(group, "m2", topic.name), [topic])
    assert (rejoined.error_code, rejoined.member_epoch) == (ErrorCode.none, 3)


async def test_a_classic_member_taking_an_empty_consumer_group_over_deletes_its_stored_state(store: MetadataStore) -> None:  # noqa: F811
    topic = await store.create_topic(f"t-{uuid.uuid4().hex[:10]}", 2, {})
    group = f"g-{uuid.uuid4().hex[:10]}"
    clock = [1_000]
    groups = Groups(CONFIG, store, lambda: clock[0], RETENTION_MS)
    assert (await groups.consumer_group_heartbeat(joining(group, "m1", topic.name), [topic])).error_code is ErrorCode.none
    assert (await groups.consumer_group_heartbeat(leaving(group, "m1"), [topic])).error_code is ErrorCode.none
    await store.commit_offsets(group, [offset(topic.name, 0, 4)])
    assert await store.get_consumer_group(group) is not None
    # JoinGroup v4+ without a member id: answered MEMBER_ID_REQUIRED at once, no generation yet
    # (nothing of the classic group is stored), but the consumer group is gone, store included.
    answer = await groups.join_group(
        group_id=group, member_id="", group_instance_id=None, client_id="c", client_host="/127.0.0.1", protocol_type="consumer",
        protocols=[("range", b"")], session_timeout_ms=10_000, rebalance_timeout_ms=30_000, require_known_member_id=True,
    )  # fmt: skip
    assert answer.error_code is ErrorCode.member_id_required
    assert await store.get_consumer_group(group) is None
    restarted = Groups(CONFIG, store, lambda: clock[0], RETENTION_MS)
    assert listed(await restarted.list_groups(), group) == [("consumer", "Empty", "classic")]  # known by its offsets
    [d] = await restarted.consumer_group_describe([group])
    assert d.error_code is ErrorCode.group_id_not_found


async def test_a_deleted_consumer_group_is_not_left_to_delete_again(store: MetadataStore) -> None:  # noqa: F811
    """DeleteGroups writes the group's deletion itself: the coordinator must not hold the group
    as changed, or a later write of the id (a classic group made since) would delete that."""
    topic = await store.create_topic(f"t-{uuid.uuid4().hex[:10]}", 2, {})
    group = f"g-{uuid.uuid4().hex[:10]}"
    groups = Groups(CONFIG, store, lambda: 1_000, RETENTION_MS)
    assert (await groups.consumer_group_heartbeat(joining(group, "m1", topic.name), [topic])).error_code is ErrorCode.none
    assert (await groups.consumer_group_heartbeat(leaving(group, "m1"), [topic])).error_code is ErrorCode.none
    assert await groups.delete_group(group) is ErrorCode.none
    assert (await store.get_consumer_group(group), groups.consumer.changed(group)) == (None, False)
