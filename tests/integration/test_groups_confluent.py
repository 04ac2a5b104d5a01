"""Consumer groups with confluent-kafka (librdkafka) against a real `diskless serve`.

Three consumers split six partitions two each; when one leaves the others take its
partitions; a consumer in a subprocess killed with SIGKILL (so it never sends LeaveGroup) is
evicted after its session timeout and the others resume its partitions at its committed
offsets; committed offsets survive a broker restart. cooperative-sticky moves only the
partitions that must move; a static member (group.instance.id) that restarts within its
session timeout gets its partitions back without a rebalance.

Consumers of one test are polled round-robin from the test's thread (librdkafka runs the
group protocol on its own threads; polling serves the rebalance callbacks).
"""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from .conftest import ON_EVERY_METADATA_BACKEND

DEADLINE_S = 30.0
SESSION_TIMEOUT_MS = 6000  # the broker's group.min.session.timeout.ms
HEARTBEAT_INTERVAL_MS = 500


def new_group() -> str:
    return f"g-{uuid.uuid4().hex[:12]}"


class Member:
    """One confluent-kafka group member and what its rebalance callbacks and polls saw."""

    def __init__(self, bootstrap: str, group: str, topic: str, **overrides: object) -> None:
        config = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
            "partition.assignment.strategy": "range",
            **overrides,
        }
        self.consumer = Consumer(config)
        self.cooperative = config["partition.assignment.strategy"] == "cooperative-sticky"
        self.topic = topic
        self.assigned: set[int] = set()
        self.assign_calls: list[set[int]] = []
        self.revoke_calls: list[set[int]] = []
        self.lost_calls: list[set[int]] = []
        self.records: list[tuple[int, int, bytes]] = []  # (partition, offset, value)
        self.closed = False
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        given = {tp.partition for tp in partitions}
        self.assign_calls.append(given)
        self.assigned = self.assigned | given if self.cooperative else given

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        taken = {tp.partition for tp in partitions}
        self.revoke_calls.append(taken)
        if not self.cooperative:
            # Eager: commit what was processed before the partitions go to someone else.
            try:
                self.commit_processed()
            except KafkaException as exc:
                # Closing after its explicit commit: the group may have moved on meanwhile (the
                # member that closed first started a rebalance this one has not polled for),
                # and a fenced member's commit is refused, as Kafka refuses it. Not otherwise.
                if not self.closed or exc.args[0].code() not in (KafkaError.UNKNOWN_MEMBER_ID, KafkaError.ILLEGAL_GENERATION):
                    raise
        self.assigned = self.assigned - taken

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        lost = {tp.partition for tp in partitions}
        self.lost_calls.append(lost)
        self.assigned = self.assigned - lost

    def poll(self, timeout_s: float = 0.05) -> None:
        msg = self.consumer.poll(timeout_s)
        if msg is not None and msg.error() is None:
            self.records.append((msg.partition(), msg.offset(), msg.value()))

    def commit_processed(self) -> None:
        """Commit the offset after the last record processed, per assigned partition."""
        last: dict[int, int] = {}
        for partition, offset, _ in self.records:
            if partition in self.assigned:
                last[partition] = offset
        if last:
            offsets = [TopicPartition(self.topic, p, o + 1) for p, o in sorted(last.items())]
            self.consumer.commit(offsets=offsets, asynchronous=False)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.consumer.close()


def poll_until(members: Iterable[Member], condition: Callable[[], bool], what: str, deadline_s: float = DEADLINE_S) -> float:
    """Poll every open member round-robin until `condition()`; returns the seconds it took."""
    members = list(members)
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > deadline_s:
            state = {i: sorted(m.assigned) for i, m in enumerate(members)}
            raise AssertionError(f"timed out waiting for {what}; assignments {state}")
        for member in members:
            if not member.closed:
                member.poll()
    return time.monotonic() - started


def split_evenly(members: list[Member], partitions: int, each: int) -> Callable[[], bool]:
    def condition() -> bool:
        sets = [m.assigned for m in members]
        return all(len(s) == each for s in sets) and set().union(*sets) == set(range(partitions))

    return condition


def described(bootstrap: str, group: str):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.describe_consumer_groups([group])[group].result(timeout=10)


def broker_assignment(bootstrap: str, group: str) -> dict[str, set[int]]:
    """member id -> partitions, as the broker's DescribeGroups reports a Stable group."""
    description = described(bootstrap, group)
    assert description.state.name == "STABLE", description.state
    return {m.member_id: {tp.partition for tp in m.assignment.topic_partitions} for m in description.members}


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int, start: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + per_partition * partitions):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % partitions)
    assert producer.flush(DEADLINE_S) == 0


# --- join, leave ---------------------------------------------------------------------------


def test_three_members_share_six_partitions_and_survivors_take_over_on_leave(shared_group_broker, create_topic) -> None:
    bootstrap = shared_group_broker.bootstrap
    topic = create_topic(bootstrap, partitions=6)
    group = new_group()
    members = [Member(bootstrap, group, topic) for _ in range(3)]
    try:
        poll_until(members, split_evenly(members, 6, 2), "two partitions each")
        by_broker = broker_assignment(bootstrap, group)
        assert sorted(map(sorted, by_broker.values())) == sorted(sorted(m.assigned) for m in members)

        leaving, survivors = members[0], members[1:]
        leaving.close()  # sends LeaveGroup: no session timeout to wait for
        poll_until(survivors, split_evenly(survivors, 6, 3), "three partitions each after a leave", deadline_s=SESSION_TIMEOUT_MS / 1000 - 1)
        assert len(broker_assignment(bootstrap, group)) == 2
        assert all(m.lost_calls == [] for m in members)
    finally:
        for member in members:
            member.close()


# --- a killed member, committed offsets, a broker restart ----------------------------------

KILLED_CONSUMER = r"""
import json, sys, threading
from confluent_kafka import Consumer, TopicPartition

bootstrap, group, topic, process_count, commit_count = sys.argv[1:4] + [int(a) for a in sys.argv[4:6]]
consumer = Consumer({
    "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
    "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
    "partition.assignment.strategy": "range",
})

def say(**fields):
    print(json.dumps(fields), flush=True)

consumer.subscribe([topic], on_assign=lambda c, ps: say(assigned=sorted(tp.partition for tp in ps)))
processed = []
while len(processed) < process_count:
    msg = consumer.poll(0.1)
    if msg is None or msg.error() is not None:
        continue
    processed.append((msg.partition(), msg.offset()))
    say(processed=[msg.partition(), msg.offset()])
    if len(processed) == commit_count:
        last = {}
        for partition, offset in processed:
            last[partition] = offset
        consumer.commit(offsets=[TopicPartition(topic, p, o + 1) for p, o in last.items()], asynchronous=False)
        say(committed={str(p): o + 1 for p, o in last.items()})
say(stalled=True)
threading.Event().wait()  # alive (librdkafka heartbeats on its own thread) until SIGKILL
"""


class KilledConsumer:
    """A group member in a subprocess that reports what it does as JSON lines on stdout."""

    def __init__(self, bootstrap: str, group: str, topic: str, process_count: int, commit_count: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", KILLED_CONSUMER, bootstrap, group, topic, str(process_count), str(commit_count)],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.events: queue.Queue[dict] = queue.Queue()
        self.assigned: set[int] = set()
        self.processed: list[tuple[int, int]] = []
        self.committed: dict[int, int] = {}
        self.stalled = False
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.events.put(json.loads(line))

    def drain(self) -> None:
        while True:
            try:
                event = self.events.get_nowait()
            except queue.Empty:
                return
            if "assigned" in event:
                self.assigned = set(event["assigned"])
            elif "processed" in event:
                self.processed.append(tuple(event["processed"]))
            elif "committed" in event:
                self.committed = {int(p): o for p, o in event["committed"].items()}
            elif "stalled" in event:
                self.stalled = True

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)


@ON_EVERY_METADATA_BACKEND  # committed offsets and group metadata live in the store
def test_killed_member_is_evicted_and_committed_offsets_survive_broker_restart(group_broker, create_topic) -> None:
    bootstrap = group_broker.bootstrap
    topic = create_topic(bootstrap, partitions=6)
    group = new_group()
    per_partition = 50
    members = [Member(bootstrap, group, topic) for _ in range(2)]
    killed = KilledConsumer(bootstrap, group, topic, process_count=30, commit_count=20)
    try:

        def three_way_split() -> bool:
            killed.drain()
            sets = [members[0].assigned, members[1].assigned, killed.assigned]
            return all(len(s) == 2 for s in sets) and set().union(*sets) == set(range(6))

        poll_until(members, three_way_split, "two partitions each, one member in a subprocess")
        produce(bootstrap, topic, 6, per_partition)

        def killed_member_stalled() -> bool:
            killed.drain()
            return killed.stalled

        poll_until(members, killed_member_stalled, "the subprocess to process 30 records and commit 20")
        assert len(killed.processed) == 30
        assert killed.committed  # offsets after its first 20 records
        killed_partitions = set(killed.assigned)
        killed.kill()  # no LeaveGroup: only the session timeout removes it
        marks = [len(m.records) for m in members]

        def since_kill() -> list[tuple[int, int]]:
            return [(p, o) for m, mark in zip(members, marks) for p, o, _ in m.records[mark:]]

        took_s = poll_until(members, split_evenly(members, 6, 3), "eviction after the session timeout", deadline_s=DEADLINE_S)
        # The last heartbeat came at most one interval before the kill.
        assert took_s >= (SESSION_TIMEOUT_MS - HEARTBEAT_INTERVAL_MS) / 1000 - 0.5, took_s
        assert all(m.lost_calls == [] for m in members)

        def everything_processed() -> bool:
            seen = set(since_kill())
            return all((p, o) in seen for p in killed_partitions for o in range(killed.committed.get(p, 0), per_partition))

        poll_until(members, everything_processed, "the killed member's partitions to be consumed")
        # Resumed exactly at its committed offsets: what it processed without committing is
        # processed again (at least once), what it committed is not.
        for partition in killed_partitions:
            offsets = sorted(o for p, o in since_kill() if p == partition)
            assert offsets[0] == killed.committed.get(partition, 0), partition
        redone = [(p, o) for p, o in killed.processed if o >= killed.committed.get(p, 0)]
        assert len(redone) == 10

        def every_record_processed() -> bool:
            processed = {(p, o) for m in members for p, o, _ in m.records} | set(killed.processed)
            return processed >= {(p, o) for p in range(6) for o in range(per_partition)}

        poll_until(members, every_record_processed, "every record processed at least once")
        for member in members:
            member.commit_processed()
            member.close()
        committed = committed_offsets(bootstrap, group, topic)
        assert committed == {p: per_partition for p in range(6)}

        group_broker.restart()
        assert committed_offsets(bootstrap, group, topic) == committed
        produce(bootstrap, topic, 6, 10, start=6 * per_partition)
        again = [Member(bootstrap, group, topic) for _ in range(2)]
        members.extend(again)
        poll_until(again, lambda: sum(len(m.records) for m in again) == 60, "the records produced after the restart")
        offsets = sorted((p, o) for m in again for p, o, _ in m.records)
        assert offsets == [(p, o) for p in range(6) for o in range(per_partition, per_partition + 10)]
    finally:
        killed.process.kill()
        killed.process.wait(timeout=10)
        for member in members:
            member.close()


def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(6)])
    result = admin.list_consumer_group_offsets([request])[group].result(timeout=10)
    return {tp.partition: tp.offset for tp in result.topic_partitions if tp.offset >= 0}


# --- cooperative-sticky --------------------------------------------------------------------


def test_cooperative_sticky_moves_only_what_must_move(shared_group_broker, create_topic) -> None:
    bootstrap = shared_group_broker.bootstrap
    topic = create_topic(bootstrap, partitions=6)
    group = new_group()
    cooperative = {"partition.assignment.strategy": "cooperative-sticky"}
    members = [Member(bootstrap, group, topic, **cooperative) for _ in range(2)]
    try:
        poll_until(members, split_evenly(members, 6, 3), "three partitions each")
        assert all(m.cooperative for m in members)
        before = [set(m.assigned) for m in members]
        for member in members:
            member.revoke_calls.clear()
            member.assign_calls.clear()

        members.append(Member(bootstrap, group, topic, **cooperative))
        poll_until(members, split_evenly(members, 6, 2), "two partitions each after a join")
        newcomer = members[2]
        for member, had in zip(members[:2], before):
            # Kept two of its three partitions, gave up only the third, was given nothing.
            assert member.assigned < had
            assert member.revoke_calls == [had - member.assigned]
            assert len(had - member.assigned) == 1
            assert all(call == set() for call in member.assign_calls)
        assert newcomer.assigned == (before[0] - members[0].assigned) | (before[1] - members[1].assigned)
        assert newcomer.revoke_calls == []

        # When the newcomer leaves, its two partitions go back without anyone else revoking.
        given_up = set(newcomer.assigned)
        kept = [set(m.assigned) for m in members[:2]]
        for member in members[:2]:
            member.revoke_calls.clear()
        newcomer.close()
        poll_until(members[:2], split_evenly(members[:2], 6, 3), "three partitions each after a leave")
        for member, had in zip(members[:2], kept):
            assert member.assigned > had
            assert member.revoke_calls == []
        assert members[0].assigned - kept[0] | members[1].assigned - kept[1] == given_up
        assert all(m.lost_calls == [] for m in members)
    finally:
        for member in members:
            member.close()


# --- static membership ---------------------------------------------------------------------


def test_static_member_restarting_within_session_timeout_gets_its_partitions_back(shared_group_broker, create_topic) -> None:
    bootstrap = shared_group_broker.bootstrap
    topic = create_topic(bootstrap, partitions=6)
    group = new_group()
    static = {"session.timeout.ms": 30_000}  # the restart below comes well within it
    first = Member(bootstrap, group, topic, **{"group.instance.id": "first"}, **static)
    other = Member(bootstrap, group, topic, **{"group.instance.id": "other"}, **static)
    members = [first, other]
    try:
        poll_until(members, split_evenly(members, 6, 3), "three partitions each")
        poll_until(members, lambda: described(bootstrap, group).state.name == "STABLE", "a Stable group")
        had = set(first.assigned)
        other_before = set(other.assigned)
        other.revoke_calls.clear()
        other.assign_calls.clear()
        by_broker = broker_assignment(bootstrap, group)
        other_member_id = next(m.member_id for m in described(bootstrap, group).members if m.group_instance_id == "other")

        first.close()  # a static member sends no LeaveGroup on close (KIP-345)
        description = described(bootstrap, group)
        assert description.state.name == "STABLE"
        assert {m.group_instance_id for m in description.members} == {"first", "other"}

        restarted = Member(bootstrap, group, topic, **{"group.instance.id": "first"}, **static)
        members.append(restarted)
        poll_until(members, lambda: restarted.assigned == had, "the restarted static member to get its partitions back")
        # Give a rebalance, if one were coming, the time to reach `other`.
        deadline = time.monotonic() + 3 * HEARTBEAT_INTERVAL_MS / 1000
        poll_until(members, lambda: time.monotonic() > deadline, "a few heartbeats")
        assert other.revoke_calls == [] and other.assign_calls == [] and other.lost_calls == []
        assert other.assigned == other_before
        after = described(bootstrap, group)
        assert after.state.name == "STABLE"
        assert {m.group_instance_id: {tp.partition for tp in m.assignment.topic_partitions} for m in after.members} == {
            "first": had,
            "other": other_before,
        }
        assert next(m.member_id for m in after.members if m.group_instance_id == "other") == other_member_id
        assert sorted(map(sorted, by_broker.values())) == sorted([sorted(had), sorted(other_before)])
    finally:
        for member in members:
            member.close()
