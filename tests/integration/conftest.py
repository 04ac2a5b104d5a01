from __future__ import annotations

import uuid

import pytest

from .broker_process import BrokerProcess


# --- metadata backends --------------------------------------------------------------------
#
# The broker fixtures below run on the metadata backend `metadata_backend` names: "sqlite"
# (the embedded default, metadata.db in the data dir) unless a module or test asks for both,
# one scenario written once:
#
#     pytestmark = ON_EVERY_METADATA_BACKEND            # every test of the module, or
#     @ON_EVERY_METADATA_BACKEND                        # one test
#
# On "postgresql" each broker a fixture starts gets `--metadata` with a database of its own
# on the session's PostgreSQL server (`postgres_server`), dropped after it. A test that starts
# brokers itself asks `metadata_url` for its URL.

METADATA_BACKENDS = ("sqlite", "postgresql")
ON_EVERY_METADATA_BACKEND = pytest.mark.parametrize("metadata_backend", METADATA_BACKENDS, indirect=True, scope="module")


@pytest.fixture(scope="module")
def metadata_backend(request) -> str:
    """"sqlite" unless parametrized (indirectly) with ON_EVERY_METADATA_BACKEND. Module-scoped,
    so that module-scoped brokers can follow it."""
    return getattr(request, "param", "sqlite")


def fresh_metadata_url(request, backend: str) -> str | None:
    """None on "sqlite" (the broker's default store in its data dir); on "postgresql" the URL of
    a new database on the session's server, dropped when `request`'s fixture is torn down
    (after the broker that used it: finalizers run last registered, first run)."""
    if backend == "sqlite":
        return None
    assert backend == "postgresql", backend
    server = request.getfixturevalue("postgres_server")
    url = server.create_database("broker")
    request.addfinalizer(lambda: server.drop_database(url))
    return url


def metadata_args(url: str | None) -> list[str]:
    return [] if url is None else ["--metadata", url]


@pytest.fixture
def metadata_url(request, metadata_backend) -> str | None:
    """For a test that starts its brokers itself: None on "sqlite" (keep the default, or pick a
    SQLite file of its own), else a fresh PostgreSQL database's URL for `--metadata`."""
    return fresh_metadata_url(request, metadata_backend)


@pytest.fixture
def broker(tmp_path, request, metadata_backend):
    """A fresh `diskless serve` on embedded defaults (SQLite, bucket in a local directory), or
    on PostgreSQL metadata when the test runs on every backend."""
    url = fresh_metadata_url(request, metadata_backend)
    process = BrokerProcess(tmp_path / "data", "--log-retention-check-interval-ms", "500", *metadata_args(url)).start()
    try:
        yield process
    finally:
        process.close()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory, request, metadata_backend):
    """One `diskless serve` for a whole module, for tests that neither stop nor kill it (each
    uses topics of its own)."""
    url = fresh_metadata_url(request, metadata_backend)
    process = BrokerProcess(tmp_path_factory.mktemp("shared") / "data", "--log-retention-check-interval-ms", "500", *metadata_args(url)).start()
    try:
        yield process
    finally:
        process.close()


# A group's first rebalance does not wait for more members (group.initial.rebalance.delay.ms=0):
# for group tests where Kafka's 3 s default delay is not what is under test.
NO_REBALANCE_DELAY = ("--group-initial-rebalance-delay-ms", "0")


@pytest.fixture
def group_broker(tmp_path, request, metadata_backend):
    """A fresh `diskless serve` without initial rebalance delay, for tests that restart or kill it."""
    url = fresh_metadata_url(request, metadata_backend)
    process = BrokerProcess(tmp_path / "data", *NO_REBALANCE_DELAY, *metadata_args(url)).start()
    try:
        yield process
    finally:
        process.close()


@pytest.fixture(scope="module")
def shared_group_broker(tmp_path_factory, request, metadata_backend):
    """One `diskless serve` without initial rebalance delay for a whole module (tests that
    neither stop nor kill it use topics and groups of their own)."""
    url = fresh_metadata_url(request, metadata_backend)
    process = BrokerProcess(tmp_path_factory.mktemp("groups") / "data", *NO_REBALANCE_DELAY, *metadata_args(url)).start()
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


class WireClient:
    """A raw Kafka connection for tests that hand-make requests: kio bodies through
    diskless.wire, one request at a time, blocking with a timeout."""

    def __init__(self, bootstrap: str, timeout_s: float = 10.0, client_id: str = "wire-test", source_host: str | None = None) -> None:
        import socket

        host, port = bootstrap.rsplit(":", 1)
        source = None if source_host is None else (source_host, 0)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s, source_address=source)
        self.timeout_s = timeout_s
        self.client_id = client_id
        self._correlation_id = 0

    def send(self, body) -> int:
        from diskless.wire import encode_request

        self._correlation_id += 1
        self.sock.sendall(encode_request(self._correlation_id, self.client_id, body))
        return self._correlation_id

    def recv_frame(self, timeout_s: float | None = None) -> bytes:
        self.sock.settimeout(self.timeout_s if timeout_s is None else timeout_s)
        size = int.from_bytes(self._recv_exactly(4), "big", signed=True)
        return self._recv_exactly(size)

    def recv(self, request_body, timeout_s: float | None = None):
        """The response to `request_body` (sent before with `send`), as a kio entity."""
        from diskless.wire import parse_response, response_type

        body_type = response_type(type(request_body).__api_key__, type(request_body).__version__)
        correlation_id, response = parse_response(self.recv_frame(timeout_s), body_type)
        assert correlation_id == self._correlation_id
        return response

    def request(self, body, timeout_s: float | None = None):
        self.send(body)
        return self.recv(body, timeout_s)

    def _recv_exactly(self, size: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < size:
            chunk = self.sock.recv(size - len(chunks))
            if not chunk:
                raise ConnectionError(f"connection closed after {len(chunks)} of {size} bytes")
            chunks += chunk
        return bytes(chunks)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def wire():
    """wire(bootstrap) -> a WireClient, closed after the test."""
    clients: list[WireClient] = []

    def connect(bootstrap: str, timeout_s: float = 10.0, client_id: str = "wire-test") -> WireClient:
        client = WireClient(bootstrap, timeout_s, client_id)
        clients.append(client)
        return client

    yield connect
    for client in clients:
        client.close()


# --- PostgreSQL ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def postgres_server():
    """One real PostgreSQL server for the test session (initdb + pg_ctl on 127.0.0.1, as the
    unprivileged postgres user); tests take a database of their own with `postgres_database`."""
    from .postgres_server import PostgresServer

    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def postgres_database(postgres_server):
    """The URL of a new, empty database on the session's server, dropped after the test."""
    url = postgres_server.create_database()
    try:
        yield url
    finally:
        postgres_server.drop_database(url)


# --- Spark -----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def spark():
    """One real local[2] SparkSession per test process, shared by every Spark module (a JVM
    takes 10-20 s to start); each module reads topics and buckets of its own, and bucket
    credentials travel as reader options, not through the environment."""
    import os
    import sys

    pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    from spark_reader import DisklessDataSource

    # The JVM and the Python workers it starts take their environment from here, once.
    spark_env = {"PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    saved = {name: os.environ.get(name) for name in spark_env}
    os.environ.update(spark_env)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("diskless-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.python.authenticate.socketTimeout", "120s")  # a worker starts slowly on a busy machine
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(DisklessDataSource)
    try:
        yield session
    finally:
        session.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
