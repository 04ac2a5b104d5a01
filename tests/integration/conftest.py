from __future__ import annotations

import uuid

import pytest

from .broker_process import BrokerProcess


@pytest.fixture
def broker(tmp_path):
    """A fresh `diskless serve` on embedded defaults (SQLite, bucket in a local directory)."""
    process = BrokerProcess(tmp_path / "data", "--log-retention-check-interval-ms", "500").start()
    try:
        yield process
    finally:
        process.close()


@pytest.fixture
def topic_name():
    return f"t-{uuid.uuid4().hex[:12]}"
