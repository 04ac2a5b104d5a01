"""examples/orders_per_key_per_hour.py run as the README says (issue O, item 6): started by a
Python without PySpark, it goes on under the project's interpreter; a relative file:// URL is
the bucket under the current directory; the output ends with how many records came from the
bucket and that --bootstrap adds the tail."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .test_spark_bucket_writer import BucketWriter, make_batches

pytest.importorskip("pyspark")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "orders_per_key_per_hour.py"


def python_without_pyspark() -> str:
    """A Python that cannot import PySpark (the system one), or this one if there is none."""
    for candidate in (shutil.which("python3"), "/usr/bin/python3"):
        if candidate and subprocess.run([candidate, "-c", "import pyspark"], capture_output=True).returncode != 0:
            return candidate
    return sys.executable


def test_the_example_runs_as_written_with_a_relative_file_url(tmp_path: Path) -> None:
    writer = BucketWriter(f"file://{tmp_path}/data/bucket", tmp_path / "work")
    written = writer.write_partition("orders", 0, make_batches(8, 10), segment_bytes=2048)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "VIRTUAL_ENV"))}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    done = subprocess.run(
        [python_without_pyspark(), str(EXAMPLE), "file://./data/bucket", "--topic", "orders"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    assert last == (
        f"{len(written.records)} records of topic 'orders' read from the bucket at file://{tmp_path}/data/bucket;"
        " records not yet tiered are not included: add --bootstrap HOST:PORT to read them from a broker"
    )
    assert "|hour " in done.stdout and "|orders|" in done.stdout


def test_a_bad_url_is_one_line_and_no_spark(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "s3://user:secret@bucket"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "error: invalid object store URL 's3://user:secret@bucket': no credentials or port in an s3:// URL:"
        " credentials come from AWS_* variables, the endpoint from ?endpoint_url="
    ]
