"""Where cleaning passes run: worker processes at a lower CPU priority.

A pass (cleaning.clean_partition) is pure Python and CPU-bound. In a thread of the broker it
would hold the interpreter lock against the event loop, and produce would slow to the pace of
the lock's switch interval; in a process of its own it takes a spare core, and at niceness
10 it yields that core to the broker whenever both want it (Kafka's cleaner threads run beside
request handling; here only a process can). The pass is a function of file paths: its
arguments and result cross by pickling, and its offset map lives and dies in the worker.

The I/O rate limit travels with each pass (a dynamic config), split evenly between the
workers. The stop flag is an event shared with the workers: set when the broker stops, a pass
ends at its next batch with CleaningStopped and leaves its .cleaned files for the next open. A
worker dies with the broker (PR_SET_PDEATHSIG), so no orphan writes into a data directory a
restarted broker already uses; a worker that dies alone fails its pass, and the next pass gets
a fresh worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import multiprocessing
import os
import signal
import sys
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from .cleaning import CleaningStopped, PassResult, Throttler, clean_partition

log = logging.getLogger(__name__)

NICENESS = 10
_PR_SET_PDEATHSIG = 1


class CleanerWorkers:
    """Up to `processes` worker processes, started at the first pass; one owner: the LogCleaner.
    Where processes cannot start (no /dev/shm for the stop event, no fork/exec), passes run in
    a thread of the broker instead, as before worker processes: slower for produce, still right."""

    def __init__(self, processes: int) -> None:
        self.processes = max(1, processes)
        self._context = multiprocessing.get_context("spawn")  # forking a threaded broker is unsafe
        self._stop: Any = None  # the event shared with the workers, made with the first pool
        self._closed = False
        self._pool: ProcessPoolExecutor | None = None
        self._thread_stop: threading.Event | None = None  # set once passes run in threads
        self._thread_throttle = Throttler(float("inf"))

    def resize(self, processes: int) -> None:
        """Another log.cleaner.threads: passes in flight finish in the old workers."""
        if max(1, processes) != self.processes:
            self.processes = max(1, processes)
            self._retire()

    async def clean(self, *args: Any, bytes_per_second: float, **kwargs: Any) -> PassResult:
        """clean_partition(*args, **kwargs) in a worker, paced at `bytes_per_second` over all workers."""
        if self._closed:
            raise CleaningStopped()
        if self._thread_stop is None:
            try:
                pool = self._start_pool()
                future = pool.submit(_run_pass, args, kwargs, bytes_per_second / self.processes)
            except (OSError, ImportError) as exc:  # ImportError: no working sem_open on this platform
                log.warning("log cleaner: worker processes cannot start here (%s); passes run in a thread of the broker", exc)
                self._thread_stop = threading.Event()
            else:
                try:
                    return await asyncio.wrap_future(future)
                except BrokenProcessPool as exc:
                    if self._closed:
                        raise CleaningStopped() from exc
                    if self._pool is pool:
                        self._retire()
                    raise
        self._thread_throttle.bytes_per_second = bytes_per_second
        return await asyncio.to_thread(clean_partition, *args, throttle=self._thread_throttle, stop=self._thread_stop, **kwargs)

    def close(self) -> None:
        """Passes in flight stop at their next batch; idle workers exit."""
        self._closed = True
        for stop in (self._stop, self._thread_stop):
            if stop is not None:
                stop.set()
        self._retire()

    def _start_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            if self._stop is None:
                self._stop = self._context.Event()
            self._pool = ProcessPoolExecutor(
                self.processes, mp_context=self._context, initializer=_start_worker, initargs=(self._stop, os.getpid())
            )
        return self._pool

    def _retire(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)  # a pass not begun yet begins stopped, or runs as it would have


# --- in the worker process ------------------------------------------------------------------

_stop: Any = None
_throttle: Throttler | None = None


def _start_worker(stop: Any, broker_pid: int) -> None:
    global _stop, _throttle
    _stop, _throttle = stop, Throttler(float("inf"), sleep=stop.wait)  # a stop ends a throttled wait
    if sys.platform == "linux":
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != broker_pid:  # the broker died before the line above
            os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the broker stops us
    with contextlib.suppress(OSError):
        os.nice(NICENESS)


def _run_pass(args: tuple[Any, ...], kwargs: dict[str, Any], bytes_per_second: float) -> PassResult:
    assert _throttle is not None
    _throttle.bytes_per_second = bytes_per_second
    return clean_partition(*args, throttle=_throttle, stop=_stop, **kwargs)
