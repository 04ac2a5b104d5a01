"""remote.log.manager.fetch.max.bytes.per.second (KIP-956) on a real broker: a consumer reading
history that lives only in the bucket is held to the quota (fetches read nothing from the
bucket while the rate is over it, counted in /metrics) and still reads every record exactly
once, in order; the quota is reported by DescribeConfigs and lifted at run time with
IncrementalAlterConfigs, after which a second read is never held back."""

from __future__ import annotations

import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from .broker_process import BrokerProcess, free_port
from .test_metrics import scrape, total, wait_for

QUOTA = 1024 * 1024  # 1 MiB/s, over 2 windows of 1 s: the reader gets 1 MiB at once, then 1 MiB/s
RECORDS = 4096  # 4 MiB of 1 KiB values
DEADLINE_S = 60.0


def read_all(bootstrap: str, topic: str) -> list[tuple[int, bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"q-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        records: list[tuple[int, bytes]] = []
        wait_for(lambda: records.extend((m.offset(), m.value()) for m in consumer.consume(500, 0.5) if m.error() is None)
                 or len(records) >= RECORDS, "every record", DEADLINE_S)  # fmt: skip
        return records
    finally:
        consumer.close()


def test_a_backfill_is_held_to_the_quota_and_reads_everything(tmp_path) -> None:
    http = f"127.0.0.1:{free_port()}"
    broker = BrokerProcess(
        tmp_path / "data", "--http", http, "--log-retention-check-interval-ms", "200",
        "--remote-log-manager-fetch-max-bytes-per-second", str(QUOTA), "--remote-log-manager-fetch-quota-window-num", "2",
    ).start()  # fmt: skip
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topic = f"history-{uuid.uuid4().hex[:8]}"
        configs = {"segment.bytes": str(256 * 1024), "local.retention.ms": "0"}
        admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(DEADLINE_S)
        values = [b"%06d" % i + b"v" * 1018 for i in range(RECORDS)]
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        for value in values:
            producer.produce(topic, value, partition=0)
        assert producer.flush(DEADLINE_S) == 0
        local = broker.data_dir / "logs" / f"{topic}-0"
        wait_for(lambda: sum(f.stat().st_size for f in local.glob("*.log")) < 256 * 1024, "the history in the bucket alone")

        expected = list(enumerate(values))
        assert read_all(broker.bootstrap, topic) == expected
        throttled = total(scrape(http), "diskless_remote_fetch_throttled_total", topic=topic)
        assert throttled > 0  # 4 MiB at 1 MiB/s after the first 1 MiB: fetches were held back

        broker_resource = ConfigResource(ResourceType.BROKER, "1")
        entry = admin.describe_configs([broker_resource])[broker_resource].result(DEADLINE_S)["remote.log.manager.fetch.max.bytes.per.second"]
        assert (entry.value, entry.is_read_only) == (str(QUOTA), False)
        lift = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
            ConfigEntry("remote.log.manager.fetch.max.bytes.per.second", str(2**63 - 1), incremental_operation=AlterConfigOpType.SET),
        ])  # fmt: skip
        admin.incremental_alter_configs([lift])[lift].result(DEADLINE_S)
        entry = admin.describe_configs([broker_resource])[broker_resource].result(DEADLINE_S)["remote.log.manager.fetch.max.bytes.per.second"]
        assert entry.value == str(2**63 - 1)
        assert read_all(broker.bootstrap, topic) == expected
        assert total(scrape(http), "diskless_remote_fetch_throttled_total", topic=topic) == throttled
    finally:
        broker.close()
