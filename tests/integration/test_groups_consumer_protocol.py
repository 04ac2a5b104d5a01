"""KIP-848 consumer groups with confluent-kafka unchanged (`group.protocol=consumer`) against a
real broker: assignments computed by the broker, members joining, leaving and being fenced,
classic and consumer groups side by side, group configs through the AdminClient."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time
import uuid

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from kio.schema.errors import ErrorCode

from .broker_process import BrokerProcess

pytestmark = pytest.mark.skipif(
    tuple(int(x) for x in __import__("confluent_kafka").libversion()[0].split(".")[:2]) < (2, 10),
    reason="group.protocol=consumer needs librdkafka 2.10+",
)


def _group() -> str:
    return f"g-{uuid.uuid4().hex[:12]}"


def _produce(bootstrap: str, topic: str, partitions: int, count: int, start: int = 0) -> set[bytes]:
    producer = Producer({"bootstrap.servers": bootstrap})
    values = set()
    for i in range(start, start + count):
        value = f"v{i}".encode()
        producer.produce(topic, value, partition=i % partitions)
        values.add(value)
    assert producer.flush(30) == 0
    return values


def _consumer(bootstrap: str, group: str, topic: str, name: str, **extra: str) -> Consumer:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
        "auto.offset.reset": "earliest", "client.id": name, **extra,
    })  # fmt: skip
    consumer.subscribe([topic])
    return consumer


def _partitions(consumer: Consumer) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


class Members:
    """Polls every consumer in turn (one thread), recording what each consumed."""

    def __init__(self, **consumers: Consumer) -> None:
        self.consumers = dict(consumers)
        self.consumed: dict[str, list[tuple[int, bytes]]] = {name: [] for name in consumers}

    def poll_until(self, condition, deadline_s: float, what: str) -> None:
        deadline = time.monotonic() + deadline_s
        while not condition():
            if time.monotonic() > deadline:
                assignments = {n: sorted(_partitions(c)) for n, c in self.consumers.items()}
                raise AssertionError(f"{what} not reached in {deadline_s}s; assignments {assignments}")
            for name, consumer in self.consumers.items():
                message = consumer.poll(0.05)
                if message is not None and message.error() is None:
                    self.consumed[name].append((message.partition(), message.value()))

    def values(self) -> list[bytes]:
        return [v for consumed in self.consumed.values() for _, v in consumed]

    def covering(self, partitions: int) -> bool:
        """Every partition held by exactly one member."""
        held = [_partitions(c) for c in self.consumers.values()]
        return sum(map(len, held)) == partitions and set().union(*held) == set(range(partitions))


def test_members_join_consume_exactly_and_partitions_move_when_one_leaves(shared_group_broker, create_topic):
    bootstrap = shared_group_broker.bootstrap
    topic = create_topic(bootstrap, partitions=4)
    group = _group()
    expected = _produce(bootstrap, topic, 4, 200)
    members = Members(a=_consumer(bootstrap, group, topic, "a"))
    members.poll_until(lambda: len(members.values()) >= 200, 60, "a consumes everything")
    assert _partitions(members.consumers["a"]) == {0, 1, 2, 3}
    members.consumers["b"] = _consumer(bootstrap, group, topic, "b")
    members.consumed["b"] = []
    members.poll_until(lambda: members.covering(4) and all(_partitions(c) for c in members.consumers.values()), 60, "a and b share")
    assert sorted(len(_partitions(c)) for c in members.consumers.values()) == [2, 2]
    expected |= _produce(bootstrap, topic, 4, 200, start=200)
    members.poll_until(lambda: len(members.values()) >= 400, 60, "400 records consumed")
    # b's records come only from b's partitions.
    assert {p for p, _ in members.consumed["b"]} <= _partitions(members.consumers["b"])
    members.consumers.pop("b").close()  # leaves the group (epoch -1)
    members.poll_until(lambda: _partitions(members.consumers["a"]) == {0, 1, 2, 3}, 60, "a holds all after b left")
    expected |= _produce(bootstrap, topic, 4, 100, start=400)
    members.poll_until(lambda: len(members.values()) >= 500, 60, "500 records consumed")
    values = members.values()
    assert len(values) == len(set(values)) == 500 and set(values) == expected
    # ConsumerGroupDescribe through the AdminClient: one member, Stable, the consumer type.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    description = admin.describe_consumer_groups([group])[group].result(timeout=20)
    assert description.type == ConsumerGroupType.CONSUMER
    assert [m.client_id for m in description.members] == ["a"]
    assert {tp.partition for tp in description.members[0].assignment.topic_partitions} == {0, 1, 2, 3}
    members.consumers["a"].close()


@pytest.fixture
def short_session_broker(tmp_path):
    """group.consumer.session.timeout.ms 6 s (Kafka's default is 45 s), heartbeats every second."""
    process = BrokerProcess(
        tmp_path / "data", "--group-initial-rebalance-delay-ms", "0",
        "--group-consumer-session-timeout-ms", "6000", "--group-consumer-min-session-timeout-ms", "6000",
        "--group-consumer-heartbeat-interval-ms", "1000", "--group-consumer-min-heartbeat-interval-ms", "1000",
    ).start()  # fmt: skip
    try:
        yield process
    finally:
        process.close()


def test_a_killed_member_is_fenced_after_its_session_and_its_partitions_move(short_session_broker, create_topic):
    """The broker's group.consumer.session.timeout.ms fences a member that stops heartbeating."""
    bootstrap = short_session_broker.bootstrap
    topic = create_topic(bootstrap, partitions=2)
    group = _group()
    script = textwrap.dedent(f"""
        from confluent_kafka import Consumer
        c = Consumer({{"bootstrap.servers": "{bootstrap}", "group.id": "{group}", "group.protocol": "consumer",
                      "auto.offset.reset": "earliest", "client.id": "doomed"}})
        c.subscribe(["{topic}"])
        while True:
            c.poll(0.1)
            if c.assignment():
                print("assigned", flush=True)
    """)
    doomed = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert doomed.stdout.readline().strip() == "assigned"
        members = Members(a=_consumer(bootstrap, group, topic, "a"))
        admin = AdminClient({"bootstrap.servers": bootstrap})

        def both_members() -> bool:
            d = admin.describe_consumer_groups([group])[group].result(timeout=20)
            return len(d.members) == 2 and d.state.name == "STABLE"

        members.poll_until(lambda: len(_partitions(members.consumers["a"])) == 1 and both_members(), 60, "a gets one partition")
        doomed.kill()
        doomed.wait(10)
        members.poll_until(lambda: _partitions(members.consumers["a"]) == {0, 1}, 90, "a holds both after the session timeout")
        expected = _produce(bootstrap, topic, 2, 50)
        members.poll_until(lambda: len(members.values()) >= 50, 60, "50 records consumed")
        assert set(members.values()) == expected and len(members.values()) == 50
        members.consumers["a"].close()
    finally:
        if doomed.poll() is None:
            doomed.kill()
            doomed.wait(10)


def test_classic_and_consumer_groups_side_by_side_listed_by_type(shared_group_broker, create_topic):
    bootstrap = shared_group_broker.bootstrap
    topic = create_topic(bootstrap, partitions=2)
    classic_group, consumer_group = _group(), _group()
    expected = _produce(bootstrap, topic, 2, 40)
    classic = Consumer({"bootstrap.servers": bootstrap, "group.id": classic_group, "auto.offset.reset": "earliest"})
    classic.subscribe([topic])
    members = Members(classic=classic, modern=_consumer(bootstrap, consumer_group, topic, "modern"))
    members.poll_until(lambda: all(len(c) >= 40 for c in members.consumed.values()), 60, "both groups consume everything")
    assert {v for _, v in members.consumed["classic"]} == {v for _, v in members.consumed["modern"]} == expected
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def listed(types):
        result = admin.list_consumer_groups(types=types).result(timeout=20)
        return {(g.group_id, g.type) for g in result.valid if g.group_id in (classic_group, consumer_group)}

    assert listed({ConsumerGroupType.CONSUMER}) == {(consumer_group, ConsumerGroupType.CONSUMER)}
    assert listed({ConsumerGroupType.CLASSIC}) == {(classic_group, ConsumerGroupType.CLASSIC)}
    assert listed(set()) == {(consumer_group, ConsumerGroupType.CONSUMER), (classic_group, ConsumerGroupType.CLASSIC)}
    described = admin.describe_consumer_groups([classic_group, consumer_group])
    assert described[classic_group].result(timeout=20).type == ConsumerGroupType.CLASSIC
    assert described[consumer_group].result(timeout=20).type == ConsumerGroupType.CONSUMER
    # Committed offsets of the consumer group, committed with the member epoch (OffsetCommit v9).
    modern = members.consumers["modern"]
    modern.commit(asynchronous=False)
    committed = modern.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=20)
    assert sum(tp.offset for tp in committed) == 40
    for consumer in members.consumers.values():
        consumer.close()


def test_group_configs_set_and_read_back(shared_group_broker):
    admin = AdminClient({"bootstrap.servers": shared_group_broker.bootstrap})
    group = _group()
    resource = ConfigResource(ResourceType.GROUP, group)

    def described() -> dict[str, tuple[str, bool]]:
        configs = admin.describe_configs([resource])[resource].result(timeout=20)
        return {name: (entry.value, entry.is_default) for name, entry in configs.items()}

    assert described() == {"consumer.session.timeout.ms": ("45000", True), "consumer.heartbeat.interval.ms": ("5000", True)}
    change = ConfigResource(
        ResourceType.GROUP, group,
        incremental_configs=[ConfigEntry("consumer.session.timeout.ms", "50000", incremental_operation=AlterConfigOpType.SET)],
    )  # fmt: skip
    admin.incremental_alter_configs([change])[change].result(timeout=20)
    assert described()["consumer.session.timeout.ms"] == ("50000", False)
    too_low = ConfigResource(
        ResourceType.GROUP, group,
        incremental_configs=[ConfigEntry("consumer.session.timeout.ms", "1000", incremental_operation=AlterConfigOpType.SET)],
    )  # fmt: skip
    with pytest.raises(KafkaException) as refused:
        admin.incremental_alter_configs([too_low])[too_low].result(timeout=20)
    assert refused.value.args[0].name() == "INVALID_CONFIG"
    # The legacy AlterConfigs replaces the whole set: the session timeout returns to its default.
    legacy = ConfigResource(ResourceType.GROUP, group, set_config={"consumer.heartbeat.interval.ms": "6000"})
    admin.alter_configs([legacy])[legacy].result(timeout=20)
    assert described() == {"consumer.session.timeout.ms": ("45000", True), "consumer.heartbeat.interval.ms": ("6000", False)}


def test_legacy_alter_configs_on_a_topic(shared_group_broker, create_topic):
    bootstrap = shared_group_broker.bootstrap
    topic = create_topic(bootstrap, partitions=1, configs={"retention.ms": "3600000"})
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, topic, set_config={"max.message.bytes": "2000000"})
    admin.alter_configs([resource])[resource].result(timeout=20)
    configs = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
    entries = next(iter(configs.values())).result(timeout=20)
    assert entries["max.message.bytes"].value == "2000000"
    assert entries["retention.ms"].is_default  # replaced: no longer set on the topic


def test_describe_groups_v6_reports_missing_and_consumer_groups(shared_group_broker, create_topic, wire):
    """DescribeGroups v6 (KIP-1043) answers GROUP_ID_NOT_FOUND, with Kafka's messages, for a
    group that does not exist and for a KIP-848 group; v5 calls both Dead; a classic group is
    described by both."""
    from kio.schema.describe_groups.v5 import request as describe_v5
    from kio.schema.describe_groups.v6 import request as describe_v6

    bootstrap = shared_group_broker.bootstrap
    topic = create_topic(bootstrap, partitions=1)
    missing, modern_group, classic_group = _group(), _group(), _group()
    _produce(bootstrap, topic, 1, 1)
    classic = Consumer({"bootstrap.servers": bootstrap, "group.id": classic_group, "auto.offset.reset": "earliest"})
    classic.subscribe([topic])
    members = Members(classic=classic, modern=_consumer(bootstrap, modern_group, topic, "modern"))
    try:
        members.poll_until(lambda: all(len(c) == 1 for c in members.consumed.values()), 60, "both groups to consume")
        client = wire(bootstrap)
        groups = (missing, modern_group, classic_group)
        v6 = client.request(describe_v6.DescribeGroupsRequest(groups=groups, include_authorized_operations=False)).groups
        assert [(g.group_id, g.error_code, g.error_message, g.group_state) for g in v6[:2]] == [
            (missing, ErrorCode.group_id_not_found, f"Group {missing} not found.", "Dead"),
            (modern_group, ErrorCode.group_id_not_found, f"Group {modern_group} is not a classic group.", "Dead"),
        ]
        assert (v6[2].error_code, v6[2].error_message, v6[2].group_state, v6[2].protocol_type) == (ErrorCode.none, None, "Stable", "consumer")
        v5 = client.request(describe_v5.DescribeGroupsRequest(groups=groups, include_authorized_operations=False)).groups
        assert [(g.error_code, g.group_state) for g in v5] == [(ErrorCode.none, "Dead"), (ErrorCode.none, "Dead"), (ErrorCode.none, "Stable")]
    finally:
        for consumer in members.consumers.values():
            consumer.close()


def test_group_configs_and_group_types_through_kafka_python(shared_group_broker, create_topic):
    """kafka-python's KafkaAdminClient: GROUP configs described, altered incrementally and with
    the legacy AlterConfigs, read back; ListGroups' types filter on a classic and a consumer group."""
    from kafka.admin import ConfigResource as KpConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    bootstrap = shared_group_broker.bootstrap
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        group = _group()

        def described(config_filter: str = "all") -> dict[str, tuple[str, str]]:
            result = admin.describe_configs([KpConfigResource(ConfigResourceType.GROUP, group)], config_filter=config_filter)
            return {name: (entry["value"], entry["config_source"]) for name, entry in result["group"][group].items()}

        assert described() == {
            "consumer.session.timeout.ms": ("45000", "DEFAULT_CONFIG"),
            "consumer.heartbeat.interval.ms": ("5000", "DEFAULT_CONFIG"),
        }
        resource = KpConfigResource(ConfigResourceType.GROUP, group, configs={"consumer.session.timeout.ms": "50000"})
        assert admin.alter_configs([resource], incremental=True) == {"group": {group: "OK"}}
        assert described("modified") == {"consumer.session.timeout.ms": ("50000", "DYNAMIC_GROUP_CONFIG")}
        legacy = KpConfigResource(ConfigResourceType.GROUP, group, configs={"consumer.heartbeat.interval.ms": "6000"})
        assert admin.alter_configs([legacy], incremental=False) == {"group": {group: "OK"}}
        # kafka-python's legacy path sends the other modified keys too (AlterConfigs replaces the set).
        assert described("modified") == {
            "consumer.session.timeout.ms": ("50000", "DYNAMIC_GROUP_CONFIG"),
            "consumer.heartbeat.interval.ms": ("6000", "DYNAMIC_GROUP_CONFIG"),
        }

        topic = create_topic(bootstrap, partitions=1)
        _produce(bootstrap, topic, 1, 1)
        classic_group, consumer_group = _group(), _group()
        classic = Consumer({"bootstrap.servers": bootstrap, "group.id": classic_group, "auto.offset.reset": "earliest"})
        classic.subscribe([topic])
        members = Members(classic=classic, modern=_consumer(bootstrap, consumer_group, topic, "modern"))
        try:
            members.poll_until(lambda: all(len(c) == 1 for c in members.consumed.values()), 60, "both groups to consume")

            def listed(types: list[str]) -> set[str]:
                return {g["group_id"] for g in admin.list_groups(types_filter=types)} & {classic_group, consumer_group}

            assert listed(["consumer"]) == {consumer_group}
            assert listed(["classic"]) == {classic_group}
        finally:
            for consumer in members.consumers.values():
                consumer.close()
    finally:
        admin.close()


def test_group_configs_are_kept_in_the_metadata_store_across_a_restart(group_broker):
    """Group configs are stored in the metadata store: a restarted broker describes them as set,
    and its coordinator hands the group's heartbeat interval to its members."""
    bootstrap = group_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    group = _group()
    change = ConfigResource(
        ResourceType.GROUP, group,
        incremental_configs=[ConfigEntry("consumer.heartbeat.interval.ms", "6000", incremental_operation=AlterConfigOpType.SET)],
    )  # fmt: skip
    admin.incremental_alter_configs([change])[change].result(timeout=20)
    group_broker.restart()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group)
    configs = admin.describe_configs([resource])[resource].result(timeout=20)
    assert (configs["consumer.heartbeat.interval.ms"].value, configs["consumer.heartbeat.interval.ms"].is_default) == ("6000", False)
    assert configs["consumer.session.timeout.ms"].is_default

    async def joined_interval_ms() -> int:
        from diskless.client import Consumer as OurConsumer

        topic = f"t-{uuid.uuid4().hex[:12]}"
        async with OurConsumer(topic, bootstrap_servers=bootstrap, group_id=group, group_protocol="consumer") as member:
            deadline = time.monotonic() + 30
            while member._group.member_epoch <= 0:
                assert time.monotonic() < deadline, "the member did not join"
                await asyncio.sleep(0.05)
            return member._group.heartbeat_interval_ms

    assert asyncio.run(joined_interval_ms()) == 6000


def test_members_join_and_leave_one_at_a_time_while_records_are_produced(short_session_broker, create_topic):
    """librdkafka members join one at a time and leave one at a time while a producer writes:
    after each change the assignments are disjoint and cover the topic, at no moment do two
    members hold the same partition, committed offsets never go back, and every record is
    consumed (at least once: a partition's new owner starts from the last commit)."""
    import threading

    from confluent_kafka import ConsumerGroupTopicPartitions

    bootstrap = short_session_broker.bootstrap
    partitions = 6
    topic = create_topic(bootstrap, partitions=partitions)
    group = _group()
    produced: list[bytes] = []
    stop = threading.Event()

    def produce() -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        i = 0
        while not stop.is_set():
            value = f"v{i}".encode()
            producer.produce(topic, value, partition=i % partitions, on_delivery=lambda err, msg: err is None and produced.append(msg.value()))
            producer.poll(0)
            i += 1
            time.sleep(0.002)
        assert producer.flush(30) == 0

    admin = AdminClient({"bootstrap.servers": bootstrap})
    overlaps: list[str] = []
    commits: list[dict[int, int]] = []

    class Watched(Members):
        def poll_until(self, condition, deadline_s, what):
            def checked() -> bool:
                held = [(n, _partitions(c)) for n, c in self.consumers.items()]
                for i, (a, pa) in enumerate(held):
                    for b, pb in held[i + 1 :]:
                        if pa & pb:
                            overlaps.append(f"{a} and {b} both hold {sorted(pa & pb)}")
                request = [ConsumerGroupTopicPartitions(group)]
                offsets = admin.list_consumer_group_offsets(request)[group].result(timeout=20)
                commits.append({tp.partition: tp.offset for tp in offsets.topic_partitions if tp.offset >= 0})
                return condition()

            super().poll_until(checked, deadline_s, what)

    producer = threading.Thread(target=produce)
    producer.start()
    members = Watched()
    try:
        for name in ("a", "b", "c"):
            members.consumers[name] = _consumer(bootstrap, group, topic, name, **{"auto.commit.interval.ms": "200"})
            members.consumed[name] = []
            members.poll_until(lambda: members.covering(partitions) and all(_partitions(c) for c in members.consumers.values()), 60, f"{name} to join")
        for name in ("b", "a"):
            members.consumers.pop(name).close()
            members.poll_until(lambda: members.covering(partitions), 60, f"{name} to leave")
        members.poll_until(lambda: len(produced) >= 300, 60, "300 records produced")
        stop.set()
        producer.join(60)
        members.poll_until(lambda: set(produced) <= set(members.values()), 60, "every record consumed")
    finally:
        stop.set()
        producer.join(60)
        for consumer in members.consumers.values():
            consumer.close()
    assert overlaps == []
    assert set(members.values()) == set(produced)
    for before, after in zip(commits, commits[1:]):
        assert all(after.get(p, -1) >= offset for p, offset in before.items()), (before, after)


def test_an_empty_classic_group_is_taken_over_by_a_consumer_protocol_member_with_its_offsets(shared_group_broker, create_topic):
    """Kafka's offline upgrade: once a classic group is empty, a member of the new protocol
    joins it as a consumer group and starts from the offsets the classic members committed;
    once that one leaves, a classic member takes it back the same way. While the classic
    group has members, a new-protocol member is refused."""
    bootstrap = shared_group_broker.bootstrap
    topic = create_topic(bootstrap, partitions=2)
    group = _group()
    values = sorted(_produce(bootstrap, topic, 2, 40), key=lambda v: int(v[1:]))
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def group_type():
        listed = admin.list_consumer_groups().result(timeout=20).valid
        return next((g.type for g in listed if g.group_id == group), None)

    classic = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    classic.subscribe([topic])
    members = Members(classic=classic)
    members.poll_until(lambda: len(members.consumed["classic"]) == 40, 60, "the classic member to read everything")
    classic.commit(offsets=[TopicPartition(topic, 0, 10), TopicPartition(topic, 1, 10)], asynchronous=False)
    assert group_type() == ConsumerGroupType.CLASSIC
    refused = _consumer(bootstrap, group, topic, "too-early")
    try:
        deadline = time.monotonic() + 30
        while True:  # the classic member still holds the group: the new protocol may not take it
            message = refused.poll(0.2)
            if message is not None and message.error() is not None:
                # GROUP_ID_NOT_FOUND, as Kafka answers with group.consumer.migration.policy=disabled
                # (no online upgrade here); librdkafka makes it fatal for that consumer.
                assert (message.error().code(), "The group id does not exist" in message.error().str()) == (KafkaError._FATAL, True), message.error()
                break
            assert message is None, "a new-protocol member consumed from a classic group that has members"
            assert time.monotonic() < deadline, "the new-protocol member was never refused"
    finally:
        refused.close()
    classic.close()  # the classic group is empty now

    modern = _consumer(bootstrap, group, topic, "modern", **{"enable.auto.commit": "false"})
    members = Members(modern=modern)
    members.poll_until(lambda: len(members.consumed["modern"]) == 20, 60, "the new-protocol member to read from the committed offsets")
    assert sorted(v for _, v in members.consumed["modern"]) == sorted(v for v in values if int(v[1:]) >= 20)  # offsets 10.. of each
    assert group_type() == ConsumerGroupType.CONSUMER
    modern.commit(offsets=[TopicPartition(topic, 0, 15), TopicPartition(topic, 1, 15)], asynchronous=False)
    modern.close()

    back = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    back.subscribe([topic])
    members = Members(back=back)
    members.poll_until(lambda: len(members.consumed["back"]) == 10, 60, "a classic member to read from the offsets committed by the new protocol")
    assert sorted(v for _, v in members.consumed["back"]) == sorted(v for v in values if int(v[1:]) >= 30)
    assert group_type() == ConsumerGroupType.CLASSIC
    back.close()
