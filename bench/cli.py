"""`diskless produce` and `diskless consume` beside kcat, as a person at a shell would run them.

    python bench/cli.py [--quick] [--lines N] [--rounds N] [--bootstrap HOST:PORT]

By default one `diskless serve` runs in a subprocess on embedded defaults (a fresh data
directory); with `--bootstrap`, a broker already running is used. N lines of text (default
200,000; `--quick` 50,000), each `line-<number>`, are written to a file, then each round:

- produce: `kcat -P -t T1 < lines` and `diskless produce T2 < lines`, each to its own fresh
  1-partition topic, acks=all and no compression for both (librdkafka's defaults), timed from
  the start of the process to its exit: start-up is part of what a person waits for. Each
  topic must then hold exactly N records.
- consume: `kcat -C -e -t T2` and `diskless consume T2 --from-beginning --until-end`, to
  /dev/null, each must print N lines.

Python's compiled bytecode is cached for our commands as on a person's machine (an interpreter
writes it on first use; here, under the work directory, after one untimed warm-up run), even
where the environment sets PYTHONDONTWRITEBYTECODE: compiling ~90 modules from source at every
start would add 0.1-0.2 s that no user pays. `--no-bytecode-cache` keeps the environment as it is.

Each figure is the best of `--rounds` rounds (the machine is shared; the best round is the least
disturbed). Ratios are ours / kcat's time (below 1: we are faster; the target for produce is 3).
The last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from diskless.client import Admin  # noqa: E402

DISKLESS = [sys.executable, "-m", "diskless.cli.main"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_broker(data_dir: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    process = subprocess.Popen([*DISKLESS, "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", str(data_dir),
                                "--log-level", "WARNING"], cwd=REPO)
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            raise SystemExit(f"the broker exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return process, f"127.0.0.1:{port}"
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit("the broker did not listen within 30 s") from None
            time.sleep(0.05)


async def create_topic(bootstrap: str) -> str:
    name = f"cli-bench-{uuid.uuid4().hex[:8]}"
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics(name, 1, {})
    return name


async def record_count(bootstrap: str, topic: str) -> int:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        latest = await admin.list_offsets(topic, "latest")
    return sum(found.offset for found in latest.values() if found is not None)


ENV = dict(os.environ)  # the environment of the timed commands (see bytecode_cache)


def bytecode_cache(directory: Path) -> None:
    """Let our commands cache their bytecode in `directory`, as they would on a user's machine."""
    ENV.pop("PYTHONDONTWRITEBYTECODE", None)
    ENV["PYTHONPYCACHEPREFIX"] = str(directory)


def timed(command: list[str], stdin_path: Path | None = None) -> tuple[float, bytes]:
    stdin = open(stdin_path, "rb") if stdin_path else subprocess.DEVNULL
    try:
        started = time.perf_counter()
        done = subprocess.run(command, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO, timeout=600, env=ENV)
        elapsed = time.perf_counter() - started
    finally:
        if stdin_path:
            stdin.close()
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited with {done.returncode}: {done.stderr.decode(errors='replace')}")
    return elapsed, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="50,000 lines, 2 rounds")
    parser.add_argument("--lines", type=int, help="lines to produce (default 200,000)")
    parser.add_argument("--rounds", type=int, help="rounds; each figure is the best (default 3)")
    parser.add_argument("--bootstrap", help="use this running broker instead of starting one")
    parser.add_argument("--no-bytecode-cache", action="store_true",
                        help="keep PYTHONDONTWRITEBYTECODE if set: every start compiles from source")
    args = parser.parse_args()
    lines = args.lines or (50_000 if args.quick else 200_000)
    rounds = args.rounds or (2 if args.quick else 3)
    kcat = shutil.which("kcat")
    if kcat is None:
        raise SystemExit("kcat is not installed (Debian package kcat; `make system-deps` installs it)")

    workdir = Path(tempfile.mkdtemp(prefix="diskless-cli-bench-"))
    broker = None
    try:
        if args.bootstrap:
            bootstrap = args.bootstrap
        else:
            broker, bootstrap = start_broker(workdir / "data")
        input_path = workdir / "lines.txt"
        input_path.write_bytes(b"".join(b"line-%d\n" % i for i in range(lines)))
        if not args.no_bytecode_cache:
            bytecode_cache(workdir / "pycache")
            warm_up = workdir / "warm-up.txt"
            warm_up.write_bytes(b"warm-up\n")
            warm_topic = asyncio.run(create_topic(bootstrap))
            timed([*DISKLESS, "produce", warm_topic, "-b", bootstrap], warm_up)  # untimed: writes the cache
            timed([*DISKLESS, "consume", warm_topic, "-b", bootstrap, "--from-beginning", "--until-end"])
        best: dict[str, float] = {}
        for round_number in range(1, rounds + 1):
            kcat_topic, our_topic = asyncio.run(create_topic(bootstrap)), asyncio.run(create_topic(bootstrap))
            figures = {
                "kcat_produce_s": timed([kcat, "-b", bootstrap, "-t", kcat_topic, "-P"], input_path)[0],
                "diskless_produce_s": timed([*DISKLESS, "produce", our_topic, "-b", bootstrap], input_path)[0],
            }
            for topic in (kcat_topic, our_topic):
                count = asyncio.run(record_count(bootstrap, topic))
                if count != lines:
                    raise SystemExit(f"topic {topic} holds {count} records, not {lines}")
            kcat_time, kcat_out = timed([kcat, "-b", bootstrap, "-t", our_topic, "-C", "-e", "-q"])
            our_time, our_out = timed([*DISKLESS, "consume", our_topic, "-b", bootstrap, "--from-beginning", "--until-end"])
            for who, out in (("kcat", kcat_out), ("diskless consume", our_out)):
                printed = out.count(b"\n")
                if printed != lines:
                    raise SystemExit(f"{who} printed {printed} lines, not {lines}")
            figures["kcat_consume_s"], figures["diskless_consume_s"] = kcat_time, our_time
            print(f"round {round_number}: " + ", ".join(f"{name} {value:.3f}" for name, value in figures.items()), flush=True)
            for name, value in figures.items():
                best[name] = min(best.get(name, value), value)
        result = {
            "lines": lines,
            "bytecode_cache": not args.no_bytecode_cache,
            **{name: round(value, 3) for name, value in best.items()},
            "produce_ratio": round(best["diskless_produce_s"] / best["kcat_produce_s"], 2),
            "consume_ratio": round(best["diskless_consume_s"] / best["kcat_consume_s"], 2),
        }
        print(f"produce {lines} lines: kcat {best['kcat_produce_s']:.3f} s, diskless produce {best['diskless_produce_s']:.3f} s "
              f"({result['produce_ratio']}x kcat's time; target 3x)")
        print(f"consume {lines} lines: kcat {best['kcat_consume_s']:.3f} s, diskless consume {best['diskless_consume_s']:.3f} s "
              f"({result['consume_ratio']}x)")
        print(json.dumps(result))
    finally:
        if broker is not None:
            broker.terminate()
            broker.wait(timeout=30)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
