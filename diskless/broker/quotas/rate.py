"""How Kafka measures a rate against a quota, and how long it throttles a client over it.
Sans-IO: every call takes the time.

`Rate` is Kafka's `Rate` over a `SampledStat` (org.apache.kafka.common.metrics.stats):
`samples` windows of `window_ms`; the rate is their total over the time since the oldest
window began, counted as at least `samples - 1` whole windows (Kafka's `Rate.windowSize`), so
a client that starts may send that many windows' worth at once before it is throttled.

`Rate.throttle_time_ms` is Kafka's `QuotaUtils.throttleTime`: how long the client must stay away
for the rate, measured over the same window, to fall back to the bound:
(rate - bound) / bound * window.

`TokenBucket` is Kafka's `TokenBucket` stat (KIP-599, controller mutations): a burst of
`rate * windows * window_s` tokens, refilled at `rate` per second; a mutation takes its
partitions' worth and may drive the bucket below zero once; the client is then throttled
until the bucket is back at zero.
"""

from __future__ import annotations

import math


class SampledStat:
    """Kafka's SampledStat (common.metrics.stats): `samples` windows of `window_ms`. An event
    goes to the current window, or starts the next one (reusing the oldest slot) once the
    current one is `window_ms` old; a window `samples` x `window_ms` old is reset (obsolete)
    before every measure. Keeps the sum and the count of the values recorded."""

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self._starts: list[int] = []  # each window's lastWindowMs
        self._sums: list[float] = []
        self._counts: list[int] = []
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        if not self._starts:
            self._add(now_ms)
        if now_ms - self._starts[self._current] >= self.window_ms:  # Sample.isComplete
            self._current = (self._current + 1) % self.samples
            if self._current >= len(self._starts):
                self._add(now_ms)
            else:
                self._reset(self._current, now_ms)
        self._sums[self._current] += value
        self._counts[self._current] += 1

    def purge(self, now_ms: int) -> None:
        """purgeObsoleteSamples: windows `samples` x `window_ms` old start again, empty, at now."""
        for i, start in enumerate(self._starts):
            if now_ms - start >= self.samples * self.window_ms:
                self._reset(i, now_ms)

    def total(self, now_ms: int) -> float:
        self.purge(now_ms)
        return sum(self._sums)

    def count(self, now_ms: int) -> int:
        self.purge(now_ms)
        return sum(self._counts)

    def oldest_start_ms(self, now_ms: int) -> int:
        if not self._starts:  # Kafka's oldest() makes a first window, as here
            self._add(now_ms)
        return min(self._starts)

    def _add(self, now_ms: int) -> None:
        self._starts.append(now_ms)
        self._sums.append(0.0)
        self._counts.append(0)

    def _reset(self, i: int, now_ms: int) -> None:
        self._starts[i], self._sums[i], self._counts[i] = now_ms, 0.0, 0


class Rate:
    """Kafka's Rate over a SampledStat: units per second, with the throttle time of a bound."""

    __slots__ = ("_stat", "last_record_ms")

    def __init__(self, samples: int, window_ms: int) -> None:
        self._stat = SampledStat(samples, window_ms)
        self.last_record_ms = 0

    def record(self, value: float, now_ms: int) -> None:
        self._stat.record(value, now_ms)
        self.last_record_ms = now_ms

    def window_size_ms(self, now_ms: int) -> int:
        """Kafka's Rate.windowSize: the time since the oldest window began, and at least
        samples - 1 full windows (the missing ones count as windows without events)."""
        self._stat.purge(now_ms)
        elapsed_ms = now_ms - self._stat.oldest_start_ms(now_ms)
        full_windows = elapsed_ms // self._stat.window_ms
        if full_windows < self._stat.samples - 1:
            elapsed_ms += (self._stat.samples - 1 - full_windows) * self._stat.window_ms
        return max(elapsed_ms, 1)

    def measure(self, now_ms: int) -> float:
        """Units per second (Kafka's Rate.measure)."""
        return self._stat.total(now_ms) * 1000 / self.window_size_ms(now_ms)

    def throttle_time_ms(self, bound: float, now_ms: int) -> int:
        """0 while the rate is within `bound`; else Kafka's QuotaUtils.throttleTime,
        (rate - bound) / bound x the rate's window, rounded half up."""
        rate = self.measure(now_ms)
        if rate <= bound:
            return 0
        return math.floor((rate - bound) / bound * self.window_size_ms(now_ms) + 0.5)


class TokenBucket:
    """Tokens for controller mutations (partitions created or deleted); one owner."""

    __slots__ = ("_last_ms", "_tokens", "_windows", "_window_s", "last_record_ms")

    def __init__(self, windows: int, window_ms: int) -> None:
        self._windows = windows
        self._window_s = window_ms / 1000.0
        self._tokens: float | None = None  # full at first use, when the rate is known
        self._last_ms = 0
        self.last_record_ms = 0

    def _refill(self, rate: float, now_ms: int) -> float:
        burst = rate * self._windows * self._window_s
        if self._tokens is None:
            self._tokens = burst
        else:
            self._tokens = min(burst, self._tokens + rate * max(0, now_ms - self._last_ms) / 1000.0)
        self._last_ms = now_ms
        return self._tokens

    def exceeded(self, rate: float, now_ms: int) -> bool:
        """Whether a mutation must be refused now (strict: the bucket is already below zero)."""
        return self._refill(rate, now_ms) < 0

    def record(self, partitions: float, rate: float, now_ms: int) -> None:
        self._tokens = self._refill(rate, now_ms) - partitions
        self.last_record_ms = now_ms

    def throttle_time_ms(self, rate: float, now_ms: int) -> int:
        tokens = self._refill(rate, now_ms)
        return 0 if tokens >= 0 else round(-tokens / rate * 1000.0)
