"""The pure decisions of the TCP shell's limits (diskless/broker/connection_limits.py)."""

from __future__ import annotations

from diskless.broker.connection_limits import (
    READ_CHUNK_BYTES,
    AcceptBackoff,
    Admission,
    ConnectionLimits,
    ConnectionQuotas,
    Phase,
    QueuedRequestBytes,
    descriptor_budget,
    overdue,
    sweep_interval_ms,
)


def test_per_ip_limit_refuses_only_that_address_and_frees_on_release() -> None:
    quotas = ConnectionQuotas(max_connections=10, max_connections_per_ip=2)
    assert quotas.admit("10.0.0.1") is Admission.ACCEPTED
    assert quotas.admit("10.0.0.1") is Admission.ACCEPTED
    assert quotas.admit("10.0.0.1") is Admission.TOO_MANY_FOR_IP
    assert quotas.admit("10.0.0.2") is Admission.ACCEPTED
    assert quotas.total == 3 and quotas.count("10.0.0.1") == 2
    quotas.release("10.0.0.1")
    assert quotas.admit("10.0.0.1") is Admission.ACCEPTED


def test_accepting_stops_at_max_connections() -> None:
    quotas = ConnectionQuotas(max_connections=2, max_connections_per_ip=100)
    quotas.admit("a")
    assert quotas.accepting()
    quotas.admit("b")
    assert not quotas.accepting()
    quotas.release("a")
    assert quotas.accepting() and quotas.count("a") == 0


def test_queued_bytes_are_counted_in_chunks_and_pause_at_the_bound() -> None:
    queued = QueuedRequestBytes(limit_bytes=100_000)
    assert queued.chunks(0) == []
    assert queued.chunks(READ_CHUNK_BYTES * 2 + 5) == [READ_CHUNK_BYTES, READ_CHUNK_BYTES, 5]
    assert queued.has_room()
    queued.take(READ_CHUNK_BYTES)
    assert queued.has_room()  # non-strict: below the bound, one more chunk may be read
    queued.take(READ_CHUNK_BYTES)
    assert not queued.has_room()
    queued.give(READ_CHUNK_BYTES)
    assert queued.has_room()


def test_no_bound_with_minus_one() -> None:
    queued = QueuedRequestBytes(limit_bytes=-1)
    queued.take(10**12)
    assert queued.has_room()


def test_deadlines_by_phase() -> None:
    limits = ConnectionLimits(connections_max_idle_ms=1000, request_arrival_timeout_ms=200)
    assert overdue(Phase.IDLE, 0, 999, limits) is None
    assert overdue(Phase.IDLE, 0, 1000, limits) == "idle for 1000 ms (connections.max.idle.ms 1000)"
    assert overdue(Phase.ARRIVING, 0, 199, limits) is None
    assert "request arrival timeout 200 ms" in (overdue(Phase.ARRIVING, 0, 200, limits) or "")
    assert overdue(Phase.BUSY, 0, 10**9, limits) is None
    assert overdue(Phase.WAITING, 0, 10**9, limits) is None
    assert sweep_interval_ms(limits) == 20
    assert sweep_interval_ms(ConnectionLimits()) == 1000


def test_accept_backoff_doubles_to_its_cap_and_resets() -> None:
    backoff = AcceptBackoff(initial_ms=10, max_ms=100)
    assert [backoff.failed() for _ in range(6)] == [10, 20, 40, 80, 100, 100]
    backoff.succeeded()
    assert backoff.failed() == 10


def test_descriptor_budget_leaves_room_for_files() -> None:
    assert descriptor_budget(1024, 384) == 1024 - 384 - 128
    assert descriptor_budget(100, 384) == 1


# --- partition limits (diskless/broker/partition_limits.py) -------------------------------


def test_partition_limits_refuse_before_anything_is_written() -> None:
    import pytest

    from diskless.broker.partition_limits import PartitionPolicyViolation, check_partition_limits
    from metadata.errors import InvalidPartitions

    check_partition_limits("t", None, 10_000, 0, max_partitions_per_request=10_000, max_partitions=20_000)
    check_partition_limits("t", 10_000, 20_000, 10_000, max_partitions_per_request=10_000, max_partitions=20_000)
    with pytest.raises(PartitionPolicyViolation, match="Excessively large number of partitions per request") as caught:
        check_partition_limits("t", None, 10_001, 0, max_partitions_per_request=10_000, max_partitions=20_000)
    assert isinstance(caught.value, InvalidPartitions) and caught.value.requested_partitions == 10_001
    with pytest.raises(PartitionPolicyViolation, match="max.partitions 20000"):
        check_partition_limits("u", 1, 2, 20_000, max_partitions_per_request=10_000, max_partitions=20_000)
