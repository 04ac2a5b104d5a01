"""When a write-ahead PUT is hedged: after the 90th percentile of recent PUTs, never sooner
than the floor, and not before enough PUTs were timed."""

from __future__ import annotations

from diskless.broker.wal.hedge import MIN_SAMPLES, HedgePolicy


def test_no_hedge_until_enough_puts_were_timed() -> None:
    policy = HedgePolicy()
    for _ in range(MIN_SAMPLES - 1):
        policy.record(0.010)
        assert policy.delay() is None
    policy.record(0.010)
    assert policy.delay() == 0.010


def test_the_delay_is_the_quantile_of_the_window() -> None:
    policy = HedgePolicy(quantile=0.9, window=100)
    for ms in range(1, 101):  # 1..100 ms
        policy.record(ms / 1000)
    assert policy.delay() == 0.091
    for _ in range(100):  # the window forgets the old, slower ones
        policy.record(0.020)
    assert policy.delay() == 0.020


def test_never_sooner_than_the_floor() -> None:
    policy = HedgePolicy(floor_s=0.005)
    for _ in range(MIN_SAMPLES):
        policy.record(0.001)
    assert policy.delay() == 0.005
