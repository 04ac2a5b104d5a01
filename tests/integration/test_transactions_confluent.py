"""Transactions through librdkafka (confluent-kafka), against a real broker process.

- committed and aborted transactions interleaved over several partitions: read_committed
  sees exactly the committed records, in order; read_uncommitted sees all of them and no
  control record (the offsets it skips are exactly the markers);
- two producers with one transactional.id: the older is fenced, its open transaction aborted;
- a transaction that goes silent is aborted after transaction.timeout.ms and the last stable
  offset moves on;
- SIGKILL of the broker mid-transaction and after a commit: the outcome is what the client
  was told;
- consume-transform-produce with send_offsets_to_transaction, one transaction aborted and
  retried: the output holds every input record once, the group's offsets at the input's end.

Every test runs on both metadata backends (the coordinator's state lives in the store); the
tests that neither kill nor restart the broker share one per module.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from .conftest import ON_EVERY_METADATA_BACKEND

pytestmark = ON_EVERY_METADATA_BACKEND

PARTITIONS = 3
DEADLINE_S = 30.0


def tid() -> str:
    return f"tx-{uuid.uuid4().hex[:10]}"


def transactional_producer(bootstrap: str, transactional_id: str, **extra: object) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5, **extra})
    producer.init_transactions(DEADLINE_S)
    return producer


def consume_all(bootstrap: str, topic: str, isolation: str, expected: int, partitions: int = PARTITIONS) -> dict[int, list[tuple[int, str]]]:
    """Every (offset, value) per partition, read from the start until `expected` records came
    and each partition's position reached the end a consumer of `isolation` may read to."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:8]}", "isolation.level": isolation,
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
    })  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict[int, list[tuple[int, str]]] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + DEADLINE_S
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None:
                assert message.error() is None, message.error()
                got[message.partition()].append((message.offset(), message.value().decode()))
                continue
            if sum(map(len, got.values())) >= expected and all(
                consumer.position([TopicPartition(topic, p)])[0].offset >= end_offset(consumer, topic, p, isolation) for p in range(partitions)
            ):
                return got
        raise AssertionError(f"{isolation}: {sum(map(len, got.values()))} of {expected} records within {DEADLINE_S}s")
    finally:
        consumer.close()


def end_offset(consumer: Consumer, topic: str, partition: int, isolation: str) -> int:
    """The high watermark; for read_committed the last stable offset (ListOffsets read_committed)."""
    return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)[1]


def values(got: dict[int, list[tuple[int, str]]]) -> dict[int, list[str]]:
    return {p: [v for _, v in records] for p, records in got.items()}


def test_interleaved_commits_and_aborts(shared_broker, create_topic) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=PARTITIONS)
    producer = transactional_producer(shared_broker.bootstrap, tid())
    committed: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    everything: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    for txn in range(8):
        producer.begin_transaction()
        for i in range(25):
            value = f"{txn}-{i}"
            producer.produce(topic, value=value.encode(), partition=i % PARTITIONS)
            everything[i % PARTITIONS].append(value)
            if txn % 3 != 1:
                committed[i % PARTITIONS].append(value)
        if txn % 3 == 1:
            producer.flush(DEADLINE_S)  # librdkafka drops what it has not sent when it aborts
            producer.abort_transaction(DEADLINE_S)
        else:
            producer.commit_transaction(DEADLINE_S)
    aborted_count = sum(map(len, everything.values())) - sum(map(len, committed.values()))
    assert aborted_count == 75  # transactions 1, 4 and 7
    read_committed = consume_all(shared_broker.bootstrap, topic, "read_committed", sum(map(len, committed.values())))
    assert values(read_committed) == committed
    read_uncommitted = consume_all(shared_broker.bootstrap, topic, "read_uncommitted", sum(map(len, everything.values())))
    assert values(read_uncommitted) == everything
    # One marker per transaction per partition: the offsets nobody reads are exactly those.
    for p in range(PARTITIONS):
        offsets = [o for o, _ in read_uncommitted[p]]
        assert len(offsets) + 8 == offsets[-1] + 2  # 8 markers, the last one after the last record
    producer.flush(1)


def test_an_older_producer_is_fenced_and_its_transaction_aborted(shared_broker, create_topic) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=PARTITIONS)
    transactional_id = tid()
    older = transactional_producer(shared_broker.bootstrap, transactional_id)
    older.begin_transaction()
    for i in range(10):
        older.produce(topic, value=f"old-{i}".encode(), partition=i % PARTITIONS)
    older.flush(DEADLINE_S)
    newer = transactional_producer(shared_broker.bootstrap, transactional_id)  # fences `older`, aborts its transaction
    newer.begin_transaction()
    for i in range(6):
        newer.produce(topic, value=f"new-{i}".encode(), partition=i % PARTITIONS)
    newer.commit_transaction(DEADLINE_S)
    with pytest.raises(KafkaException) as raised:
        older.commit_transaction(DEADLINE_S)
    assert raised.value.args[0].fatal() or "fenced" in str(raised.value).lower()
    got = consume_all(shared_broker.bootstrap, topic, "read_committed", 6)
    assert sorted(v for vs in values(got).values() for v in vs) == [f"new-{i}" for i in range(6)]
    assert len(consume_all(shared_broker.bootstrap, topic, "read_uncommitted", 16)) == PARTITIONS


def test_a_silent_transaction_is_aborted_after_its_timeout(shared_broker, create_topic) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=1)
    silent_id = tid()
    silent = transactional_producer(shared_broker.bootstrap, silent_id, **{"transaction.timeout.ms": 2000})
    silent.begin_transaction()
    for i in range(5):
        silent.produce(topic, value=f"silent-{i}".encode(), partition=0)
    silent.flush(DEADLINE_S)
    plain = Producer({"bootstrap.servers": shared_broker.bootstrap, "enable.idempotence": True})
    for i in range(3):
        plain.produce(topic, value=f"plain-{i}".encode(), partition=0)
    plain.flush(DEADLINE_S)
    started = time.monotonic()
    got = consume_all(shared_broker.bootstrap, topic, "read_committed", 3, partitions=1)
    assert values(got) == {0: [f"plain-{i}" for i in range(3)]}
    assert time.monotonic() - started < DEADLINE_S
    assert any(silent_id in line and "timed out after 2000 ms: aborting it" in line for line in shared_broker.log_text().splitlines())
    with pytest.raises(KafkaException):
        silent.commit_transaction(DEADLINE_S)


def test_broker_killed_mid_transaction_and_after_a_commit(broker, create_topic) -> None:
    topic = create_topic(broker.bootstrap, partitions=PARTITIONS)
    producer = transactional_producer(broker.bootstrap, tid())
    producer.begin_transaction()
    for i in range(30):
        producer.produce(topic, value=f"a-{i}".encode(), partition=i % PARTITIONS)
    producer.commit_transaction(DEADLINE_S)  # told: committed
    producer.begin_transaction()
    for i in range(30):
        producer.produce(topic, value=f"b-{i}".encode(), partition=i % PARTITIONS)
    producer.flush(DEADLINE_S)  # acknowledged (acks=all: durable), the transaction open
    broker.kill()
    broker.start()
    producer.commit_transaction(DEADLINE_S)  # the coordinator found it Ongoing in the store
    expected = {p: [f"a-{i}" for i in range(30) if i % PARTITIONS == p] + [f"b-{i}" for i in range(30) if i % PARTITIONS == p] for p in range(PARTITIONS)}
    assert values(consume_all(broker.bootstrap, topic, "read_committed", 60)) == expected
    producer.begin_transaction()
    for i in range(9):
        producer.produce(topic, value=f"c-{i}".encode(), partition=i % PARTITIONS)
    producer.flush(DEADLINE_S)
    producer.abort_transaction(DEADLINE_S)  # told: aborted
    broker.kill()
    broker.start()
    assert values(consume_all(broker.bootstrap, topic, "read_committed", 60)) == expected
    assert sum(map(len, consume_all(broker.bootstrap, topic, "read_uncommitted", 69).values())) == 69


def test_consume_transform_produce_exactly_once(shared_broker, create_topic) -> None:
    source = create_topic(shared_broker.bootstrap, partitions=PARTITIONS)
    sink = create_topic(shared_broker.bootstrap, partitions=PARTITIONS)
    count = 600
    plain = Producer({"bootstrap.servers": shared_broker.bootstrap, "enable.idempotence": True})
    for i in range(count):
        plain.produce(source, value=str(i).encode(), partition=i % PARTITIONS)
    plain.flush(DEADLINE_S)
    group = f"ctp-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({
        "bootstrap.servers": shared_broker.bootstrap, "group.id": group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "isolation.level": "read_committed",
    })  # fmt: skip
    consumer.subscribe([source])
    producer = transactional_producer(shared_broker.bootstrap, tid())
    done = 0
    transactions = 0
    deadline = time.monotonic() + 2 * DEADLINE_S
    try:
        while done < count and time.monotonic() < deadline:
            batch = consumer.consume(50, 1.0)
            if not batch:
                continue
            producer.begin_transaction()
            for message in batch:
                assert message.error() is None
                producer.produce(sink, value=b"out-" + message.value(), partition=message.partition())
            transactions += 1
            if transactions == 3:  # this one fails: abort and go back to the committed offsets
                producer.flush(DEADLINE_S)
                producer.abort_transaction(DEADLINE_S)
                committed = consumer.committed([TopicPartition(source, p) for p in range(PARTITIONS)], timeout=10)
                for tp in committed:
                    consumer.seek(TopicPartition(source, tp.partition, tp.offset if tp.offset >= 0 else 0))
                continue
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), DEADLINE_S)
            producer.commit_transaction(DEADLINE_S)
            done += len(batch)
        assert done == count
    finally:
        consumer.close()
    got = consume_all(shared_broker.bootstrap, sink, "read_committed", count)
    out = sorted(int(v.removeprefix("out-")) for vs in values(got).values() for v in vs)
    assert out == list(range(count))
    checker = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": group})
    try:
        offsets = checker.committed([TopicPartition(source, p) for p in range(PARTITIONS)], timeout=10)
        assert [tp.offset for tp in offsets] == [count // PARTITIONS] * PARTITIONS
    finally:
        checker.close()


def store_url(broker) -> str:
    args = broker.extra_args
    return args[args.index("--metadata") + 1] if "--metadata" in args else f"sqlite:///{broker.data_dir / 'metadata.db'}"


def test_a_restart_finishes_transactions_found_preparing(broker, create_topic) -> None:
    """The broker dies after PrepareCommit / PrepareAbort reached the store and before any
    marker: the restarted coordinator writes the markers, and the clients' EndTxn retries
    are answered as the outcome decided."""
    import asyncio
    import dataclasses

    from metadata import open_metadata_store
    from metadata.transactions import PREPARE_ABORT, PREPARE_COMMIT

    topic = create_topic(broker.bootstrap, partitions=PARTITIONS)
    committing, aborting = tid(), tid()
    to_commit = transactional_producer(broker.bootstrap, committing)
    to_abort = transactional_producer(broker.bootstrap, aborting)
    for producer, prefix in ((to_commit, "c"), (to_abort, "a")):
        producer.begin_transaction()
        for i in range(12):
            producer.produce(topic, value=f"{prefix}-{i}".encode(), partition=i % PARTITIONS)
        producer.flush(DEADLINE_S)
    broker.kill()

    async def prepare() -> None:
        store = await open_metadata_store(store_url(broker))
        try:
            for record in await store.list_transactions():
                state = {committing: PREPARE_COMMIT, aborting: PREPARE_ABORT}.get(record.transactional_id)
                if state is not None:
                    await store.put_transaction(dataclasses.replace(record, state=state))
        finally:
            await store.close()

    asyncio.run(prepare())
    broker.start()
    expected = {p: [f"c-{i}" for i in range(12) if i % PARTITIONS == p] for p in range(PARTITIONS)}
    assert values(consume_all(broker.bootstrap, topic, "read_committed", 12)) == expected
    assert sum(map(len, consume_all(broker.bootstrap, topic, "read_uncommitted", 24).values())) == 24
    assert "found in PrepareCommit: finishing it" in broker.log_text()
    to_commit.commit_transaction(DEADLINE_S)  # the retry is answered: committed
    to_abort.abort_transaction(DEADLINE_S)


def test_describe_and_list_transactions(broker, create_topic, wire) -> None:
    """KIP-664 over the wire: an open transaction's state, partitions, producer and timeout."""
    from kio.schema.describe_transactions.v0 import request as describe_v0
    from kio.schema.errors import ErrorCode
    from kio.schema.list_transactions.v1 import request as list_v1

    topic = create_topic(broker.bootstrap, partitions=PARTITIONS)
    transactional_id = tid()
    producer = transactional_producer(broker.bootstrap, transactional_id, **{"transaction.timeout.ms": 45_000})
    producer.begin_transaction()
    producer.produce(topic, value=b"x", partition=2)
    producer.produce(topic, value=b"y", partition=0)
    producer.flush(DEADLINE_S)
    client = wire(broker.bootstrap)
    (state, missing) = client.request(describe_v0.DescribeTransactionsRequest(transactional_ids=(transactional_id, "nobody"))).transaction_states
    assert (state.error_code, state.transactional_id, state.transaction_state) == (ErrorCode.none, transactional_id, "Ongoing")
    assert (state.transaction_timeout.total_seconds(), state.producer_epoch) == (45.0, 0)
    assert [(t.topic, sorted(t.partitions)) for t in state.topics] == [(topic, [0, 2])]
    assert missing.error_code is ErrorCode.transactional_id_not_found
    listed = client.request(list_v1.ListTransactionsRequest(state_filters=("Ongoing", "Bogus"), producer_id_filters=(state.producer_id,), duration_filter=-1))
    assert (listed.error_code, listed.unknown_state_filters) == (ErrorCode.none, ("Bogus",))
    assert [(s.transactional_id, s.transaction_state) for s in listed.transaction_states] == [(transactional_id, "Ongoing")]
    producer.commit_transaction(DEADLINE_S)
    (state,) = client.request(describe_v0.DescribeTransactionsRequest(transactional_ids=(transactional_id,))).transaction_states
    assert (state.transaction_state, state.topics) == ("CompleteCommit", ())
    listed = client.request(list_v1.ListTransactionsRequest(state_filters=("Ongoing",), producer_id_filters=(), duration_filter=-1))
    assert transactional_id not in [s.transactional_id for s in listed.transaction_states]


def plain_records_then_restart_without_the_first_segment(broker, topic: str) -> None:
    """40 plain records "p-0-xx..." to partition 0; once the first segment is uploaded and its
    local copy dropped, SIGKILL the broker and start it again."""
    plain = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "batch.size": 1000})
    for i in range(40):
        plain.produce(topic, value=f"p-{i}-".encode() + b"x" * 60, partition=0)
    plain.flush(DEADLINE_S)
    log_dir = broker.data_dir / "logs" / f"{topic}-0"
    deadline = time.monotonic() + DEADLINE_S
    while (log_dir / "00000000000000000000.log").exists():  # uploaded, then its local copy dropped
        assert time.monotonic() < deadline, f"the first segment of {topic}-0 never left the local disk"
        time.sleep(0.05)  # polling the data directory with a deadline: nothing to wait on instead
    broker.kill()
    broker.start()


def test_aborted_transactions_in_the_bucket_stay_aborted_after_a_restart(broker, create_topic) -> None:
    """Small segments: the aborted transaction's segments are uploaded and their local copies
    dropped (local.retention.ms 0); after a SIGKILL and a restart, read_committed still skips it."""
    topic = create_topic(broker.bootstrap, partitions=1, configs={"segment.bytes": "2048"})
    producer = transactional_producer(broker.bootstrap, tid(), **{"batch.size": 1000})
    for txn, prefix in enumerate(("a", "b", "c")):
        producer.begin_transaction()
        for i in range(40):
            producer.produce(topic, value=f"{prefix}-{i}-".encode() + b"x" * 60, partition=0)
        if prefix == "b":
            producer.flush(DEADLINE_S)
            producer.abort_transaction(DEADLINE_S)
        else:
            producer.commit_transaction(DEADLINE_S)
    plain_records_then_restart_without_the_first_segment(broker, topic)
    expected = [f"{prefix}-{i}-" + "x" * 60 for prefix in ("a", "c", "p") for i in range(40)]
    assert values(consume_all(broker.bootstrap, topic, "read_committed", 120, partitions=1)) == {0: expected}
    assert sum(map(len, consume_all(broker.bootstrap, topic, "read_uncommitted", 160, partitions=1).values())) == 160


def test_an_open_transaction_whose_start_left_the_local_disk_holds_the_last_stable_offset(broker, create_topic) -> None:
    """A transaction opens, writes past several segment rolls, and stays open while plain
    records follow; its first segment is uploaded and its local copy dropped. After a SIGKILL
    and a restart the leader knows where it began (the producer state's snapshot keeps it):
    read_committed reads nothing of it or after it until it ends, then skips all of it."""
    topic = create_topic(broker.bootstrap, partitions=1, configs={"segment.bytes": "2048"})
    producer = transactional_producer(broker.bootstrap, tid(), **{"batch.size": 1000})
    producer.begin_transaction()
    for i in range(40):
        producer.produce(topic, value=f"o-{i}-".encode() + b"x" * 60, partition=0)
    producer.flush(DEADLINE_S)  # acknowledged, the transaction open
    plain_records_then_restart_without_the_first_segment(broker, topic)
    reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"r-{uuid.uuid4().hex[:8]}", "isolation.level": "read_committed"})
    try:
        assert end_offset(reader, topic, 0, "read_committed") == 0  # the open transaction's first offset
    finally:
        reader.close()
    producer.abort_transaction(DEADLINE_S)
    expected = [f"p-{i}-" + "x" * 60 for i in range(40)]
    assert values(consume_all(broker.bootstrap, topic, "read_committed", 40, partitions=1)) == {0: expected}
    assert sum(map(len, consume_all(broker.bootstrap, topic, "read_uncommitted", 80, partitions=1).values())) == 80


def test_an_abort_whose_transaction_began_in_the_bucket_covers_all_of_it_after_a_restart(broker, create_topic) -> None:
    """A transaction writes past a segment roll and is aborted; its first segment is uploaded
    and its local copy dropped while the marker is still in the local active segment. After a
    SIGKILL and a restart the leader folds the local log, which holds only the transaction's
    later batches and its marker: the abort must still reach back to its first offset, in the
    bucket (from the producer state's snapshot), or read_committed serves its first records."""
    topic = create_topic(broker.bootstrap, partitions=1, configs={"segment.bytes": "2048"})
    producer = transactional_producer(broker.bootstrap, tid(), **{"batch.size": 1000})
    producer.begin_transaction()
    for i in range(40):
        producer.produce(topic, value=f"a-{i}-".encode() + b"x" * 60, partition=0)
    producer.flush(DEADLINE_S)
    producer.abort_transaction(DEADLINE_S)
    log_dir = broker.data_dir / "logs" / f"{topic}-0"
    deadline = time.monotonic() + DEADLINE_S
    while (log_dir / "00000000000000000000.log").exists():  # uploaded, then its local copy dropped
        assert time.monotonic() < deadline, f"the first segment of {topic}-0 never left the local disk"
        time.sleep(0.05)  # polling the data directory with a deadline: nothing to wait on instead
    assert len(list(log_dir.glob("*.log"))) == 1  # the marker's segment, still the active one
    broker.kill()
    broker.start()
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, value=f"c-{i}".encode(), partition=0)
    producer.commit_transaction(DEADLINE_S)
    assert values(consume_all(broker.bootstrap, topic, "read_committed", 10, partitions=1)) == {0: [f"c-{i}" for i in range(10)]}
    assert sum(map(len, consume_all(broker.bootstrap, topic, "read_uncommitted", 50, partitions=1).values())) == 50


def test_offsets_of_an_open_transaction_are_unstable(shared_broker, create_topic, wire) -> None:
    """KIP-447: OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for a partition
    whose offset an open transaction holds; without it, the last committed offset."""
    from kio.schema.errors import ErrorCode
    from kio.schema.offset_fetch.v8 import request as offset_fetch_v8

    source = create_topic(shared_broker.bootstrap, partitions=2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": group})
    producer = transactional_producer(shared_broker.bootstrap, tid())
    producer.begin_transaction()
    producer.send_offsets_to_transaction([TopicPartition(source, 1, 17)], consumer.consumer_group_metadata(), DEADLINE_S)
    client = wire(shared_broker.bootstrap)

    def fetch(require_stable: bool) -> dict[int, tuple[ErrorCode, int]]:
        mod = offset_fetch_v8
        request = mod.OffsetFetchRequest(
            groups=(mod.OffsetFetchRequestGroup(group_id=group, topics=(mod.OffsetFetchRequestTopics(name=source, partition_indexes=(0, 1)),)),),
            require_stable=require_stable,
        )
        (answer,) = client.request(request).groups
        return {p.partition_index: (p.error_code, p.committed_offset) for t in answer.topics for p in t.partitions}

    assert fetch(True) == {0: (ErrorCode.none, -1), 1: (ErrorCode.unstable_offset_commit, -1)}
    assert fetch(False) == {0: (ErrorCode.none, -1), 1: (ErrorCode.none, -1)}
    producer.commit_transaction(DEADLINE_S)
    assert fetch(True) == {0: (ErrorCode.none, -1), 1: (ErrorCode.none, 17)}
    consumer.close()


def test_consume_transform_produce_through_broker_kills(broker, create_topic) -> None:
    """The broker is killed (SIGKILL) and restarted three times while a consume-transform-produce
    loop runs: on an abortable error the loop aborts and goes back to the committed offsets, on
    a fatal one (fenced) it starts a new producer with the same transactional.id. The output
    holds each input record exactly once and the group's offsets end at the input's end."""
    import threading

    source = create_topic(broker.bootstrap, partitions=PARTITIONS)
    sink = create_topic(broker.bootstrap, partitions=PARTITIONS)
    count = 1500
    plain = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    for i in range(count):
        plain.produce(source, value=str(i).encode(), partition=i % PARTITIONS)
    plain.flush(DEADLINE_S)
    group, transactional_id = f"ctp-{uuid.uuid4().hex[:8]}", tid()
    consumer = Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "isolation.level": "read_committed",
    })  # fmt: skip
    consumer.subscribe([source])
    producer = transactional_producer(broker.bootstrap, transactional_id)
    kills = 0
    stop = threading.Event()

    def killer() -> None:
        nonlocal kills
        while kills < 3 and not stop.wait(1.5):
            broker.kill()
            broker.start()
            kills += 1

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()

    def rewind() -> None:
        committed = consumer.committed([TopicPartition(source, p) for p in range(PARTITIONS)], timeout=DEADLINE_S)
        for tp in committed:
            if tp.partition in {a.partition for a in consumer.assignment()}:
                consumer.seek(TopicPartition(source, tp.partition, tp.offset if tp.offset >= 0 else 0))

    deadline = time.monotonic() + 4 * DEADLINE_S
    finished = False
    try:
        while time.monotonic() < deadline and not finished:
            try:
                batch = [m for m in consumer.consume(100, 0.5) if m.error() is None]
                if not batch:
                    positions = consumer.committed([TopicPartition(source, p) for p in range(PARTITIONS)], timeout=DEADLINE_S)
                    finished = kills == 3 and sum(max(tp.offset, 0) for tp in positions) == count
                    continue
                producer.begin_transaction()
                for message in batch:
                    producer.produce(sink, value=b"out-" + message.value(), partition=message.partition())
                producer.send_offsets_to_transaction(consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), DEADLINE_S)
                producer.commit_transaction(DEADLINE_S)
            except KafkaException as exc:
                error = exc.args[0]
                if error.txn_requires_abort():
                    producer.abort_transaction(DEADLINE_S)
                elif error.fatal():
                    producer = transactional_producer(broker.bootstrap, transactional_id)
                elif not error.retriable():
                    raise
                rewind()
        assert finished, f"{kills} kills; not every input record committed within the deadline"
    finally:
        stop.set()
        thread.join(60)
        consumer.close()
    got = consume_all(broker.bootstrap, sink, "read_committed", count)
    out = sorted(int(v.removeprefix("out-")) for vs in values(got).values() for v in vs)
    assert out == list(range(count))


def test_cli_lists_and_describes_transactions(shared_broker, create_topic) -> None:
    """`diskless transactions list|describe`, as kafka-transactions.sh prints them."""
    import subprocess
    import sys

    topic = create_topic(shared_broker.bootstrap, partitions=PARTITIONS)
    open_id, done_id = tid(), tid()
    done = transactional_producer(shared_broker.bootstrap, done_id)
    done.begin_transaction()
    done.produce(topic, value=b"d", partition=0)
    done.commit_transaction(DEADLINE_S)
    ongoing = transactional_producer(shared_broker.bootstrap, open_id)
    ongoing.begin_transaction()
    ongoing.produce(topic, value=b"o", partition=2)
    ongoing.produce(topic, value=b"o", partition=1)
    ongoing.flush(DEADLINE_S)

    def cli(*args: str) -> list[list[str]]:
        result = subprocess.run(
            [sys.executable, "-m", "diskless.cli.main", "transactions", *args, "-b", shared_broker.bootstrap], capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, result.stderr
        return [line.split() for line in result.stdout.splitlines()]

    header, *rows = cli("list")
    assert header == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    states = {row[0]: (row[1], row[3]) for row in rows}
    assert (states[open_id], states[done_id]) == (("1", "Ongoing"), ("1", "CompleteCommit"))
    header, *rows = cli("list", "--state", "Ongoing")
    assert [row[0] for row in rows if row[0] in (open_id, done_id)] == [open_id]  # the broker is shared with other tests
    assert {row[3] for row in rows} == {"Ongoing"}
    header, row = cli("describe", "--transactional-id", open_id)
    assert header[:5] == ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState"]
    assert (row[0], row[1], row[3], row[4]) == ("1", open_id, "0", "Ongoing")
    assert int(row[6]) >= 0 and row[7] == f"{topic}-1,{topic}-2"
    ongoing.abort_transaction(DEADLINE_S)
