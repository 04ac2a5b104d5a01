"""Compaction in the bucket (moto's S3 server): a tiered compacted topic's segments, uploaded as
written, are replaced by their cleaned copies, merged up to segment.bytes. Read from the
bucket alone (one LIST of commit objects, then the .log objects), the partition holds each
live key once, at the offset its last value was acknowledged at; tombstones go
delete.retention.ms after the cleaning that first kept them (KIP-534); the replaced objects are gone after file.delete.delay.ms. SIGKILL at
random moments while the bucket is rewritten loses nothing acknowledged and live, shows no key
older than before, and leaves no orphaned object. A broker that did not write the history (its
disk was lost) compacts it from the bucket; transactions are cleaned as Kafka cleans them, abort
markers too, on the leader's log and in the bucket's history."""

from __future__ import annotations

import asyncio
import random
import shutil
import time
from collections.abc import Collection

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from cold_tier.errors import ObjectNotFound
from hot_tier.records import decode_batches
from hot_tier.records.transactions import decode_txn_index

from .test_compaction_cleaner import CLEANER_FLAGS, read_all_librdkafka, read_all_ours, wait_until
from .test_compaction_durable import last_per_key, produce
from .test_tiering_reads import BucketView, moto, open_bucket, start_broker  # noqa: F401 (fixture)

KEYS = 200
ROUNDS = 5
TOMBSTONED = range(0, KEYS, 11)
TOMBSTONED_LATER = range(5, KEYS, 11)
KILLS = 3
# A deleted disk is a new directory: it waits for the old session to expire, kept short here.
SHORT_SESSION = ("--broker-session-timeout-ms", "1500", "--broker-heartbeat-interval-ms", "200")
TOPIC_CONFIGS = {
    "cleanup.policy": "compact", "segment.bytes": "16384", "segment.ms": "300", "min.cleanable.dirty.ratio": "0.01",
    "file.delete.delay.ms": "1500", "remote.storage.enable": "true",
}  # fmt: skip


def bucket_records(bucket: BucketView, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every data record partition 0's committed segments hold, read
    from the bucket alone, in offset order."""
    records = []
    for segment in bucket.catalogue(topic, 0):
        data = bucket.get(segment.log_key)
        assert len(data) == segment.size_bytes
        for batch in decode_batches(data):
            if not batch.header.is_control:
                records.extend((r.offset, r.key, r.value) for r in batch.records)
    return records


def bucket_is_compacted(
    bucket: BucketView, topic: str, acked: dict[int, tuple[bytes, bytes | None]], *, past: int, tombstones: bool, dropped: Collection[bytes] = ()
) -> bool:
    """The bucket holds offsets up to `past` at least, and exactly the last record of each key
    below its end (the cleaner cleans what is in the bucket, against what is in the bucket);
    with `tombstones`, the tombstones among them too, but for the keys `dropped`."""
    catalogue = bucket.catalogue(topic, 0)
    end = catalogue[-1].next_offset if catalogue else 0
    expected = expected_records({o: kv for o, kv in acked.items() if o < end}, tombstones=tombstones, dropped=dropped)
    return end > past and bucket_records(bucket, topic) == expected


def expected_records(
    acked: dict[int, tuple[bytes, bytes | None]], *, tombstones: bool, dropped: Collection[bytes] = ()
) -> list[tuple[int, bytes, bytes | None]]:
    return sorted(
        (offset, key, value) for key, (offset, value) in last_per_key(acked).items()
        if value is not None or (tombstones and key not in dropped)
    )  # fmt: skip


def create(bootstrap: str, topic: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={**TOPIC_CONFIGS, **configs})])[topic].result(timeout=20)


def roll_everything_into_the_bucket(bootstrap: str, topic: str, acked: dict) -> int:
    """Write one filler record once segment.ms has passed: the segment before it rolls and is
    uploaded; the filler stays in the active segment. Returns its offset."""
    time.sleep(0.4)  # segment.ms=300 must pass before the filler's append rolls the segment
    filler = produce(bootstrap, topic, [(b"filler-%d" % len(acked), b"f")])  # a key of its own: it supersedes nothing
    acked |= filler
    return max(filler)


def test_the_bucket_holds_each_live_key_once_after_cleaning(moto, tmp_path) -> None:
    bucket = open_bucket("s3", moto, tmp_path / "bucket")
    broker = start_broker(tmp_path / "data", bucket, *CLEANER_FLAGS)
    try:
        topic = "bucket-compacted"
        create(broker.bootstrap, topic)
        acked: dict[int, tuple[bytes, bytes | None]] = {}
        for r in range(ROUNDS):  # a batch per round, a segment per batch
            acked |= produce(broker.bootstrap, topic, [(b"key-%03d" % k, b"value-%03d-%d-" % (k, r) + b"x" * 60) for k in range(KEYS)])
        acked |= produce(broker.bootstrap, topic, [(b"key-%03d" % k, None) for k in TOMBSTONED])
        assert sorted(acked) == list(range(ROUNDS * KEYS + len(TOMBSTONED)))
        filler = roll_everything_into_the_bucket(broker.bootstrap, topic, acked)

        # Compacted in the bucket, tombstones kept (delete.retention.ms is a day).
        wait_until(lambda: bucket_is_compacted(bucket, topic, acked, past=filler - 1, tombstones=True), "the bucket compacted, tombstones kept")
        catalogue = bucket.catalogue(topic, 0)
        assert catalogue[0].base_offset == 0
        assert all(a.next_offset == b.base_offset for a, b in zip(catalogue, catalogue[1:]))  # contiguous
        # Each local segment was uploaded as it rolled; their cleaned copies were merged.
        rolled = sorted((tmp_path / "data").rglob(f"{topic}-0/*.log"))[:-1]
        assert len(rolled) > ROUNDS and len(catalogue) < len(rolled) and all(s.size_bytes <= 16384 for s in catalogue)

        # With delete.retention.ms short, tombstones written from then on go at the cleaning
        # after the one that kept them; those kept before stay until the horizon stamped on them
        # then, a day on (as in Kafka). The replaced objects go after file.delete.delay.ms: the
        # bucket then holds the catalogue's objects and nothing else.
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        altered = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
            ConfigEntry("delete.retention.ms", "100", incremental_operation=AlterConfigOpType.SET)])  # fmt: skip
        admin.incremental_alter_configs([altered])[altered].result(timeout=20)
        later = [b"key-%03d" % k for k in TOMBSTONED_LATER]
        acked |= produce(broker.bootstrap, topic, [(key, None) for key in later] + [(b"key-%03d" % (KEYS - 1), b"last")])
        filler = roll_everything_into_the_bucket(broker.bootstrap, topic, acked)
        wait_until(
            lambda: bucket_is_compacted(bucket, topic, acked, past=filler - 1, tombstones=True, dropped=later),
            "the later tombstones dropped in the bucket, the earlier ones kept",
        )  # fmt: skip
        wait_until(lambda: bucket.orphans(topic, 0) == [] and stray_commits(bucket, topic) == [], "replaced objects deleted")

        # Consumers read the same from the broker, librdkafka and ours.
        everything = expected_records(acked, tombstones=True, dropped=later)
        assert read_all_librdkafka(broker.bootstrap, topic, filler) == everything
        assert asyncio.run(read_all_ours(broker.bootstrap, topic, filler)) == everything

    finally:
        broker.close()
        bucket.close()


def stray_commits(bucket: BucketView, topic: str) -> list[str]:
    """Commit objects in the bucket that the catalogue does not resolve to."""
    named = {s.commit_key for s in bucket.catalogue(topic, 0)}
    return [key for key in bucket.keys(topic, 0) if key.endswith(".commit") and key not in named]


@pytest.mark.slow
def test_sigkill_while_the_bucket_is_compacted_loses_nothing_live(moto, tmp_path) -> None:
    bucket = open_bucket("s3", moto, tmp_path / "bucket")
    broker = start_broker(tmp_path / "data", bucket, *CLEANER_FLAGS)
    rng = random.Random(11)
    try:
        topic = "bucket-compacted-kills"
        create(broker.bootstrap, topic)
        acked: dict[int, tuple[bytes, bytes | None]] = {}
        seen_before: dict[bytes, int] = {}  # key -> the offset of its value a reader saw last
        for round_ in range(KILLS):
            writes = [(b"key-%03d" % k, b"value-%03d-%d-" % (k, round_) + b"y" * 80) for k in range(KEYS)]
            acked |= produce(broker.bootstrap, topic, writes)
            roll_everything_into_the_bucket(broker.bootstrap, topic, acked)
            time.sleep(rng.uniform(0.1, 1.2))  # a random moment of cleaning, uploading, rewriting
            broker.kill()
            broker.start()
            last = max(acked)
            records = read_all_librdkafka(broker.bootstrap, topic, last)
            # Nothing but acknowledged records at their offsets; every live key's last value.
            assert [(o, k, v) for o, k, v in records if acked.get(o) != (k, v)] == []
            assert last_per_key({o: (k, v) for o, k, v in records}) == last_per_key(acked)
            newest = {k: o for o, k, _ in records}
            assert [k for k, o in newest.items() if o < seen_before.get(k, -1)] == []  # no key older than before
            seen_before = newest
            catalogue = bucket.catalogue(topic, 0)
            assert all(a.next_offset == b.base_offset for a, b in zip(catalogue, catalogue[1:]))
        # Left alone after one more round, the bucket ends compacted, with no orphaned object.
        acked |= produce(broker.bootstrap, topic, [(b"key-%03d" % k, b"final-%03d" % k) for k in range(KEYS)])
        filler = roll_everything_into_the_bucket(broker.bootstrap, topic, acked)
        wait_until(lambda: bucket_is_compacted(bucket, topic, acked, past=filler - 1, tombstones=True), "the bucket compacted after the kills")
        wait_until(lambda: bucket.orphans(topic, 0) == [] and stray_commits(bucket, topic) == [], "no orphaned object")
    finally:
        broker.close()
        bucket.close()


def test_history_the_leader_did_not_write_is_compacted_from_the_bucket(moto, tmp_path) -> None:
    """A broker that lost its disk (as one taking a partition over) has no local copy of the
    bucket's segments: it cleans them from the bucket (compaction/history.py)."""
    bucket = open_bucket("s3", moto, tmp_path / "bucket")
    metadata = f"sqlite:///{(tmp_path / 'metadata.db').resolve()}"
    writer = start_broker(tmp_path / "data", bucket, "--metadata", metadata, "--log-cleaner-enable", "false", *SHORT_SESSION, *CLEANER_FLAGS)
    try:
        topic = "bucket-history"
        create(writer.bootstrap, topic)
        acked: dict[int, tuple[bytes, bytes | None]] = {}
        for r in range(ROUNDS):
            acked |= produce(writer.bootstrap, topic, [(b"key-%03d" % k, b"value-%03d-%d-" % (k, r) + b"x" * 60) for k in range(KEYS)])
        acked |= produce(writer.bootstrap, topic, [(b"key-%03d" % k, None) for k in TOMBSTONED])
        filler = roll_everything_into_the_bucket(writer.bootstrap, topic, acked)
        as_written = sorted((o, k, v) for o, (k, v) in acked.items() if o < filler)
        wait_until(lambda: bucket.catalogue(topic, 0) and bucket.catalogue(topic, 0)[-1].next_offset >= filler, "everything in the bucket")
        assert [r for r in bucket_records(bucket, topic) if r[0] < filler] == as_written  # not cleaned: the cleaner is off
    finally:
        writer.kill()
    shutil.rmtree(tmp_path / "data")
    successor = start_broker(tmp_path / "data", bucket, "--metadata", metadata, *SHORT_SESSION, *CLEANER_FLAGS)
    try:
        wait_until(lambda: bucket_is_compacted(bucket, topic, acked, past=filler - 1, tombstones=True), "the history compacted")
        wait_until(lambda: bucket.orphans(topic, 0) == [] and stray_commits(bucket, topic) == [], "replaced objects deleted")
        # The five rounds' segments merged into one: after cleaning, only the last round's
        # 16 KB remain, within segment.bytes; the tombstones' segment no longer fits with it.
        first = bucket.catalogue(topic, 0)[0]
        assert (first.base_offset, first.last_offset) == (0, ROUNDS * KEYS - 1)
        assert read_all_librdkafka(successor.bootstrap, topic, filler) == expected_records(acked, tombstones=True)
        assert "compacted: " in successor.log_text()
    finally:
        successor.close()
        bucket.close()


def produce_transactions(bootstrap: str, topic: str) -> None:
    """c1 at 0-9, its commit marker 10; a2 at 11-20, abort marker 21; c3 at 22-31, commit 32:
    one transactional producer, so a read_committed consumer still told of a2's abort without
    its marker would skip c3 (it skips the producer's batches until it meets the marker)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"cleaned-{topic}", "linger.ms": 5})
    producer.init_transactions(30)
    for value, commit in ((b"c1", True), (b"a2", False), (b"c3", True)):
        producer.begin_transaction()
        for k in range(10):
            producer.produce(topic, key=b"k%d" % k, value=value, partition=0)
        assert producer.flush(30) == 0  # written before the end: an abort does not drop them unsent
        producer.commit_transaction(30) if commit else producer.abort_transaction(30)


def bucket_markers(bucket: BucketView, topic: str) -> tuple[list[int], list]:
    """The offsets of the control batches in the bucket's segments, and their .txnindex entries."""
    catalogue = bucket.catalogue(topic, 0)
    markers = [b.header.last_offset for s in catalogue for b in decode_batches(bucket.get(s.log_key)) if b.header.is_control]
    entries = []
    for segment in catalogue:
        try:
            entries += decode_txn_index(bucket.get(segment.txn_index_key))
        except ObjectNotFound:  # none uploaded
            pass
    return markers, entries


def test_transactions_are_cleaned_as_kafka_cleans_them(moto, tmp_path) -> None:
    """Aborted records go; past delete.retention.ms, a marker goes once its transaction's records
    are gone: the abort marker with its transaction, which leaves the fetches' lists, the store
    and the bucket's .txnindex. On the leader's log and in the bucket; after a restart and on a
    broker that lost its disk, read_committed reads the same."""
    bucket = open_bucket("s3", moto, tmp_path / "bucket")
    metadata = f"sqlite:///{(tmp_path / 'metadata.db').resolve()}"
    broker = start_broker(tmp_path / "data", bucket, "--metadata", metadata, *SHORT_SESSION, *CLEANER_FLAGS)
    try:
        topic = "bucket-transactions"
        create(broker.bootstrap, topic, **{"delete.retention.ms": "100"})
        produce_transactions(broker.bootstrap, topic)
        acked: dict[int, tuple[bytes, bytes | None]] = {}
        filler = roll_everything_into_the_bucket(broker.bootstrap, topic, acked)
        expected = [(22 + k, b"k%d" % k, b"c3") for k in range(10)] + [(filler, b"filler-0", b"f")]

        def cleaned() -> bool:
            catalogue = bucket.catalogue(topic, 0)
            if not catalogue or catalogue[-1].next_offset < filler:
                return False
            markers, entries = bucket_markers(bucket, topic)
            return bucket_records(bucket, topic) == [r for r in expected if r[0] < catalogue[-1].next_offset] and markers == [32] and entries == []

        wait_until(cleaned, "the bucket cleaned: c3 alone and its commit marker, no aborted transaction indexed")
        for isolation in ("read_uncommitted", "read_committed"):
            assert read_isolated(broker.bootstrap, topic, filler, isolation) == expected
        broker.kill()
        broker.start()  # the local log and the store agree: nothing names a2 any more
        assert read_isolated(broker.bootstrap, topic, filler, "read_committed") == expected
        broker.kill()
        shutil.rmtree(tmp_path / "data")
        broker.start()  # from the bucket and the store alone
        assert read_isolated(broker.bootstrap, topic, filler, "read_committed") == expected
    finally:
        broker.close()
        bucket.close()


def local_markers(data_dir, topic: str) -> list[int]:
    """The offsets of the control batches in the local log of `topic`-0."""
    (partition_dir,) = [d for d in data_dir.rglob(f"{topic}-0") if d.is_dir()]
    return [b.header.last_offset for f in sorted(partition_dir.glob("*.log")) for b in decode_batches(f.read_bytes()) if b.header.is_control]


def test_transactions_are_cleaned_on_a_topic_without_the_bucket(moto, tmp_path) -> None:
    """remote.storage.enable=false: the local pass alone removes the abort marker and its
    transaction leaves the fetches' lists at the swap; a restart rebuilds no entry for it."""
    bucket = open_bucket("s3", moto, tmp_path / "bucket")
    broker = start_broker(tmp_path / "data", bucket, *CLEANER_FLAGS)
    try:
        topic = "local-transactions"
        create(broker.bootstrap, topic, **{"delete.retention.ms": "100", "remote.storage.enable": "false"})
        produce_transactions(broker.bootstrap, topic)
        acked: dict[int, tuple[bytes, bytes | None]] = {}
        filler = roll_everything_into_the_bucket(broker.bootstrap, topic, acked)  # rolls the segment; nothing is uploaded
        expected = [(22 + k, b"k%d" % k, b"c3") for k in range(10)] + [(filler, b"filler-0", b"f")]
        wait_until(lambda: local_markers(tmp_path / "data", topic) == [32], "the local log cleaned: the abort marker gone")
        for isolation in ("read_uncommitted", "read_committed"):
            assert read_isolated(broker.bootstrap, topic, filler, isolation) == expected
        broker.kill()
        broker.start()
        assert read_isolated(broker.bootstrap, topic, filler, "read_committed") == expected
        assert bucket.catalogue(topic, 0) == []
    finally:
        broker.close()
        bucket.close()


def test_history_transactions_are_cleaned_from_the_bucket(moto, tmp_path) -> None:
    """The same transactions, uploaded as written by a broker that then lost its disk: its
    successor cleans them from the bucket (history.py), and the abort marker, its .txnindex
    entry and the store's entry go in the rewrite's one swap."""
    bucket = open_bucket("s3", moto, tmp_path / "bucket")
    metadata = f"sqlite:///{(tmp_path / 'metadata.db').resolve()}"
    writer = start_broker(tmp_path / "data", bucket, "--metadata", metadata, "--log-cleaner-enable", "false", *SHORT_SESSION, *CLEANER_FLAGS)
    try:
        topic = "history-transactions"
        create(writer.bootstrap, topic, **{"delete.retention.ms": "100"})
        produce_transactions(writer.bootstrap, topic)
        acked: dict[int, tuple[bytes, bytes | None]] = {}
        filler = roll_everything_into_the_bucket(writer.bootstrap, topic, acked)
        wait_until(lambda: bucket.catalogue(topic, 0) and bucket.catalogue(topic, 0)[-1].next_offset >= filler, "everything in the bucket")
        markers, entries = bucket_markers(bucket, topic)
        assert markers == [10, 21, 32] and [(e.first_offset, e.last_offset) for e in entries] == [(11, 21)]  # as written
    finally:
        writer.kill()
    shutil.rmtree(tmp_path / "data")
    successor = start_broker(tmp_path / "data", bucket, "--metadata", metadata, *SHORT_SESSION, *CLEANER_FLAGS)
    try:
        expected = [(22 + k, b"k%d" % k, b"c3") for k in range(10)] + [(filler, b"filler-0", b"f")]
        wait_until(lambda: bucket_markers(bucket, topic) == ([32], []), "the history cleaned: the abort marker and its entry gone")
        for isolation in ("read_uncommitted", "read_committed"):
            assert read_isolated(successor.bootstrap, topic, filler, isolation) == expected
        successor.kill()
        successor.start()
        assert read_isolated(successor.bootstrap, topic, filler, "read_committed") == expected
    finally:
        successor.close()
        bucket.close()


def read_isolated(bootstrap: str, topic: str, last_offset: int, isolation: str) -> list[tuple[int, bytes, bytes | None]]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{isolation}", "enable.auto.commit": False, "isolation.level": isolation})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        records: list[tuple[int, bytes, bytes | None]] = []
        deadline = time.monotonic() + 60
        while not records or records[-1][0] < last_offset:
            assert time.monotonic() < deadline, records
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is None, message.error()
                records.append((message.offset(), message.key(), message.value()))
        return records
    finally:
        consumer.close()
