"""Issue O item 1: two brokers on one data directory. Both processes are real `diskless serve`."""

from __future__ import annotations

import subprocess
import sys

from .broker_process import BrokerProcess, free_port


def serve(data_dir, *extra: str) -> subprocess.CompletedProcess[str]:
    """A `diskless serve` expected to refuse to start: its exit code and output."""
    command = [sys.executable, "-m", "diskless.cli.main", "serve", "--listen", f"127.0.0.1:{free_port()}", "--data-dir", str(data_dir), *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def test_second_broker_on_a_data_dir_is_refused_until_the_first_dies(tmp_path):
    data_dir = tmp_path / "data"
    first = BrokerProcess(data_dir).start()
    try:
        second = serve(data_dir)
        assert second.returncode == 2
        assert second.stdout == ""
        assert second.stderr == (
            f"diskless serve: data directory {data_dir} is in use by process {first.process.pid} (another broker); "
            "stop it or use another data directory\n"
        )
        first.kill()  # SIGKILL: no clean shutdown; the kernel drops the lock
        third = BrokerProcess(data_dir).start()
        assert third.stop() == 0
    finally:
        first.close()


def test_data_dir_of_another_node_id_is_refused(tmp_path):
    data_dir = tmp_path / "data"
    broker = BrokerProcess(data_dir).start()
    assert broker.stop() == 0
    meta = (data_dir / "meta.properties").read_text()
    cluster_id = meta.split("cluster.id=")[1].split()[0]
    directory_id = meta.split("directory.id=")[1].split()[0]

    other = serve(data_dir, "--node-id", "2")

    assert other.returncode == 2
    assert other.stderr == (
        f"diskless serve: data directory {data_dir} belongs to node.id 1, not 2 (see {data_dir}/meta.properties); "
        "use that node.id or another data directory\n"
    )
    assert (data_dir / "meta.properties").read_text() == f"version=1\ncluster.id={cluster_id}\nnode.id=1\ndirectory.id={directory_id}\n"
