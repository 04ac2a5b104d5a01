"""Issue O item 5: a user error is one line on stderr, exit code 2, and nothing written."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest

from .broker_process import BrokerProcess, free_port


def diskless(*args: str, env: dict[str, str] | None = None, cwd=None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([sys.executable, "-m", "diskless.cli.main", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})}, cwd=cwd)


@pytest.mark.parametrize(("flags", "line"), [
    (("--object-store", "foo://x"),
     "--object-store: invalid object store URL 'foo://x': unsupported scheme 'foo'; use file:// or s3://"),
    (("--object-store", "file://bucket"),
     "--object-store: invalid object store URL 'file://bucket': file URLs name an absolute path, file:///abs/path; "
     "got host 'bucket' (a relative path is not allowed)"),
    (("--object-store", "s3://Bad_Bucket"),
     "--object-store: invalid object store URL 's3://Bad_Bucket': bad bucket name 'Bad_Bucket': 3 to 63 lowercase letters, "
     "digits, '.' or '-', starting and ending with a letter or digit"),
    (("--metadata", "postgres://x"),
     "--metadata: metadata URL 'postgres://x': name one database: postgresql://USER:PASSWORD@HOST:PORT/DATABASE"),
    (("--log-level", "verbose"), "--log-level: expected DEBUG, INFO, WARNING or ERROR, got 'verbose'"),
    (("--listen", "9092"), "--listen: expected HOST:PORT, got '9092'"),
    (("--node-id", "one"), "--node-id: expected an integer, got 'one'"),
    (("--num-partitions", "0"), "--num-partitions: expected at least 1, got 0"),
    (("--group-consumer-session-timeout-ms", "0"), "--group-consumer-session-timeout-ms: expected at least 1, got 0"),
])
def test_serve_refuses_a_bad_setting_in_one_line_and_writes_nothing(tmp_path, flags, line):
    data_dir = tmp_path / "data"
    result = diskless("serve", "--data-dir", str(data_dir), *flags)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", f"diskless serve: {line}\n")
    assert not data_dir.exists()


def test_bad_value_is_blamed_on_its_source(tmp_path):
    config = tmp_path / "diskless.toml"
    config.write_text('listen = "nope"\nnode_id = "two"\ndata_dir = 5\n')
    data_dir = tmp_path / "data"

    from_file = diskless("serve", "--config", str(config), "--data-dir", str(data_dir), "--node-id", "1")
    assert (from_file.returncode, from_file.stderr) == (2, f"diskless serve: listen in {config}: expected HOST:PORT, got 'nope'\n")

    from_env = diskless("serve", "--config", str(config), "--listen", "127.0.0.1:0", "--data-dir", str(data_dir),
                        env={"DISKLESS_NODE_ID": "x"})
    assert (from_env.returncode, from_env.stderr) == (2, "diskless serve: DISKLESS_NODE_ID: expected an integer, got 'x'\n")

    wrong_type = diskless("serve", "--config", str(config), "--listen", "127.0.0.1:0", "--node-id", "1")
    assert (wrong_type.returncode, wrong_type.stderr) == (2, f"diskless serve: data_dir in {config}: expected a directory path, got 5\n")
    assert not data_dir.exists()


def test_ready_line_shows_the_absolute_object_store_url(tmp_path):
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        deadline = time.monotonic() + 30  # the port opens a moment before the line is logged
        while not (ready := [line for line in broker.log_text().splitlines() if " ready on " in line]):
            assert time.monotonic() < deadline, broker.log_text()
            time.sleep(0.02)
    finally:
        assert broker.stop() == 0
    assert len(ready) == 1
    assert ready[0].endswith(f", data in {tmp_path / 'data'}, object store file://{tmp_path / 'data' / 'bucket'}")


def test_describe_with_http_when_the_admin_endpoint_is_off(shared_broker, create_topic):
    topic = create_topic(shared_broker.bootstrap, partitions=1)
    http = f"127.0.0.1:{free_port()}"
    result = diskless("topics", "describe", topic, "-b", shared_broker.bootstrap, "--http", http)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        f"diskless topics: no admin HTTP endpoint answers at http://{http}; start the broker with --http {http}, or leave out --http\n"
    )


def test_an_object_store_that_does_not_answer_is_a_warning_at_start(tmp_path):
    closed = free_port()
    url = f"s3://diskless/x?endpoint_url=http://127.0.0.1:{closed}"
    broker = BrokerProcess(tmp_path / "data", "--object-store", url,
                           env={"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}).start()
    try:
        deadline = time.monotonic() + 30
        while " ready on " not in broker.log_text():
            assert time.monotonic() < deadline, broker.log_text()
            time.sleep(0.02)
    finally:
        assert broker.stop() == 0
    (warning,) = [line for line in broker.log_text().splitlines() if " WARNING " in line]
    assert re.search(rf"WARNING diskless: object store {re.escape(url)}&region=us-east-1 does not answer "
                     r"\(object store unavailable: .+\); starting anyway: uploads retry until it does$", warning), warning
