"""Acknowledged writes, and their account after faults: a producer thread that records every
acknowledgement, and the check every durability test ends with (acknowledged and missing,
acknowledged at another offset, duplicates, values never sent: all 0; each partition's log
from offset 0 without a gap)."""

from __future__ import annotations

import threading
import time
import uuid

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

DEADLINE_S = 60


class AckingProducer(threading.Thread):
    """An idempotent acks=all producer writing distinct values round-robin over partitions."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        super().__init__(daemon=True)
        self.topic, self.partitions = topic, partitions
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
            "message.timeout.ms": 120_000, "retry.backoff.ms": 50, "reconnect.backoff.max.ms": 200,
            "topic.metadata.refresh.interval.ms": 1000,
        })  # fmt: skip
        self.sent = 0
        # value -> (partition, offset). The offset is None for an implicit ack: librdkafka marks a
        # request whose answer was lost as delivered once a later one succeeds in sequence.
        self.acked: dict[bytes, tuple[int, int | None]] = {}
        self.errors: list[str] = []
        self.stopping = threading.Event()
        self.lock = threading.Lock()

    def _delivered(self, err: KafkaError | None, msg) -> None:
        with self.lock:
            if err is not None:
                self.errors.append(str(err))
            else:
                self.acked[msg.value()] = (msg.partition(), msg.offset())

    def acks(self) -> int:
        with self.lock:
            return len(self.acked)

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.producer.produce(self.topic, b"%d" % self.sent, partition=self.sent % self.partitions, on_delivery=self._delivered)
                self.sent += 1
            except BufferError:
                self.producer.poll(0.05)
                continue
            if self.sent % 20 == 0:
                self.producer.poll(0.005)
        assert self.producer.flush(DEADLINE_S * 3) == 0


def account(bootstrap: str, topic: str, partitions: int, producer: AckingProducer) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=DEADLINE_S)[1] for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + DEADLINE_S * 2
        while any(len(got[p]) < ends[p] for p in got):
            assert time.monotonic() < deadline, {p: (len(got[p]), ends[p]) for p in got}
            msg = consumer.poll(0.1)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got[msg.partition()].append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    seen: dict[bytes, list[tuple[int, int]]] = {}
    for partition, records in got.items():
        assert [offset for offset, _ in records] == list(range(len(records)))
        for offset, value in records:
            seen.setdefault(value, []).append((partition, offset))
    missing = [v for v in producer.acked if v not in seen]
    moved = [v for v, (p, o) in producer.acked.items() if v in seen and (len(seen[v]) != 1 or seen[v][0][0] != p or o not in (None, seen[v][0][1]))]
    duplicates = [v for v, at in seen.items() if len(at) > 1]
    garbage = [v for v in seen if not (v.isdigit() and int(v) < producer.sent)]
    counts = {p: len(records) for p, records in got.items()}
    assert (len(missing), len(moved), len(duplicates), len(garbage)) == (0, 0, 0, 0), (
        [(v, producer.acked[v]) for v in missing[:5]], len(missing), moved[:5], duplicates[:5], garbage[:5], ends, counts
    )


class CommittingConsumer(threading.Thread):
    """A consumer group member reading throughout and committing its position every 100
    records (synchronously): `committed` holds, per partition, the highest offset a commit was
    acknowledged for, which the group's stored offsets must never fall behind."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        super().__init__(daemon=True)
        self.topic, self.group = topic, group
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 1000, "reconnect.backoff.max.ms": 200,
        })  # fmt: skip
        self.committed: dict[int, int] = {}
        self.values: list[bytes] = []
        self.seen: set[bytes] = set()
        self.errors: list[str] = []  # record errors (commits refused during a coordinator move are retried, not errors)
        self.stopping = threading.Event()
        self.lock = threading.Lock()

    def run(self) -> None:
        self.consumer.subscribe([self.topic])
        read = 0
        try:
            while not self.stopping.is_set():
                msg = self.consumer.poll(0.1)
                if msg is None:
                    continue
                if msg.error() is not None:
                    if not msg.error().retriable() and msg.error().code() != KafkaError._PARTITION_EOF:
                        self.errors.append(str(msg.error()))
                    continue
                with self.lock:
                    self.values.append(msg.value())
                    self.seen.add(msg.value())
                read += 1
                if read % 100 == 0:
                    self._commit()
        finally:
            self.consumer.close()

    def has_read(self, values: set[bytes]) -> bool:
        """Whether every one of `values` was read (at least once: a member reads again from
        the last commit after a rebalance)."""
        with self.lock:
            return values <= self.seen

    def _commit(self) -> None:
        try:
            done = self.consumer.commit(asynchronous=False)
        except Exception:
            return  # the coordinator moved or its broker died: the next commit goes to the new one
        with self.lock:
            for tp in done or ():
                if tp.error is None and tp.offset >= 0:
                    self.committed[tp.partition] = max(self.committed.get(tp.partition, 0), tp.offset)


def stored_offsets(bootstrap: str, topic: str, group: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets as the cluster stores them (OffsetFetch)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return {tp.partition: tp.offset for tp in consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=DEADLINE_S)}
    finally:
        consumer.close()
