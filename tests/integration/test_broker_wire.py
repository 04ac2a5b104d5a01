"""Hand-made requests over raw sockets: error codes, framing abuse and long polling.

Requests are kio bodies framed by diskless.wire (the `wire` fixture); record batches come from
hot_tier.records.encode_batch, so a test can flip any byte it likes.
"""

from __future__ import annotations

import datetime
import select
import socket
import time

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient
from kio.schema.api_versions.v3 import request as api_versions_v3
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v4 import request as fetch_v4
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.list_offsets.v7 import request as list_offsets_v7
from kio.schema.metadata.v12 import request as metadata_v12
from kio.schema.produce.v3 import request as produce_v3
from kio.schema.produce.v9 import request as produce_v9

from hot_tier.records import Record, decode_batches, encode_batch

from .broker_process import BrokerProcess

DEADLINE_S = 10.0


def ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


def batch(value: bytes = b"value", key: bytes = b"key", count: int = 1) -> bytes:
    now = int(time.time() * 1000)
    return encode_batch([Record(i, now + i, key, value, (("h", b"1"),)) for i in range(count)])


def produce(topic: str, records: bytes, partition: int = 0, mod=produce_v9):
    return mod.ProduceRequest(
        acks=-1, timeout=ms(5000),
        topic_data=(mod.TopicProduceData(name=topic, partition_data=(mod.PartitionProduceData(index=partition, records=records),)),),
    )  # fmt: skip


def fetch(topic: str, offset: int, *, max_wait_ms: int = 0, min_bytes: int = 1, mod=fetch_v12):
    part = mod.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)
    return mod.FetchRequest(
        max_wait=ms(max_wait_ms), min_bytes=min_bytes, topics=(mod.FetchTopic(topic=topic, partitions=(part,)),),
        **({"forgotten_topics_data": ()} if mod is fetch_v12 else {}),
    )  # fmt: skip


def produce_result(response):
    (topic,) = response.responses
    (partition,) = topic.partition_responses
    return partition


def fetch_result(response):
    (topic,) = response.responses
    (partition,) = topic.partitions
    return partition


def api_versions():
    return api_versions_v3.ApiVersionsRequest(client_software_name="wire-test", client_software_version="1")


def metadata(topic: str):
    return metadata_v12.MetadataRequest(
        topics=(metadata_v12.MetadataRequestTopic(topic_id=None, name=topic),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False,
    )  # fmt: skip


def wait_for(condition, what: str, deadline_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)  # polling a log file: nothing to block on


# --- produce errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flip_at",
    [
        pytest.param(-1, id="last-record-byte"),
        pytest.param(17, id="crc"),
        pytest.param(16, id="magic"),
        pytest.param(22, id="attributes"),
        pytest.param(60, id="records-count"),
    ],
)
def test_corrupt_batch_is_corrupt_message_and_nothing_is_written(shared_broker, create_topic, wire, flip_at: int) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=1)
    client = wire(shared_broker.bootstrap)
    good = batch()
    bad = bytearray(good)
    bad[flip_at] ^= 0x40
    result = produce_result(client.request(produce(topic, bytes(bad))))
    assert result.error_code == ErrorCode.corrupt_message
    assert result.base_offset == -1
    # The log is untouched: the next good batch gets offset 0, and a fetch returns only it.
    assert produce_result(client.request(produce(topic, good))).base_offset == 0
    fetched = fetch_result(client.request(fetch(topic, 0)))
    assert (fetched.error_code, fetched.high_watermark) == (ErrorCode.none, 1)
    assert [b.records for b in decode_batches(fetched.records)] == [next(decode_batches(good)).records]


def test_produce_v3_and_v9_both_append(shared_broker, create_topic, wire) -> None:
    """Request header v1 (Produce v3, aiokafka's kind) and v2 (flexible v9, librdkafka's)."""
    topic = create_topic(shared_broker.bootstrap, partitions=1)
    client = wire(shared_broker.bootstrap)
    assert produce_result(client.request(produce(topic, batch(count=3), mod=produce_v3))).base_offset == 0
    assert produce_result(client.request(produce(topic, batch(count=2)))).base_offset == 3
    assert fetch_result(client.request(fetch(topic, 0, mod=fetch_v4))).high_watermark == 5


def test_message_above_max_message_bytes_is_message_too_large(shared_broker, create_topic, wire) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=1, configs={"max.message.bytes": "1000"})
    client = wire(shared_broker.bootstrap)
    too_big = batch(b"x" * 2000)
    assert len(too_big) > 1000
    result = produce_result(client.request(produce(topic, too_big)))
    assert (result.error_code, result.base_offset) == (ErrorCode.message_too_large, -1)
    fits = batch(b"x" * 500)
    assert len(fits) <= 1000
    assert produce_result(client.request(produce(topic, fits))).base_offset == 0

    # librdkafka checks only its own message.max.bytes (1 MB), so the broker is the one saying no.
    errors = []
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap, "acks": "all"})
    producer.produce(topic, value=b"y" * 5000, partition=0, on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(DEADLINE_S) == 0
    assert [e.code() for e in errors] == [KafkaError.MSG_SIZE_TOO_LARGE]


def test_unknown_topic_is_unknown_topic_or_partition(shared_broker, create_topic, wire) -> None:
    client = wire(shared_broker.bootstrap)
    missing = "no-such-topic-" + str(time.monotonic_ns())
    assert produce_result(client.request(produce(missing, batch()))).error_code == ErrorCode.unknown_topic_or_partition
    assert fetch_result(client.request(fetch(missing, 0))).error_code == ErrorCode.unknown_topic_or_partition
    offsets = client.request(
        list_offsets_v7.ListOffsetsRequest(
            replica_id=-1, isolation_level=0,
            topics=(list_offsets_v7.ListOffsetsTopic(name=missing, partitions=(list_offsets_v7.ListOffsetsPartition(partition_index=0, timestamp=-1),)),),
        )
    )  # fmt: skip
    assert offsets.topics[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition
    (described,) = client.request(metadata(missing)).topics
    assert described.error_code == ErrorCode.unknown_topic_or_partition
    # A partition past the end of an existing topic is unknown too.
    topic = create_topic(shared_broker.bootstrap, partitions=1)
    assert produce_result(client.request(produce(topic, batch(), partition=1))).error_code == ErrorCode.unknown_topic_or_partition
    # auto.create.topics.enable is true (Kafka's default): a real client's Metadata for the
    # name creates it, as Kafka does; Produce, Fetch and ListOffsets above never did.
    listed = AdminClient({"bootstrap.servers": shared_broker.bootstrap}).list_topics(missing, timeout=DEADLINE_S)
    assert listed.topics[missing].error is None
    assert sorted(listed.topics[missing].partitions) == [0]


def test_unknown_topic_without_auto_create(tmp_path) -> None:
    """auto.create.topics.enable=false: a real client's Metadata answers UNKNOWN_TOPIC_OR_PARTITION."""
    process = BrokerProcess(tmp_path / "data", "--auto-create-topics", "false").start()
    try:
        missing = "no-such-topic-" + str(time.monotonic_ns())
        listed = AdminClient({"bootstrap.servers": process.bootstrap}).list_topics(missing, timeout=DEADLINE_S)
        assert listed.topics[missing].error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    finally:
        process.close()


def test_fetch_out_of_range(shared_broker, create_topic, wire) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=1)
    client = wire(shared_broker.bootstrap)
    client.request(produce(topic, batch(count=4)))
    for offset in (5, 1000, -1):
        result = fetch_result(client.request(fetch(topic, offset)))
        assert (result.error_code, result.high_watermark, result.log_start_offset) == (ErrorCode.offset_out_of_range, 4, 0)
        assert not result.records
    # The end of the log is not out of range: an empty answer after max_wait.
    at_end = fetch_result(client.request(fetch(topic, 4)))
    assert (at_end.error_code, at_end.high_watermark) == (ErrorCode.none, 4)
    assert not at_end.records


# --- framing abuse -------------------------------------------------------------------------------


ABUSES = {
    # name: (bytes sent, then half-close?, text the broker logs)
    "garbage": (b"\x00\x00\x00\x10" + b"GARBAGE-GARBAGE!", False, "invalid frame: client_id runs past the end of the frame"),
    "unknown-api": (b"\x00\x00\x00\x0a" + b"\x7f\xff\x00\x00\x00\x00\x00\x07\xff\xff", False, "unknown or unsupported API key 32767"),
    "absurd-size": (b"\x7f\xff\xff\xf0" + b"\x00" * 64, False, "frame of 2147483632 bytes exceeds socket.request.max.bytes"),
    "negative-size": (b"\xff\xff\xff\xfe" + b"\x00" * 64, False, "frame size -2 is smaller than a request header"),
    "truncated-frame": (b"\x00\x00\x00\x64" + b"\x00\x03\x00\x0c\x00\x00\x00\x07" + b"\x00" * 12, True, "truncated frame (20 bytes of 100)"),
    "malformed-body": (b"\x00\x00\x00\x0f" + b"\x00\x03\x00\x0c\x00\x00\x00\x07\xff\xff" + b"\x00\x05\xff\xff\xff", False, "malformed MetadataRequest body"),
    "unsupported-version": (b"\x00\x00\x00\x0a" + b"\x00\x00\x00\x01\x00\x00\x00\x07\xff\xff", False, "API key 0 version 1 is not supported"),
}


def closed_by_peer(sock: socket.socket, deadline_s: float = DEADLINE_S) -> bool:
    sock.settimeout(deadline_s)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


@pytest.mark.parametrize("abuse", sorted(ABUSES))
def test_framing_abuse_closes_only_that_connection(shared_broker, create_topic, wire, abuse: str) -> None:
    sent, half_close, logged = ABUSES[abuse]
    topic = create_topic(shared_broker.bootstrap, partitions=1)
    bystander = wire(shared_broker.bootstrap)
    assert bystander.request(api_versions()).error_code == ErrorCode.none

    abuser = socket.create_connection(("127.0.0.1", shared_broker.port), timeout=DEADLINE_S)
    try:
        abuser.sendall(sent)
        if half_close:
            abuser.shutdown(socket.SHUT_WR)
        assert closed_by_peer(abuser)
    finally:
        abuser.close()
    wait_for(lambda: logged in shared_broker.log_text(), f"the broker to log {logged!r}")
    line = next(line for line in shared_broker.log_text().splitlines() if logged in line)
    assert "closing connection from" in line

    # The connection opened before keeps working, and so do new ones.
    assert produce_result(bystander.request(produce(topic, batch()))).base_offset == 0
    assert fetch_result(wire(shared_broker.bootstrap).request(fetch(topic, 0))).high_watermark == 1


# --- long polling -------------------------------------------------------------------------------------


@pytest.mark.parametrize("mod", [fetch_v4, fetch_v12], ids=["v4", "v12"])
def test_long_poll_on_idle_partition_waits_max_wait(shared_broker, create_topic, wire, mod) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=1)
    client = wire(shared_broker.bootstrap)
    max_wait_s = 0.5
    started = time.monotonic()
    result = fetch_result(client.request(fetch(topic, 0, max_wait_ms=int(max_wait_s * 1000), mod=mod)))
    elapsed = time.monotonic() - started
    assert (result.error_code, result.high_watermark) == (ErrorCode.none, 0)
    assert not result.records
    assert max_wait_s <= elapsed < max_wait_s + 1.0, elapsed


def test_record_produced_during_long_poll_reaches_the_waiting_fetch(shared_broker, create_topic, wire) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=1)
    consumer, producer = wire(shared_broker.bootstrap), wire(shared_broker.bootstrap)
    request = fetch(topic, 0, max_wait_ms=5000, min_bytes=1)
    started = time.monotonic()
    consumer.send(request)
    # The fetch is parked: nothing comes back while the partition is empty.
    readable, _, _ = select.select([consumer.sock], [], [], 0.3)
    assert readable == []
    sent = batch(b"wake up")
    assert produce_result(producer.request(produce(topic, sent))).base_offset == 0
    acked = time.monotonic()
    result = fetch_result(consumer.recv(request))
    answered = time.monotonic()
    assert answered - started < 4.0  # well before max_wait
    assert answered - acked < 0.5, answered - acked  # typically about a millisecond
    assert [b.records for b in decode_batches(result.records)] == [next(decode_batches(sent)).records]


def test_acks_0_produce_gets_no_response_and_the_next_request_its_own(shared_broker, create_topic, wire) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=1)
    client = wire(shared_broker.bootstrap)
    fire_and_forget = produce_v9.ProduceRequest(
        acks=0, timeout=ms(5000),
        topic_data=(produce_v9.TopicProduceData(name=topic, partition_data=(produce_v9.PartitionProduceData(index=0, records=batch(count=2)),)),),
    )  # fmt: skip
    client.send(fire_and_forget)
    # The next response on the connection answers the next request (its correlation id). The
    # records become visible once durable in the bucket: the fetch long-polls for them.
    result = fetch_result(client.request(fetch(topic, 0, max_wait_ms=5000)))
    assert (result.error_code, result.high_watermark) == (ErrorCode.none, 2)


def test_pipelined_produce_requests_are_appended_and_answered_in_request_order(shared_broker, create_topic, wire) -> None:
    # Sent without waiting, as librdkafka does with many requests in flight: the broker reads
    # the next Produce while one waits for durability, yet appends and answers in request
    # order, and a Metadata request behind them is answered after all of them.
    from diskless.wire import parse_response, response_type

    topic = create_topic(shared_broker.bootstrap, partitions=2)
    client = wire(shared_broker.bootstrap)
    sizes = [n % 3 + 1 for n in range(40)]
    sent = [batch(value=b"v%d" % n, count=size) for n, size in enumerate(sizes)]
    ids = [client.send(produce(topic, records, partition=n % 2)) for n, records in enumerate(sent)]
    metadata_id = client.send(metadata(topic))
    answers = [parse_response(client.recv_frame(), response_type(0, 9)) for _ in sent]
    assert [correlation_id for correlation_id, _ in answers] == ids
    next_offset = [0, 0]
    for n, (_, response) in enumerate(answers):
        result = produce_result(response)
        assert (result.error_code, result.base_offset) == (ErrorCode.none, next_offset[n % 2])
        next_offset[n % 2] += sizes[n]
    correlation_id, _ = parse_response(client.recv_frame(), response_type(3, 12))
    assert correlation_id == metadata_id
    for partition in (0, 1):
        part = fetch_v12.FetchPartition(partition=partition, fetch_offset=0, partition_max_bytes=1 << 20)
        body = fetch_v12.FetchRequest(max_wait=ms(0), min_bytes=1, topics=(fetch_v12.FetchTopic(topic=topic, partitions=(part,)),), forgotten_topics_data=())
        client.send(body)
        (fetched,) = client.recv(body).responses[0].partitions
        values = [record.value for fetched_batch in decode_batches(fetched.records) for record in fetched_batch.records]
        assert values == [b"v%d" % n for n in range(partition, 40, 2) for _ in range(sizes[n])]


def test_metadata_v10_by_an_unknown_topic_id_is_unknown_topic_id(shared_broker, wire) -> None:
    # v10 asks by topic id with a null name; the answer's name cannot be null before v12.
    import uuid

    from kio.schema.metadata.v10 import request as metadata_v10

    client = wire(shared_broker.bootstrap)
    body = metadata_v10.MetadataRequest(
        topics=(metadata_v10.MetadataRequestTopic(topic_id=uuid.uuid4(), name=None),), allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False, include_topic_authorized_operations=False,
    )  # fmt: skip
    (topic,) = client.request(body).topics
    assert (topic.error_code, topic.name) == (ErrorCode.unknown_topic_id, "")
    assert client.request(api_versions()).error_code == ErrorCode.none  # the connection stays open


@pytest.mark.parametrize(("name", "version"), [("bad name!", "1"), ("client", "1.0 beta"), ("-starts-with-dash", "1"), ("", "1"), ("client", "1.")])
def test_api_versions_with_a_malformed_software_name_is_invalid_request(shared_broker, wire, name: str, version: str) -> None:
    """As Kafka (KIP-511): the name and version match [a-zA-Z0-9](?:[a-zA-Z0-9\\-.]*[a-zA-Z0-9])?,
    else INVALID_REQUEST and no API listed; the connection goes on."""
    client = wire(shared_broker.bootstrap)
    refused = client.request(api_versions_v3.ApiVersionsRequest(client_software_name=name, client_software_version=version))
    assert (refused.error_code, refused.api_keys) == (ErrorCode.invalid_request, ())
    answered = client.request(api_versions_v3.ApiVersionsRequest(client_software_name="apache-kafka-java", client_software_version="4.0.0"))
    assert answered.error_code == ErrorCode.none and len(answered.api_keys) > 40
