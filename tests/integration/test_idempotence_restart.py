"""Producer ids and deduplication survive a broker restart: raw requests, exact answers.

A producer id comes from a raw InitProducerId; batches are made with encode_batch carrying
that producer id, epoch and base sequence, and sent as raw Produce requests. After the broker
restarts (SIGTERM, or SIGKILL: the producer state is rebuilt from the local log either way),
retries of batches it already has are answered with their first offsets and append nothing,
a gap in sequence is OUT_OF_ORDER_SEQUENCE_NUMBER, an older epoch INVALID_PRODUCER_EPOCH, and
the next batch in sequence appends where the log ends.

Every test runs on both metadata backends (producer ids come from the store).
"""

from __future__ import annotations

import datetime
import time

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.init_producer_id.v4 import request as init_producer_id_v4
from kio.schema.list_offsets.v7 import request as list_offsets_v7
from kio.schema.produce.v9 import request as produce_v9

from hot_tier.records import Record, decode_batches, encode_batch

from .broker_process import BrokerProcess
from .conftest import NO_REBALANCE_DELAY, ON_EVERY_METADATA_BACKEND, metadata_args

pytestmark = ON_EVERY_METADATA_BACKEND

LATEST = -1


def ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


def init_producer_id():
    return init_producer_id_v4.InitProducerIdRequest(
        transactional_id=None, transaction_timeout=ms(60_000), producer_id=-1, producer_epoch=-1
    )


def idempotent_batch(producer_id: int, producer_epoch: int, base_sequence: int, values: list[bytes]) -> bytes:
    now = int(time.time() * 1000)
    records = [Record(i, now, f"k{base_sequence + i}".encode(), value) for i, value in enumerate(values)]
    return encode_batch(records, producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence)


def produce(topic: str, records: bytes, acks: int = -1):
    mod = produce_v9
    return mod.ProduceRequest(
        transactional_id=None, acks=acks, timeout=ms(5000),
        topic_data=(mod.TopicProduceData(name=topic, partition_data=(mod.PartitionProduceData(index=0, records=records),)),),
    )  # fmt: skip


def once_settled(send) -> tuple[ErrorCode, int]:
    """The answer to a batch whose sequence leaves a gap, once the partition has settled here: in
    the first seconds after a leader takes a partition another leadership held, a gap is answered
    NOT_LEADER_OR_FOLLOWER (the batches before it may be on their way: refused_batches.py)."""
    deadline = time.monotonic() + 30
    while (answer := send())[0] is ErrorCode.not_leader_or_follower:
        assert time.monotonic() < deadline, "the gap was still answered NOT_LEADER_OR_FOLLOWER after 30 s"
        time.sleep(0.2)  # the settling time runs on the broker's clock: nothing to wait on
    return answer


def produced(client, topic: str, records: bytes) -> tuple[ErrorCode, int]:
    (topic_response,) = client.request(produce(topic, records)).responses
    (partition,) = topic_response.partition_responses
    return partition.error_code, partition.base_offset


def log_end_offset(client, topic: str) -> int:
    mod = list_offsets_v7
    request = mod.ListOffsetsRequest(
        replica_id=-1, isolation_level=0,
        topics=(mod.ListOffsetsTopic(name=topic, partitions=(mod.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=LATEST),)),),
    )  # fmt: skip
    (topic_response,) = client.request(request).topics
    (partition,) = topic_response.partitions
    assert partition.error_code is ErrorCode.none
    return partition.offset


def fetched_values(client, topic: str) -> list[tuple[int, bytes]]:
    mod = fetch_v12
    part = mod.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    request = mod.FetchRequest(
        max_wait=ms(0), min_bytes=1, topics=(mod.FetchTopic(topic=topic, partitions=(part,)),), forgotten_topics_data=()
    )
    (topic_response,) = client.request(request).responses
    (partition,) = topic_response.partitions
    assert partition.error_code is ErrorCode.none
    return [(r.offset, r.value) for batch in decode_batches(bytes(partition.records or b"")) for r in batch.records]


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_producer_state_survives_restart(group_broker, create_topic, wire, how: str) -> None:
    broker = group_broker
    topic = create_topic(broker.bootstrap, partitions=1)
    client = wire(broker.bootstrap)
    response = client.request(init_producer_id())
    assert response.error_code is ErrorCode.none
    assert response.producer_epoch == 0
    producer_id = response.producer_id
    assert producer_id >= 0

    first = idempotent_batch(producer_id, 0, 0, [b"v0", b"v1", b"v2"])
    second = idempotent_batch(producer_id, 0, 3, [b"v3", b"v4"])
    assert produced(client, topic, first) == (ErrorCode.none, 0)
    assert produced(client, topic, second) == (ErrorCode.none, 3)
    assert produced(client, topic, second) == (ErrorCode.none, 3)  # a retry before the restart
    assert log_end_offset(client, topic) == 5

    if how == "stop":
        broker.stop()
    else:
        broker.kill()
    broker.start()
    client = wire(broker.bootstrap)

    # Retries of the last batch and of an older retained one: their first offsets, nothing written.
    assert produced(client, topic, second) == (ErrorCode.none, 3)
    assert produced(client, topic, first) == (ErrorCode.none, 0)
    assert log_end_offset(client, topic) == 5

    # A gap in sequence (5 expected).
    gap = idempotent_batch(producer_id, 0, 6, [b"gap"])
    assert once_settled(lambda: produced(client, topic, gap))[0] is ErrorCode.out_of_order_sequence_number
    assert log_end_offset(client, topic) == 5

    # The next batch in sequence appends at the log end.
    third = idempotent_batch(producer_id, 0, 5, [b"v5"])
    assert produced(client, topic, third) == (ErrorCode.none, 5)

    # A new epoch starts at sequence 0; after it, the old epoch is fenced.
    bumped = idempotent_batch(producer_id, 1, 0, [b"e1"])
    assert produced(client, topic, bumped) == (ErrorCode.none, 6)
    stale = idempotent_batch(producer_id, 0, 6, [b"stale"])
    assert produced(client, topic, stale)[0] is ErrorCode.invalid_producer_epoch
    # A new epoch must start at sequence 0.
    bad_start = idempotent_batch(producer_id, 2, 3, [b"bad"])
    assert once_settled(lambda: produced(client, topic, bad_start))[0] is ErrorCode.out_of_order_sequence_number
    assert log_end_offset(client, topic) == 7

    assert fetched_values(client, topic) == [(0, b"v0"), (1, b"v1"), (2, b"v2"), (3, b"v3"), (4, b"v4"), (5, b"v5"), (6, b"e1")]

    # Producer ids are not handed out twice across the restart.
    again = client.request(init_producer_id())
    assert again.error_code is ErrorCode.none
    assert again.producer_id != producer_id


def test_epoch_fencing_survives_restart(group_broker, create_topic, wire) -> None:
    broker = group_broker
    topic = create_topic(broker.bootstrap, partitions=1)
    client = wire(broker.bootstrap)
    producer_id = client.request(init_producer_id()).producer_id
    assert produced(client, topic, idempotent_batch(producer_id, 0, 0, [b"a"])) == (ErrorCode.none, 0)
    assert produced(client, topic, idempotent_batch(producer_id, 3, 0, [b"b"])) == (ErrorCode.none, 1)
    broker.restart()
    client = wire(broker.bootstrap)
    assert produced(client, topic, idempotent_batch(producer_id, 2, 0, [b"c"]))[0] is ErrorCode.invalid_producer_epoch
    assert produced(client, topic, idempotent_batch(producer_id, 3, 0, [b"b"])) == (ErrorCode.none, 1)
    assert produced(client, topic, idempotent_batch(producer_id, 3, 1, [b"d"])) == (ErrorCode.none, 2)
    assert log_end_offset(client, topic) == 3


def test_retried_batch_on_a_log_append_time_topic_gets_its_first_append_time(shared_group_broker, create_topic, wire) -> None:
    topic = create_topic(shared_group_broker.bootstrap, partitions=1, configs={"message.timestamp.type": "LogAppendTime"})
    client = wire(shared_group_broker.bootstrap)
    producer_id = client.request(init_producer_id()).producer_id
    batch = idempotent_batch(producer_id, 0, 0, [b"a", b"b"])

    def answer():
        (topic_response,) = client.request(produce(topic, batch)).responses
        (partition,) = topic_response.partition_responses
        return partition.error_code, partition.base_offset, partition.log_append_time

    first = answer()
    assert first[:2] == (ErrorCode.none, 0)
    assert first[2] is not None and first[2].timestamp() > 0
    assert answer() == first
    assert log_end_offset(client, topic) == 2


def local_segment_count(broker, topic: str) -> int:
    return len(list((broker.data_dir / "logs" / f"{topic}-0").glob("*.log")))


def test_dedup_survives_restart_after_the_producers_segments_left_the_local_disk(group_broker, create_topic, wire) -> None:
    """Tiered topics drop local copies of rolled segments once they are in the bucket (the
    default, local.retention.ms=0). A producer whose last batches are only in the bucket by
    the time the broker restarts must still be known: its retries are duplicates."""
    broker = group_broker
    topic = create_topic(broker.bootstrap, partitions=1, configs={"segment.bytes": "200", "remote.storage.enable": "true", "local.retention.ms": "0"})
    client = wire(broker.bootstrap)
    quiet = client.request(init_producer_id()).producer_id
    busy = client.request(init_producer_id()).producer_id
    first = idempotent_batch(quiet, 0, 0, [b"q0"])
    second = idempotent_batch(quiet, 0, 1, [b"q1"])
    assert produced(client, topic, first) == (ErrorCode.none, 0)
    assert produced(client, topic, second) == (ErrorCode.none, 1)
    for sequence in range(8):  # another producer rolls segments past the quiet one's batches
        assert produced(client, topic, idempotent_batch(busy, 0, sequence, [b"b" * 40])) == (ErrorCode.none, 2 + sequence)
    deadline = time.monotonic() + 20
    while local_segment_count(broker, topic) > 1:
        assert time.monotonic() < deadline, "rolled segments were never uploaded and dropped locally"
        time.sleep(0.05)  # polling the data directory: nothing to wait on instead
    broker.restart()
    client = wire(broker.bootstrap)
    assert produced(client, topic, second) == (ErrorCode.none, 1)
    assert produced(client, topic, first) == (ErrorCode.none, 0)
    assert once_settled(lambda: produced(client, topic, idempotent_batch(quiet, 0, 5, [b"gap"])))[0] is ErrorCode.out_of_order_sequence_number
    assert log_end_offset(client, topic) == 10
    assert produced(client, topic, idempotent_batch(quiet, 0, 2, [b"q2"])) == (ErrorCode.none, 10)


def test_dedup_survives_restart_after_a_time_based_roll_tiered_the_producers_batches(tmp_path, create_topic, wire, metadata_url) -> None:
    """segment.ms rolls an idle partition's segment in the background; tiering then drops its
    local copy. The producer that wrote it must still be known after a restart."""
    broker = BrokerProcess(tmp_path / "data", *NO_REBALANCE_DELAY, "--log-retention-check-interval-ms", "100", *metadata_args(metadata_url)).start()
    try:
        topic = create_topic(broker.bootstrap, partitions=1, configs={"segment.ms": "200", "remote.storage.enable": "true", "local.retention.ms": "0"})
        client = wire(broker.bootstrap)
        producer_id = client.request(init_producer_id()).producer_id
        batch = idempotent_batch(producer_id, 0, 0, [b"only"])
        assert produced(client, topic, batch) == (ErrorCode.none, 0)
        deadline = time.monotonic() + 20
        while not (local_segment_count(broker, topic) == 1 and local_segment_bases(broker, topic) == [1]):
            assert time.monotonic() < deadline, "the idle segment was never rolled, uploaded and dropped locally"
            time.sleep(0.05)  # polling the data directory: nothing to wait on instead
        broker.restart()
        client = wire(broker.bootstrap)
        assert produced(client, topic, batch) == (ErrorCode.none, 0)
        assert log_end_offset(client, topic) == 1
    finally:
        broker.close()


def local_segment_bases(broker, topic: str) -> list[int]:
    return sorted(int(path.stem) for path in (broker.data_dir / "logs" / f"{topic}-0").glob("*.log"))
