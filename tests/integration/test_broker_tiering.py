"""History through real clients once local copies are gone: with remote.storage.enable (the
default) rolled segments go to the bucket and local.retention.ms=0 drops them from disk, yet
every record stays readable from offset 0, and every answer reports the whole log's start."""

from __future__ import annotations

import datetime
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_v12

from hot_tier.records import decode_batches

DEADLINE_S = 30.0


def test_history_is_served_from_the_bucket_with_the_whole_logs_start(shared_broker, create_topic, wire) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=1, configs={"segment.bytes": "1024", "local.retention.ms": "0"})
    values = [f"tiered-{i:03d}-".encode() + b"t" * 100 for i in range(40)]
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap, "acks": "all", "linger.ms": 0})
    for value in values:
        producer.produce(topic, value=value, partition=0)
        assert producer.flush(DEADLINE_S) == 0  # one batch per record: many small segments

    local_dir = shared_broker.data_dir / "logs" / f"{topic}-0"
    deadline = time.monotonic() + DEADLINE_S
    while min(int(p.stem) for p in local_dir.glob("*.log")) == 0:
        assert time.monotonic() < deadline, "rolled segments never left the local disk"
        time.sleep(0.05)  # uploads run on the broker's own schedule; poll their effect
    local_start = min(int(p.stem) for p in local_dir.glob("*.log"))

    # A raw fetch from 0, below the local log: served from the bucket, log start offset 0.
    request = fetch_v12.FetchRequest(
        max_wait=datetime.timedelta(0), min_bytes=1, forgotten_topics_data=(),
        topics=(fetch_v12.FetchTopic(topic=topic, partitions=(fetch_v12.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),)),),
    )  # fmt: skip
    result = wire(shared_broker.bootstrap).request(request).responses[0].partitions[0]
    assert (result.error_code, result.log_start_offset, result.high_watermark) == (ErrorCode.none, 0, 40)
    first = next(decode_batches(result.records))
    assert (first.header.base_offset, first.records[0].value) == (0, values[0])

    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    tp = TopicPartition(topic, 0)
    assert admin.list_offsets({tp: OffsetSpec.earliest()}, request_timeout=DEADLINE_S)[tp].result().offset == 0

    consumer = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": "tiering-test", "auto.offset.reset": "error"})
    try:
        assert consumer.get_watermark_offsets(tp, timeout=DEADLINE_S) == (0, 40)
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < len(values):
            assert time.monotonic() < deadline, f"got {len(got)} records"
            msg = consumer.poll(0.1)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    assert got == list(enumerate(values))
    assert local_start > 0  # and the early ones really came from the bucket
