"""acks=all means durable in the bucket: a broker killed with SIGKILL at random moments, its
data directory deleted each time, restarted on an empty disk with the same bucket and
metadata, loses no acknowledged record.

The account, at the end, from a consumer reading each partition from offset 0 to its high
watermark: acknowledged and missing (must be 0), acknowledged at another offset than the one
acknowledged (0), duplicates of a value (0: the producer is idempotent), values never sent (0).
Against moto's S3 server and against the local-directory store.
"""

from __future__ import annotations

import random
import shutil
import time
from pathlib import Path

import pytest

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_v12

from hot_tier.records import decode_batches

from .acked_writes import AckingProducer, account
from .broker_process import BrokerProcess
from .test_idempotence_restart import idempotent_batch, init_producer_id, log_end_offset, ms, once_settled, produce, produced
from .test_tiering_reads import DEADLINE_S, BucketView, create_topic, moto, open_bucket  # noqa: F401

PARTITIONS = 2
KILLS = 5


@pytest.fixture(params=["file", "s3"])
def bucket(request, tmp_path) -> BucketView:
    moto_server = request.getfixturevalue("moto") if request.param == "s3" else None
    view = open_bucket(request.param, moto_server, tmp_path / "bucket")
    yield view
    view.close()


@pytest.mark.slow
def test_sigkill_and_a_deleted_disk_lose_no_acknowledged_record(bucket, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    metadata = f"sqlite:///{(tmp_path / 'metadata' / 'metadata.db').resolve()}"
    (tmp_path / "metadata").mkdir()
    broker = BrokerProcess(
        data_dir, "--object-store", bucket.url, "--metadata", metadata, "--log-retention-check-interval-ms", "200",
        # A deleted disk is a new directory: it waits for the old session to expire, kept short here.
        "--broker-session-timeout-ms", "1500", "--broker-heartbeat-interval-ms", "200", env=bucket.env
    ).start()
    try:
        # Small segments: history moves into the bucket as segments while the tail lives in
        # write-ahead objects, so both paths are exercised by the kills.
        topic = create_topic(broker.bootstrap, PARTITIONS, {"segment.bytes": "65536"})
        producer = AckingProducer(broker.bootstrap, topic, PARTITIONS)
        producer.start()
        rng = random.Random(7)
        for _ in range(KILLS):
            target = producer.acks() + rng.randrange(500, 3000)
            deadline = time.monotonic() + DEADLINE_S * 2
            while producer.acks() < target:
                assert time.monotonic() < deadline, (producer.acks(), target, producer.errors[-3:])
                time.sleep(0.01)  # polling a counter another thread moves; nothing to wait on
            broker.kill()
            shutil.rmtree(data_dir)
            broker.start()
        producer.stopping.set()
        producer.join(DEADLINE_S * 5)
        assert not producer.is_alive()
        assert producer.errors == []

        account(broker.bootstrap, topic, PARTITIONS, producer)
        assert len(producer.acked) >= KILLS * 500
        assert "rebuilt" in broker.log_text()  # the tail came back from write-ahead objects
    finally:
        broker.close()


def test_a_segment_rolled_before_it_was_durable_keeps_its_producers_known_on_an_empty_disk(bucket, tmp_path: Path, wire) -> None:
    """acks=1 is answered at the local append, so a segment can roll before its batches reach a
    write-ahead object. It goes to the bucket only once they are durable, with the producer
    state at its end: a leader rebuilt on an empty disk, whose log begins where the bucket
    ends, still knows a producer whose last batch lies in it, and a retry of that batch is a
    duplicate rather than a second copy (uploaded at once, the segment went without that state)."""
    data_dir = tmp_path / "data"
    metadata = f"sqlite:///{(tmp_path / 'metadata' / 'metadata.db').resolve()}"
    (tmp_path / "metadata").mkdir()
    broker = BrokerProcess(
        data_dir, "--object-store", bucket.url, "--metadata", metadata, "--log-retention-check-interval-ms", "100",
        # A long commit interval: the segments roll (and the uploader looks at them) well
        # before their batches are durable.
        "--wal-commit-interval-ms", "700",
        "--broker-session-timeout-ms", "1500", "--broker-heartbeat-interval-ms", "200", env=bucket.env,
    ).start()  # fmt: skip
    try:
        topic = create_topic(broker.bootstrap, 1, {"segment.bytes": "200", "local.retention.ms": "0"})
        client = wire(broker.bootstrap)
        quiet = client.request(init_producer_id()).producer_id
        busy = client.request(init_producer_id()).producer_id
        batches = [idempotent_batch(quiet, 0, 0, [b"q0"]), idempotent_batch(quiet, 0, 1, [b"q1"])]
        batches += [idempotent_batch(busy, 0, sequence, [b"b" * 40]) for sequence in range(8)]
        for offset, batch in enumerate(batches):
            (answer,) = client.request(produce(topic, batch, acks=1)).responses
            (partition,) = answer.partition_responses
            assert (partition.error_code, partition.base_offset) == (ErrorCode.none, offset)
        deadline = time.monotonic() + DEADLINE_S
        while log_end_offset(client, topic) < 10 or len(list((data_dir / "logs" / f"{topic}-0").glob("*.log"))) > 1:
            assert time.monotonic() < deadline, "the batches never became durable, or the rolled segments never reached the bucket"
            time.sleep(0.05)  # polling the data directory: nothing to wait on instead
        (local_base,) = [int(path.stem) for path in (data_dir / "logs" / f"{topic}-0").glob("*.log")]
        # The bucket holds everything below the active segment, the quiet producer's batches too.
        assert bucket.catalogue(topic, 0)[-1].next_offset == local_base > 1

        broker.kill()
        shutil.rmtree(data_dir)
        broker.start()
        client = wire(broker.bootstrap)
        assert produced(client, topic, batches[1]) == (ErrorCode.none, 1)  # its retry: the first offset, nothing written
        assert log_end_offset(client, topic) == 10
        assert once_settled(lambda: produced(client, topic, idempotent_batch(quiet, 0, 3, [b"gap"])))[0] is ErrorCode.out_of_order_sequence_number
        assert produced(client, topic, idempotent_batch(quiet, 0, 2, [b"q2"])) == (ErrorCode.none, 10)
        assert values_from(client, topic, 0) == [(0, b"q0"), (1, b"q1"), *((o, b"b" * 40) for o in range(2, 10)), (10, b"q2")]
    finally:
        broker.close()


def values_from(client, topic: str, offset: int) -> list[tuple[int, bytes]]:
    """Partition 0's (offset, value)s from `offset` to the high watermark, fetch after fetch (a
    fetch from the bucket answers with one segment's batches)."""
    mod = fetch_v12
    values: list[tuple[int, bytes]] = []
    while offset < log_end_offset(client, topic):
        part = mod.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)
        request = mod.FetchRequest(max_wait=ms(0), min_bytes=1, topics=(mod.FetchTopic(topic=topic, partitions=(part,)),), forgotten_topics_data=())
        (answer,) = client.request(request).responses
        (partition,) = answer.partitions
        assert partition.error_code is ErrorCode.none
        batches = decode_batches(bytes(partition.records or b""))
        assert batches, f"an empty answer at offset {offset}"
        values += [(r.offset, r.value) for batch in batches for r in batch.records]
        offset = values[-1][0] + 1
    return values
