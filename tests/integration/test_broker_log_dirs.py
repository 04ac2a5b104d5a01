"""DescribeLogDirs (kafka-log-dirs.sh, AdminClient.describeLogDirs): the broker's one log
directory and the local size of each partition it holds, exact, through raw requests and
kafka-python's admin client."""

from __future__ import annotations

from kafka.admin import KafkaAdminClient
from kio.schema.describe_log_dirs.v1 import request as describe_log_dirs_v1
from kio.schema.describe_log_dirs.v4 import request as describe_log_dirs_v4
from kio.schema.errors import ErrorCode
from confluent_kafka import Producer


def local_bytes(broker, topic: str, partition: int) -> int:
    return sum(path.stat().st_size for path in (broker.data_dir / "logs" / f"{topic}-{partition}").glob("*.log"))


def test_the_log_dir_and_the_local_size_of_each_partition_held(broker, create_topic, wire) -> None:
    topic = create_topic(broker.bootstrap, partitions=2)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(50):
        producer.produce(topic, b"v" * 100, key=b"k%d" % i, partition=0)
    assert producer.flush(30) == 0
    size = local_bytes(broker, topic, 0)
    assert size > 50 * 100
    log_dir = str((broker.data_dir / "logs").resolve())

    client = wire(broker.bootstrap)
    mod = describe_log_dirs_v4
    asked = (mod.DescribableLogDirTopic(topic=topic, partitions=(0, 1, 7)), mod.DescribableLogDirTopic(topic="no-such-topic", partitions=(0,)))
    answer = client.request(mod.DescribeLogDirsRequest(topics=asked))
    assert answer.error_code is ErrorCode.none
    (result,) = answer.results
    assert (result.error_code, result.log_dir) == (ErrorCode.none, log_dir)
    assert 0 < result.usable_bytes <= result.total_bytes
    assert [(t.name, [(p.partition_index, p.partition_size, p.offset_lag, p.is_future_key) for p in t.partitions]) for t in result.topics] == [
        (topic, [(0, size, 0, False), (1, 0, 0, False)])  # partition 7 does not exist: left out
    ]  # fmt: skip
    # Every partition held, when no topic is named (v1: no disk figures).
    (every,) = client.request(describe_log_dirs_v1.DescribeLogDirsRequest(topics=None)).results
    assert every.log_dir == log_dir and {(t.name, p.partition_index) for t in every.topics for p in t.partitions} >= {(topic, 0), (topic, 1)}

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        [described] = admin.describe_log_dirs({topic: [0]})
    finally:
        admin.close()
    assert described["broker"] == 1
    [directory] = described["log_dirs"]
    assert (directory["error_code"], directory["log_dir"]) == (0, log_dir)
    assert [(t["name"], [(p["partition_index"], p["partition_size"]) for p in t["partitions"]]) for t in directory["topics"]] == [(topic, [(0, size)])]
