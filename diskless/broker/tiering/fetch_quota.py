"""The broker's quota on bytes fetched from the bucket (Kafka's KIP-956, RLMQuotaManager):
`remote.log.manager.fetch.max.bytes.per.second` over all partitions, measured as Kafka's
quotas measure a rate, over `remote.log.manager.fetch.quota.window.num` windows of
`remote.log.manager.fetch.quota.window.size.seconds`. Sans-IO: the caller passes the time.

While the rate is over the bound, a fetch that would read a partition's history from the
bucket reads nothing for it (as Kafka's ReplicaManager skips the remote read): the partition
answers no records, so the consumer comes back after its fetch's wait, and hot-tail fetches of
other partitions keep the broker's and the bucket's time. The default bound is Kafka's, no bound.

The rate is Kafka's (quotas/rate.py): a reader that starts may read `windows - 1` windows'
worth at once before it is held back.
"""

from __future__ import annotations

from ..quotas.rate import Rate

UNBOUNDED = 2**63 - 1  # Long.MAX_VALUE: Kafka's default, no quota


class RemoteFetchQuota:
    __slots__ = ("bytes_per_second", "_rate")

    def __init__(self, bytes_per_second: int = UNBOUNDED, *, windows: int = 11, window_s: float = 1.0) -> None:
        self.bytes_per_second = bytes_per_second
        self._rate = Rate(windows, round(window_s * 1000))

    @property
    def bounded(self) -> bool:
        return self.bytes_per_second < UNBOUNDED

    def record(self, size_bytes: int, now_s: float) -> None:
        """Bytes read from the bucket for a fetch."""
        if self.bounded:
            self._rate.record(size_bytes, round(now_s * 1000))

    def rate(self, now_s: float) -> float:
        """Bytes per second over the kept windows (Kafka's Rate.measure)."""
        return self._rate.measure(round(now_s * 1000))

    def exceeded(self, now_s: float) -> bool:
        """Whether a fetch must not read from the bucket now."""
        return self.bounded and self.rate(now_s) > self.bytes_per_second
