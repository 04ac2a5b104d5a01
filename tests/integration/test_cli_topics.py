"""Issue O item 4: a missing topic fails fast with a sentence; auto.create.topics.enable as in Kafka."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from .broker_process import BrokerProcess


def diskless(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    # The timeout is the deadline: the client alone would wait 60 s (max_block_ms) for the topic.
    return subprocess.run([sys.executable, "-m", "diskless.cli.main", *args], input=stdin.decode(), capture_output=True,
                          text=True, timeout=30, env={**os.environ, "PYTHONUNBUFFERED": "1"})


@pytest.fixture(scope="module")
def strict_broker(tmp_path_factory):
    """A broker with auto.create.topics.enable=false."""
    process = BrokerProcess(tmp_path_factory.mktemp("strict") / "data", "--auto-create-topics", "false").start()
    yield process
    process.close()


@pytest.mark.parametrize("command", [
    ("produce",),
    ("consume",),
    ("consume", "--group", "g-1"),
    ("consume", "--from-beginning", "--max-messages", "1"),
])
def test_a_missing_topic_fails_fast_with_how_to_create_it(strict_broker, command):
    topic = f"missing-{uuid.uuid4().hex[:8]}"
    result = diskless(command[0], topic, *command[1:], "-b", strict_broker.bootstrap, stdin=b"hello\n")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        f"diskless {command[0]}: topic {topic} does not exist and the broker does not create topics on use; "
        f"create it with: diskless topics create {topic} -b {strict_broker.bootstrap}\n"
    )


def test_by_default_the_broker_creates_a_topic_a_producer_names(shared_broker):
    topic = f"auto-{uuid.uuid4().hex[:8]}"
    produced = diskless("produce", topic, "-b", shared_broker.bootstrap, stdin=b"hello\n")
    assert produced.returncode == 0, produced.stderr
    assert produced.stderr.splitlines()[0] == (
        f"diskless produce: topic {topic} did not exist; the broker created it with 1 partition(s) (auto.create.topics.enable)"
    )
    consumed = diskless("consume", topic, "-b", shared_broker.bootstrap, "--from-beginning", "--max-messages", "1")
    assert (consumed.returncode, consumed.stdout) == (0, "hello\n")
    assert "did not exist" not in consumed.stderr


def test_an_invalid_topic_name_is_one_line(shared_broker):
    result = diskless("produce", "bad/name", "-b", shared_broker.bootstrap, stdin=b"x\n")
    assert (result.returncode, result.stderr) == (
        2, "diskless produce: 'bad/name' is not a valid topic name: at most 249 letters, digits, '.', '_' or '-'\n"
    )
