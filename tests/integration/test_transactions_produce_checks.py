"""A transactional batch no transaction holds is refused, as Kafka refuses it: without the
request's transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), or with one whose
coordinator (here) knows no such producer (INVALID_PRODUCER_ID_MAPPING). Accepted, it held the
partition's last stable offset for good: no coordinator would ever end its transaction."""

from __future__ import annotations

import dataclasses
import time

from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v7 import request as list_offsets_v7

from hot_tier.records import Record, encode_batch

from .test_broker_wire import produce, produce_result

LATEST = -1


def offsets(client, topic: str) -> tuple[int, int]:
    """(high watermark, last stable offset) of partition 0."""
    found = []
    for isolation in (0, 1):
        answer = client.request(list_offsets_v7.ListOffsetsRequest(
            replica_id=-1, isolation_level=isolation,
            topics=(list_offsets_v7.ListOffsetsTopic(name=topic, partitions=(
                list_offsets_v7.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=LATEST),
            )),),
        ))  # fmt: skip
        found.append(answer.topics[0].partitions[0].offset)
    return found[0], found[1]


def transactional_batch() -> bytes:
    return encode_batch([Record(0, int(time.time() * 1000), None, b"t", ())], producer_id=4242, producer_epoch=0, base_sequence=0,
                        is_transactional=True)  # fmt: skip


def plain_batch() -> bytes:
    return encode_batch([Record(0, int(time.time() * 1000), None, b"p", ())])


def test_a_transactional_batch_without_its_transactional_id_is_refused(shared_broker, create_topic, wire) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=1)
    client = wire(shared_broker.bootstrap)
    refused = produce_result(client.request(produce(topic, transactional_batch())))
    assert (refused.error_code, refused.base_offset) == (ErrorCode.transactional_id_authorization_failed, -1)
    assert (produce_result(client.request(produce(topic, plain_batch()))).base_offset, offsets(client, topic)) == (0, (1, 1))


def test_a_transactional_batch_of_a_producer_its_coordinator_does_not_know_is_refused(shared_broker, create_topic, wire) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=1)
    client = wire(shared_broker.bootstrap)
    request = dataclasses.replace(produce(topic, transactional_batch()), transactional_id=f"never-initialized-{topic}")
    refused = produce_result(client.request(request))
    assert (refused.error_code, refused.base_offset) == (ErrorCode.invalid_producer_id_mapping, -1)
    assert (produce_result(client.request(produce(topic, plain_batch()))).base_offset, offsets(client, topic)) == (0, (1, 1))
