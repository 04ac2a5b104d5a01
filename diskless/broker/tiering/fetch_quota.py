"""The broker's quota on bytes fetched from the bucket (Kafka's KIP-956, RLMQuotaManager):
`remote.log.manager.fetch.max.bytes.per.second` over all partitions, measured as Kafka's
quotas measure a rate, over `remote.log.manager.fetch.quota.window.num` windows of
`remote.log.manager.fetch.quota.window.size.seconds`. Sans-IO: the caller passes the time.

While the rate is over the bound, a fetch that would read a partition's history from the
bucket reads nothing for it (as Kafka's ReplicaManager skips the remote read): the partition
answers no records, so the consumer comes back after its fetch's wait, and hot-tail fetches of
other partitions keep the broker's and the bucket's time. The default bound is Kafka's, no bound.

Kafka's Rate: samples of one window each, at most `windows` kept; the rate is their bytes over
the time since the oldest began, counted as at least `windows - 1` whole windows, so a reader
that starts may read that many windows' worth at once before it is held back.
"""

from __future__ import annotations

from collections import deque

UNBOUNDED = 2**63 - 1  # Long.MAX_VALUE: Kafka's default, no quota


class RemoteFetchQuota:
    __slots__ = ("bytes_per_second", "_samples", "_window_s", "_windows")

    def __init__(self, bytes_per_second: int = UNBOUNDED, *, windows: int = 11, window_s: float = 1.0) -> None:
        self.bytes_per_second = bytes_per_second
        self._windows = windows
        self._window_s = window_s
        self._samples: deque[list[float]] = deque()  # [window start, bytes]

    @property
    def bounded(self) -> bool:
        return self.bytes_per_second < UNBOUNDED

    def record(self, size_bytes: int, now_s: float) -> None:
        """Bytes read from the bucket for a fetch."""
        if not self.bounded:
            return
        if not self._samples or now_s - self._samples[-1][0] >= self._window_s:
            self._samples.append([now_s, 0.0])
            while len(self._samples) > self._windows:
                self._samples.popleft()
        self._samples[-1][1] += size_bytes

    def rate(self, now_s: float) -> float:
        """Bytes per second over the kept windows (Kafka's Rate.measure)."""
        oldest_allowed = now_s - self._windows * self._window_s
        while self._samples and self._samples[0][0] < oldest_allowed:
            self._samples.popleft()
        if not self._samples:
            return 0.0
        elapsed = max(now_s - self._samples[0][0], (self._windows - 1) * self._window_s)
        return sum(s[1] for s in self._samples) / elapsed

    def exceeded(self, now_s: float) -> bool:
        """Whether a fetch must not read from the bucket now."""
        return self.bounded and self.rate(now_s) > self.bytes_per_second
