"""Spark reads every acknowledged record from the bucket alone (issue K): a real `diskless
serve` writes each acknowledged batch into write-ahead objects, and the `diskless` source,
given no broker at all, reads the committed segments plus the write-ahead tail above them,
exactly once. Run against moto's S3 server over HTTP and a local-directory bucket, with
topics whose segments have not rolled, and topics with rolled segments under the tail.
Expected rows are what a real Kafka consumer (confluent-kafka) reads from the broker.
"""

from __future__ import annotations

import shutil
import time
import uuid

import confluent_kafka
import pytest

from cold_tier import layout
from cold_tier.wal_format import WAL_PREFIX
from spark_reader.wal_read import list_wal_candidates

from .broker_process import BrokerProcess
from .test_spark_broker import consume, create_topic, produce, spark_rows
from .test_spark_read import credentials, s3  # noqa: F401 (fixtures)

pytest.importorskip("confluent_kafka")
pytest.importorskip("pyspark")

PARTITIONS = 2
# A lost disk is a new incarnation: it waits for the old session to expire, kept short here.
SHORT_SESSION = ("--broker-session-timeout-ms", "1500", "--broker-heartbeat-interval-ms", "200")


class WalBroker:
    def __init__(self, process: BrokerProcess, url: str, env: dict[str, str]) -> None:
        self.process, self.url, self.env = process, url, env

    def bucket(self):
        from spark_reader.bucket import open_bucket, resolve_location

        return open_bucket(resolve_location(self.url, self.env, {}))


@pytest.fixture(scope="module")
def s3_broker(s3, tmp_path_factory):
    url = s3.url(s3.create_bucket(), prefix="cluster-w")
    env = {k: v for k, v in s3.env().items() if k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    process = BrokerProcess(tmp_path_factory.mktemp("wal-s3") / "data", "--object-store", url, env=env).start()
    try:
        yield WalBroker(process, url, env)
    finally:
        process.close()


@pytest.fixture(scope="module")
def file_broker(tmp_path_factory):
    url = f"file://{tmp_path_factory.mktemp('wal-file-bucket')}/bucket"
    process = BrokerProcess(tmp_path_factory.mktemp("wal-file") / "data", "--object-store", url).start()
    try:
        yield WalBroker(process, url, {})
    finally:
        process.close()


@pytest.fixture(params=["s3", "file"])
def broker(request) -> WalBroker:
    return request.getfixturevalue(f"{request.param}_broker")


def load(spark, broker: WalBroker, topic: str, **options: str):
    reader = spark.read.format("diskless").option("includeHeaders", "true")
    if "assign" not in options:
        reader = reader.option("subscribe", topic)
    for name, value in {**credentials(broker.url), **options}.items():
        reader = reader.option(name, value)
    return reader.load(broker.url)


def catalogue(broker: WalBroker, topic: str) -> dict[int, list]:
    bucket = broker.bucket()
    return {p: layout.parse_catalogue(bucket.list_keys(layout.commits_prefix(topic, p))) for p in range(PARTITIONS)}


def test_an_unrolled_topic_is_read_whole_from_write_ahead_objects(spark, broker) -> None:
    topic = f"wal-{uuid.uuid4().hex[:8]}"
    create_topic(broker.process, topic, PARTITIONS, **{"retention.ms": "-1"})
    for seed, codec in enumerate(("none", "lz4", "zstd", "gzip", "snappy")):
        produce(broker.process, topic, codec, 120, seed)
    consumed = consume(broker.process, topic, PARTITIONS)
    assert len(consumed) == 600
    assert catalogue(broker, topic) == {0: [], 1: []}  # nothing rolled: no segment in the bucket
    assert broker.bucket().list_keys(WAL_PREFIX)
    df = load(spark, broker, topic)
    assert spark_rows(df) == consumed
    assert df.count() == 600
    # Offsets resolve against the tail: latest is its end, JSON offsets inside it are exact.
    bounded = load(spark, broker, topic, startingOffsets=f'{{"{topic}":{{"0":7,"1":-2}}}}',
                   endingOffsets=f'{{"{topic}":{{"0":250,"1":-1}}}}')  # fmt: skip
    assert spark_rows(bounded) == [r for r in consumed if (7 <= r[2] < 250 if r[1] == 0 else True)]
    since = consumed[len(consumed) // 2][3] // 1000
    by_time = load(spark, broker, topic, startingTimestamp=str(since))
    first = {p: min(r[2] for r in consumed if r[1] == p and r[3] >= since * 1000) for p in range(PARTITIONS)}
    assert spark_rows(by_time) == [r for r in consumed if r[2] >= first[r[1]]]


def test_segments_and_the_tail_above_them_meet_exactly_once(spark, broker) -> None:
    topic = f"walseg-{uuid.uuid4().hex[:8]}"
    create_topic(broker.process, topic, PARTITIONS, **{"segment.bytes": "16384", "index.interval.bytes": "1024", "retention.ms": "-1"})
    for seed, codec in enumerate(("lz4", "none", "zstd")):
        produce(broker.process, topic, codec, 240, seed + 10)
    consumed = consume(broker.process, topic, PARTITIONS)
    deadline = time.monotonic() + 60
    while not all(catalogue(broker, topic).values()):
        assert time.monotonic() < deadline, "no segment of the topic was committed to the bucket within 60 s"
        time.sleep(0.1)  # polling the bucket with a deadline: nothing to wait on instead
    ends = {p: segments[-1].next_offset for p, segments in catalogue(broker, topic).items()}
    for p, end in ends.items():
        assert 0 < end < sum(1 for r in consumed if r[1] == p)  # records on both sides of the edge
    assert spark_rows(load(spark, broker, topic)) == consumed
    edge = ends[0]
    across = load(spark, broker, topic, assign=f'{{"{topic}":[0]}}',
                  startingOffsets=f'{{"{topic}":{{"0":{edge - 5}}}}}', endingOffsets=f'{{"{topic}":{{"0":{edge + 5}}}}}')  # fmt: skip
    assert spark_rows(across) == [r for r in consumed if r[1] == 0 and edge - 5 <= r[2] < edge + 5]
    pieces = load(spark, broker, topic, minPartitions="7")
    assert spark_rows(pieces) == consumed


def test_a_stream_follows_new_write_ahead_objects_without_a_broker(spark, file_broker, tmp_path) -> None:
    broker = file_broker
    topic = f"walstream-{uuid.uuid4().hex[:8]}"
    create_topic(broker.process, topic, PARTITIONS, **{"retention.ms": "-1"})
    produce(broker.process, topic, "lz4", 50, 1)
    stream = (
        spark.readStream.format("diskless").option("subscribe", topic).option("startingOffsets", "earliest").load(broker.url)
        .selectExpr("partition", "offset", "value")
    )  # fmt: skip
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def written() -> list[tuple]:
        return sorted((r.partition, r.offset, r.value) for r in spark.read.parquet(out).collect())

    query = stream.writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint).trigger(processingTime="200 milliseconds").start()
    try:
        _wait_for(lambda: query.lastProgress is not None and len(written()) == 50, query)
        produce(broker.process, topic, "zstd", 70, 2)
        _wait_for(lambda: len(written()) == 120, query)
    finally:
        query.stop()
    assert written() == [(r[1], r[2], r[6]) for r in consume(broker.process, topic, PARTITIONS)]
    # Restarted from its checkpoint, the query reads only what came since: each record once.
    produce(broker.process, topic, "none", 30, 3)
    again = stream.writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    try:
        assert again.awaitTermination(120)
        assert again.exception() is None
    finally:
        again.stop()
    rows = written()
    assert len(rows) == 150
    assert rows == [(r[1], r[2], r[6]) for r in consume(broker.process, topic, PARTITIONS)]


def _wait_for(condition, query, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise AssertionError(f"streaming query failed: {query.exception()}")
        if condition():
            return
        query.awaitTermination(0.2)  # returns early only if the query stops
    raise AssertionError(f"condition not met within {timeout_s}s; last progress: {query.lastProgress}")


def test_a_corrupt_write_ahead_object_fails_naming_it_or_is_skipped(spark, file_broker, tmp_path) -> None:
    """A copy of the broker's write-ahead objects, one byte of one batch flipped: the query
    fails naming that object and offset; with failOnDataLoss=false the rows of that object's
    slice are missing, the others are all there, and every row read is right."""
    import shutil

    from cold_tier.wal_format import decode_wal_object

    broker = file_broker
    topic = f"walbad-{uuid.uuid4().hex[:8]}"
    create_topic(broker.process, topic, 1, **{"retention.ms": "-1"})
    for seed in range(3):
        produce(broker.process, topic, "none", 40, seed + 20, partitions=1)
    consumed = consume(broker.process, topic, 1)
    source = broker.url.removeprefix("file://")
    copy = tmp_path / "bucket"
    shutil.copytree(f"{source}/{WAL_PREFIX}", copy / WAL_PREFIX)
    objects = sorted((copy / WAL_PREFIX).rglob("*.wal"))
    mine = [(path, e) for path in objects for e in decode_wal_object(path.read_bytes()) if e.topic == topic]
    assert len(mine) >= 2
    path, entry = mine[len(mine) // 2]
    data = bytearray(path.read_bytes())
    data[entry.position + entry.size_bytes - 1] ^= 0xFF  # the last byte of a record: the CRC fails
    path.write_bytes(bytes(data))
    key = path.relative_to(copy).as_posix()
    url = f"file://{copy}"

    def frame(**options: str):
        reader = spark.read.format("diskless").option("subscribe", topic).option("includeHeaders", "true")
        for name, value in options.items():
            reader = reader.option(name, value)
        return reader.load(url)

    with pytest.raises(Exception, match=rf"corrupt write-ahead object '{key}'.*{topic}-0 from offset {entry.base_offset}"):
        frame().collect()
    rows = spark_rows(frame(failOnDataLoss="false"))
    assert rows == [r for r in consumed if r in set(rows)]  # nothing wrong
    assert all(r[2] < entry.base_offset or r[2] > entry.last_offset for r in rows)
    # What is skipped is at most the batches of that object (one slice); the rest is all there.
    in_object = [e for p, e in mine if p == path]
    low, high = min(e.base_offset for e in in_object), max(e.last_offset for e in in_object)
    assert [r for r in consumed if not low <= r[2] <= high] == [r for r in rows if not low <= r[2] <= high]


def consume_isolated(process: BrokerProcess, topic: str, partitions: int, isolation: str) -> list[tuple]:
    """What a confluent-kafka consumer of `isolation` reads from the start to the end it may
    read to (read_committed: the last stable offset), in the rows' tuple form."""
    import confluent_kafka

    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": process.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "isolation.level": isolation,
    })  # fmt: skip
    try:
        tps = [confluent_kafka.TopicPartition(topic, p) for p in range(partitions)]
        ends = {tp.partition: consumer.get_watermark_offsets(tp, timeout=10, cached=False)[1] for tp in tps}
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in range(partitions)])
        rows: list[tuple] = []
        deadline = time.monotonic() + 60
        while any(tp.offset < ends[tp.partition] for tp in consumer.position(tps)):
            assert time.monotonic() < deadline, f"{isolation}: at {consumer.position(tps)}, ends {ends}"
            message = consumer.poll(0.2)
            if message is None:
                continue
            assert message.error() is None, message.error()
            headers = tuple(message.headers()) if message.headers() else None
            rows.append((message.topic(), message.partition(), message.offset(), message.timestamp()[1] * 1000, 0,
                         message.key(), message.value(), headers))  # fmt: skip
        return sorted(rows, key=lambda r: (r[1], r[2]))
    finally:
        consumer.close()


def test_read_committed_skips_aborted_transactions_from_the_bucket_alone(spark, s3_broker) -> None:
    """Committed and aborted transactions interleaved with plain records over two partitions,
    segments rolled into the bucket under a write-ahead tail, and one transaction left open:
    Spark's read_committed reads exactly what a read_committed consumer reads (aborted records
    and markers skipped, nothing from the open transaction's first offset on); read_uncommitted
    reads what a read_uncommitted consumer reads. Once the open transaction, whose first
    batches are by then in committed segments, commits, both read it."""
    from confluent_kafka import Producer

    broker = s3_broker  # moto's S3 server: the directory bucket reads the same objects through the same reader
    topic = f"waltxn-{uuid.uuid4().hex[:8]}"
    create_topic(broker.process, topic, PARTITIONS, **{"segment.bytes": "4096", "retention.ms": "-1"})
    bootstrap = broker.process.bootstrap
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:8]}", "linger.ms": 5})
    txn.init_transactions(30)
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})

    def send(producer, label: str, count: int) -> None:
        for i in range(count):
            producer.produce(topic, key=f"{label}-{i % 7}".encode(), value=f"{label}-{i}-".encode() + b"x" * 80, partition=i % PARTITIONS,
                             headers=[("label", label.encode())] if i % 3 == 0 else None)  # fmt: skip
        assert producer.flush(30) == 0

    for label, outcome in (("t1", "commit"), ("t2", "abort"), ("t3", "commit"), ("t4", "abort")):
        txn.begin_transaction()
        send(txn, label, 40)
        send(plain, f"p{label}", 10)  # plain records inside the transaction's span
        txn.commit_transaction(30) if outcome == "commit" else txn.abort_transaction(30)
    txn.begin_transaction()
    send(txn, "open", 10)  # left open: the last stable offset stays at its first offset
    send(plain, "after", 120)  # enough to roll the open transaction's start into the bucket
    bucket = broker.bucket()
    lso = {p: min(r[2] for r in consume_isolated(broker.process, topic, PARTITIONS, "read_uncommitted") if r[1] == p and r[6].startswith(b"open-"))
           for p in range(PARTITIONS)}  # fmt: skip
    deadline = time.monotonic() + 60
    while not all((c[-1].next_offset if c else 0) > lso[p] for p, c in catalogue(broker, topic).items()):
        assert time.monotonic() < deadline, "the open transaction's first batches never reached a committed segment"
        time.sleep(0.1)  # polling the bucket with a deadline: nothing to wait on instead
    indexes = [k for p in range(PARTITIONS) for k in bucket.list_keys(layout.partition_prefix(topic, p)) if k.endswith(layout.TXN_INDEX_SUFFIX)]
    assert any(bucket.get(k) for k in indexes)  # some aborts are read from segments' transaction indexes
    snapshots = [k for p in range(PARTITIONS) for k in bucket.list_keys(layout.partition_prefix(topic, p)) if k.endswith(layout.PRODUCER_SNAPSHOT_SUFFIX)]
    assert len(snapshots) == len(indexes)  # a producer state at each segment's end: the open transaction starts in one

    committed = consume_isolated(broker.process, topic, PARTITIONS, "read_committed")
    assert {r[2] for r in committed if r[1] == 0} and max(r[2] for r in committed if r[1] == 0) < lso[0]
    assert not [r for r in committed if r[6].split(b"-")[0] in (b"t2", b"t4", b"open", b"after")]
    read_committed = load(spark, broker, topic, **{"kafka.isolation.level": "read_committed"})
    assert spark_rows(read_committed) == committed
    assert spark_rows(load(spark, broker, topic)) == consume_isolated(broker.process, topic, PARTITIONS, "read_uncommitted")
    split = load(spark, broker, topic, minPartitions="9", **{"kafka.isolation.level": "read_committed"})
    assert spark_rows(split) == committed  # ranges split inside aborted transactions skip them too

    txn.commit_transaction(30)
    committed = consume_isolated(broker.process, topic, PARTITIONS, "read_committed")
    assert len([r for r in committed if r[6].startswith((b"open-", b"after-"))]) == 130
    assert spark_rows(load(spark, broker, topic, **{"kafka.isolation.level": "read_committed"})) == committed


def test_a_compacted_topic_is_read_as_the_latest_value_per_key_while_its_bucket_is_compacted(spark, s3, tmp_path) -> None:
    """A compacted topic's bucket holds the segments as far as the leader cleaned them and
    write-ahead objects above them; latest_per_key makes the table of it: each live key once,
    with its last acknowledged value at the offset it was acknowledged at. Spark queries and a
    consumer run while a producer writes on and the broker replaces bucket segments by their
    cleaned copies (compaction/bucket.py): each finishes on a consistent log."""
    import threading

    from confluent_kafka import Producer

    from spark_reader.compacted import latest_per_key

    url = s3.url(s3.create_bucket(), prefix="compacting")
    env = {k: v for k, v in s3.env().items() if k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    process = BrokerProcess(tmp_path / "data", "--object-store", url, "--log-cleaner-backoff-ms", "100", env=env).start()
    broker = WalBroker(process, url, env)
    try:
        topic = f"compacted-{uuid.uuid4().hex[:8]}"
        create_topic(process, topic, PARTITIONS, **{"cleanup.policy": "compact", "segment.bytes": "8192", "min.cleanable.dirty.ratio": "0.01"})
        producer = Producer({"bootstrap.servers": process.bootstrap, "enable.idempotence": True, "linger.ms": 5})
        acked: dict[tuple[int, int], tuple[bytes, bytes | None]] = {}  # (partition, offset) -> (key, value)
        lock = threading.Lock()

        def delivered(err, msg) -> None:
            assert err is None, err
            with lock:
                acked[(msg.partition(), msg.offset())] = (msg.key(), msg.value())

        def write(rounds: range) -> None:
            for round_ in rounds:
                for k in range(60):
                    value = None if round_ % 3 == 2 and k % 4 == 0 else b"v%d-%02d-" % (round_, k) + b"x" * 50  # some tombstones
                    producer.produce(topic, key=b"key-%02d" % k, value=value, partition=k % PARTITIONS, on_delivery=delivered)
                assert producer.flush(30) == 0

        write(range(5))
        deadline = time.monotonic() + 60
        while not all(catalogue(broker, topic).values()):
            assert time.monotonic() < deadline, "no segment of the compacted topic reached the bucket"
            time.sleep(0.1)  # polling the bucket with a deadline: nothing to wait on instead
        rewrites_before = process.log_text().count("compacted: ")
        writer = threading.Thread(target=write, args=(range(5, 24),))
        writer.start()
        reads = []
        try:
            for _ in range(3):
                reads.append(spark_rows(load(spark, broker, topic)))
                reads.append(consume(process, topic, PARTITIONS))
        finally:
            writer.join()
        assert process.log_text().count("compacted: ") > rewrites_before  # the bucket was rewritten meanwhile
        for rows in reads:
            # Nothing but acknowledged records at their offsets, in order; each key's last value
            # up to where the read ended, with nothing after it.
            assert [r[1:3] for r in rows if acked.get((r[1], r[2])) != (r[5], r[6])] == []
            ends = {p: max(r[2] for r in rows if r[1] == p) for p in range(PARTITIONS)}
            assert last_values([(r[1], r[2], r[5], r[6]) for r in rows]) == last_values(
                [(p, o, k, v) for (p, o), (k, v) in acked.items() if o <= ends[p]]
            )
        every = load(spark, broker, topic)
        table = latest_per_key(every).select("partition", "offset", "key", "value").collect()
        assert sorted((r.partition, r.offset, bytes(r.key), bytes(r.value)) for r in table) == sorted(
            (p, o, k, v) for (p, k), (o, v) in last_values([(p, o, k, v) for (p, o), (k, v) in acked.items()]).items() if v is not None
        )
        assert len(table) == 45  # keys 0, 4, 8, ... end in the tombstones of round 23
        assert latest_per_key(every, keep_tombstones=True).where("value IS NULL").count() == 15
    finally:
        process.close()


def last_values(records) -> dict[tuple[int, bytes], tuple[int, bytes | None]]:
    """(partition, key) -> (offset, value) of its last record among (partition, offset, key, value)."""
    return {(p, k): (o, v) for p, o, k, v in sorted(records, key=lambda r: (r[0], r[1]))}


def _fenced_object(root, node_id: int, topic: str, epoch: int, base: int) -> str:
    """What a leader that died between its PUT and its commit leaves in the bucket: two
    batches at offsets base..base+9, never acknowledged. Returns the object's key."""
    from cold_tier.layout import new_upload_id
    from cold_tier.wal_format import encode_wal_object, wal_object_key
    from hot_tier.records import Record, encode_batch

    batches = []
    for first in (base, base + 5):
        data = bytearray(encode_batch([Record(i, 1_700_000_000_000, b"fenced", b"never acknowledged") for i in range(5)]))
        data[0:8] = first.to_bytes(8, "big")
        batches.append((topic, 0, first, first + 4, epoch, bytes(data)))
    key = wal_object_key(node_id, int(time.time() * 1000), new_upload_id())
    (root / key).parent.mkdir(parents=True, exist_ok=True)
    (root / key).write_bytes(encode_wal_object(batches)[0])
    return key


def test_write_ahead_batches_never_acknowledged_are_not_read_once_the_partition_has_a_leader_again(spark, tmp_path) -> None:
    """A leader killed between its PUT and its commit leaves batches above the durable end
    that were never acknowledged. A reader with only the bucket cannot tell them from the
    others, and would read them, and see their offsets change once written again. Restarted
    on its disk, the broker deletes its earlier process's uncommitted objects at once; a
    broker that lost its disk takes the partition at a higher epoch and marks where it began
    (T/P/epochs/), which leaves the lower epoch's batches above it out, though it wrote
    nothing yet. Spark then reads exactly what a consumer reads, before and after new writes."""

    root = tmp_path / "bucket"
    url = f"file://{root}"
    metadata = f"sqlite:///{(tmp_path / 'metadata.db').resolve()}"  # outside the disk it loses
    process = BrokerProcess(tmp_path / "data", "--object-store", url, "--metadata", metadata, *SHORT_SESSION).start()
    try:
        broker = WalBroker(process, url, {})
        topic = f"fenced-{uuid.uuid4().hex[:8]}"
        create_topic(process, topic, 1, **{"retention.ms": "-1"})
        produce(process, topic, "lz4", 40, 3, partitions=1)
        consumed = consume(process, topic, 1)
        assert [r[2] for r in consumed] == list(range(40))
        (epoch,) = {c.entry.leader_epoch for c in list_wal_candidates(broker.bucket(), lambda t, p: t == topic, True)[(topic, 0)]}

        # Killed, restarted on its disk: same epoch, the orphan goes at the first collection.
        process.kill()
        orphan = _fenced_object(root, 1, topic, epoch, 40)
        assert len(spark_rows(load(spark, broker, topic))) == 50  # nothing in the bucket tells them apart
        process.start()
        deadline = time.monotonic() + 60
        while (root / orphan).exists():
            assert time.monotonic() < deadline, "the earlier process's uncommitted object is still there after 60 s"
            time.sleep(0.1)  # polling the bucket with a deadline: nothing to wait on instead
        assert spark_rows(load(spark, broker, topic)) == consume(process, topic, 1) == consumed

        # Killed, its disk lost: a new incarnation takes the partition at a higher epoch.
        process.kill()
        _fenced_object(root, 1, topic, epoch, 40)
        shutil.rmtree(tmp_path / "data")
        process.start()
        deadline = time.monotonic() + 60
        while not (marks := broker.bucket().list_keys(layout.epochs_prefix(topic, 0))):
            assert time.monotonic() < deadline, "no leader epoch mark within 60 s"
            time.sleep(0.1)  # polling the bucket with a deadline: nothing to wait on instead
        ((marked_epoch, start, _),) = [layout.parse_epoch_key(k) for k in marks]
        assert (start, marked_epoch > epoch) == (40, True)
        assert spark_rows(load(spark, broker, topic)) == consume(process, topic, 1) == consumed
        produce(process, topic, "zstd", 7, 4, partitions=1)
        after = consume(process, topic, 1)
        assert [r[2] for r in after] == list(range(47)) and after[:40] == consumed
        assert spark_rows(load(spark, broker, topic)) == after
    finally:
        process.close()


def test_a_topic_made_again_under_its_name_is_read_without_the_deleted_ones_batches(spark, file_broker) -> None:
    """Write-ahead objects are shared by every partition a broker leads: a deleted topic's
    batches stay in those still holding another topic's unsegmented batches. Made again under
    its name, the topic is read from the bucket with its own batches only (each entry carries
    its topic's id, the bucket names the topic that has the name now)."""
    from confluent_kafka.admin import AdminClient

    process = file_broker.process
    topic, keeper = f"again-{uuid.uuid4().hex[:8]}", f"keeper-{uuid.uuid4().hex[:8]}"
    create_topic(process, topic, 1, **{"retention.ms": "-1"})
    create_topic(process, keeper, 1, **{"retention.ms": "-1"})
    producer = confluent_kafka.Producer({"bootstrap.servers": process.bootstrap, "linger.ms": 0})
    for i in range(40):  # a batch of one record each, both topics in one request: in the same objects
        producer.produce(topic, key=b"old", value=b"deleted-%d" % i, timestamp=1_700_000_000_000 + i)
        producer.produce(keeper, key=b"keep", value=b"kept-%d" % i, timestamp=1_700_000_000_000 + i)
        assert producer.flush(30) == 0
    old_keys = {c.key for c in list_wal_candidates(file_broker.bucket(), lambda t, p: t == topic, True)[(topic, 0)]}
    admin = AdminClient({"bootstrap.servers": process.bootstrap})
    admin.delete_topics([topic])[topic].result(timeout=30)
    deadline = time.monotonic() + 30
    while True:  # made again as soon as the broker has let go of the name
        try:
            create_topic(process, topic, 1, **{"retention.ms": "-1"})
            break
        except confluent_kafka.KafkaException as exc:
            assert time.monotonic() < deadline, exc
            time.sleep(0.1)  # retried with a deadline: the deletion finishes in the background
    produce(process, topic, "none", 10, 5, partitions=1)
    consumed = consume(process, topic, 1)
    assert [r[2] for r in consumed] == list(range(10))
    still = {c.key for c in list_wal_candidates(file_broker.bucket(), lambda t, p: t == topic, True).get((topic, 0), [])}
    assert old_keys & still  # the deleted topic's batches are still in objects the keeper holds
    assert spark_rows(load(spark, file_broker, topic)) == consumed
    assert len(consume(process, keeper, 1)) == 40
