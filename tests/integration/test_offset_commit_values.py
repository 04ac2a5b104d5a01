"""What OffsetCommit keeps: any offset a client commits, negative ones included, as Kafka
(its coordinator checks only the metadata's size); -1 reads back as "no position"."""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.schema.offset_commit.v7 import request as offset_commit_v7
from kio.schema.offset_fetch.v7 import request as offset_fetch_v7


def commit(client, group: str, topic: str, offsets: dict[int, int]) -> list[ErrorCode]:
    answer = client.request(offset_commit_v7.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=(offset_commit_v7.OffsetCommitRequestTopic(name=topic, partitions=tuple(
            offset_commit_v7.OffsetCommitRequestPartition(partition_index=p, committed_offset=o, committed_leader_epoch=-1, committed_metadata="m")
            for p, o in offsets.items()
        )),),
    ))  # fmt: skip
    return [p.error_code for t in answer.topics for p in t.partitions]


def fetched(client, group: str, topic: str, partitions: int) -> list[tuple[int, int, str]]:
    answer = client.request(offset_fetch_v7.OffsetFetchRequest(
        group_id=group, topics=(offset_fetch_v7.OffsetFetchRequestTopic(name=topic, partition_indexes=tuple(range(partitions))),),
        require_stable=False,
    ))  # fmt: skip
    assert answer.error_code == ErrorCode.none
    return [(p.partition_index, p.committed_offset, p.metadata) for t in answer.topics for p in t.partitions]


def test_negative_offsets_are_committed_and_read_back_as_given(shared_broker, create_topic, wire) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=3)
    client = wire(shared_broker.bootstrap)
    assert commit(client, "negatives", topic, {0: 5, 1: -1, 2: -7}) == [ErrorCode.none] * 3
    assert fetched(client, "negatives", topic, 3) == [(0, 5, "m"), (1, -1, "m"), (2, -7, "m")]
    assert commit(client, "negatives", topic, {0: -1}) == [ErrorCode.none]
    assert fetched(client, "negatives", topic, 3) == [(0, -1, "m"), (1, -1, "m"), (2, -7, "m")]
    assert "Traceback" not in shared_broker.log_text()
