"""An empty KIP-848 consumer group stays a consumer group across a restart of its coordinator
(SIGTERM), as Kafka keeps its ConsumerGroupMetadata record: ListGroups lists it as type
`consumer`, Empty, its committed offsets kept; ConsumerGroupDescribe answers it Empty at its
group and assignment epochs; DescribeGroups calls it Dead (v5) or not a classic group (v6);
a member of the new protocol joins it at the next epoch. Once a classic member takes it over
(Kafka's offline downgrade), it is a classic group, also after the next restart.

confluent-kafka unchanged (`group.protocol=consumer` and classic), raw requests where the
clients do not show the answer (epochs); on both metadata backends.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.consumer_group_describe.v0.request import ConsumerGroupDescribeRequest
from kio.schema.describe_groups.v5 import request as describe_groups_v5
from kio.schema.describe_groups.v6 import request as describe_groups_v6
from kio.schema.errors import ErrorCode

from .conftest import ON_EVERY_METADATA_BACKEND, WireClient
from .test_cli_groups_reset import committed

pytestmark = [
    ON_EVERY_METADATA_BACKEND,
    pytest.mark.skipif(
        tuple(int(x) for x in __import__("confluent_kafka").libversion()[0].split(".")[:2]) < (2, 10),
        reason="group.protocol=consumer needs librdkafka 2.10+",
    ),
]

DEADLINE_S = 30.0
RECORDS = 10  # per partition
COORDINATOR_MOVING = (ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available)


def consume(bootstrap: str, group: str, topic: str, count: int, protocol: str) -> tuple[Consumer, list[tuple[int, int]]]:
    """A member of `group` that consumed `count` records, as (partition, offset)."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol, "client.id": f"{protocol}-member",
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
    })  # fmt: skip
    consumer.subscribe([topic])
    consumed: list[tuple[int, int]] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(consumed) < count:
        assert time.monotonic() < deadline, f"consumed {len(consumed)} of {count}"
        message = consumer.poll(0.1)
        if message is not None and message.error() is None:
            consumed.append((message.partition(), message.offset()))
    return consumer, consumed


def listed(bootstrap: str, group: str) -> tuple[Any, str] | None:
    """(type, state) of `group` as ListGroups v5 answers it, None while it is not listed."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    found = [g for g in admin.list_consumer_groups().result(timeout=DEADLINE_S).valid if g.group_id == group]
    return (found[0].type, found[0].state.name) if found else None


def listed_once_known(bootstrap: str, group: str) -> tuple[Any, str]:
    deadline = time.monotonic() + DEADLINE_S
    while (answer := listed(bootstrap, group)) is None:
        assert time.monotonic() < deadline, f"{group} was never listed"
        time.sleep(0.05)  # a restarted broker is taking its coordinator slots up: ask again, as a client would
    return answer


def consumer_group_described(bootstrap: str, group: str) -> tuple[ErrorCode, str, int, int, int]:
    """ConsumerGroupDescribe: (error, state, group epoch, assignment epoch, members), retried while
    the coordinator is being found or loaded."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        client = WireClient(bootstrap)
        try:
            [d] = client.request(ConsumerGroupDescribeRequest(group_ids=(group,), include_authorized_operations=False)).groups
        finally:
            client.close()
        if d.error_code not in COORDINATOR_MOVING:
            return d.error_code, d.group_state, d.group_epoch, d.assignment_epoch, len(d.members)
        assert time.monotonic() < deadline, f"the broker never coordinated {group}: {d.error_code!r}"
        time.sleep(0.05)


def described_classically(bootstrap: str, group: str) -> list[tuple[ErrorCode, str, str | None]]:
    """DescribeGroups v5 and v6: (error, state, error message or protocol type)."""
    client = WireClient(bootstrap)
    try:
        [v5] = client.request(describe_groups_v5.DescribeGroupsRequest(groups=(group,), include_authorized_operations=False)).groups
        [v6] = client.request(describe_groups_v6.DescribeGroupsRequest(groups=(group,), include_authorized_operations=False)).groups
    finally:
        client.close()
    return [(v5.error_code, v5.group_state, v5.protocol_type), (v6.error_code, v6.group_state, v6.error_message)]


def test_an_empty_consumer_group_keeps_its_type_and_epochs_across_a_restart(group_broker, create_topic) -> None:
    bootstrap = group_broker.bootstrap
    topic = create_topic(bootstrap, partitions=2)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(2 * RECORDS):
        producer.produce(topic, value=b"v%d" % i, partition=i % 2)
    assert producer.flush(DEADLINE_S) == 0
    group = f"fresh848-{uuid.uuid4().hex[:8]}"

    member, _ = consume(bootstrap, group, topic, 2 * RECORDS, "consumer")
    member.commit(offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 4)], asynchronous=False)
    member.close()  # leaves: group epoch 2, the target assignment still epoch 1's
    assert listed(bootstrap, group) == (ConsumerGroupType.CONSUMER, "EMPTY")
    assert consumer_group_described(bootstrap, group) == (ErrorCode.none, "Empty", 2, 1, 0)

    group_broker.restart()  # SIGTERM, then start again on the same metadata store
    assert listed_once_known(bootstrap, group) == (ConsumerGroupType.CONSUMER, "EMPTY")
    assert consumer_group_described(bootstrap, group) == (ErrorCode.none, "Empty", 2, 1, 0)
    assert described_classically(bootstrap, group) == [
        (ErrorCode.none, "Dead", ""),
        (ErrorCode.group_id_not_found, "Dead", f"Group {group} is not a classic group."),
    ]
    assert committed(bootstrap, group, topic) == {0: 3, 1: 4}

    # A member of the new protocol goes on from the committed offsets, at the epoch after the kept ones.
    member, consumed = consume(bootstrap, group, topic, 2 * RECORDS - 7, "consumer")
    assert sorted(consumed) == [(0, o) for o in range(3, RECORDS)] + [(1, o) for o in range(4, RECORDS)]
    assert consumer_group_described(bootstrap, group) == (ErrorCode.none, "Stable", 3, 3, 1)
    member.commit(offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 6)], asynchronous=False)
    member.close()
    assert consumer_group_described(bootstrap, group)[:3] == (ErrorCode.none, "Empty", 4)

    # Kafka's offline downgrade: a classic member takes the empty group over, and it stays
    # classic across the next restart (the consumer group's stored state went with it).
    member, consumed = consume(bootstrap, group, topic, 2 * RECORDS - 11, "classic")
    assert sorted(consumed) == [(0, o) for o in range(5, RECORDS)] + [(1, o) for o in range(6, RECORDS)]
    assert listed(bootstrap, group) == (ConsumerGroupType.CLASSIC, "STABLE")
    member.close()
    group_broker.restart()
    assert listed_once_known(bootstrap, group) == (ConsumerGroupType.CLASSIC, "EMPTY")
    assert consumer_group_described(bootstrap, group)[0] is ErrorCode.group_id_not_found
    assert committed(bootstrap, group, topic) == {0: 5, 1: 6}
