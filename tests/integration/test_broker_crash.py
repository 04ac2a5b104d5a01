"""kill -9 of the broker in the middle of a produce stream, then a restart.

Every record the producer saw acknowledged (acks=all) must be there at the offset it was given,
in order; the log may also hold records whose acknowledgement the kill swallowed, but nothing
that was not produced, and no offset twice.
"""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition

PARTITIONS = 2
DEADLINE_S = 30.0


class ProducerThread(threading.Thread):
    """Produces values 0, 1, 2, ... (value i to partition i % PARTITIONS) until stopped, and
    records every delivery report."""

    def __init__(self, bootstrap: str, topic: str, kill_after_acks: int) -> None:
        super().__init__(daemon=True)
        self.topic = topic
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2, "message.timeout.ms": 3000,
            "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200,
        })  # fmt: skip
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.produced = 0
        self.acked: list[tuple[int, int, int]] = []  # (partition, offset, value)
        self.failed: list[int] = []
        self.error: BaseException | None = None
        self.kill_after_acks = kill_after_acks
        self.enough_acked = threading.Event()

    def _on_delivery(self, err, msg) -> None:
        value = int(msg.value())
        with self.lock:
            if err is None:
                self.acked.append((msg.partition(), msg.offset(), value))
                if len(self.acked) >= self.kill_after_acks:
                    self.enough_acked.set()
            else:
                self.failed.append(value)

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                for _ in range(50):
                    value = self.produced
                    try:
                        self.producer.produce(self.topic, value=b"%08d" % value, partition=value % PARTITIONS, on_delivery=self._on_delivery)
                    except BufferError:
                        break
                    self.produced += 1
                self.producer.poll(0.001)
            # Every message ends acknowledged or failed (message.timeout.ms) before flush returns.
            self.producer.flush(DEADLINE_S)
        except BaseException as exc:  # surfaced by the test, not lost in the thread
            self.error = exc
            self.enough_acked.set()

    def counts(self) -> tuple[int, int]:
        with self.lock:
            return self.produced, len(self.acked)


def consume_everything(bootstrap: str, topic: str) -> dict[int, list[tuple[int, bytes]]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "crash-test", "enable.auto.commit": False, "auto.offset.reset": "error"})
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=DEADLINE_S) for p in range(PARTITIONS)}
        assert all(low == 0 for low, _ in ends.values())
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + DEADLINE_S
        while any(len(got[p]) < ends[p][1] for p in got):
            assert time.monotonic() < deadline, {p: (len(got[p]), ends[p]) for p in got}
            msg = c.poll(0.1)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got[msg.partition()].append((msg.offset(), msg.value()))
        return got
    finally:
        c.close()


def test_kill_9_mid_produce_loses_no_acknowledged_record(broker, create_topic) -> None:
    topic = create_topic(broker.bootstrap, partitions=PARTITIONS)
    producer = ProducerThread(broker.bootstrap, topic, kill_after_acks=3000)
    producer.start()
    assert producer.enough_acked.wait(DEADLINE_S) and producer.error is None
    produced_at_kill, acked_at_kill = producer.counts()
    broker.kill()
    producer.stop.set()
    producer.join(DEADLINE_S + 10)
    assert not producer.is_alive() and producer.error is None
    # The kill came mid-stream: records were in flight, unacknowledged.
    assert produced_at_kill > acked_at_kill
    assert len(producer.acked) + len(producer.failed) == producer.produced

    broker.start()
    consumed = consume_everything(broker.bootstrap, topic)
    for p, records in consumed.items():
        offsets = [offset for offset, _ in records]
        values = [int(value) for _, value in records]
        assert offsets == list(range(len(records)))
        # Only values that were produced to this partition, each once, in produce order.
        assert all(0 <= v < producer.produced and v % PARTITIONS == p for v in values)
        assert values == sorted(set(values))
    by_position = {(p, offset): int(value) for p, records in consumed.items() for offset, value in records}
    missing = [(p, offset, v) for p, offset, v in producer.acked if by_position.get((p, offset)) != v]
    assert missing == []
    assert len(producer.acked) >= acked_at_kill >= 3000

    # The recovered log takes appends after its end. That end may lie above the high watermark
    # read just now: the restarted broker sends the unacknowledged tail its disk kept back to
    # the bucket, and those records become visible once durable, before the new one.
    reports = []
    after = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    after.produce(topic, value=b"after", partition=0, on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    assert after.flush(DEADLINE_S) == 0
    ((error, offset),) = reports
    assert error is None
    again = consume_everything(broker.bootstrap, topic)[0]
    assert again[: len(consumed[0])] == consumed[0]
    assert [o for o, _ in again] == list(range(len(again))) and again[-1] == (offset, b"after")
    tail = [int(value) for _, value in again[len(consumed[0]) : -1]]
    assert all(0 <= v < producer.produced and v % PARTITIONS == 0 for v in tail) and tail == sorted(set(tail))
    assert not tail or not consumed[0] or tail[0] > int(consumed[0][-1][1])
