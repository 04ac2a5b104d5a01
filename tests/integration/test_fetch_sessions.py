"""Incremental fetch sessions (KIP-227) on a real broker: a session opened by a full Fetch is
continued by requests naming only what changed, answered with only the partitions that have
something new; forgotten partitions stay out; a wrong epoch or an unknown session is Kafka's
error; epoch -1 closes it. kafka-python, whose consumer uses sessions by default, reads many
partitions through one exactly once; librdkafka and aiokafka, which fetch without, still do."""

from __future__ import annotations

import datetime
import time
import urllib.request

from confluent_kafka import Producer
from kafka import KafkaConsumer, TopicPartition
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_v12

from .broker_process import BrokerProcess, free_port
from .conftest import WireClient


def produce(bootstrap: str, topic: str, records: list[tuple[int, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    failures: list[str] = []
    for partition, value in records:
        producer.produce(topic, value=value, partition=partition, on_delivery=lambda err, _: err and failures.append(str(err)))
    assert producer.flush(30) == 0 and failures == []


def fetch(client: WireClient, session_id: int, epoch: int, topic: str, partitions: list[tuple[int, int]], forget: list[int] = ()):
    request = fetch_v12.FetchRequest(
        replica_id=-1, max_wait=datetime.timedelta(milliseconds=50), min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=session_id, session_epoch=epoch,
        topics=(fetch_v12.FetchTopic(topic=topic, partitions=tuple(
            fetch_v12.FetchPartition(partition=p, fetch_offset=offset, partition_max_bytes=1 << 20) for p, offset in partitions
        )),) if partitions else (),
        forgotten_topics_data=(fetch_v12.ForgottenTopic(topic=topic, partitions=tuple(forget)),) if forget else (),
        rack_id="",
    )  # fmt: skip
    return client.request(request)


def partitions_of(response) -> dict[int, tuple[int, int]]:
    """partition -> (high watermark, record bytes) of every partition in the response."""
    return {p.partition_index: (p.high_watermark, len(p.records or b"")) for t in response.responses for p in t.partitions}


def test_a_session_answers_only_what_changed(broker, wire, create_topic) -> None:
    topic = create_topic(broker.bootstrap, partitions=3)
    produce(broker.bootstrap, topic, [(0, b"a"), (1, b"b"), (2, b"c")])
    client = wire(broker.bootstrap)
    opened = fetch(client, 0, 0, topic, [(0, 0), (1, 0), (2, 0)])
    assert opened.error_code is ErrorCode.none and opened.session_id > 0
    session = opened.session_id
    assert {p: hw for p, (hw, _) in partitions_of(opened).items()} == {0: 1, 1: 1, 2: 1}
    # The client moves its offsets past what it read; nothing new: an empty answer.
    moved = fetch(client, session, 1, topic, [(0, 1), (1, 1), (2, 1)])
    assert (moved.error_code, moved.session_id, partitions_of(moved)) == (ErrorCode.none, session, {})
    produce(broker.bootstrap, topic, [(1, b"b2")])
    news = fetch(client, session, 2, topic, [])
    assert news.session_id == session and list(partitions_of(news)) == [1]
    assert partitions_of(news)[1][0] == 2 and partitions_of(news)[1][1] > 0
    # Forget partition 2: new records there no longer come back.
    forgot = fetch(client, session, 3, topic, [(1, 2)], forget=[2])
    assert partitions_of(forgot) == {}
    produce(broker.bootstrap, topic, [(2, b"c2"), (0, b"a2")])
    later = fetch(client, session, 4, topic, [])
    assert list(partitions_of(later)) == [0]
    # Kafka's errors, then the session closed by epoch -1 (answered in full, without one).
    wrong = fetch(client, session, 9, topic, [])
    assert (wrong.error_code, wrong.session_id, wrong.responses) == (ErrorCode.invalid_fetch_session_epoch, 0, ())
    unknown = fetch(client, session + 1 if session < 2**31 - 1 else 1, 1, topic, [])
    assert unknown.error_code is ErrorCode.fetch_session_id_not_found
    closed = fetch(client, session, -1, topic, [(0, 0)])
    assert (closed.error_code, closed.session_id, list(partitions_of(closed))) == (ErrorCode.none, 0, [0])
    assert fetch(client, session, 5, topic, []).error_code is ErrorCode.fetch_session_id_not_found


def test_kafka_python_reads_many_partitions_through_a_session_exactly_once(tmp_path, create_topic) -> None:
    http = f"127.0.0.1:{free_port()}"
    broker = BrokerProcess(tmp_path / "data", "--http", http).start()
    try:
        topic = create_topic(broker.bootstrap, partitions=12)
        expected = {(p, f"{p}-{i}".encode()) for p in range(12) for i in range(20)}
        produce(broker.bootstrap, topic, sorted(expected))
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False, consumer_timeout_ms=1000)
        try:
            consumer.assign([TopicPartition(topic, p) for p in range(12)])
            consumer.seek_to_beginning()
            seen: list[tuple[int, int, bytes]] = []
            deadline = time.monotonic() + 60
            while len(seen) < len(expected) and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=500).values():
                    seen.extend((r.partition, r.offset, r.value) for r in records)
            with urllib.request.urlopen(f"http://{http}/metrics", timeout=10) as response:
                metrics = response.read().decode()
        finally:
            consumer.close()
        assert len(seen) == len(expected) and {(p, v) for p, _, v in seen} == expected
        for p in range(12):
            assert [o for q, o, _ in seen if q == p] == list(range(20))
        assert "kafka_server_fetchsessioncache_numincrementalfetchsessions 1.0" in metrics
    finally:
        broker.close()
