"""A topic written while it was not tiered (remote.storage.enable=false), its partition then
reopened at a later leader epoch without a write (restarts), and switched to tiered: its local
log is the only copy of what was acknowledged, so the next leadership keeps it and sends it to
the bucket, rather than cutting it back as a tail another leader may have rewritten. For a
plain and for a compacted topic (compacted topics, not tiered before, take this path once)."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from .broker_process import BrokerProcess

DEADLINE_S = 30.0
RECORDS = 50


def read_all(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[int, bytes, bytes]] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(got) < RECORDS and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None:
                assert message.error() is None, message.error()
                got.append((message.offset(), message.key(), message.value()))
    finally:
        consumer.close()
    return got


def test_a_topic_tiered_after_restarts_keeps_what_it_wrote_untiered(tmp_path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topics = {policy: f"{policy}-{uuid.uuid4().hex[:8]}" for policy in ("delete", "compact")}
        for future in admin.create_topics(
            [NewTopic(name, 1, 1, config={"cleanup.policy": policy, "remote.storage.enable": "false"}) for policy, name in topics.items()]
        ).values():
            future.result(DEADLINE_S)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
        written = [(i, b"key-%d" % i, b"value-%d" % i) for i in range(RECORDS)]
        for name in topics.values():
            for _, key, value in written:
                producer.produce(name, key=key, value=value, partition=0)
        assert producer.flush(DEADLINE_S) == 0
        broker.restart()
        broker.restart()  # a leader epoch with no write in between: the next one is not the checkpoint's + 1
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for name in topics.values():
            change = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[
                ConfigEntry("remote.storage.enable", "true", incremental_operation=AlterConfigOpType.SET)])  # fmt: skip
            admin.incremental_alter_configs([change])[change].result(DEADLINE_S)
        broker.restart()
        for name in topics.values():
            assert read_all(broker.bootstrap, name) == written, name
        assert broker.log_text().count("the local log (offsets 0-49) is its only copy, kept and sent to the bucket") == 2
    finally:
        broker.close()
