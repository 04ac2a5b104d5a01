"""Deduplication survives a takeover by another broker after the producer's batches all went
to the bucket (three brokers, PostgreSQL, moto's S3 server, raw requests, exact answers).

The new leader's local log begins where the bucket ends, with no batch of the producer in
it; the producer state its old leader published with the segment (in the metadata store)
is what tells it the producer's last batch: the retry of that batch is answered with its
first offset and appends nothing, a gap in sequence is OUT_OF_ORDER_SEQUENCE_NUMBER, and the
next batch in sequence appends where the log ends."""

from __future__ import annotations

import shutil
import time
import uuid

from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from .conftest import WireClient
from .test_cluster import DEADLINE_S, Cluster, cluster, leaders, moto_bucket, wait_until  # noqa: F401 (fixtures)
from .test_idempotence_restart import idempotent_batch, init_producer_id, log_end_offset, once_settled, produced


def test_a_retry_of_a_tiered_batch_is_a_duplicate_at_the_next_leader(cluster: Cluster) -> None:
    topic = f"t-{uuid.uuid4().hex[:12]}"
    configs = {"segment.ms": "200", "local.retention.ms": "0"}
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(DEADLINE_S)
    node = wait_until(lambda: (leader := leaders(cluster.bootstrap, topic).get(0, -1)) >= 1 and leader, f"{topic} to have a leader")
    victim = cluster.brokers[node]
    client = WireClient(victim.bootstrap)
    try:
        producer_id = client.request(init_producer_id()).producer_id
        batches = [idempotent_batch(producer_id, 0, 2 * i, [b"a%d" % i, b"b%d" % i]) for i in range(3)]
        assert [produced(client, topic, b) for b in batches] == [(ErrorCode.none, 0), (ErrorCode.none, 2), (ErrorCode.none, 4)]
    finally:
        client.close()
    # segment.ms rolls the idle segment, the upload takes it, local.retention.ms=0 drops it here.
    logs = victim.data_dir / "logs" / f"{topic}-0"
    wait_until(lambda: sorted(int(p.stem) for p in logs.glob("*.log")) == [6], "every batch to be in the bucket alone")
    victim.kill()
    shutil.rmtree(victim.data_dir)
    other = cluster.brokers[1 + node % 3]
    successor = wait_until(lambda: (l := leaders(other.bootstrap, topic)[0]) not in (node, -1) and l, f"another broker than {node} to lead")
    client = WireClient(cluster.brokers[successor].bootstrap)
    try:
        deadline = time.monotonic() + DEADLINE_S
        while (answer := produced(client, topic, batches[-1]))[0] is not ErrorCode.none:
            assert answer[0] in (ErrorCode.not_leader_or_follower, ErrorCode.request_timed_out), answer
            assert time.monotonic() < deadline, "the new leader never took the retry"
            time.sleep(0.05)  # the partition is still opening there: retry as a client would
        assert answer == (ErrorCode.none, 4)  # the retry: its first offset, nothing appended
        assert log_end_offset(client, topic) == 6
        assert once_settled(lambda: produced(client, topic, idempotent_batch(producer_id, 0, 9, [b"gap"])))[0] is ErrorCode.out_of_order_sequence_number
        assert produced(client, topic, idempotent_batch(producer_id, 0, 6, [b"c"])) == (ErrorCode.none, 6)
        assert log_end_offset(client, topic) == 7
    finally:
        client.close()
    victim.start()
