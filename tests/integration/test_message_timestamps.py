"""message.timestamp.before.max.ms / after.max.ms (KIP-937): produce refuses CreateTime records
too far from the broker's clock with INVALID_TIMESTAMP, naming each (KIP-467), as Kafka 4."""

from __future__ import annotations

import time

from confluent_kafka import KafkaError, Producer
from kio.schema.errors import ErrorCode

from hot_tier.records import Record, encode_batch

from .test_broker_admin import consume_all
from .test_broker_wire import produce as wire_produce
from .test_broker_wire import produce_result as wire_result

HOUR_MS = 3_600_000
DEADLINE_S = 30.0


def deliveries(bootstrap: str, topic: str, timestamps: list[int]) -> list[int]:
    """Produce one record per timestamp, each in its own batch; the error code of each delivery."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "retries": 0})
    outcomes: dict[int, int] = {}
    for index, timestamp in enumerate(timestamps):
        producer.produce(topic, value=f"v{index}".encode(), timestamp=timestamp, partition=0,
                         on_delivery=lambda err, _msg, i=index: outcomes.__setitem__(i, err.code() if err else 0))  # fmt: skip
        producer.flush(DEADLINE_S)
    assert len(outcomes) == len(timestamps)
    return [outcomes[i] for i in range(len(timestamps))]


def test_records_beyond_the_bounds_are_refused_with_invalid_timestamp(shared_broker, create_topic) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=1,
                         configs={"message.timestamp.before.max.ms": "60000", "message.timestamp.after.max.ms": "60000"})  # fmt: skip
    now = int(time.time() * 1000)
    codes = deliveries(shared_broker.bootstrap, topic, [now, now - 2 * HOUR_MS, now + 2 * HOUR_MS, now - 30_000, now + 30_000])
    assert codes == [0, KafkaError.INVALID_TIMESTAMP, KafkaError.INVALID_TIMESTAMP, 0, 0]
    (records,) = consume_all(shared_broker.bootstrap, topic).values()
    assert [(m.value(), m.timestamp()) for m in records] == [(b"v0", (1, now)), (b"v3", (1, now - 30_000)), (b"v4", (1, now + 30_000))]


def test_by_default_only_records_more_than_an_hour_ahead_are_refused(shared_broker, create_topic) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=1)
    now = int(time.time() * 1000)
    long_ago = now - 365 * 24 * HOUR_MS
    codes = deliveries(shared_broker.bootstrap, topic, [long_ago, now + 2 * HOUR_MS, now + HOUR_MS // 2])
    assert codes == [0, KafkaError.INVALID_TIMESTAMP, 0]
    (records,) = consume_all(shared_broker.bootstrap, topic).values()
    assert [m.value() for m in records] == [b"v0", b"v2"]


def test_the_refusal_names_every_record_out_of_range(shared_broker, create_topic, wire) -> None:
    """One batch of four records, two out of range: the whole batch is refused, each of the two
    named with its index and Kafka's message; a batch of the same records in range is taken."""
    topic = create_topic(shared_broker.bootstrap, partitions=1, configs={"message.timestamp.before.max.ms": "60000"})
    now = int(time.time() * 1000)
    stamps = [now, now - 2 * HOUR_MS, now, now + 2 * HOUR_MS]
    batch = encode_batch([Record(i, ts, None, b"x", ()) for i, ts in enumerate(stamps)])
    client = wire(shared_broker.bootstrap)
    refused = wire_result(client.request(wire_produce(topic, batch)))
    assert refused.error_code == ErrorCode.invalid_timestamp
    assert refused.error_message == "One or more records have been rejected due to invalid timestamp"
    named = [(e.batch_index, e.batch_index_error_message) for e in refused.record_errors]
    assert [index for index, _ in named] == [1, 3]
    for (index, message), offset in zip(named, (1, 3), strict=True):
        low, high = message.rsplit("[", 1)[1].rstrip("]").split(", ")
        assert message == f"Timestamp {stamps[index]} of message with offset {offset} is out of range. The timestamp should be within [{low}, {high}]"
        assert int(high) - int(low) == 60_000 + HOUR_MS and now - 60_000 <= int(low) <= int(time.time() * 1000) - 60_000
    taken = wire_result(client.request(wire_produce(topic, encode_batch([Record(i, now, None, b"x", ()) for i in range(4)]))))
    assert (taken.error_code, taken.base_offset) == (ErrorCode.none, 0)


def test_log_append_time_topics_take_any_timestamp(shared_broker, create_topic) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=1,
                         configs={"message.timestamp.type": "LogAppendTime", "message.timestamp.after.max.ms": "0"})  # fmt: skip
    now = int(time.time() * 1000)
    assert deliveries(shared_broker.bootstrap, topic, [now + 2 * HOUR_MS]) == [0]
