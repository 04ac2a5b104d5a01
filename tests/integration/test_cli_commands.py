"""Issue O item 8: the CLI's gaps: --version, help, consume's kcat-like options, argument errors."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import uuid
from importlib.metadata import version

import pytest

from diskless.client import Producer


def diskless(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "diskless.cli.main", *args], input=stdin, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def summary(verb: str, count: int, topic: str) -> re.Pattern[str]:
    word = "record" if count == 1 else "records"
    return re.compile(rf"{verb} {count} {word} \(\d+(\.\d)? (B|KiB)\) (from|to) {topic} in \d+\.\d\d s \([\d,]+ records/s\)\n")


@pytest.fixture(scope="module")
def keyed_topic(shared_group_broker):
    """A 2-partition topic: partition p holds k{p}-{i}=v{i} at offset i (i < 5), timestamps 1000 * (i + 1)."""
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    assert diskless("topics", "create", topic, "--partitions", "2", "-b", shared_group_broker.bootstrap).returncode == 0

    async def fill() -> None:
        async with Producer(bootstrap_servers=shared_group_broker.bootstrap, linger_ms=0) as producer:
            for partition in (0, 1):
                for i in range(5):
                    await producer.send_and_wait(topic, b"v%d" % i, key=b"k%d-%d" % (partition, i), partition=partition,
                                                 timestamp_ms=1000 * (i + 1))

    asyncio.run(fill())
    return topic


def test_version():
    result = diskless("--version")
    assert (result.returncode, result.stdout) == (0, f"diskless {version('diskless')}\n")


def test_an_unknown_flag_shows_the_usage_of_its_command():
    result = diskless("serve", "--listn", "127.0.0.1:9092")
    assert result.returncode == 2
    assert result.stderr.startswith("usage: diskless serve [-h]")
    assert result.stderr.endswith("diskless serve: error: unrecognized arguments: --listn 127.0.0.1:9092 (did you mean --listen?)\n")


@pytest.mark.parametrize(("args", "error"), [
    (("consume", "t", "--max-messages", "-1"), "diskless consume: error: argument --max-messages: expected a positive integer, got '-1'"),
    (("consume", "t", "--offset", "middle"), "diskless consume: error: argument --offset: expected beginning, end, N or -N, got 'middle'"),
    (("consume", "t", "--offset", "1", "--from-beginning"),
     "diskless consume: error: argument --from-beginning: not allowed with argument --offset"),
    (("topics", "create", "t", "--partitions", "0"),
     "diskless topics create: error: argument --partitions: expected a positive integer, got '0'"),
])
def test_bad_arguments_are_refused_by_argparse(args, error):
    result = diskless(*args)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == error


def test_produce_help_states_compression_and_acks_defaults():
    text = " ".join(diskless("produce", "--help").stdout.split())
    assert "compression.type of the record batches: none, gzip, snappy, lz4 or zstd (default none)" in text
    assert "acks: 0 (do not wait), 1 (the leader appended) or all (durable; default all)" in text


def test_consume_from_beginning_until_end_with_a_format(shared_group_broker, keyed_topic):
    result = diskless("consume", keyed_topic, "-b", shared_group_broker.bootstrap, "--from-beginning", "--until-end",
                      "--format", r"%t %p:%o %T %k=%s %K/%S\n")
    assert result.returncode == 0, result.stderr
    lines = sorted(result.stdout.splitlines())
    assert lines == sorted(f"{keyed_topic} {p}:{i} {1000 * (i + 1)} k{p}-{i}=v{i} 4/2" for p in (0, 1) for i in range(5))
    assert summary("consumed", 10, keyed_topic).fullmatch(result.stderr)


@pytest.mark.parametrize(("start", "offsets"), [
    (("--offset", "2"), [2, 3, 4]),
    (("--offset", "-2"), [3, 4]),
    (("--offset", "beginning"), [0, 1, 2, 3, 4]),
    (("--offset", "end"), []),
    (("--timestamp", "3500"), [3, 4]),
])
def test_consume_one_partition_from_an_offset_or_time(shared_group_broker, keyed_topic, start, offsets):
    result = diskless("consume", keyed_topic, "-b", shared_group_broker.bootstrap, "--partition", "1", *start, "--until-end",
                      "--format", r"%p:%o\n")
    assert (result.returncode, result.stdout) == (0, "".join(f"1:{o}\n" for o in offsets)), result.stderr
    assert summary("consumed", len(offsets), keyed_topic).fullmatch(result.stderr)


def test_consume_max_messages_and_print_key(shared_group_broker, keyed_topic):
    result = diskless("consume", keyed_topic, "-b", shared_group_broker.bootstrap, "--partition", "0", "--from-beginning",
                      "--max-messages", "3", "--print-key", "--print-offset")
    assert (result.returncode, result.stdout) == (0, "0:0\tk0-0\tv0\n0:1\tk0-1\tv1\n0:2\tk0-2\tv2\n")


def test_consume_with_a_group_until_end(shared_group_broker, keyed_topic):
    group = f"g-{uuid.uuid4().hex[:8]}"
    first = diskless("consume", keyed_topic, "-b", shared_group_broker.bootstrap, "--group", group, "--from-beginning", "--until-end")
    assert first.returncode == 0, first.stderr
    assert sorted(first.stdout.splitlines()) == sorted(f"v{i}" for p in (0, 1) for i in range(5))
    again = diskless("consume", keyed_topic, "-b", shared_group_broker.bootstrap, "--group", group, "--until-end")
    assert (again.returncode, again.stdout) == (0, "")  # the group's committed offsets are at the end


def test_group_with_offset_options_is_one_line(shared_group_broker, keyed_topic):
    result = diskless("consume", keyed_topic, "-b", shared_group_broker.bootstrap, "--group", "g", "--offset", "2")
    assert (result.returncode, result.stderr) == (2, (
        "diskless consume: --partition, --offset and --timestamp choose partitions and offsets themselves: use them "
        "without --group (a group reads what it is assigned from its committed offsets)\n"))


def test_a_partition_that_does_not_exist(shared_group_broker, keyed_topic):
    result = diskless("consume", keyed_topic, "-b", shared_group_broker.bootstrap, "--partition", "2")
    assert (result.returncode, result.stderr) == (
        2, f"diskless consume: topic {keyed_topic} has partitions 0 to 1; there is no partition 2\n")


def test_topics_describe_of_a_missing_topic_is_a_sentence(shared_group_broker):
    b = shared_group_broker.bootstrap
    result = diskless("topics", "describe", "nosuch", "-b", b)
    assert (result.returncode, result.stdout, result.stderr) == (
        2, "", f"diskless topics: topic nosuch does not exist; diskless topics list -b {b} shows the topics there are\n")


def test_an_unknown_topic_config_gets_a_suggestion(shared_group_broker, keyed_topic):
    b = shared_group_broker.bootstrap
    typo = diskless("topics", "alter", keyed_topic, "--set", "retention.mss=1000", "-b", b)
    assert (typo.returncode, typo.stderr) == (2, "diskless topics: unknown config retention.mss; did you mean retention.ms?\n")
    unknown = diskless("topics", "create", "x", "--config", "colour=blue", "-b", b)
    assert (unknown.returncode, unknown.stderr) == (
        2, "diskless topics: unknown config colour; the topic configs are listed by: diskless topics describe TOPIC\n")
