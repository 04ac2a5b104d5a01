"""GET /metrics after a known produce / tier / consume / commit run: a real broker, real clients
(confluent-kafka), the page parsed with prometheus_client's own parser, exact values checked
against the workload and against the bucket's own listing."""

from __future__ import annotations

import json
import socket
import struct
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from cold_tier.layout import parse_commit_key

from .broker_process import BrokerProcess, free_port

DEADLINE_S = 30.0
RECORDS_P0 = 30  # one batch each: small segments that roll and upload
RECORDS_P1 = 12  # a few batches of several records: messages in counts records, not batches
COMMITTED = 17


@pytest.fixture(scope="module")
def http_broker(tmp_path_factory):
    data = tmp_path_factory.mktemp("metrics") / "data"
    http_port = free_port()
    process = BrokerProcess(data, "--log-retention-check-interval-ms", "500", "--http", f"127.0.0.1:{http_port}").start()
    process.http = f"127.0.0.1:{http_port}"  # type: ignore[attr-defined]
    try:
        yield process
    finally:
        process.close()


def scrape(http: str) -> dict[tuple[str, frozenset], float]:
    """Every sample of GET /metrics, by (sample name, labels)."""
    with urllib.request.urlopen(f"http://{http}/metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def total(samples: dict, name: str, **labels: str) -> float:
    """The sum over every label set that includes `labels` (e.g. all versions of one API)."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


def wait_for(condition, what: str, deadline_s: float = DEADLINE_S):
    deadline = time.monotonic() + deadline_s
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)  # uploads run on the broker's own schedule; poll their effect


def scrape_when(http: str, condition, what: str) -> dict:
    """The first scrape that meets `condition` (the broker sees a socket close a moment after it)."""

    def met():
        s = scrape(http)
        return s if condition(s) else None

    return wait_for(met, what)


def bucket_segments(data_dir: Path, topic: str, partition: int) -> list:
    """The partition's committed segments, from the bucket's commit objects alone."""
    commits = data_dir / "bucket" / topic / str(partition) / "commits"
    return sorted((parse_commit_key(f"{topic}/{partition}/commits/{p.name}") for p in commits.glob("*.commit")), key=lambda s: s.base_offset)


def produce(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(RECORDS_P0):
        producer.produce(topic, value=f"p0-{i:03d}-".encode() + b"x" * 100, partition=0)
        assert producer.flush(DEADLINE_S) == 0
    batched = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20})
    for i in range(RECORDS_P1):
        batched.produce(topic, value=f"p1-{i:03d}".encode(), partition=1)
        if i % 4 == 3:
            assert batched.flush(DEADLINE_S) == 0
    assert batched.flush(DEADLINE_S) == 0


def consume_and_commit(bootstrap: str, topic: str, group: str) -> None:
    """Read partition 0 from offset 0 (the early records from the bucket), commit COMMITTED."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        offsets = []
        deadline = time.monotonic() + DEADLINE_S
        while len(offsets) < RECORDS_P0:
            assert time.monotonic() < deadline, f"read {len(offsets)} records"
            msg = consumer.poll(0.1)
            if msg is not None:
                assert msg.error() is None, msg.error()
                offsets.append(msg.offset())
        assert offsets == list(range(RECORDS_P0))
        consumer.commit(offsets=[TopicPartition(topic, 0, COMMITTED)], asynchronous=False)
    finally:
        consumer.close()


def test_metrics_after_produce_tier_consume_commit(http_broker, create_topic) -> None:
    topic = create_topic(http_broker.bootstrap, partitions=2, configs={"segment.bytes": "1024", "local.retention.ms": "0"})
    group = f"g-{uuid.uuid4().hex[:12]}"
    p0, p1 = {"topic": topic, "partition": "0"}, {"topic": topic, "partition": "1"}
    produce(http_broker.bootstrap, topic)

    # Every rolled segment of partition 0 in the bucket and gone from disk.
    def tiered():
        s = scrape(http_broker.http)
        waiting = value(s, "kafka_server_brokertopicmetrics_remotecopylagsegments", **p0)
        in_bucket = value(s, "kafka_server_brokertopicmetrics_remotelogmetadatacount", **p0)
        only_active = value(s, "kafka_log_log_numlogsegments", **p0) == 1
        return s if waiting == 0 and in_bucket and only_active else None

    s = wait_for(tiered, "partition 0's rolled segments to reach the bucket")
    segments = bucket_segments(http_broker.data_dir, topic, 0)
    assert segments and segments[0].base_offset == 0

    # Offsets of both partitions, and both tiers of partition 0 against the bucket's listing.
    assert value(s, "kafka_log_log_logendoffset", **p0) == RECORDS_P0
    assert value(s, "diskless_log_highwatermark", **p0) == RECORDS_P0
    assert value(s, "kafka_log_log_logstartoffset", **p0) == 0
    assert value(s, "diskless_log_locallogstartoffset", **p0) == segments[-1].last_offset + 1
    assert value(s, "kafka_log_log_logendoffset", **p1) == RECORDS_P1
    assert value(s, "diskless_log_highwatermark", **p1) == RECORDS_P1
    assert value(s, "kafka_server_brokertopicmetrics_remotelogmetadatacount", **p0) == len(segments)
    bucket_bytes = sum(seg.size_bytes for seg in segments)
    assert value(s, "kafka_server_brokertopicmetrics_remotelogsizebytes", **p0) == bucket_bytes
    assert value(s, "kafka_server_brokertopicmetrics_remotecopylagbytes", **p0) == 0
    assert value(s, "diskless_remote_copy_lag_seconds", **p0) == 0
    log_files = http_broker.data_dir / "logs" / f"{topic}-0"
    assert value(s, "kafka_log_log_size", **p0) == sum(p.stat().st_size for p in log_files.glob("*.log"))

    # Uploads counted where they happen: one per committed segment, their bytes, no errors.
    assert value(s, "kafka_server_brokertopicmetrics_remotecopyrequests_total", topic=topic) == len(segments)
    assert value(s, "kafka_server_brokertopicmetrics_remotecopybytes_total", topic=topic) == bucket_bytes
    assert total(s, "kafka_server_brokertopicmetrics_remotecopyerrors_total", topic=topic) == 0
    assert value(s, "diskless_remote_copy_duration_seconds_count") >= len(segments)

    # Produce: records (not batches) in, bytes in equal to what both tiers hold (nothing was
    # compressed or deleted), one Produce request per partition write, each answered NONE.
    assert value(s, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == RECORDS_P0 + RECORDS_P1
    size_p1 = value(s, "kafka_log_log_size", **p1)
    assert value(s, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic) == bucket_bytes + value(s, "kafka_log_log_size", **p0) + size_p1
    produce_requests = total(s, "kafka_network_requestmetrics_requests_total", request="Produce")
    assert produce_requests >= RECORDS_P0 + 3
    assert value(s, "kafka_network_requestmetrics_totaltime_seconds_count", request="Produce") == produce_requests
    assert value(s, "kafka_network_requestmetrics_errors_total", request="Produce", error="NONE") == produce_requests
    assert value(s, "kafka_server_brokertopicmetrics_totalproducerequests_total", topic=topic) == produce_requests
    # Every Produce request measured on the way in and its answer on the way out (acks=all).
    assert value(s, "kafka_network_requestmetrics_requestbytes_count", request="Produce") == produce_requests
    assert value(s, "kafka_network_requestmetrics_requestbytes_sum", request="Produce") > value(s, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic)
    assert value(s, "diskless_network_responsebytes_count", request="Produce") == produce_requests
    assert value(s, "kafka_server_brokertopicmetrics_failedproducerequests_total", topic=topic) is None
    assert total(s, "kafka_network_requestmetrics_requests_total", request="CreateTopics") == 1

    # Write-ahead objects: every produced batch (one per Produce request here) made durable by
    # a commit, each commit timed once, nothing retried or pending.
    objects = value(s, "diskless_wal_objects_committed_total")
    assert value(s, "diskless_wal_batches_committed_total") == produce_requests
    assert 1 <= objects <= produce_requests
    assert value(s, "diskless_wal_commit_duration_seconds_count") == objects
    assert value(s, "diskless_wal_bytes_total") > value(s, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic)
    assert value(s, "diskless_wal_pending_bytes") == 0
    assert value(s, "diskless_wal_retries_total", step="put") == value(s, "diskless_wal_retries_total", step="commit") == 0

    # Consume from 0 (the bucket, then disk), commit COMMITTED: the group's lag is HW - COMMITTED.
    consume_and_commit(http_broker.bootstrap, topic, group)
    s = scrape(http_broker.http)
    g0 = {"consumergroup": group, "topic": topic, "partition": "0"}
    assert value(s, "kafka_consumergroup_current_offset", **g0) == COMMITTED
    assert value(s, "kafka_consumergroup_lag", **g0) == RECORDS_P0 - COMMITTED
    assert value(s, "kafka_consumergroup_lag", consumergroup=group, topic=topic, partition="1") is None  # never committed
    assert value(s, "kafka_server_brokertopicmetrics_remotefetchrequests_total", topic=topic) >= 1
    assert 0 < value(s, "kafka_server_brokertopicmetrics_remotefetchbytes_total", topic=topic) <= bucket_bytes
    assert total(s, "kafka_server_brokertopicmetrics_remotefetcherrors_total", topic=topic) == 0
    # Every remote fetch was a cache hit or a miss; each segment (smaller than a chunk) was
    # fetched from the bucket exactly once, by a read or by prefetch.
    remote_fetches = total(s, "kafka_server_brokertopicmetrics_remotefetchrequests_total")
    fetch_cache = {"cache": "fetch"}
    assert value(s, "diskless_remote_cache_hits_total", **fetch_cache) + value(s, "diskless_remote_cache_misses_total", **fetch_cache) == remote_fetches
    assert value(s, "diskless_remote_cache_misses_total", **fetch_cache) >= 1
    gets = value(s, "diskless_remote_get_requests_total", purpose="fetch") + value(s, "diskless_remote_get_requests_total", purpose="prefetch")
    assert gets == len(segments)
    assert value(s, "diskless_remote_cache_misses_total", cache="chunk") >= value(s, "diskless_remote_get_requests_total", purpose="fetch")
    assert value(s, "diskless_remote_cache_chunk_bytes") == bucket_bytes  # nothing evicted
    assert value(s, "diskless_remote_fetch_duration_seconds_count") == remote_fetches
    assert value(s, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) >= bucket_bytes + value(s, "kafka_log_log_size", **p0)
    assert value(s, "kafka_network_requestmetrics_errors_total", request="OffsetCommit", error="NONE") == 1
    assert value(s, "kafka_server_replicamanager_leadercount") >= 2
    assert value(s, "diskless_event_loop_lag_seconds") is not None
    assert value(s, "process_cpu_seconds_total") > 0

    # The same figures as the JSON route (one source: the leaders).
    with urllib.request.urlopen(f"http://{http_broker.http}/v1/topics/{topic}", timeout=10) as response:
        state = json.load(response)["partitions"][0]
    assert (state["remote_segments"], state["remote_bytes"], state["high_watermark"]) == (len(segments), bucket_bytes, RECORDS_P0)


def test_unknown_topics_get_no_labels(http_broker, wire) -> None:
    """A client naming topics that do not exist cannot grow the label sets."""
    from kio.schema.metadata.v12 import request as metadata_v12

    made_up = f"nope-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({"bootstrap.servers": http_broker.bootstrap, "group.id": "x", "allow.auto.create.topics": False})
    try:
        consumer.assign([TopicPartition(made_up, 0, 0)])
        consumer.poll(0.5)
    finally:
        consumer.close()
    wire(http_broker.bootstrap).request(metadata_v12.MetadataRequest(
        topics=(metadata_v12.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=made_up),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False,
    ))  # fmt: skip
    s = scrape(http_broker.http)
    assert not [key for key in s if ("topic", made_up) in key[1]]
    assert total(s, "kafka_network_requestmetrics_requests_total", request="Metadata") >= 1


def api_versions_v0(correlation_id: int, client_id: bytes) -> bytes:
    """An ApiVersions v0 request frame: header v1 (api key, version, correlation id, client id), no body."""
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    return struct.pack(">i", len(body)) + body


def read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            assert chunk, "the broker closed the connection"
            data += chunk
        return data

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def test_connections_and_request_and_response_sizes(http_broker) -> None:
    """Raw sockets, so that every connection and byte is known: the connection count is the
    number of sockets open, each opened and closed is counted once, and the size histograms of
    ApiVersions grow by exactly the frames sent and received."""
    listener = {"listener": http_broker.bootstrap}
    host, port = http_broker.bootstrap.split(":")
    count = "kafka_server_socket_server_metrics_connection_count"
    # Clients of the tests before have closed (librdkafka closes its sockets on destruction).
    s = scrape_when(http_broker.http, lambda s: value(s, count, **listener) == 0, "no connection open")
    created = value(s, "kafka_server_socket_server_metrics_connection_creation_total", **listener)
    closed = value(s, "kafka_server_socket_server_metrics_connection_close_total", **listener)
    assert created == closed > 0
    api_versions = {"request": "ApiVersions"}
    requests_before = value(s, "kafka_network_requestmetrics_requestbytes_count", **api_versions)
    request_bytes_before = value(s, "kafka_network_requestmetrics_requestbytes_sum", **api_versions)
    response_bytes_before = value(s, "diskless_network_responsebytes_sum", **api_versions)

    sockets = [socket.create_connection((host, int(port)), timeout=10) for _ in range(3)]
    try:
        s = scrape_when(http_broker.http, lambda s: value(s, count, **listener) == 3, "three connections open")
        assert value(s, "kafka_server_socket_server_metrics_connection_creation_total", **listener) == created + 3
        sent = received = 0
        for i, client_id in enumerate((b"a", b"metrics-test", b"x" * 100, b"", b"bb")):
            frame = api_versions_v0(i, client_id)
            sockets[i % 3].sendall(frame)
            sent += len(frame) - 4
            received += len(read_frame(sockets[i % 3]))
        s = scrape(http_broker.http)
        assert value(s, "kafka_network_requestmetrics_requestbytes_count", **api_versions) == requests_before + 5
        assert value(s, "kafka_network_requestmetrics_requestbytes_sum", **api_versions) == request_bytes_before + sent
        assert value(s, "diskless_network_responsebytes_count", **api_versions) == requests_before + 5
        assert value(s, "diskless_network_responsebytes_sum", **api_versions) == response_bytes_before + received
        assert value(s, count, **listener) == 3
    finally:
        for sock in sockets:
            sock.close()
    s = scrape_when(http_broker.http, lambda s: value(s, count, **listener) == 0, "the three connections closed")
    assert value(s, "kafka_server_socket_server_metrics_connection_close_total", **listener) == closed + 3
    assert value(s, "kafka_server_socket_server_metrics_connection_creation_total", **listener) == created + 3
