"""The pure decisions of the TCP shell's limits (diskless/broker/connection_limits.py)."""

from __future__ import annotations

import math

import pytest

from diskless.broker.connection_limits import (
    INT32_MAX,
    READ_CHUNK_BYTES,
    AcceptBackoff,
    Admission,
    ConnectionCreationRate,
    ConnectionLimits,
    ConnectionQuotas,
    InvalidPerIpOverrides,
    Phase,
    QueuedRequestBytes,
    ThrottleTimeAvg,
    descriptor_budget,
    normalize_address,
    overdue,
    parse_per_ip_overrides,
    resolve_per_ip_overrides,
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


def test_at_the_bound_the_last_holder_not_waiting_reads_on() -> None:
    """Three requests hold twice the bound between them: two wait, so the third may read on
    (it would give bytes back); once it is answered the bytes still pass the bound and both
    others wait, so one waiter is let through (and only one)."""
    queued = QueuedRequestBytes(limit_bytes=3 * READ_CHUNK_BYTES)
    for _ in range(3):
        queued.take(READ_CHUNK_BYTES, first=True)
        queued.take(READ_CHUNK_BYTES)
    assert (queued.holders, queued.has_room()) == (3, False)
    assert not queued.may_read(holding=False)  # a new request waits for room
    assert not queued.may_read(holding=True)  # two others read on: they will give bytes back
    queued.waits(holding=True)
    queued.waits(holding=True)
    assert queued.may_read(holding=True) and not queued.may_progress()
    queued.give(2 * READ_CHUNK_BYTES)  # the third was answered: 4 chunks held, both holders wait
    assert (queued.holders, queued.has_room(), queued.may_progress()) == (2, False, True)
    queued.waits(holding=True, waiting=False)  # the first woken stops waiting and reads on
    assert queued.may_read(holding=True)
    queued.waits(holding=True, waiting=False)  # a second woken finds it reading, and waits again
    assert not queued.may_read(holding=True) and not queued.may_read(holding=False)
    queued.waits(holding=True)
    queued.take(READ_CHUNK_BYTES)
    queued.give(3 * READ_CHUNK_BYTES)  # it was answered: room again, for everyone
    assert (queued.holders, queued.used_bytes) == (1, 2 * READ_CHUNK_BYTES)
    assert queued.may_progress() and queued.may_read(holding=False)


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


# --- max.connections.per.ip.overrides ------------------------------------------------------------


def test_overrides_are_parsed_as_kafkas_csv_map() -> None:
    assert parse_per_ip_overrides("") == {}
    assert parse_per_ip_overrides("127.0.0.1:200, hostName:100 ,::1:5,") == {"127.0.0.1": 200, "hostName": 100, "::1": 5}
    assert parse_per_ip_overrides("10.0.0.1:1,10.0.0.1:3") == {"10.0.0.1": 3}  # the last one wins
    with pytest.raises(InvalidPerIpOverrides, match="expected HOST:COUNT, got 'hostName'"):
        parse_per_ip_overrides("127.0.0.1:2,hostName")
    with pytest.raises(InvalidPerIpOverrides, match="the count of 127.0.0.1 is not an int: 'many'"):
        parse_per_ip_overrides("127.0.0.1:many")
    with pytest.raises(InvalidPerIpOverrides, match="not an int: '2147483648'"):
        parse_per_ip_overrides("a:2147483648")
    with pytest.raises(InvalidPerIpOverrides):
        parse_per_ip_overrides("a:1,,b:2")


def test_overrides_match_by_address_and_names_are_resolved() -> None:
    asked: list[str] = []

    def resolve(host: str) -> list[str]:
        asked.append(host)
        return {"broker-host": ["10.0.0.7", "::ffff:10.0.0.8"], "localhost": ["127.0.0.1", "::1"]}.get(host, [])

    overrides = {"0:0:0:0:0:0:0:1": 9, "[fe80::2]": 4, "broker-host": 3, "nowhere.invalid": 1, "10.0.0.9": 0}
    by_address, unresolved = resolve_per_ip_overrides(overrides, resolve)
    assert by_address == {"::1": 9, "fe80::2": 4, "10.0.0.7": 3, "10.0.0.8": 3, "10.0.0.9": 0}
    assert unresolved == ["nowhere.invalid"] and asked == ["broker-host", "nowhere.invalid"]
    assert normalize_address("::ffff:127.0.0.1") == "127.0.0.1" and normalize_address("a-host") == "a-host"


def test_an_override_replaces_the_default_limit_for_its_address_only() -> None:
    quotas = ConnectionQuotas(max_connections=100, max_connections_per_ip=2, per_ip_overrides={"10.0.0.1": 4, "10.0.0.3": 0})
    assert [quotas.admit("10.0.0.1") for _ in range(5)] == [Admission.ACCEPTED] * 4 + [Admission.TOO_MANY_FOR_IP]
    assert [quotas.admit("10.0.0.2") for _ in range(3)] == [Admission.ACCEPTED] * 2 + [Admission.TOO_MANY_FOR_IP]
    assert quotas.admit("10.0.0.3") is Admission.TOO_MANY_FOR_IP  # 0: no connection from it
    assert quotas.total == 6 and quotas.limit_for("10.0.0.1") == 4 and quotas.limit_for("10.0.0.9") == 2
    quotas.per_ip_overrides = {}  # changed at run time: open connections stay, new ones follow the new limits
    assert quotas.admit("10.0.0.1") is Admission.TOO_MANY_FOR_IP and quotas.count("10.0.0.1") == 4
    assert quotas.admit("10.0.0.3") is Admission.ACCEPTED


# --- max.connection.creation.rate ---------------------------------------------------------------


def test_a_fresh_rate_lets_ten_windows_worth_through_then_throttles_to_the_quota() -> None:
    # Kafka's Rate: 11 samples of 1 s; a window younger than 10 s counts as 10 s. At 2/s the
    # first 20 connections at t=0 pass (20 / 10 s = 2/s), the 21st measures 2.1/s and waits
    # (2.1 - 2) / 2 x 10000 ms = 500 ms.
    rate = ConnectionCreationRate(max_rate=2)
    assert [rate.record(0) for _ in range(20)] == [0] * 20
    assert rate.rate(0) == 2.0
    assert rate.record(0) == 500
    # The next, after that wait: 22 in a window of 10.5 s, 2.095/s: 500 ms again.
    assert rate.record(500) == 500
    # A new sample begins at 1000 ms: the window is 10 s again and 23/10 = 2.3/s; the wait,
    # 0.15 x 10000 = 1500 ms, is bounded by one sample window (quota.window.size.seconds).
    assert rate.record(1000) == 1000 and rate.window_size_ms(1000) == 10_000


def test_the_acceptor_serves_a_burst_at_the_times_kafka_would() -> None:
    # 60 connections at once at 5/s, each served after its own wait, the next accepted then:
    # 50 at once, the rest of the first second at 5/s (200 ms apart), then one a second (each
    # wait bounded by the sample window) while the burst is in the 11 s window.
    rate = ConnectionCreationRate(max_rate=5)
    now_ms, served_ms = 0, []
    for _ in range(60):
        now_ms += rate.record(now_ms)
        served_ms.append(now_ms)
    assert served_ms[:50] == [0] * 50
    assert served_ms[50:] == [200, 400, 600, 800, 1000, 2000, 3000, 4000, 5000, 6000]


def test_the_rate_forgets_connections_older_than_its_samples() -> None:
    rate = ConnectionCreationRate(max_rate=1)
    assert [rate.record(0) for _ in range(10)] == [0] * 10
    assert rate.record(0) == 1000
    # 11 s later every sample is obsolete: a fresh window, the next ten pass again.
    assert [rate.record(11_000) for _ in range(10)] == [0] * 10
    assert rate.rate(11_000) == 1.0


def test_a_quota_of_zero_delays_every_connection_one_window_and_the_default_none() -> None:
    zero = ConnectionCreationRate(max_rate=0)
    assert [zero.record(t) for t in (0, 1000, 2000)] == [1000, 1000, 1000]
    unlimited = ConnectionCreationRate(max_rate=INT32_MAX)
    assert all(unlimited.record(0) == 0 for _ in range(100_000))
    unlimited.max_rate = 100  # lowered at run time: the connections already counted count
    assert unlimited.record(0) == 1000


def test_throttle_time_average_is_of_the_non_zero_waits_in_the_metric_window() -> None:
    average = ThrottleTimeAvg()  # Kafka's default metric window: 2 samples of 30 s
    assert math.isnan(average.value(0))
    average.record(500, 0)
    average.record(1000, 10_000)
    assert average.value(10_000) == 750.0
    average.record(200, 30_000)  # a second sample
    assert average.value(30_000) == 1700 / 3
    assert average.value(59_999) == 1700 / 3
    assert average.value(60_000) == 200.0  # the first sample is 60 s old: obsolete
    assert math.isnan(average.value(90_000))
