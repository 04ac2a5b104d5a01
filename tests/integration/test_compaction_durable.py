"""A compacted topic is tiered like any other: its acks=all records are in the bucket (write-ahead
objects, then its uploaded segments, as written) before they are acknowledged, while the
cleaner compacts the local copies. The broker is killed with SIGKILL and its whole data
directory deleted; restarted, it serves the partition from the bucket: every key's last
acknowledged value is there, at the offset it was acknowledged at, and nothing else is read
than records acknowledged at their offsets."""

from __future__ import annotations

import shutil

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from .broker_process import BrokerProcess
from .test_compaction_cleaner import CLEANER_FLAGS, DEADLINE_S, compacted_read, read_all_librdkafka, wait_until

KEYS = 120
ROUNDS = 6
TAIL_KEYS = 10  # written again after the cleaning: only in write-ahead objects when the broker dies


def produce(bootstrap: str, topic: str, writes: list[tuple[bytes, bytes | None]]) -> dict[int, tuple[bytes, bytes | None]]:
    """acks=all; offset -> (key, value) of every acknowledged record."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    acked: dict[int, tuple[bytes, bytes | None]] = {}
    failures = []

    def on_delivery(err, msg) -> None:
        if err:
            failures.append(err)
        else:
            acked[msg.offset()] = (msg.key(), msg.value())

    for key, value in writes:
        producer.produce(topic, key=key, value=value, partition=0, on_delivery=on_delivery)
    assert producer.flush(DEADLINE_S) == 0 and not failures
    return acked


def last_per_key(records: dict[int, tuple[bytes, bytes | None]]) -> dict[bytes, tuple[int, bytes | None]]:
    return {key: (offset, value) for offset, (key, value) in sorted(records.items())}


def test_a_compacted_topic_loses_nothing_acknowledged_with_the_disk(tmp_path) -> None:
    data_dir, bucket = tmp_path / "data", tmp_path / "bucket"
    metadata = f"sqlite:///{(tmp_path / 'metadata.db').resolve()}"
    # A deleted disk is a new directory: it waits for the old session to expire, kept short here.
    session = ("--broker-session-timeout-ms", "1500", "--broker-heartbeat-interval-ms", "200")
    broker = BrokerProcess(data_dir, "--object-store", f"file://{bucket}", "--metadata", metadata, *session, *CLEANER_FLAGS).start()
    try:
        topic = "compacted-durable"
        settings = {"cleanup.policy": "compact", "segment.bytes": "16384", "segment.ms": "300", "min.cleanable.dirty.ratio": "0.01"}
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1, config=settings)])[topic].result(timeout=20)
        writes = [(b"key-%03d" % k, b"value-%03d-%d" % (k, r) + b"x" * 60) for r in range(ROUNDS) for k in range(KEYS)]
        writes += [(b"key-%03d" % k, None) for k in range(0, KEYS, 9)]  # tombstones, kept for delete.retention.ms
        acked = produce(broker.bootstrap, topic, writes)
        assert sorted(acked) == list(range(len(writes)))
        # Compacted on the leader's disk: each key once, at its last offset.
        wait_until(lambda: compacted_read(broker.bootstrap, topic, last_per_key(acked)), "the local copies compacted")
        tail = produce(broker.bootstrap, topic, [(b"key-%03d" % k, b"tail-%03d" % k) for k in range(TAIL_KEYS)])
        assert sorted(tail) == list(range(len(writes), len(writes) + TAIL_KEYS))
        acked |= tail

        broker.kill()
        shutil.rmtree(data_dir)
        broker.start()
        last_offset = max(acked)
        records = read_all_librdkafka(broker.bootstrap, topic, last_offset)
        # Nothing but acknowledged records, at the offsets they were acknowledged at, in order...
        assert [(offset, key, value) for offset, key, value in records if acked.get(offset) != (key, value)] == []
        assert [offset for offset, _, _ in records] == sorted({offset for offset, _, _ in records})
        # ...and every key's last acknowledged value among them (the bucket's copies are as written).
        read = {offset: (key, value) for offset, key, value in records}
        assert last_per_key(read) == last_per_key(acked)
        assert len(records) >= KEYS
        # New writes follow the last acknowledged offset.
        after = produce(broker.bootstrap, topic, [(b"key-000", b"after")])
        assert list(after) == [last_offset + 1]
    finally:
        broker.close()
