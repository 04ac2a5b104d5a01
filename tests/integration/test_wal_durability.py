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

from .acked_writes import AckingProducer, account
from .broker_process import BrokerProcess
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
