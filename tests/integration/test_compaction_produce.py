"""Produce to a compacted topic (cleanup.policy=compact): a record without a key is refused with
INVALID_RECORD and KIP-467 record errors, as Kafka's LogValidator refuses it; the other
partitions of the same request are appended. Raw requests (Produce v9) and librdkafka."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, Producer
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9 import request as produce_v9

from hot_tier.records import Record, encode_batch

from .test_broker_wire import ms

DEADLINE_S = 20.0
RECORD_MESSAGE = "Compacted topic cannot accept message without key in topic partition {topic}-{partition}."


def keyed_batch(keys: list[bytes | None]) -> bytes:
    now = int(time.time() * 1000)
    return encode_batch([Record(i, now, key, b"v%d" % i, ()) for i, key in enumerate(keys)])


def test_records_without_key_refused_with_record_errors_other_partitions_appended(shared_broker, create_topic, wire) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=4, configs={"cleanup.policy": "compact"})
    batches = {
        0: keyed_batch([b"a", b"b", b"c"]),  # keyed: appended
        1: keyed_batch([b"a", None, b"c", None]),  # two keyless records: the whole batch refused
        2: keyed_batch([None]),  # one record without key
        3: keyed_batch([b"z"]),
    }
    request = produce_v9.ProduceRequest(
        acks=-1, timeout=ms(5000), transactional_id=None,
        topic_data=(produce_v9.TopicProduceData(name=topic, partition_data=tuple(
            produce_v9.PartitionProduceData(index=index, records=records) for index, records in batches.items()
        )),),
    )  # fmt: skip
    response = wire(shared_broker.bootstrap).request(request)
    results = {p.index: p for p in response.responses[0].partition_responses}
    assert [(results[i].error_code, results[i].base_offset) for i in (0, 3)] == [(ErrorCode.none, 0), (ErrorCode.none, 0)]
    assert [(results[i].record_errors, results[i].error_message) for i in (0, 3)] == [((), None), ((), None)]
    one = RECORD_MESSAGE.format(topic=topic, partition=1)
    assert (results[1].error_code, results[1].base_offset) == (ErrorCode.invalid_record, -1)
    assert [(e.batch_index, e.batch_index_error_message) for e in results[1].record_errors] == [(1, one), (3, one)]
    assert results[1].error_message == (
        "One or more records have been rejected due to 2 record errors in total, and only showing the first three errors "
        f"at most: [RecordError(batchIndex=1, message='{one}'), RecordError(batchIndex=3, message='{one}')]"
    )
    two = RECORD_MESSAGE.format(topic=topic, partition=2)
    assert (results[2].error_code, results[2].base_offset) == (ErrorCode.invalid_record, -1)
    assert [(e.batch_index, e.batch_index_error_message) for e in results[2].record_errors] == [(0, two)]
    # Nothing of the refused batches was written: the next keyed batch of partition 1 is offset 0.
    again = produce_v9.ProduceRequest(
        acks=-1, timeout=ms(5000), transactional_id=None,
        topic_data=(produce_v9.TopicProduceData(name=topic, partition_data=(
            produce_v9.PartitionProduceData(index=1, records=keyed_batch([b"k"])),)),),
    )  # fmt: skip
    (retry,) = wire(shared_broker.bootstrap).request(again).responses[0].partition_responses
    assert (retry.error_code, retry.base_offset) == (ErrorCode.none, 0)


def test_a_topic_that_is_not_compacted_takes_records_without_key(shared_broker, create_topic, wire) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=1)
    request = produce_v9.ProduceRequest(
        acks=-1, timeout=ms(5000), transactional_id=None,
        topic_data=(produce_v9.TopicProduceData(name=topic, partition_data=(
            produce_v9.PartitionProduceData(index=0, records=keyed_batch([None, None])),)),),
    )  # fmt: skip
    (result,) = wire(shared_broker.bootstrap).request(request).responses[0].partition_responses
    assert (result.error_code, result.base_offset, result.record_errors) == (ErrorCode.none, 0, ())


@pytest.mark.parametrize("batch_records", [1, 100], ids=["one-record-batches", "many-record-batches"])
def test_librdkafka_sees_invalid_record_for_keyless_records_and_acks_keyed_ones(shared_broker, create_topic, batch_records) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=2, configs={"cleanup.policy": "compact"})
    producer = Producer({
        "bootstrap.servers": shared_broker.bootstrap, "linger.ms": 0 if batch_records == 1 else 50,
        "batch.num.messages": batch_records, "retries": 0, "enable.idempotence": False,
    })  # fmt: skip
    outcomes: dict[bytes, tuple[int, int]] = {}  # value -> (error code or 0, offset)

    def on_delivery(err, msg) -> None:
        outcomes[msg.value()] = (err.code() if err else 0, msg.offset() if not err else -1)

    # Partition 0: keyed records only; partition 1: every fourth record has no key.
    for i in range(40):
        producer.produce(topic, value=b"p0-%d" % i, key=b"k%d" % (i % 7), partition=0, on_delivery=on_delivery)
        producer.produce(topic, value=b"p1-%d" % i, key=None if i % 4 == 3 else b"k%d" % i, partition=1, on_delivery=on_delivery)
    assert producer.flush(DEADLINE_S) == 0
    assert [outcomes[b"p0-%d" % i] for i in range(40)] == [(0, i) for i in range(40)]
    keyless = {i for i in range(40) if i % 4 == 3}
    assert {i for i in range(40) if outcomes[b"p1-%d" % i][0] == KafkaError.INVALID_RECORD} == keyless
    if batch_records == 1:  # one record a batch: only the keyless ones refused
        assert [outcomes[b"p1-%d" % i] for i in range(40) if i not in keyless] == [(0, n) for n in range(30)]
    else:
        # KIP-467: librdkafka fails the keyed records of a refused batch with
        # _INVALID_DIFFERENT_RECORD ("an invalid record in the same batch caused the failure").
        others = [outcomes[b"p1-%d" % i] for i in range(40) if i not in keyless]
        assert {code for code, _ in others} <= {0, KafkaError._INVALID_DIFFERENT_RECORD}
        assert KafkaError._INVALID_DIFFERENT_RECORD in {code for code, _ in others}
        acked = [offset for code, offset in others if code == 0]
        assert acked == list(range(len(acked)))
