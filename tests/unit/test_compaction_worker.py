"""Cleaning passes in worker processes (compaction/worker.py): the same result as in the
broker's own interpreter, at a lower CPU priority, stopped by the broker's stop, and never
outliving a broker that was killed (an orphan would write .cleaned files into a data
directory a restarted broker uses)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from hot_tier import Log, LogConfig
from hot_tier.records import Record, encode_batch

from diskless.broker.compaction.cleaning import CleaningStopped, Throttler, clean_partition, segment_views
from diskless.broker.compaction.config import CompactionRules
from diskless.broker.compaction.policy import plan
from diskless.broker.compaction.worker import NICENESS, CleanerWorkers

NOW = 10**12
RULES = CompactionRules(delete=False, delete_retention_ms=10**9)
DEADLINE_S = 30


def keyed_log(dir: Path, records: int = 300) -> Log:
    log = Log.open(dir, LogConfig(segment_bytes=2000), 0)
    for i in range(records):
        log.append(bytearray(encode_batch([Record(0, NOW, b"k%d" % (i % 7), b"v%d" % i)])), 0)
    log.roll(0)
    return log


def pass_arguments(log: Log) -> tuple[tuple, dict]:
    segments = list(log.segments)
    views = segment_views(segments)
    cleaning = plan(views, checkpoint=None, log_start_offset=0, high_watermark=log.log_end_offset, rules=RULES, now_ms=NOW)
    return (segments, views, cleaning, RULES), {"map_capacity": 100, "producer_last_offsets": {}, "now_ms": NOW}


def test_a_pass_in_a_worker_writes_what_a_pass_in_the_broker_writes(tmp_path: Path) -> None:
    here, there = keyed_log(tmp_path / "here"), keyed_log(tmp_path / "there")
    args, kwargs = pass_arguments(here)
    expected = clean_partition(*args, throttle=Throttler(float("inf")), stop=threading.Event(), **kwargs)
    args, kwargs = pass_arguments(there)

    async def run():
        workers = CleanerWorkers(2)
        try:
            first = await workers.clean(*args, bytes_per_second=float("inf"), **kwargs)
            again = await workers.clean(*args, bytes_per_second=float("inf"), **kwargs)  # the worker is reused
            return first, again
        finally:
            workers.close()

    first, again = asyncio.run(run())
    assert (first.end_offset, first.map_keys, first.cleaned, first.stats) == (300, 7, expected.cleaned, expected.stats)
    assert (again.end_offset, again.cleaned) == (300, expected.cleaned)
    assert len(expected.cleaned) > 3
    for (base, size), (other_base, other_size) in zip(expected.cleaned, first.cleaned):
        name = f"{base:020d}.log.cleaned"
        assert (base, size) == (other_base, other_size)
        assert (tmp_path / "here" / name).read_bytes() == (tmp_path / "there" / name).read_bytes()


def test_where_worker_processes_cannot_start_passes_run_in_a_thread(tmp_path: Path, monkeypatch, caplog) -> None:
    here, there = keyed_log(tmp_path / "here"), keyed_log(tmp_path / "there")
    args, kwargs = pass_arguments(here)
    expected = clean_partition(*args, throttle=Throttler(float("inf")), stop=threading.Event(), **kwargs)
    args, kwargs = pass_arguments(there)

    def no_processes(self):
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(CleanerWorkers, "_start_pool", no_processes)

    async def run():
        workers = CleanerWorkers(1)
        first = await workers.clean(*args, bytes_per_second=float("inf"), **kwargs)
        workers.close()
        with pytest.raises(CleaningStopped):
            await workers.clean(*args, bytes_per_second=float("inf"), **kwargs)
        return first

    assert (asyncio.run(run()).cleaned, expected.cleaned != []) == (expected.cleaned, True)
    assert [r.getMessage() for r in caplog.records if "worker processes cannot start" in r.getMessage()] == [
        "log cleaner: worker processes cannot start here ([Errno 38] Function not implemented); passes run in a thread of the broker"
    ]


def _stat(pid: int | str) -> list[str]:
    """/proc/PID/stat's fields from the third (state) on."""
    return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()


def _children(parent: int) -> set[int]:
    pids = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int(_stat(entry.name)[1]) == parent:
                    pids.add(int(entry.name))
            except (OSError, IndexError):
                continue
    return pids


def _alive(pid: int) -> bool:
    try:
        return _stat(pid)[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_the_worker_runs_at_a_lower_priority_and_a_stopped_broker_stops_its_passes(tmp_path: Path) -> None:
    log = keyed_log(tmp_path)
    args, kwargs = pass_arguments(log)
    before = _children(os.getpid())

    async def run() -> tuple[list[int], type]:
        workers = CleanerWorkers(1)
        await workers.clean(*args, bytes_per_second=float("inf"), **kwargs)
        spawned = [pid for pid in _children(os.getpid()) - before if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        niceness = [int(_stat(pid)[16]) for pid in spawned]
        # At 1 byte/s the next pass sleeps in the throttle after its first batch; the stop ends it.
        slow = asyncio.ensure_future(workers.clean(*args, bytes_per_second=1.0, **kwargs))
        await asyncio.sleep(0)
        workers.close()
        try:
            await asyncio.wait_for(slow, DEADLINE_S)
        except CleaningStopped as exc:
            return niceness, type(exc)
        return niceness, type(None)

    niceness, outcome = asyncio.run(run())
    assert niceness == [os.nice(0) + NICENESS]
    assert outcome is CleaningStopped


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG and /proc")
def test_a_killed_broker_takes_its_cleaning_workers_with_it(tmp_path: Path) -> None:
    """A process standing in for the broker starts a pass that would run for minutes
    (throttled) and is SIGKILLed once the pass is under way: its children must go too."""
    keyed_log(tmp_path, records=1000)
    script = textwrap.dedent(f"""
        import asyncio
        from pathlib import Path
        from hot_tier import Log, LogConfig
        from diskless.broker.compaction.cleaning import segment_views
        from diskless.broker.compaction.config import CompactionRules
        from diskless.broker.compaction.policy import plan
        from diskless.broker.compaction.worker import CleanerWorkers

        async def main():
            rules = CompactionRules(delete=False, delete_retention_ms=10**9)
            log = Log.open(Path({str(tmp_path)!r}), LogConfig(segment_bytes=2000), 0)
            segments = list(log.segments)
            views = segment_views(segments)
            cleaning = plan(views, checkpoint=None, log_start_offset=0, high_watermark=log.log_end_offset, rules=rules, now_ms={NOW})
            await CleanerWorkers(1).clean(segments, views, cleaning, rules, map_capacity=100, producer_last_offsets={{}},
                                          now_ms={NOW}, bytes_per_second=30000.0)

        asyncio.run(main())
    """)
    broker = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not any(tmp_path.glob("*.cleaned")):  # the pass is under way
            assert broker.poll() is None and time.monotonic() < deadline, "the worker never began its pass"
            time.sleep(0.05)
        children = _children(broker.pid)
        assert children
        os.kill(broker.pid, signal.SIGKILL)
        broker.wait(timeout=DEADLINE_S)
        while alive := [pid for pid in children if _alive(pid)]:
            assert time.monotonic() < deadline, f"{alive} outlived their broker"
            time.sleep(0.05)
    finally:
        broker.kill()
        broker.wait()
