"""SIGKILL at random moments while the log cleaner rewrites a compacted topic's segments,
repeated: after each restart nothing acknowledged and live is lost, no key shows an older value
than the last one acknowledged, and the log is cleaned again to one record per key."""

from __future__ import annotations

import random
import threading
import time

from confluent_kafka import Producer

from .broker_process import BrokerProcess
from .test_compaction_cleaner import DEADLINE_S, compacted_topic, read_all_librdkafka, wait_until

KEYS = 200
KILLS = 4


def test_sigkill_during_cleaning_loses_nothing_acknowledged(tmp_path) -> None:
    broker = BrokerProcess(
        tmp_path / "data", "--log-cleaner-backoff-ms", "20", "--log-retention-check-interval-ms", "50",
        "--log-cleaner-io-max-bytes-per-second", "150000",
    ).start()  # fmt: skip
    rng = random.Random()
    try:
        topic = compacted_topic(broker.bootstrap, **{"segment.bytes": "8192", "segment.ms": "100", "delete.retention.ms": "3600000"})
        acked: dict[bytes, tuple[int, bytes]] = {}  # key -> (offset, value) of its newest acknowledged record
        lock = threading.Lock()
        sequence = 0
        for kill in range(KILLS):
            producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 2, "acks": "all", "enable.idempotence": True})

            def on_delivery(err, msg) -> None:
                if err is None:
                    with lock:
                        if msg.offset() > acked.get(msg.key(), (-1, b""))[0]:
                            acked[msg.key()] = (msg.offset(), msg.value())

            for _ in range(rng.randint(2, 5)):
                for k in range(KEYS):
                    sequence += 1
                    producer.produce(topic, key=b"key-%03d" % k, value=b"%d-%d" % (k, sequence) + b"x" * 80, partition=0, on_delivery=on_delivery)
                assert producer.flush(DEADLINE_S) == 0
            del producer
            # Kill at a random moment of a cleaning pass: once a cleaned copy is being written
            # (the pass is slowed by log.cleaner.io.max.bytes.per.second), after a random number
            # of looks at the directory more.
            partition_dir = next((tmp_path / "data" / "logs").glob(f"{topic}-0"))
            deadline = time.monotonic() + DEADLINE_S
            while not any(p.name.endswith(".cleaned") for p in partition_dir.iterdir()):
                assert time.monotonic() < deadline, "no cleaning pass started"
            for _ in range(rng.randrange(300)):
                list(partition_dir.iterdir())
            broker.kill()
            broker.start()
            expected_end = max(offset for offset, _ in acked.values())
            records = read_all_librdkafka(broker.bootstrap, topic, expected_end)
            newest: dict[bytes, tuple[int, bytes]] = {}
            for offset, key, value in records:
                newest[key] = (offset, value)
            assert [o for o, _, _ in records] == sorted({o for o, _, _ in records}), "offsets increase"
            for key, (offset, value) in acked.items():
                assert key in newest, (kill, key)
                assert newest[key][0] >= offset, (kill, key, newest[key], (offset, value))
                if newest[key][0] == offset:
                    assert newest[key][1] == value
        # And the cleaner still brings the log down to one record per key.
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce(topic, key=b"roll", value=b"x", partition=0)  # goes to the active segment; older ones roll by segment.ms
        producer.flush(DEADLINE_S)
        acked[b"roll"] = (-1, b"x")

        def once_per_key():
            records = read_all_librdkafka(broker.bootstrap, topic, max(o for o, _ in acked.values()))
            keys = [key for _, key, _ in records]
            return records if len(keys) == len(set(keys)) == KEYS + 1 else None

        records = wait_until(once_per_key, "one record per key after the kills")
        for offset, key, value in records:
            if key != b"roll":
                assert offset >= acked[key][0]
    finally:
        broker.close()
