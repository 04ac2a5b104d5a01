"""Our asyncio client with KIP-848's protocol (`group_protocol="consumer"`) against a real
broker: members joining and leaving while records are produced, every record consumed exactly
once, assignments disjoint at every moment and covering after each change, committed offsets
never going back; a group shared with confluent-kafka's `group.protocol=consumer`; an empty
classic group taken over by a new-protocol member with its offsets; the admin client's view
of group types."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections import Counter

import pytest

from diskless.client import Admin, Consumer, Producer, RebalanceListener, TopicPartition

from .broker_process import BrokerProcess

DEADLINE_S = 60.0
PARTITIONS = 6


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def group_broker(data_dir, heartbeat_ms: int = 300, session_ms: int = 6000) -> BrokerProcess:
    """A started broker whose consumer-protocol groups heartbeat every `heartbeat_ms` (300: so
    that reconciliation takes a few hundred ms) with a session of `session_ms`."""
    return BrokerProcess(
        data_dir, "--group-initial-rebalance-delay-ms", "0",
        "--group-consumer-heartbeat-interval-ms", str(heartbeat_ms), "--group-consumer-min-heartbeat-interval-ms", str(heartbeat_ms),
        "--group-consumer-session-timeout-ms", str(session_ms), "--group-consumer-min-session-timeout-ms", str(session_ms),
    ).start()  # fmt: skip


@pytest.fixture(scope="module")
def fast_group_broker(tmp_path_factory):
    process = group_broker(tmp_path_factory.mktemp("cgp") / "data")
    try:
        yield process
    finally:
        process.close()


async def wait_until(condition, what: str, deadline_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def make_topic(bootstrap: str, partitions: int = PARTITIONS) -> str:
    topic = _name("t")
    async with Admin(bootstrap) as admin:
        await admin.create_topics(topic, partitions)
    return topic


def consumer(bootstrap: str, group: str, topic: str, name: str, **extra) -> Consumer:
    settings = {"auto_offset_reset": "earliest", "group_protocol": "consumer", "client_id": name, "auto_commit_interval_ms": 200}
    return Consumer(topic, bootstrap_servers=bootstrap, group_id=group, **{**settings, **extra})


class Members:
    """Consumers of one group, each read by a task of its own; every record handed out is kept
    with the member that got it, and a sampler checks that no two members ever hold the same
    partition at the same moment."""

    def __init__(self) -> None:
        self.consumers: dict[str, Consumer] = {}
        self.readers: dict[str, asyncio.Task[None]] = {}
        self.consumed: list[tuple[str, int, int, bytes]] = []  # member, partition, offset, value
        self.overlaps: list[str] = []
        self._sampler = asyncio.create_task(self._sample())

    async def add(self, name: str, c: Consumer) -> None:
        await c.start()
        self.consumers[name] = c
        self.readers[name] = asyncio.create_task(self._read(name, c))

    async def remove(self, name: str) -> None:
        task = self.readers.pop(name)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await self.consumers.pop(name).close()  # commits what it consumed, leaves (epoch -1)

    async def _read(self, name: str, c: Consumer) -> None:
        while True:
            for tp, records in (await c.getmany(timeout_ms=200)).items():
                self.consumed += [(name, tp.partition, r.offset, r.value) for r in records]

    async def _sample(self) -> None:
        while True:
            held = [(n, c.assignment()) for n, c in self.consumers.items()]
            for (a, pa), (b, pb) in itertools.combinations(held, 2):
                if pa & pb:
                    self.overlaps.append(f"{a} and {b} both hold {sorted(pa & pb)}")
            await asyncio.sleep(0.005)

    def covering(self, partitions: int) -> bool:
        held = [c.assignment() for c in self.consumers.values()]
        return sum(map(len, held)) == partitions and {tp.partition for tp in set().union(*held)} == set(range(partitions))

    def balanced(self) -> bool:
        sizes = [len(c.assignment()) for c in self.consumers.values()]
        return max(sizes) - min(sizes) <= 1

    async def close(self) -> None:
        for name in list(self.consumers):
            await self.remove(name)
        self._sampler.cancel()
        await asyncio.gather(self._sampler, return_exceptions=True)


async def test_members_join_and_leave_while_producing_and_every_record_is_consumed_once(fast_group_broker) -> None:
    bootstrap = fast_group_broker.bootstrap
    topic = await make_topic(bootstrap)
    group = _name("g")
    produced: list[bytes] = []
    stop_producing = asyncio.Event()

    async def produce() -> None:
        async with Producer(bootstrap, linger_ms=1) as producer:
            for i in itertools.count():
                if stop_producing.is_set():
                    return
                value = b"v%d" % i
                await producer.send_and_wait(topic, value, partition=i % PARTITIONS)
                produced.append(value)
                await asyncio.sleep(0.002)

    committed_history: list[dict[int, int]] = []

    async def watch_commits(admin: Admin) -> None:
        while True:
            offsets = await admin.list_group_offsets(group)
            committed_history.append({tp.partition: m.offset for tp, m in offsets.items()})
            await asyncio.sleep(0.05)

    members = Members()
    producer_task = asyncio.create_task(produce())
    async with Admin(bootstrap) as admin:
        watcher = asyncio.create_task(watch_commits(admin))
        try:
            for name in ("a", "b", "c"):  # join one at a time
                await members.add(name, consumer(bootstrap, group, topic, name))
                await wait_until(lambda: members.covering(PARTITIONS) and members.balanced(), f"{name}'s join to settle")
            assert sorted(len(c.assignment()) for c in members.consumers.values()) == [2, 2, 2]
            description = (await admin.describe_consumer_groups(group))[group]
            assert description.state == "Stable" and sorted(m.client_id for m in description.members) == ["a", "b", "c"]
            for name in ("b", "a"):  # leave one at a time
                await members.remove(name)
                await wait_until(lambda: members.covering(PARTITIONS), f"{name}'s leaving to settle")
            assert len(members.consumers["c"].assignment()) == PARTITIONS
            await wait_until(lambda: len(produced) >= 300, "300 records produced")
            stop_producing.set()
            await producer_task
            await wait_until(lambda: len(members.consumed) >= len(produced), f"all {len(produced)} records consumed")
            await members.close()
            final = await admin.list_group_offsets(group)
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
            stop_producing.set()
            await asyncio.gather(producer_task, return_exceptions=True)
            await members.close()
    assert members.overlaps == []
    counts = Counter(value for _, _, _, value in members.consumed)
    assert set(counts) == set(produced) and set(counts.values()) == {1}
    # Each partition was read in offset order, across owners: no offset twice, none skipped.
    for p in range(PARTITIONS):
        offsets = [o for _, partition, o, _ in members.consumed if partition == p]
        assert offsets == list(range(len(offsets)))
    assert {tp.partition: m.offset for tp, m in final.items()} == {p: len(produced[p::PARTITIONS]) for p in range(PARTITIONS)}
    for before, after in itertools.pairwise(committed_history):
        assert all(after.get(p, -1) >= offset for p, offset in before.items()), (before, after)


async def test_a_group_shared_with_confluent_kafka_members(fast_group_broker) -> None:
    """One group, our member and librdkafka's (group.protocol=consumer): the broker splits the
    partitions between them, each record is read by exactly one of them."""
    ck = pytest.importorskip("confluent_kafka")
    bootstrap = fast_group_broker.bootstrap
    topic = await make_topic(bootstrap, 4)
    group = _name("g")
    async with Producer(bootstrap) as producer:
        for i in range(200):
            await producer.send(topic, b"v%d" % i, partition=i % 4)
    theirs = ck.Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
        "auto.offset.reset": "earliest", "client.id": "librdkafka",
    })  # fmt: skip
    theirs.subscribe([topic])
    their_values: list[bytes] = []
    members = Members()
    try:
        await members.add("ours", consumer(bootstrap, group, topic, "ours"))

        def shared() -> bool:
            ours = {tp.partition for tp in members.consumers["ours"].assignment()}
            their = {tp.partition for tp in theirs.assignment()}
            return len(ours) == len(their) == 2 and ours.isdisjoint(their)

        deadline = time.monotonic() + DEADLINE_S
        while not (shared() and len(members.consumed) + len(their_values) >= 200):
            assert time.monotonic() < deadline, "the group to split and read 200 records"
            message = await asyncio.to_thread(theirs.poll, 0.1)
            if message is not None and message.error() is None:
                their_values.append(message.value())
    finally:
        await members.close()
        await asyncio.to_thread(theirs.close)
    ours = [value for _, _, _, value in members.consumed]
    assert Counter(ours + their_values) == Counter({b"v%d" % i: 1 for i in range(200)})


async def test_an_empty_classic_group_is_taken_over_with_its_offsets(fast_group_broker) -> None:
    """Kafka's offline upgrade: a classic group with no members left becomes a consumer group
    when a new-protocol member joins; the offsets it committed are where that member starts.
    The admin client lists the group's type before and after."""
    bootstrap = fast_group_broker.bootstrap
    topic = await make_topic(bootstrap, 2)
    group = _name("g")
    async with Producer(bootstrap) as producer:
        for i in range(20):
            await producer.send(topic, b"v%d" % i, partition=i % 2)
    async with Consumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                        heartbeat_interval_ms=200, enable_auto_commit=False) as classic:  # fmt: skip
        seen = []
        await wait_until_async(lambda: _read_into(classic, seen), lambda: len(seen) == 20, "the classic member to read 20")
        await classic.commit()
    async with Admin(bootstrap) as admin:
        (listed,) = [g for g in await admin.list_groups() if g.group_id == group]
        assert (listed.group_type, listed.state) == ("classic", "Empty")
        async with Producer(bootstrap) as producer:
            for i in range(20, 30):
                await producer.send(topic, b"v%d" % i, partition=i % 2)
        async with consumer(bootstrap, group, topic, "upgraded") as modern:
            seen = []
            await wait_until_async(lambda: _read_into(modern, seen), lambda: len(seen) >= 10, "the new member to read 10")
            assert sorted(seen) == sorted(b"v%d" % i for i in range(20, 30))
            assert [(g.group_type, g.state) for g in await admin.list_groups(types=["consumer"]) if g.group_id == group] == [("consumer", "Stable")]
            assert [g.group_id for g in await admin.list_groups(types=["classic"]) if g.group_id == group] == []
        offsets = await admin.list_group_offsets(group)
        assert {tp.partition: m.offset for tp, m in offsets.items()} == {0: 15, 1: 15}


async def _read_into(c: Consumer, seen: list[bytes]) -> None:
    for records in (await c.getmany(timeout_ms=100)).values():
        seen += [r.value for r in records]


async def wait_until_async(step, condition, what: str, deadline_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await step()


class Revocations(RebalanceListener):
    def __init__(self) -> None:
        self.revoked: set[TopicPartition] = set()
        self.lost: set[TopicPartition] = set()

    def on_partitions_revoked(self, revoked):
        self.revoked |= revoked

    def on_partitions_lost(self, lost):
        self.lost |= lost


async def test_a_member_joining_a_group_of_five_pauses_no_other_member(fast_group_broker) -> None:
    """Incremental reconciliation: when a sixth member joins five that consume steadily, each
    of the five gives up only the partitions that move to the newcomer; the partitions it keeps
    are never revoked, never leave its assignment, and its records from them continue at the
    next offset. (The longest gap in their consumption is bench/groups.py's business.)"""
    bootstrap = fast_group_broker.bootstrap
    topic = await make_topic(bootstrap, 12)
    group = _name("g")
    stop_producing = asyncio.Event()

    async def produce() -> None:
        async with Producer(bootstrap, linger_ms=1) as producer:
            while not stop_producing.is_set():
                for p in range(12):
                    await producer.send(topic, b"x", partition=p)
                await asyncio.sleep(0.01)

    members = Members()
    listeners = {f"m{i}": Revocations() for i in range(6)}
    producer_task = asyncio.create_task(produce())
    try:
        for i in range(5):
            await members.add(f"m{i}", consumer(bootstrap, group, topic, f"m{i}", listener=listeners[f"m{i}"]))
        # Settled: 12 over 5 is 3, 3, 2, 2, 2 (covering all 12 with five members is not enough:
        # a member can still hold one partition more than its target while another waits for it).
        await wait_until(lambda: members.covering(12) and sorted(len(c.assignment()) for c in members.consumers.values()) == [2, 2, 2, 3, 3], "five to settle")
        before = {name: c.assignment() for name, c in members.consumers.items()}
        for listener in listeners.values():
            listener.revoked.clear()
        samples: list[dict[str, set[TopicPartition]]] = []
        sampling = asyncio.create_task(_sample_assignments(members, samples))
        await members.add("m5", consumer(bootstrap, group, topic, "m5", listener=listeners["m5"]))
        await wait_until(
            lambda: members.covering(12) and sorted(len(c.assignment()) for c in members.consumers.values()) == [2] * 6,
            "six to settle",
        )
        sampling.cancel()
        await asyncio.gather(sampling, return_exceptions=True)
        after = {name: c.assignment() for name, c in members.consumers.items()}
        revoked = {name: set(listener.revoked) for name, listener in listeners.items()}  # closing revokes the rest
        consumed_at_settle = len(members.consumed)
        await wait_until(lambda: len(members.consumed) > consumed_at_settle + 120, "consumption to go on")
    finally:
        stop_producing.set()
        await asyncio.gather(producer_task, return_exceptions=True)
        await members.close()
    assert members.overlaps == []
    for i in range(5):
        name = f"m{i}"
        kept = before[name] & after[name]
        assert kept and revoked[name] == before[name] - after[name] and not listeners[name].lost
        assert all(kept <= sample[name] for sample in samples)
    assert revoked["m5"] == set() and sum(len(before[n] - after[n]) for n in before) == 2
    # Each partition read in offset order, across its owners: nothing read twice, nothing skipped.
    for p in range(12):
        offsets = [o for _, partition, o, _ in members.consumed if partition == p]
        assert offsets == list(range(len(offsets))), [(name, o) for name, partition, o, _ in members.consumed if partition == p]


async def _sample_assignments(members: Members, samples: list[dict[str, set[TopicPartition]]]) -> None:
    while True:
        samples.append({name: c.assignment() for name, c in members.consumers.items()})
        await asyncio.sleep(0.005)


@pytest.fixture
def restartable_broker(tmp_path):
    process = group_broker(tmp_path / "data")
    try:
        yield process
    finally:
        process.close()


async def test_a_coordinator_restart_keeps_the_group_and_its_members_go_on(restartable_broker) -> None:
    """The KIP-848 group's state is in the metadata store with its committed offsets: after the
    broker restarts, the coordinator takes the group up as it was; its members go on at their
    epochs with their partitions (none lost, none revoked, no rejoin) and read every record
    exactly once, also those produced while the broker was away."""
    bootstrap = restartable_broker.bootstrap
    topic = await make_topic(bootstrap, 4)
    group = _name("g")
    async with Producer(bootstrap) as producer:
        for i in range(100):
            await producer.send(topic, b"v%d" % i, partition=i % 4)
    listener = Revocations()
    members = Members()
    try:
        await members.add("a", consumer(bootstrap, group, topic, "a", listener=listener))
        await members.add("b", consumer(bootstrap, group, topic, "b"))
        await wait_until(
            lambda: len(members.consumed) == 100 and members.covering(4) and all(c.assignment() for c in members.consumers.values()),
            "100 records read by two members",
        )
        held = {name: c.assignment() for name, c in members.consumers.items()}
        listener.revoked.clear()  # what a gave b when b joined
        await asyncio.to_thread(restartable_broker.restart)
        async with Producer(bootstrap) as producer:
            for i in range(100, 140):
                await producer.send(topic, b"v%d" % i, partition=i % 4)
        await wait_until(lambda: len(members.consumed) >= 140, "the 40 new records read")
        assert {name: c.assignment() for name, c in members.consumers.items()} == held
        assert (listener.lost, listener.revoked) == (set(), set())
    finally:
        await members.close()
    counts = Counter(value for _, _, _, value in members.consumed)
    assert set(counts) == {b"v%d" % i for i in range(140)} and set(counts.values()) == {1}


async def test_a_pattern_subscription_is_resolved_by_the_broker(fast_group_broker) -> None:
    """subscribe(pattern=...) sends the regular expression (SubscribedTopicRegex): the broker
    assigns the matching topics, and a topic created later that matches joins the assignment."""
    bootstrap = fast_group_broker.bootstrap
    prefix = _name("p")
    async with Admin(bootstrap) as admin:
        await admin.create_topics(f"{prefix}-a", 2)
        await admin.create_topics(f"other-{prefix}", 1)
        async with Consumer(bootstrap_servers=bootstrap, group_id=_name("g"), pattern=f"{prefix}-.*", group_protocol="consumer",
                            auto_offset_reset="earliest", metadata_max_age_ms=500) as member:  # fmt: skip
            await wait_until(lambda: member.assignment() == {TopicPartition(f"{prefix}-a", 0), TopicPartition(f"{prefix}-a", 1)}, "the first topic")
            await admin.create_topics(f"{prefix}-b", 1)
            await wait_until(lambda: TopicPartition(f"{prefix}-b", 0) in member.assignment(), "the topic created later")
            assert {tp.topic for tp in member.assignment()} == {f"{prefix}-a", f"{prefix}-b"}


@pytest.fixture
def slow_heartbeat_broker(tmp_path):
    process = group_broker(tmp_path / "data", heartbeat_ms=2000, session_ms=10_000)
    try:
        yield process
    finally:
        process.close()


async def test_a_member_joining_right_after_a_coordinator_restart_takes_nothing_the_old_members_hold(slow_heartbeat_broker) -> None:
    """A member joins at once after the coordinator restarted: the group is read back from the
    store with the members of before and the partitions they hold, so the newcomer is given
    only what they have let go: no partition has two owners (without the stored state it would
    get every partition while they still held theirs, up to a heartbeat interval, 2 s here)."""
    bootstrap = slow_heartbeat_broker.bootstrap
    topic = await make_topic(bootstrap, 4)
    group = _name("g")
    members = Members()
    try:
        await members.add("a", consumer(bootstrap, group, topic, "a"))
        await members.add("b", consumer(bootstrap, group, topic, "b"))
        await wait_until(lambda: members.covering(4) and all(c.assignment() for c in members.consumers.values()), "two members to settle")
        await asyncio.to_thread(slow_heartbeat_broker.restart)
        await members.add("c", consumer(bootstrap, group, topic, "c"))  # at once
        await wait_until(
            lambda: members.covering(4) and all(c.assignment() for c in members.consumers.values()), "the three members to settle"
        )
    finally:
        await members.close()
    assert members.overlaps == []
