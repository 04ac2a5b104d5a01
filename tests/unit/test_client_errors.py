"""Typed errors by Kafka code, version negotiation, building requests of any version (and the
hand-encoded Produce request, byte for byte against kio), and the configs' rules."""

from __future__ import annotations

import datetime

import pytest
from kio.schema.errors import ErrorCode

from diskless.client import errors, protocol
from diskless.client.config import ConsumerConfig, ProducerConfig
from diskless.wire import encode_request


def test_every_kafka_error_code_has_a_class_with_its_name_and_policy() -> None:
    for code in ErrorCode:
        if code.value == 0:
            continue
        cls = errors.for_code(code.value)
        assert issubclass(cls, errors.BrokerResponseError)
        assert cls.errno == code.value
        assert cls.name == code.name.upper()
        assert cls.retriable == code.retriable, code.name


def test_written_out_classes_are_the_ones_in_the_table() -> None:
    assert errors.for_code(6) is errors.NotLeaderOrFollowerError
    assert errors.NotLeaderOrFollowerError.retriable and errors.NotLeaderOrFollowerError.invalid_metadata
    assert errors.for_code(36) is errors.TopicAlreadyExistsError
    assert not errors.TopicAlreadyExistsError.retriable
    assert errors.for_code(90).__name__ == "ProducerFencedError"


def test_an_error_carries_message_and_context() -> None:
    error = errors.error_for(3, "no such topic", topic="orders", partition=2)
    assert isinstance(error, errors.UnknownTopicOrPartitionError)
    assert error.message == "no such topic"
    assert error.context == {"topic": "orders", "partition": 2}
    assert str(error) == "UNKNOWN_TOPIC_OR_PARTITION (topic=orders, partition=2): no such topic"


def test_check_raises_only_for_non_zero_codes() -> None:
    errors.check(0)
    with pytest.raises(errors.InvalidPartitionsError):
        errors.check(37)


def test_an_unknown_code_still_gets_a_type() -> None:
    cls = errors.for_code(31999)
    assert cls.errno == 31999 and cls is errors.for_code(31999)


def test_client_errors_say_what_and_where() -> None:
    assert "closed" in str(errors.ClientClosedError("producer"))
    timeout = errors.KafkaTimeoutError("flushing the producer", 500)
    assert timeout.timeout_ms == 500 and timeout.retriable
    assert errors.KafkaConnectionError("h", 1, "refused").invalid_metadata


def test_pick_version_takes_the_highest_common_version() -> None:
    assert protocol.pick_version(protocol.FETCH, (0, 17)) == 12
    assert protocol.pick_version(protocol.FETCH, (4, 8)) == 8
    assert protocol.pick_version(protocol.METADATA, (0, 12)) == 12


def test_pick_version_refuses_disjoint_ranges_and_missing_apis() -> None:
    with pytest.raises(errors.UnsupportedByBroker) as info:
        protocol.pick_version(protocol.PRODUCE, (0, 2))
    assert info.value.broker_range == (0, 2) and info.value.client_range == (3, 11)
    with pytest.raises(errors.UnsupportedByBroker):
        protocol.pick_version(protocol.CREATE_PARTITIONS, None)


def test_build_drops_fields_a_version_lacks() -> None:
    v1 = protocol.request_class(protocol.METADATA, 1)
    v12 = protocol.request_class(protocol.METADATA, 12)
    fields = dict(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    assert protocol.build(v1, **fields) == v1(topics=None)
    assert protocol.build(v12, **fields).include_topic_authorized_operations is False
    assert protocol.nested(v12, "MetadataRequestTopic").__module__ == v12.__module__
    assert protocol.ms(1500) == datetime.timedelta(milliseconds=1500)


def test_producer_config_follows_java_rules() -> None:
    assert ProducerConfig.from_kwargs().enable_idempotence is True
    assert ProducerConfig.from_kwargs(acks=1).enable_idempotence is False
    assert ProducerConfig.from_kwargs(compression_type="zstd").compression_type == 4
    with pytest.raises(ValueError):
        ProducerConfig.from_kwargs(acks=1, enable_idempotence=True)
    with pytest.raises(ValueError):
        ProducerConfig.from_kwargs(acks="some")
    with pytest.raises(ValueError):
        ProducerConfig.from_kwargs(compression_type="brotli")
    with pytest.raises(ValueError):
        ProducerConfig.from_kwargs(delivery_timeout_ms=1000, request_timeout_ms=30000)
    with pytest.raises(TypeError):
        ProducerConfig.from_kwargs(no_such_setting=1)


def test_consumer_config_checks_strategies_and_resets() -> None:
    assert ConsumerConfig.from_kwargs(partition_assignment_strategy="range, roundrobin").partition_assignment_strategy == (
        "range",
        "roundrobin",
    )
    with pytest.raises(ValueError):
        ConsumerConfig.from_kwargs(partition_assignment_strategy=("range", "cooperative-sticky"))
    with pytest.raises(ValueError):
        ConsumerConfig.from_kwargs(partition_assignment_strategy="sticky")
    with pytest.raises(ValueError):
        ConsumerConfig.from_kwargs(auto_offset_reset="smallest")
    assert ConsumerConfig.from_kwargs(isolation_level="read_committed").isolation_level == 1


@pytest.mark.parametrize("version", range(3, 12))
@pytest.mark.parametrize("client_id", [None, "producer-1"])
@pytest.mark.parametrize("transactional_id", [None, "tx-ü"])
def test_hand_encoded_produce_requests_match_kio(version: int, client_id: str | None, transactional_id: str | None) -> None:
    topics = [("orders", [(0, b"\x01" * 70), (3, b"batch-bytes")]), ("päyments", [(1, b"x" * 200)])]
    frame = protocol.encode_produce_request(version, client_id, -1, 30000, topics, transactional_id)
    cls = protocol.request_class(protocol.PRODUCE, version)
    topic_cls = protocol.nested(cls, "TopicProduceData")
    partition_cls = protocol.nested(cls, "PartitionProduceData")
    entity = cls(
        transactional_id=transactional_id,
        acks=-1,
        timeout=protocol.ms(30000),
        topic_data=tuple(
            topic_cls(name=name, partition_data=tuple(partition_cls(index=i, records=r) for i, r in parts))
            for name, parts in topics
        ),
    )
    assert bytes(frame) == encode_request(0, client_id, entity)
