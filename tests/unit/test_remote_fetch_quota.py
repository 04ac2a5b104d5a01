"""The remote fetch quota (KIP-956, tiering/fetch_quota.py): Kafka's windowed rate, its first
windows' allowance, and no bound by default."""

from __future__ import annotations

from diskless.broker.tiering.fetch_quota import UNBOUNDED, RemoteFetchQuota


def test_unbounded_by_default_records_nothing() -> None:
    quota = RemoteFetchQuota()
    assert quota.bytes_per_second == UNBOUNDED and not quota.bounded
    quota.record(10**15, 0.0)
    assert not quota.exceeded(0.0) and quota.rate(0.0) == 0.0


def test_rate_over_the_windows_counts_at_least_all_but_one_whole_window() -> None:
    quota = RemoteFetchQuota(100, windows=3, window_s=1.0)
    quota.record(150, 0.0)  # a first read: 0.1 s and the two missing whole windows
    assert quota.rate(0.1) == 150 / 2.1 and not quota.exceeded(0.1)
    quota.record(110, 0.5)  # same window: 260 B over 2.5 s
    assert quota.rate(0.5) == 104.0 and quota.exceeded(0.5)
    quota.record(0, 1.0)  # a second window opens
    assert quota.exceeded(2.0)  # 260 B over 2 s
    assert quota.rate(2.9) == 260 / 2.9  # past two windows: the time since the oldest began
    assert not quota.exceeded(3.1)  # the first window, 3 windows old, is gone: nothing left
    quota.record(90, 3.2)
    assert quota.rate(3.2) == 90 / 2.2 and not quota.exceeded(3.2)  # the windows of 1.0 (empty) and 3.2


def test_at_most_the_configured_windows_are_kept() -> None:
    quota = RemoteFetchQuota(10, windows=2, window_s=1.0)
    for second in range(5):
        quota.record(100, float(second))
    assert quota.rate(4.0) == 200.0  # the windows of seconds 3 and 4, over at least one second
    quota.bytes_per_second = UNBOUNDED  # a dynamic change takes effect at once
    assert not quota.exceeded(4.0)
