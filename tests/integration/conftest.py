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


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    """One `diskless serve` for a whole module, for tests that neither stop nor kill it (each
    uses topics of its own)."""
    process = BrokerProcess(tmp_path_factory.mktemp("shared") / "data", "--log-retention-check-interval-ms", "500").start()
    try:
        yield process
    finally:
        process.close()


@pytest.fixture
def topic_name():
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def create_topic():
    """create_topic(bootstrap, partitions=3, configs=None) -> a new random topic's name, made
    through confluent-kafka's AdminClient (CreateTopics)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    def create(bootstrap: str, partitions: int = 3, configs: dict[str, str] | None = None) -> str:
        name = f"t-{uuid.uuid4().hex[:12]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        futures = admin.create_topics([NewTopic(name, partitions, 1, config=configs or {})], operation_timeout=10)
        futures[name].result(timeout=20)
        return name

    return create
