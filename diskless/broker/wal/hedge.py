"""When to hedge a write-ahead PUT: a second, identical PUT of the same key once the first has
taken longer than most recent PUTs did.

Object stores have long tails: most PUTs answer in milliseconds, a few in ten times that, and
write-ahead objects commit in seal order, so one slow PUT holds back every acks=all answer
behind it. A second PUT of the same bytes under the same key (`If-None-Match: *`, so whichever
lands second is refused and changes nothing) usually answers within the median; the first of
the two to succeed wins. Hedging after the `quantile` of the last `window` PUTs costs about
(1 - quantile) more requests.

Sans-IO: the writer records each PUT's time and asks `delay()` before the next.
"""

from __future__ import annotations

from collections import deque

MIN_SAMPLES = 20  # no hedging until this many PUTs were timed


class HedgePolicy:
    def __init__(self, quantile: float = 0.9, window: int = 200, floor_s: float = 0.005) -> None:
        self.quantile = quantile
        self.floor_s = floor_s  # never hedge sooner: a PUT cannot answer faster than a round trip
        self._times: deque[float] = deque(maxlen=window)

    def record(self, seconds: float) -> None:
        """How long a PUT took, from its start to its answer (or to the hedge's, if that won)."""
        self._times.append(seconds)

    def delay(self) -> float | None:
        """Seconds after which to send the hedge; None: not yet enough PUTs timed."""
        if len(self._times) < MIN_SAMPLES:
            return None
        ordered = sorted(self._times)
        return max(ordered[min(int(len(ordered) * self.quantile), len(ordered) - 1)], self.floor_s)
