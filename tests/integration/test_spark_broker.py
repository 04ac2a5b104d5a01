"""Spark reads what a Kafka consumer reads: records produced through a real `diskless serve`
by librdkafka (confluent-kafka) with every codec, consumed back by confluent-kafka, and read
by the `diskless` data source from the bucket the broker tiers its rolled segments to, and
from bucket + broker with the hot tail.

The broker here runs without write-ahead objects (DISKLESS_WAL_ENABLE=false), a deployment
where the bucket holds only rolled segments and the hot tail is the broker's alone; with them,
the bucket alone holds every acknowledged record (test_spark_wal.py).
"""

from __future__ import annotations

import random
import time
import uuid
from pathlib import Path

import pytest

from cold_tier import layout
from hot_tier.records import iter_headers

from .broker_process import BrokerProcess

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
pytest.importorskip("pyspark")

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PARTITIONS = 2


@pytest.fixture(scope="module")
def bucket_url(tmp_path_factory) -> str:
    return f"file://{tmp_path_factory.mktemp('spark-broker-bucket')}/bucket"


@pytest.fixture(scope="module")
def broker(tmp_path_factory, bucket_url):
    process = BrokerProcess(
        tmp_path_factory.mktemp("spark-broker") / "data", "--object-store", bucket_url, env={"DISKLESS_WAL_ENABLE": "false"}
    ).start()
    try:
        yield process
    finally:
        process.close()


def create_topic(broker: BrokerProcess, topic: str, partitions: int, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, 1, config=configs)])
    futures[topic].result(timeout=30)


def produce(broker: BrokerProcess, topic: str, codec: str, count: int, seed: int, partitions: int = PARTITIONS) -> None:
    rng = random.Random(seed)
    producer = confluent_kafka.Producer({
        "bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 20,
        "batch.num.messages": 50, "enable.idempotence": False,
    })  # fmt: skip
    for i in range(count):
        key = None if i % 9 == 4 else f"{codec}-key-{i % 13}".encode()
        value = None if i % 17 == 6 else rng.randbytes(rng.randint(0, 300))
        headers = [("codec", codec.encode()), ("n", None)] if i % 4 == 1 else None
        producer.produce(topic, value=value, key=key, partition=i % partitions, headers=headers,
                         timestamp=1_700_000_000_000 + seed * 100_000 + i * 3)  # fmt: skip
        producer.poll(0)
    assert producer.flush(30) == 0


def consume(broker: BrokerProcess, topic: str, partitions: int) -> list[tuple]:
    """Every record of `topic`, as confluent-kafka hands it out, in the rows' tuple form."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
    })  # fmt: skip
    try:
        ends = {p: consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in range(partitions)])
        rows: list[tuple] = []
        deadline = time.monotonic() + 60
        seen = {p: 0 for p in range(partitions)}
        while any(seen[p] < ends[p] for p in seen):
            assert time.monotonic() < deadline, f"consumed up to {seen}, high watermarks {ends}"
            message = consumer.poll(1.0)
            if message is None:
                continue
            assert message.error() is None, message.error()
            kind, timestamp = message.timestamp()
            headers = tuple(message.headers()) if message.headers() else None
            timestamp_type = 1 if kind == confluent_kafka.TIMESTAMP_LOG_APPEND_TIME else 0
            rows.append((message.topic(), message.partition(), message.offset(), timestamp * 1000, timestamp_type,
                         message.key(), message.value(), headers))  # fmt: skip
            seen[message.partition()] = message.offset() + 1
        return sorted(rows, key=lambda r: (r[1], r[2]))
    finally:
        consumer.close()


def wait_tiered(broker: BrokerProcess, url: str, topic: str, partitions: int, timeout_s: float = 60.0) -> dict[int, list]:
    """Wait until the broker has committed every rolled segment of `topic` to the bucket:
    each partition's catalogue ends where its active local segment begins. Returns the
    committed segments per partition."""
    from spark_reader.bucket import open_bucket, resolve_location

    bucket = open_bucket(resolve_location(url, {}, {}))
    deadline = time.monotonic() + timeout_s
    while True:
        catalogue = {p: layout.parse_catalogue(bucket.list_keys(layout.commits_prefix(topic, p))) for p in range(partitions)}
        active = {p: int(sorted((broker.data_dir / "logs" / f"{topic}-{p}").glob("*.log"))[-1].stem) for p in range(partitions)}
        if all((catalogue[p][-1].next_offset if catalogue[p] else 0) == active[p] for p in range(partitions)):
            return catalogue
        assert time.monotonic() < deadline, f"not tiered after {timeout_s}s: bucket {catalogue}, active segments {active}"
        time.sleep(0.1)  # polling the bucket with a deadline: nothing to wait on instead


def spark_rows(df) -> list[tuple]:
    table = df.selectExpr("topic", "partition", "offset", "unix_micros(timestamp) AS ts", "timestampType", "key", "value", "headers").toArrow()
    rows = []
    for r in table.to_pylist():
        headers = None if r["headers"] is None else tuple((h["key"], h["value"]) for h in r["headers"])
        rows.append((r["topic"], r["partition"], r["offset"], r["ts"], r["timestampType"], r["key"], r["value"], headers))
    return sorted(rows, key=lambda r: (r[1], r[2]))


@pytest.fixture(scope="module")
def mixed(broker, bucket_url):
    """A topic produced with every codec in turn; the broker tiers its rolled segments.
    Timestamps are from 2023: retention.ms=-1 keeps the broker from deleting them."""
    topic = f"mixed-{uuid.uuid4().hex[:8]}"
    create_topic(broker, topic, PARTITIONS, **{"segment.bytes": "16384", "index.interval.bytes": "1024", "retention.ms": "-1"})
    for seed, codec in enumerate(CODECS):
        produce(broker, topic, codec, 240, seed)
    tiered = wait_tiered(broker, bucket_url, topic, PARTITIONS)
    return topic, bucket_url, tiered, consume(broker, topic, PARTITIONS)


def test_bucket_reads_equal_a_kafka_consumer_for_every_codec(spark, mixed) -> None:
    topic, url, tiered, consumed = mixed
    codecs = set()
    for segments in tiered.values():
        for segment in segments:
            data = (Path(url.removeprefix("file://")) / segment.log_key).read_bytes()
            codecs.update(header.codec for header in iter_headers(data))
    assert codecs == {0, 1, 2, 3, 4}
    bucket_ends = {p: segments[-1].next_offset for p, segments in tiered.items()}
    want = [row for row in consumed if row[2] < bucket_ends[row[1]]]
    assert len(want) > 600
    df = spark.read.format("diskless").option("subscribe", topic).option("includeHeaders", "true").load(url)
    assert spark_rows(df) == want
    bounded = (
        spark.read.format("diskless").option("subscribe", topic).option("includeHeaders", "true")
        .option("startingOffsets", f'{{"{topic}":{{"0":17,"1":-2}}}}')
        .option("endingOffsets", f'{{"{topic}":{{"0":{bucket_ends[0] - 3},"1":101}}}}').load(url)
    )  # fmt: skip
    assert spark_rows(bounded) == [r for r in want if (17 if r[1] == 0 else 0) <= r[2] < (bucket_ends[0] - 3 if r[1] == 0 else 101)]


def test_the_hot_tail_completes_the_log_exactly_once(spark, broker, mixed) -> None:
    topic, url, tiered, consumed = mixed
    ends = {p: segments[-1].next_offset for p, segments in tiered.items()}
    for p, end in ends.items():
        assert 0 < end < sum(1 for r in consumed if r[1] == p)  # records on both sides
    df = (
        spark.read.format("diskless").option("subscribe", topic).option("includeHeaders", "true")
        .option("kafka.bootstrap.servers", broker.bootstrap).load(url)
    )  # fmt: skip
    rows = spark_rows(df)
    assert rows == consumed
    for p in range(PARTITIONS):
        offsets = [r[2] for r in rows if r[1] == p]
        assert offsets == list(range(len(offsets)))
    edge = ends[0]
    across = (
        spark.read.format("diskless").option("assign", f'{{"{topic}":[0]}}').option("includeHeaders", "true")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("startingOffsets", f'{{"{topic}":{{"0":{edge - 5}}}}}')
        .option("endingOffsets", f'{{"{topic}":{{"0":{edge + 5}}}}}').load(url)
    )  # fmt: skip
    assert spark_rows(across) == [r for r in consumed if r[1] == 0 and edge - 5 <= r[2] < edge + 5]


def test_a_topic_only_the_broker_holds_is_read_from_it(spark, broker, bucket_url) -> None:
    topic = f"fresh-{uuid.uuid4().hex[:8]}"
    create_topic(broker, topic, 1, **{"message.timestamp.type": "LogAppendTime", "retention.ms": "-1"})
    produce(broker, topic, "lz4", 50, 9, partitions=1)
    consumed = consume(broker, topic, 1)
    url = bucket_url  # nothing rolled yet: no segment of it in the bucket
    df = spark.read.format("diskless").option("subscribe", topic).option("includeHeaders", "true").option("kafka.bootstrap.servers", broker.bootstrap).load(url)
    rows = spark_rows(df)
    assert rows == consumed and len(rows) == 50 and {r[4] for r in rows} == {1}
    assert spark.read.format("diskless").option("subscribe", topic).load(url).count() == 0
