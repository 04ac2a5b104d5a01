"""A gap in an idempotent producer's sequence that the broker's own retriable refusal left is
answered with that refusal's error again, not as a sequence error (raw requests, exact answers).

A producer keeps several Produce requests in flight per partition. When the first is refused
with a retriable error and the next one is read once the cause is gone, the next one does not
follow the producer's last batch. Answered OUT_OF_ORDER_SEQUENCE_NUMBER (or
UNKNOWN_PRODUCER_ID on an empty partition), librdkafka bumps its producer epoch, and a batch
of another partition whose answer was lost is then written a second time under the new epoch.
Answered with the refusal's error, the producer sends both again, in order. A gap no refusal
explains is still a sequence error.

Two real refusals: a partition that does not exist yet (a producer racing CreatePartitions),
and a write-ahead log past wal.max.pending.bytes while the bucket (moto's S3 server, through
a byte proxy) does not answer.
"""

from __future__ import annotations

import json
import urllib.request

from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9 import request as produce_v9

from .broker_process import BrokerProcess, free_port
from .conftest import WireClient
from .moto_s3 import MotoS3
from .store_proxy import StoreProxy
from .test_bucket_outage import wait_until
from .test_idempotence_restart import idempotent_batch, init_producer_id, ms

DEADLINE_S = 60.0


def produced(client: WireClient, topic: str, index: int, records: bytes, acks: int = -1) -> tuple[ErrorCode, int]:
    mod = produce_v9
    request = mod.ProduceRequest(
        transactional_id=None, acks=acks, timeout=ms(5000),
        topic_data=(mod.TopicProduceData(name=topic, partition_data=(mod.PartitionProduceData(index=index, records=records),)),),
    )  # fmt: skip
    (topic_response,) = client.request(request).responses
    (partition,) = topic_response.partition_responses
    return partition.error_code, partition.base_offset


def test_a_batch_refused_before_its_partition_existed_is_not_skipped_over(broker, wire, topic_name) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(DEADLINE_S)
    client = wire(broker.bootstrap)
    producer_id = client.request(init_producer_id()).producer_id
    other = client.request(init_producer_id()).producer_id
    first = idempotent_batch(producer_id, 0, 0, [b"a", b"b", b"c"])
    second = idempotent_batch(producer_id, 0, 3, [b"d", b"e"])
    assert produced(client, topic_name, 1, first) == (ErrorCode.unknown_topic_or_partition, -1)
    assert produced(client, topic_name, 1, idempotent_batch(other, 0, 5, [b"x"])) == (ErrorCode.unknown_topic_or_partition, -1)
    admin.create_partitions([NewPartitions(topic_name, 2)])[topic_name].result(DEADLINE_S)
    # The first batch's refusal explains why the second does not start at sequence 0 here.
    assert produced(client, topic_name, 1, second) == (ErrorCode.unknown_topic_or_partition, -1)
    assert produced(client, topic_name, 1, first) == (ErrorCode.none, 0)
    assert produced(client, topic_name, 1, second) == (ErrorCode.none, 3)
    assert produced(client, topic_name, 1, second) == (ErrorCode.none, 3)  # a retry: a duplicate
    # Gaps nothing here explains: another producer's refused batch at sequence 5 is not this one's.
    assert produced(client, topic_name, 1, idempotent_batch(producer_id, 0, 6, [b"g"])) == (ErrorCode.out_of_order_sequence_number, -1)
    assert produced(client, topic_name, 1, idempotent_batch(producer_id, 0, 9, [b"j"])) == (ErrorCode.out_of_order_sequence_number, -1)
    assert produced(client, topic_name, 1, idempotent_batch(producer_id, 0, 5, [b"f"])) == (ErrorCode.none, 5)


def high_watermark(http_port: int, topic: str) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v1/topics/{topic}", timeout=10) as response:
        (partition,) = json.load(response)["partitions"]
    return partition["high_watermark"]


def test_a_batch_refused_while_the_bucket_was_away_is_not_skipped_over(tmp_path, wire, topic_name) -> None:
    moto = MotoS3()
    moto.start()
    proxy = StoreProxy(moto.port)
    http_port = free_port()
    url = f"s3://{moto.create_bucket()}/refusals?endpoint_url={proxy.endpoint_url}&region=us-east-1"
    env = {k: v for k, v in moto.env().items() if k != "AWS_ENDPOINT_URL"}
    # One batch waiting for the bucket is as much as the write-ahead log takes.
    broker = BrokerProcess(tmp_path / "data", "--object-store", url, "--http", f"127.0.0.1:{http_port}", "--wal-max-pending-bytes", "1", env=env)
    try:
        broker.start()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(DEADLINE_S)
        client = wire(broker.bootstrap)
        producer_id = client.request(init_producer_id()).producer_id
        batches = [idempotent_batch(producer_id, 0, 2 * i, [b"v%d" % (2 * i), b"v%d" % (2 * i + 1)]) for i in range(4)]
        assert produced(client, topic_name, 0, batches[0]) == (ErrorCode.none, 0)
        proxy.blackhole()
        assert produced(client, topic_name, 0, batches[1], acks=1) == (ErrorCode.none, 2)  # appended; waits for the bucket
        assert produced(client, topic_name, 0, batches[2], acks=1) == (ErrorCode.not_enough_replicas, -1)
        proxy.restore()
        wait_until(lambda: high_watermark(http_port, topic_name) == 4, "the waiting batch to be durable")
        # The log takes batches again, but the one after the refused batch must wait for it.
        assert produced(client, topic_name, 0, batches[3]) == (ErrorCode.not_enough_replicas, -1)
        assert produced(client, topic_name, 0, batches[2]) == (ErrorCode.none, 4)
        assert produced(client, topic_name, 0, batches[3]) == (ErrorCode.none, 6)
        assert high_watermark(http_port, topic_name) == 8
    finally:
        broker.close()
        proxy.close()
        moto.stop()
