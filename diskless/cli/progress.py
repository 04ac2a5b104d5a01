"""Progress and summaries for `diskless produce` and `diskless consume`.

A progress bar (records, bytes, rates) is drawn on standard error only when a person is
watching: standard error is a terminal and the records neither come from one nor go to one
(a bar between lines someone types or reads helps nobody). Piped, the commands are silent until the one summary
line at the end, which always goes to standard error so standard output stays data only.
Updates come once per block of records, never per record.
"""

from __future__ import annotations

import sys
import time
from typing import IO, Any


def human_bytes(size_bytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size_bytes) < 1024 or unit == "GiB":
            return f"{size_bytes:.0f} {unit}" if unit == "B" else f"{size_bytes:.1f} {unit}"
        size_bytes /= 1024
    raise AssertionError("unreachable")


def want_progress(choice: str, stderr: IO[str], records: IO[Any]) -> bool:
    """`choice` is auto, on or off; auto draws a bar when stderr is a terminal and the stream
    the records come from (produce: stdin) or go to (consume: stdout) is not."""
    if choice != "auto":
        return choice == "on"
    return stderr.isatty() and not records.isatty()


class Progress:
    """Counts records and bytes; draws a tqdm bar when `enabled`; writes the summary line."""

    def __init__(self, verb: str, topic: str, *, enabled: bool, stream: IO[str] | None = None) -> None:
        self.verb = verb
        self.topic = topic
        self.records = 0
        self.size_bytes = 0
        self.stream = stream or sys.stderr
        self._started = time.monotonic()
        self._bar: Any = None
        if enabled:
            from tqdm import tqdm  # only when drawing: piped runs do not pay for the import

            self._bar = tqdm(
                desc=verb, unit=" records", unit_scale=True, file=self.stream, leave=False, dynamic_ncols=True,
                bar_format="{desc}: {n_fmt}{unit} [{elapsed}, {rate_fmt}{postfix}]",
            )

    def add(self, records: int, size_bytes: int) -> None:
        self.records += records
        self.size_bytes += size_bytes
        if self._bar is not None:
            elapsed = max(time.monotonic() - self._started, 1e-9)
            self._bar.set_postfix_str(f"{human_bytes(self.size_bytes)}, {human_bytes(self.size_bytes / elapsed)}/s", refresh=False)
            self._bar.update(records)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def summary(self, preposition: str) -> str:
        elapsed = time.monotonic() - self._started
        rate = self.records / elapsed if elapsed > 0 else 0.0
        return (f"{self.verb} {self.records} record{'' if self.records == 1 else 's'} ({human_bytes(self.size_bytes)}) "
                f"{preposition} {self.topic} in {elapsed:.2f} s ({rate:,.0f} records/s)")

    def finish(self, preposition: str) -> None:
        self.close()
        print(self.summary(preposition), file=self.stream, flush=True)
