"""RefusedBatches: which refusal explains a gap, for how long, and within what bound."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from diskless.broker.refused_batches import RefusedBatches

T, P, PID = "t", 0, 7


def test_only_the_same_producer_epoch_partition_and_sequence_explain_a_gap() -> None:
    refused = RefusedBatches()
    refused.refused(T, P, PID, 1, 10, ErrorCode.not_leader_or_follower, now_ms=0)
    assert refused.explains(T, P, PID, 1, 10, now_ms=1) is ErrorCode.not_leader_or_follower
    assert refused.explains(T, P, PID, 1, 11, now_ms=1) is None
    assert refused.explains(T, P, PID, 2, 10, now_ms=1) is None
    assert refused.explains(T, P, PID + 1, 1, 10, now_ms=1) is None
    assert refused.explains(T, P + 1, PID, 1, 10, now_ms=1) is None
    assert refused.explains("u", P, PID, 1, 10, now_ms=1) is None


def test_errors_a_producer_does_not_retry_are_not_kept() -> None:
    refused = RefusedBatches()
    for error in (ErrorCode.corrupt_message, ErrorCode.record_list_too_large, ErrorCode.topic_authorization_failed, ErrorCode.invalid_producer_epoch):
        refused.refused(T, P, PID, 0, 0, error, now_ms=0)
    assert len(refused) == 0
    refused.refused(T, P, PID, 0, 0, ErrorCode.not_enough_replicas, now_ms=0)
    assert refused.explains(T, P, PID, 0, 0, now_ms=0) is ErrorCode.not_enough_replicas


def test_a_refusal_is_kept_for_keep_ms_from_its_latest_time() -> None:
    refused = RefusedBatches(keep_ms=1000)
    refused.refused(T, P, PID, 0, 0, ErrorCode.not_leader_or_follower, now_ms=0)
    refused.refused(T, P, PID, 0, 5, ErrorCode.not_leader_or_follower, now_ms=500)
    refused.refused(T, P, PID, 0, 0, ErrorCode.unknown_topic_or_partition, now_ms=800)  # refused again: kept from now
    assert refused.explains(T, P, PID, 0, 5, now_ms=1500) is ErrorCode.not_leader_or_follower
    assert refused.explains(T, P, PID, 0, 5, now_ms=1501) is None
    assert refused.explains(T, P, PID, 0, 0, now_ms=1800) is ErrorCode.unknown_topic_or_partition
    assert refused.explains(T, P, PID, 0, 0, now_ms=1801) is None
    assert len(refused) == 0


def test_the_oldest_go_first_past_the_bound() -> None:
    refused = RefusedBatches(max_kept=3)
    for sequence in range(5):
        refused.refused(T, P, PID, 0, sequence, ErrorCode.not_leader_or_follower, now_ms=sequence)
    assert len(refused) == 3
    assert [refused.explains(T, P, PID, 0, s, now_ms=5) for s in range(5)] == [None, None] + [ErrorCode.not_leader_or_follower] * 3


def test_a_partition_settles_for_a_few_seconds_after_it_began_to_be_served() -> None:
    from diskless.broker.refused_batches import SETTLING_MS, settling

    assert settling(10_000, 10_000) and settling(10_000, 10_000 + SETTLING_MS - 1)
    assert not settling(10_000, 10_000 + SETTLING_MS)
