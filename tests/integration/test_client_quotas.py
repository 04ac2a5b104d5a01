"""Client quotas (KIP-13, KIP-55, KIP-124, KIP-546, KIP-599, KIP-612) on real brokers: set and
read with AlterClientQuotas and DescribeClientQuotas as Kafka answers them, kept in the
metadata store across a restart (on both backends) and followed by every broker of a cluster;
and enforced: a producer or consumer over its byte rate is throttled (librdkafka reports the
throttle times the broker sent; kafka-python and aiokafka are held back by the broker) and
loses nothing, a client over its request percentage gets throttled responses while another is
not, topic creations over controller_mutation_rate are refused with THROTTLING_QUOTA_EXCEEDED,
and connections from an address over its connection_creation_rate are closed unserved."""

from __future__ import annotations

import datetime
import time
import urllib.request
import uuid

from confluent_kafka import Consumer, Producer
from kio.schema.alter_client_quotas.v1 import request as alter_v1
from kio.schema.api_versions.v3 import request as api_versions_v3
from kio.schema.create_topics.v7 import request as create_topics_v7
from kio.schema.create_topics.v4 import request as create_topics_v4
from kio.schema.describe_client_quotas.v1 import request as describe_v1
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as metadata_v12

from .broker_process import BrokerProcess, free_port
from .conftest import ON_EVERY_METADATA_BACKEND, WireClient, fresh_metadata_url, metadata_args
from .test_cluster import Cluster, cluster, moto_bucket, wait_until  # noqa: F401 (fixtures)

# Two windows of one second: a client's first second passes at once, then its rate is held.
SHORT_WINDOWS = ("--quota-window-num", "2", "--quota-window-size-seconds", "1")

Entity = tuple[tuple[str, str | None], ...]


def alter(client: WireClient, entries: list[tuple[Entity, list[tuple[str, float, bool]]]], validate_only: bool = False) -> list[tuple[ErrorCode, str | None]]:
    body = alter_v1.AlterClientQuotasRequest(
        entries=tuple(
            alter_v1.EntryData(
                entity=tuple(alter_v1.EntityData(entity_type=t, entity_name=n) for t, n in entity),
                ops=tuple(alter_v1.OpData(key=k, value=v, remove=r) for k, v, r in ops),
            )
            for entity, ops in entries
        ),
        validate_only=validate_only,
    )
    response = client.request(body)
    assert [tuple((e.entity_type, e.entity_name) for e in entry.entity) for entry in response.entries] == [entity for entity, _ in entries]
    return [(entry.error_code, entry.error_message) for entry in response.entries]


def describe(client: WireClient, components: list[tuple[str, int, str | None]], strict: bool = False) -> tuple[ErrorCode, str | None, dict]:
    body = describe_v1.DescribeClientQuotasRequest(
        components=tuple(describe_v1.ComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components), strict=strict
    )
    response = client.request(body)
    found = None
    if response.entries is not None:
        found = {tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)): {v.key: v.value for v in entry.values}
                 for entry in response.entries}  # fmt: skip
    return response.error_code, response.error_message, found


ALICE = (("user", "alice"),)
ALICE_APP = (("client-id", "app"), ("user", "alice"))
DEFAULT_CLIENT = (("client-id", None),)
LOCALHOST = (("ip", "127.0.0.1"),)


@ON_EVERY_METADATA_BACKEND
def test_quotas_are_set_described_and_kept_across_a_restart(tmp_path, request, metadata_backend, wire) -> None:
    url = fresh_metadata_url(request, metadata_backend)
    broker = BrokerProcess(tmp_path / "data", *metadata_args(url)).start()
    try:
        client = wire(broker.bootstrap)
        ok = (ErrorCode.none, None)
        assert alter(client, [
            (ALICE, [("producer_byte_rate", 1024.0, False), ("request_percentage", 12.5, False)]),
            (ALICE_APP, [("consumer_byte_rate", 4096.0, False)]),
            (DEFAULT_CLIENT, [("producer_byte_rate", 2048.0, False)]),
            (LOCALHOST, [("connection_creation_rate", 10.0, False)]),
        ]) == [ok, ok, ok, ok]  # fmt: skip
        # validate_only changes nothing
        assert alter(client, [((("user", "bob"),), [("producer_byte_rate", 1.0, False)])], validate_only=True) == [ok]
        everything = {
            (("user", "alice"),): {"producer_byte_rate": 1024.0, "request_percentage": 12.5},
            (("client-id", "app"), ("user", "alice")): {"consumer_byte_rate": 4096.0},
            (("client-id", None),): {"producer_byte_rate": 2048.0},
            (("ip", "127.0.0.1"),): {"connection_creation_rate": 10.0},
        }
        assert describe(client, []) == (ErrorCode.none, None, everything)
        assert describe(client, [("user", 0, "alice")]) == (ErrorCode.none, None, {k: everything[k] for k in (ALICE, ALICE_APP)})
        assert describe(client, [("user", 0, "alice")], strict=True) == (ErrorCode.none, None, {ALICE: everything[ALICE]})
        assert describe(client, [("client-id", 1, None)]) == (ErrorCode.none, None, {DEFAULT_CLIENT: everything[DEFAULT_CLIENT]})
        assert describe(client, [("client-id", 2, None)]) == (ErrorCode.none, None, {k: everything[k] for k in (ALICE_APP, DEFAULT_CLIENT)})
        assert describe(client, [("user", 2, None), ("client-id", 0, "app")], strict=True) == (ErrorCode.none, None, {ALICE_APP: everything[ALICE_APP]})
        assert describe(client, [("user", 0, "bob")]) == (ErrorCode.none, None, {})

        # A removal of the last value removes the entity; one of two keeps the other.
        assert alter(client, [(ALICE_APP, [("consumer_byte_rate", 0.0, True)]), (ALICE, [("request_percentage", 0.0, True)])]) == [ok, ok]
        broker.stop()
        broker.start()
        client = wire(broker.bootstrap)
        expected = {
            ALICE: {"producer_byte_rate": 1024.0},
            DEFAULT_CLIENT: {"producer_byte_rate": 2048.0},
            LOCALHOST: {"connection_creation_rate": 10.0},
        }
        assert describe(client, []) == (ErrorCode.none, None, expected)
    finally:
        broker.close()


def test_alterations_and_filters_kafka_refuses(broker, wire) -> None:
    client = wire(broker.bootstrap)
    invalid = ErrorCode.invalid_request
    assert alter(client, [
        ((), [("producer_byte_rate", 1.0, False)]),
        ((("user", "alice"), ("ip", "127.0.0.1")), [("producer_byte_rate", 1.0, False)]),
        ((("ip", "not-an-address"),), [("connection_creation_rate", 1.0, False)]),
        ((("group", "g"),), [("producer_byte_rate", 1.0, False)]),
        (ALICE, [("connection_creation_rate", 1.0, False)]),
        (LOCALHOST, [("producer_byte_rate", 1.0, False)]),
        (ALICE, [("producer_byte_rate", 1.5, False)]),
        (ALICE, [("consumer_byte_rate", -1.0, False)]),
        (ALICE, [("request_percentage", 0.5, False)]),
    ]) == [
        (invalid, "Invalid empty client quota entity"),
        (invalid, "Invalid quota entity combination, IP entity should not be combined with User or ClientId"),
        (invalid, "not-an-address is not a valid IP address"),
        (invalid, "Unhandled client quota entity type: group"),
        (invalid, "Invalid configuration key connection_creation_rate"),
        (invalid, "Invalid configuration key producer_byte_rate"),
        (invalid, "Configuration producer_byte_rate must be a Long value"),
        (invalid, "Configuration consumer_byte_rate must be greater than 0, not -1"),
        (ErrorCode.none, None),
    ]  # fmt: skip
    assert describe(client, []) == (ErrorCode.none, None, {ALICE: {"request_percentage": 0.5}})
    assert describe(client, [("user", 0, None)]) == (invalid, "Request specified MATCH_TYPE_EXACT, but set match string to null", None)
    assert describe(client, [("user", 1, "x")]) == (invalid, "Request specified MATCH_TYPE_DEFAULT, but also specified a match string", None)
    assert describe(client, [("user", 7, None)]) == (ErrorCode.unsupported_version, "Unknown match type 7", None)
    assert describe(client, [("group", 2, None)]) == (ErrorCode.unsupported_version, "Custom entity type group not supported", None)
    assert describe(client, [("user", 2, None), ("user", 1, None)]) == (invalid, "Entity type user cannot appear more than once in the filter.", None)
    assert describe(client, [("ip", 2, None), ("user", 1, None)]) == (
        invalid, "Invalid entity filter component combination, IP filter component should not be used with user or clientId filter component.", None
    )  # fmt: skip


def _delivered(bootstrap: str, topic: str, client_id: str, count: int, value: bytes, throttles: list[int]) -> list[tuple[int, int, bytes]]:
    """Produce `count` records as `client_id`; their (partition, offset, value) as acknowledged."""
    acked: list[tuple[int, int, bytes]] = []
    errors: list[str] = []
    producer = Producer({
        "bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5, "batch.size": 16384,
        "throttle_cb": lambda event: throttles.append(event.throttle_time),
    })  # fmt: skip

    def report(err, message) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked.append((message.partition(), message.offset(), message.value()))

    for i in range(count):
        producer.produce(topic, value=value + str(i).encode(), partition=0, on_delivery=report)
        producer.poll(0)
    assert producer.flush(120) == 0
    assert errors == []
    return acked


def test_a_producer_over_its_byte_rate_is_throttled_and_loses_nothing(tmp_path, wire, create_topic) -> None:
    http = f"127.0.0.1:{free_port()}"
    broker = BrokerProcess(tmp_path / "data", *SHORT_WINDOWS, "--http", http).start()
    try:
        topic = create_topic(broker.bootstrap, partitions=1)
        rate = 100_000
        assert alter(wire(broker.bootstrap), [((("client-id", "slow"),), [("producer_byte_rate", float(rate), False)])]) == [(ErrorCode.none, None)]
        value = b"x" * 1000
        slow_throttles: list[int] = []
        fast_throttles: list[int] = []
        started = time.monotonic()
        slow = _delivered(broker.bootstrap, topic, "slow", 500, value, slow_throttles)
        slow_s = time.monotonic() - started
        fast = _delivered(broker.bootstrap, topic, "fast", 500, value, fast_throttles)
        # Every record acknowledged once, at the offsets it was given, in order.
        assert [v for _, _, v in slow] == [value + str(i).encode() for i in range(500)]
        assert [o for _, o, _ in slow + fast] == list(range(1000))
        assert len(slow_throttles) > 0 and max(slow_throttles) > 0
        assert fast_throttles == []
        # ~500 KB at 100 KB/s, the first window's worth at once: held back for seconds.
        assert slow_s >= (500 * 1000 - 2 * rate) / rate / 2
        with urllib.request.urlopen(f"http://{http}/metrics", timeout=10) as response:
            metrics = response.read().decode()
        assert 'kafka_network_requestmetrics_throttletime_seconds_count{request="Produce"}' in metrics
    finally:
        broker.close()


def test_a_consumer_over_its_byte_rate_is_throttled_and_reads_everything(tmp_path, wire, create_topic) -> None:
    broker = BrokerProcess(tmp_path / "data", *SHORT_WINDOWS).start()
    try:
        topic = create_topic(broker.bootstrap, partitions=1)
        value = b"y" * 1000
        _delivered(broker.bootstrap, topic, "writer", 400, value, [])
        assert alter(wire(broker.bootstrap), [((("user", "ANONYMOUS"), ("client-id", "reader")), [("consumer_byte_rate", 50_000.0, False)])]) == [
            (ErrorCode.none, None)
        ]  # fmt: skip
        throttles: list[int] = []
        consumer = Consumer({
            "bootstrap.servers": broker.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}", "client.id": "reader",
            "auto.offset.reset": "earliest", "enable.auto.commit": False, "fetch.max.bytes": 65536, "max.partition.fetch.bytes": 32768, "message.max.bytes": 65536,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
        })  # fmt: skip
        try:
            consumer.subscribe([topic])
            seen: list[tuple[int, bytes]] = []
            deadline = time.monotonic() + 90
            while len(seen) < 400 and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    seen.append((message.offset(), message.value()))
        finally:
            consumer.close()
        assert seen == [(i, value + str(i).encode()) for i in range(400)]
        assert len(throttles) > 0 and max(throttles) > 0
    finally:
        broker.close()


def test_a_client_over_its_request_percentage_is_throttled_and_others_are_not(tmp_path, wire) -> None:
    broker = BrokerProcess(tmp_path / "data", *SHORT_WINDOWS).start()
    try:
        admin = wire(broker.bootstrap)
        assert alter(admin, [((("client-id", "busy"),), [("request_percentage", 1.0, False)])]) == [(ErrorCode.none, None)]
        busy = wire(broker.bootstrap, client_id="busy")
        other = wire(broker.bootstrap, client_id="other")
        request = metadata_v12.MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        busy_throttles = []
        deadline = time.monotonic() + 60
        while not any(busy_throttles) and time.monotonic() < deadline:  # 1% of a second: a few ms of Metadata
            busy_throttles.append(busy.request(request).throttle_time.total_seconds())
        other_throttles = [other.request(request).throttle_time.total_seconds() for _ in range(len(busy_throttles))]
        assert max(busy_throttles) > 0
        assert other_throttles == [0.0] * len(busy_throttles)
    finally:
        broker.close()


def test_topic_creations_over_the_controller_mutation_rate_are_refused(tmp_path, wire) -> None:
    broker = BrokerProcess(tmp_path / "data", "--controller-quota-window-num", "2", "--controller-quota-window-size-seconds", "1").start()
    try:
        admin = wire(broker.bootstrap)
        assert alter(admin, [((("client-id", "creator"),), [("controller_mutation_rate", 2.0, False)])]) == [(ErrorCode.none, None)]
        creator = wire(broker.bootstrap, client_id="creator")
        names = [f"q-{uuid.uuid4().hex[:8]}" for _ in range(3)]

        def create_v7(client: WireClient, name: str, partitions: int):
            topic = create_topics_v7.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1, assignments=(), configs=())
            return client.request(create_topics_v7.CreateTopicsRequest(topics=(topic,), timeout=datetime.timedelta(seconds=10), validate_only=False))

        # A burst of 2/s x 2 windows = 4 partitions: a topic of 10 is let through (the bucket
        # may go below zero once), and the next is refused while it refills.
        first = create_v7(creator, names[0], 10)
        assert [(t.name, t.error_code, t.num_partitions) for t in first.topics] == [(names[0], ErrorCode.none, 10)]
        assert first.throttle_time.total_seconds() > 0
        # Another connection of the same client, not held back by the first one's throttle:
        second = create_v7(wire(broker.bootstrap, client_id="creator"), names[1], 1)
        assert [(t.name, t.error_code, t.error_message) for t in second.topics] == [
            (names[1], ErrorCode.throttling_quota_exceeded, "The throttling quota has been exceeded.")
        ]
        assert second.throttle_time.total_seconds() > 0
        # Before KIP-599's versions the creation is done and only throttled.
        topic = create_topics_v4.CreatableTopic(name=names[2], num_partitions=1, replication_factor=1, assignments=(), configs=())
        third = creator.request(create_topics_v4.CreateTopicsRequest(topics=(topic,), timeout=datetime.timedelta(seconds=10), validate_only=False), timeout_s=30)
        assert [(t.name, t.error_code) for t in third.topics] == [(names[2], ErrorCode.none)]
    finally:
        broker.close()


def test_connections_over_an_ips_creation_rate_are_closed_unserved(tmp_path, wire) -> None:
    broker = BrokerProcess(tmp_path / "data", *SHORT_WINDOWS).start()
    try:
        assert alter(wire(broker.bootstrap), [((("ip", "127.0.0.2"),), [("connection_creation_rate", 2.0, False)])]) == [(ErrorCode.none, None)]
        request = api_versions_v3.ApiVersionsRequest(client_software_name="quota-test", client_software_version="1")

        def served_from(source: str) -> bool:
            client = WireClient(broker.bootstrap, client_id="quota-test", source_host=source)
            try:
                return client.request(request).error_code == ErrorCode.none
            except ConnectionError:
                return False
            finally:
                client.close()

        # Two a second from 127.0.0.2, measured over at least one second: the third is closed.
        from_limited = [served_from("127.0.0.2") for _ in range(6)]
        from_other = [served_from("127.0.0.1") for _ in range(6)]
        assert from_limited[:2] == [True, True] and False in from_limited
        assert from_other == [True] * 6
    finally:
        broker.close()


def test_a_quota_set_through_one_broker_applies_at_every_broker(cluster: Cluster) -> None:  # noqa: F811 (the fixture)
    request = metadata_v12.MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)

    def throttled_at(broker: BrokerProcess) -> bool:
        client = WireClient(broker.bootstrap, client_id="busy")  # a fresh connection: never held back by an earlier throttle
        try:
            return client.request(request).throttle_time.total_seconds() > 0
        finally:
            client.close()

    first, *others = cluster.brokers.values()
    admin = WireClient(first.bootstrap)
    try:
        assert alter(admin, [((("client-id", "busy"),), [("request_percentage", 0.0001, False)])]) == [(ErrorCode.none, None)]
    finally:
        admin.close()
    for broker in others:
        wait_until(lambda: throttled_at(broker), f"the quota to apply at {broker.bootstrap}")
    admin = WireClient(others[-1].bootstrap)
    try:
        assert alter(admin, [((("client-id", "busy"),), [("request_percentage", 0.0, True)])]) == [(ErrorCode.none, None)]
        assert describe(admin, []) == (ErrorCode.none, None, {})
    finally:
        admin.close()
    wait_until(lambda: not throttled_at(first), f"the removal to apply at {first.bootstrap}")


def test_kafka_python_and_aiokafka_under_quotas_lose_nothing(tmp_path, wire, create_topic) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from kafka import KafkaProducer

    http = f"127.0.0.1:{free_port()}"
    broker = BrokerProcess(tmp_path / "data", *SHORT_WINDOWS, "--http", http).start()
    try:
        topic = create_topic(broker.bootstrap, partitions=1)
        assert alter(wire(broker.bootstrap), [
            ((("client-id", "kp"),), [("producer_byte_rate", 50_000.0, False)]),
            ((("client-id", "aio"),), [("consumer_byte_rate", 50_000.0, False)]),
        ]) == [(ErrorCode.none, None)] * 2  # fmt: skip
        values = [b"z" * 1000 + str(i).encode() for i in range(200)]
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, client_id="kp", acks="all", linger_ms=5)
        try:
            futures = [producer.send(topic, value=v, partition=0) for v in values]
            offsets = [f.get(timeout=60).offset for f in futures]
        finally:
            producer.close()
        assert offsets == list(range(200))

        async def consume() -> list[tuple[int, bytes]]:
            consumer = AIOKafkaConsumer(
                topic, bootstrap_servers=broker.bootstrap, client_id="aio", auto_offset_reset="earliest", enable_auto_commit=False,
                max_partition_fetch_bytes=16384, fetch_max_bytes=32768,
            )  # fmt: skip
            await consumer.start()
            try:
                seen: list[tuple[int, bytes]] = []
                async with asyncio.timeout(60):
                    while len(seen) < 200:
                        for records in (await consumer.getmany(timeout_ms=500)).values():
                            seen.extend((r.offset, r.value) for r in records)
                return seen
            finally:
                await consumer.stop()

        assert asyncio.run(consume()) == list(enumerate(values))
        with urllib.request.urlopen(f"http://{http}/metrics", timeout=10) as response:
            metrics = response.read().decode()
        # Both were held back: the broker sent throttled Produce and Fetch responses.
        for api in ("Produce", "Fetch"):
            assert f'kafka_network_requestmetrics_throttletime_seconds_count{{request="{api}"}}' in metrics
    finally:
        broker.close()


def test_a_consumers_fetch_is_capped_by_its_byte_rate(tmp_path, wire, create_topic) -> None:
    from hot_tier.records.header import iter_headers
    from kio.schema.fetch.v12 import request as fetch_v12

    broker = BrokerProcess(tmp_path / "data", *SHORT_WINDOWS).start()
    try:
        topic = create_topic(broker.bootstrap, partitions=1)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.num.messages": 1})
        for i in range(50):
            producer.produce(topic, value=b"q" * 1000, partition=0)
            producer.flush(30)  # one batch each
        assert alter(wire(broker.bootstrap), [((("client-id", "capped"),), [("consumer_byte_rate", 1000.0, False)])]) == [(ErrorCode.none, None)]
        request = fetch_v12.FetchRequest(
            replica_id=-1, max_wait=datetime.timedelta(milliseconds=100), min_bytes=1, max_bytes=1 << 20, isolation_level=0,
            session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=(),
            topics=(fetch_v12.FetchTopic(topic=topic, partitions=(fetch_v12.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),)),),
        )  # fmt: skip
        capped = wire(broker.bootstrap, client_id="capped").request(request)
        free = wire(broker.bootstrap, client_id="free").request(request)
        # 1000 B/s over the windows but one (one second here): one batch, the first, however large.
        [[capped_records]] = [[p.records for p in t.partitions] for t in capped.responses]
        [[free_records]] = [[p.records for p in t.partitions] for t in free.responses]
        assert [h.base_offset for h in iter_headers(capped_records)] == [0]
        assert [h.base_offset for h in iter_headers(free_records)] == list(range(50))
        assert 0 < capped.throttle_time.total_seconds() < 2  # not hours, as 50 KB at 1 KB/s would earn
    finally:
        broker.close()
