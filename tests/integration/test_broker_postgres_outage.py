"""The broker's PostgreSQL server goes away for 20 s under load, and comes back.

A broker on PostgreSQL metadata (a server of this module's own: the test stops it). A
confluent-kafka producer (acks=all, idempotent) produces all along, a consumer fetches every
partition from offset 0, and a group member commits the offsets of what it consumed, one
synchronous commit after another. The server stops (pg_ctl stop -m fast: every connection is
cut) for 20 s, longer than the broker's session timeout (9 s), then starts again on the same
port. The broker is not restarted.

What must hold, exactly:
- the broker says the database is unreachable, then that it answers again, and its process
  lives throughout (same pid, never exited);
- it serves again by itself: records produced after the server returned are acknowledged and
  fetched, and a commit after it is acknowledged;
- every acknowledged record is in the log once, at its acknowledged offset, with its value
  (acknowledged and missing = 0); no value is in the log twice (duplicates = 0); nothing is
  in the log that was never produced;
- each partition's committed offset is never behind the last commit that was acknowledged
  for it, and never ahead of the last one that was tried.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from .broker_process import BrokerProcess
from .conftest import NO_REBALANCE_DELAY
from .postgres_server import PostgresServer

T = TypeVar("T")

PARTITIONS = 3
OUTAGE_S = 20.0
DEADLINE_S = 90.0  # for the broker to serve again once the server is back (it rejoins the cluster)


@pytest.fixture
def own_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server of this test's own, to stop and start again."""
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.close()


def wait_until(condition: Callable[[], T], what: str, deadline_s: float = DEADLINE_S) -> T:
    deadline = time.monotonic() + deadline_s
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {deadline_s:.0f} s waiting for {what}")
        time.sleep(0.05)  # the broker and the clients' threads move on their own: poll their effect
    return value


@dataclass
class Account:
    """What the clients' threads saw; each list only grows, under `lock`."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    produced: int = 0  # values handed to the producer: b"v-0" .. b"v-{produced-1}"
    acked: dict[bytes, tuple[int, int]] = field(default_factory=dict)  # value -> (partition, offset)
    acked_at: dict[bytes, float] = field(default_factory=dict)  # value -> monotonic time of its report
    failed: dict[bytes, str] = field(default_factory=dict)  # value -> delivery error
    fetched: list[tuple[int, int, bytes]] = field(default_factory=list)  # (partition, offset, value)
    fetch_errors: list[str] = field(default_factory=list)
    commits_tried: list[tuple[float, dict[int, int]]] = field(default_factory=list)
    commits_acked: list[tuple[float, dict[int, int]]] = field(default_factory=list)
    commit_errors: list[str] = field(default_factory=list)
    producer_fatal: str | None = None


def produce_loop(bootstrap: str, topic: str, account: Account, stop: threading.Event) -> None:
    """Round-robin over the partitions, a record at a time, until `stop`; then wait for every
    delivery report (each record is acknowledged or failed)."""
    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
        "message.timeout.ms": 120_000, "retry.backoff.max.ms": 1000,
    })  # fmt: skip

    def on_delivery(err, msg) -> None:
        with account.lock:
            if err is None:
                account.acked[msg.value()] = (msg.partition(), msg.offset())
                account.acked_at[msg.value()] = time.monotonic()
            else:
                account.failed[msg.value()] = str(err)
                if err.fatal():
                    account.producer_fatal = str(err)

    i = 0
    while not stop.is_set():
        producer.produce(topic, value=b"v-%d" % i, partition=i % PARTITIONS, on_delivery=on_delivery)
        i += 1
        with account.lock:
            account.produced = i
        producer.poll(0.01)  # serves delivery reports; about 100 records a second
    assert producer.flush(150) == 0, "delivery reports still missing after message.timeout.ms"


def fetch_loop(bootstrap: str, topic: str, account: Account, stop: threading.Event) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"fetch-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        while not stop.is_set():
            msg = consumer.poll(0.1)
            if msg is None:
                continue
            with account.lock:
                if msg.error() is not None:
                    account.fetch_errors.append(str(msg.error()))
                else:
                    account.fetched.append((msg.partition(), msg.offset(), msg.value()))
    finally:
        consumer.close()


def commit_loop(bootstrap: str, topic: str, group: str, account: Account, stop: threading.Event) -> None:
    """A group member that commits, synchronously, the next offset of each partition it has
    consumed, again and again; each commit is recorded as tried, then as acknowledged if the
    broker answered it without error for every partition."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "session.timeout.ms": 45_000, "heartbeat.interval.ms": 1000,
    })  # fmt: skip
    try:
        consumer.subscribe([topic])
        position: dict[int, int] = {}
        last_commit: dict[int, int] = {}
        last_try = 0.0
        while not stop.is_set():
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                position[msg.partition()] = msg.offset() + 1
            if not position or position == last_commit or time.monotonic() - last_try < 0.1:
                continue
            last_try = time.monotonic()
            offsets = dict(position)
            with account.lock:
                account.commits_tried.append((time.monotonic(), offsets))
            try:
                result = consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
            except KafkaException as e:
                with account.lock:
                    account.commit_errors.append(str(e))
                continue
            errors = [tp for tp in result if tp.error is not None]
            with account.lock:
                if errors:
                    account.commit_errors.append(str(errors))
                else:
                    account.commits_acked.append((time.monotonic(), offsets))
                    last_commit = offsets
    finally:
        consumer.close()


def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(PARTITIONS)])
    result = admin.list_consumer_group_offsets([request])[group].result(timeout=30)
    return {tp.partition: tp.offset for tp in result.topic_partitions if tp.offset >= 0}


def read_log(bootstrap: str, topic: str) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of every partition, from 0 to its high watermark."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)[1] for p in range(PARTITIONS)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        log: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + 60
        while any((log[p][-1][0] + 1 if log[p] else 0) < ends[p] for p in log):
            assert time.monotonic() < deadline, {p: (len(log[p]), ends[p]) for p in log}
            msg = consumer.poll(0.1)
            if msg is not None:
                assert msg.error() is None, msg.error()
                log[msg.partition()].append((msg.offset(), msg.value()))
        return log
    finally:
        consumer.close()


def test_postgres_down_for_20_s_under_produce_fetch_and_commit(own_server: PostgresServer, tmp_path) -> None:
    url = own_server.create_database("outage")
    broker = BrokerProcess(tmp_path / "data", *NO_REBALANCE_DELAY, "--metadata", url).start()
    pid = broker.process.pid
    account = Account()
    stop_producing, stop_consuming = threading.Event(), threading.Event()
    threads: list[threading.Thread] = []
    try:
        bootstrap = broker.bootstrap
        topic = f"t-{uuid.uuid4().hex[:12]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)], operation_timeout=10)[topic].result(timeout=30)
        group = f"g-{uuid.uuid4().hex[:12]}"
        errors: list[BaseException] = []

        def run(target, *args) -> threading.Thread:
            def guarded() -> None:
                try:
                    target(*args)
                except BaseException as e:  # reported by the main thread
                    errors.append(e)

            thread = threading.Thread(target=guarded, daemon=True)
            thread.start()
            threads.append(thread)
            return thread

        producer_thread = run(produce_loop, bootstrap, topic, account, stop_producing)
        run(fetch_loop, bootstrap, topic, account, stop_consuming)
        run(commit_loop, bootstrap, topic, group, account, stop_consuming)

        def counts() -> tuple[int, int, int]:
            with account.lock:
                return len(account.acked), len(account.fetched), len(account.commits_acked)

        wait_until(lambda: all(n >= 50 for n in counts()[:2]) and counts()[2] >= 5, "records acknowledged, fetched and commits acknowledged before the outage")

        own_server.stop("fast")
        stopped_at = time.monotonic()
        wait_until(lambda: "is unreachable" in broker.log_text(), "the broker to say the database is unreachable", deadline_s=OUTAGE_S)
        # 20 s of outage, measured from the stop, while the clients go on; the broker must stay up.
        wait_until(lambda: time.monotonic() - stopped_at >= OUTAGE_S or broker.process.poll() is not None, "the outage to last 20 s", deadline_s=OUTAGE_S + 5)
        assert broker.process.poll() is None, f"the broker exited with {broker.process.returncode} during the outage"
        during = counts()
        own_server.restart()
        back_at = time.monotonic()

        # Serves again, by itself: a record produced after the return is acknowledged and
        # fetched, and a commit made after the return is acknowledged.
        def acked_after_return() -> bool:
            with account.lock:
                return any(t > back_at for t in account.acked_at.values())

        wait_until(acked_after_return, "a record produced after the server returned to be acknowledged")
        with account.lock:
            acked_before = dict(account.commits_acked[-1][1])
        wait_until(lambda: any(t > back_at for t, _ in list(account.commits_acked)), "a commit after the server returned to be acknowledged")
        # No acknowledged commit was lost in the outage: the store has at least the last one
        # acknowledged before this look.
        committed = committed_offsets(bootstrap, group, topic)
        assert all(committed.get(p, -1) >= o for p, o in acked_before.items()), (committed, acked_before)
        marks = counts()
        wait_until(lambda: counts()[1] >= marks[1] + 30, "records fetched after the server returned")
        wait_until(lambda: "answers again" in broker.log_text(), "the broker to say the database answers again")

        stop_producing.set()
        producer_thread.join(180)
        assert not producer_thread.is_alive()
        # The consumers catch up with everything acknowledged, then stop.
        with account.lock:
            final_acked = dict(account.acked)
        ends = {p: max((o for q, o in final_acked.values() if q == p), default=-1) + 1 for p in range(PARTITIONS)}

        def fetched_to_the_end() -> bool:
            with account.lock:
                seen = {p: max((o for q, o, _ in account.fetched if q == p), default=-1) + 1 for p in range(PARTITIONS)}
                committed = account.commits_acked[-1][1] if account.commits_acked else {}
            return all(seen[p] >= ends[p] and committed.get(p, 0) >= ends[p] for p in range(PARTITIONS))

        wait_until(fetched_to_the_end, "the consumer and the group to reach every acknowledged record")
        stop_consuming.set()
        for thread in threads:
            thread.join(60)
            assert not thread.is_alive()
        assert errors == [], errors
        assert account.producer_fatal is None, account.producer_fatal

        # --- the exact account ---------------------------------------------------------
        assert broker.process.poll() is None and broker.process.pid == pid  # never exited, never restarted
        log_text = broker.log_text()
        assert log_text.count(" ready on ") == 1
        assert "Traceback" not in log_text  # every failure was handled and said in one line

        log = read_log(bootstrap, topic)
        where: dict[bytes, list[tuple[int, int]]] = {}
        for p, records in log.items():
            assert [o for o, _ in records] == list(range(len(records))), f"partition {p} has gaps"
            for offset, value in records:
                where.setdefault(value, []).append((p, offset))
        produced = {b"v-%d" % i for i in range(account.produced)}
        missing = {v: at for v, at in final_acked.items() if where.get(v) != [at]}
        duplicates = {v: at for v, at in where.items() if len(at) > 1}
        strangers = set(where) - produced
        failed_but_written = set(account.failed) & set(where)
        summary = (
            f"produced {account.produced}, acknowledged {len(final_acked)}, failed {len(account.failed)} "
            f"({len(failed_but_written)} of them in the log), in the log {sum(len(r) for r in log.values())}; "
            f"fetched {len(account.fetched)}; commits tried {len(account.commits_tried)}, acknowledged "
            f"{len(account.commits_acked)}, refused {len(account.commit_errors)}; counts during the outage {during}"
        )
        print(summary)
        assert (len(missing), len(duplicates), len(strangers)) == (0, 0, 0), (summary, list(missing.items())[:5], list(duplicates.items())[:5])
        # What the fetching consumer saw is the log, once each.
        fetched = {(p, o): v for p, o, v in account.fetched}
        assert all(log[p][o] == (o, v) for (p, o), v in fetched.items())

        # Committed offsets: never behind the last acknowledged commit, never past the last tried.
        committed = committed_offsets(bootstrap, group, topic)
        last_acked = account.commits_acked[-1][1]
        last_tried = account.commits_tried[-1][1]
        assert all(last_acked[p] <= committed[p] <= last_tried[p] and committed[p] >= ends[p] for p in range(PARTITIONS)), (
            committed, last_acked, last_tried, ends,
        )  # fmt: skip

        assert "is unreachable" in log_text and "answers again" in log_text
    finally:
        stop_producing.set()
        stop_consuming.set()
        for thread in threads:
            thread.join(30)
        broker.close()
