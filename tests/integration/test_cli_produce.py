"""Issue O item 3: `diskless produce` reads input in blocks, and both tools end with a summary."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys

from diskless.client import Consumer, TopicPartition


def diskless(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "diskless.cli.main", *args], input=stdin, capture_output=True, timeout=120,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})


async def read_all(bootstrap: str, topic: str, count: int) -> list[tuple[bytes | None, bytes | None]]:
    got: list[tuple[bytes | None, bytes | None]] = []
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        async with asyncio.timeout(60):
            while len(got) < count:
                for records in (await consumer.getmany(timeout_ms=1000)).values():
                    got.extend((r.key, r.value) for r in records)
    return got


def test_produce_sends_every_line_in_order_with_keys(shared_broker, create_topic):
    topic = create_topic(shared_broker.bootstrap, partitions=1)
    lines = [b"k%d:value %d" % (i % 7, i) for i in range(20_000)]
    stdin = b"\r\n".join(lines[:10]) + b"\r\n" + b"\n".join(lines[10:])  # CRLF lines too, and no final newline

    result = diskless("produce", topic, "-b", shared_broker.bootstrap, "--key-separator", ":", stdin=stdin)

    assert result.returncode == 0, result.stderr
    assert result.stdout == b""
    assert re.fullmatch(rb"produced 20000 records \(\d+\.\d KiB\) to " + topic.encode() + rb" in \d+\.\d\d s \([\d,]+ records/s\)\n",
                        result.stderr), result.stderr
    got = asyncio.run(read_all(shared_broker.bootstrap, topic, len(lines)))
    assert got == [tuple(line.split(b":", 1)) for line in lines]


def test_produce_with_a_progress_bar_still_ends_with_the_summary(shared_broker, create_topic):
    topic = create_topic(shared_broker.bootstrap, partitions=1)
    result = diskless("produce", topic, "-b", shared_broker.bootstrap, "--progress", "on", stdin=b"a\nb\r\nc")
    assert result.returncode == 0, result.stderr
    last = result.stderr.decode().replace("\r", "\n").splitlines()[-1]
    assert re.fullmatch(rf"produced 3 records \(3 B\) to {topic} in \d+\.\d\d s \([\d,]+ records/s\)", last), result.stderr


def test_consume_ends_with_a_summary(shared_broker, create_topic):
    topic = create_topic(shared_broker.bootstrap, partitions=1)
    assert diskless("produce", topic, "-b", shared_broker.bootstrap, stdin=b"one\ntwo\n").returncode == 0

    result = diskless("consume", topic, "-b", shared_broker.bootstrap, "--from-beginning", "--max-messages", "2")

    assert (result.returncode, result.stdout) == (0, b"one\ntwo\n")
    assert re.fullmatch(rb"consumed 2 records \(6 B\) from " + topic.encode() + rb" in \d+\.\d\d s \([\d,]+ records/s\)\n", result.stderr)
