"""Connection, memory and partition limits of a real `diskless serve` (issue N):

- max.connections pauses accepting (the extra connection waits, unanswered, until one closes)
  and max.connections.per.ip closes the extra connection, while earlier ones keep working;
- connections.max.idle.ms closes an idle connection, not a busy one;
- a slow sender (a byte at a time, then nothing) is cut after the request arrival deadline
  while a normal client produces and consumes throughout;
- 2,000 idle connections against a broker whose descriptor limit is 1024 (soft and hard): it
  stays up, logs a bounded number of lines, and a client connected before keeps working;
- CreateTopics over max.partitions.per.request is refused with Kafka's error, and a creation
  that fails half-way is rolled back so the broker starts again;
- a topic of 20,000 partitions is created, produced to, and the broker restarted (startup time
  and RSS printed; the broker must answer within STARTUP_DEADLINE_S).
"""

from __future__ import annotations

import resource
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kio.schema.api_versions.v3 import request as api_versions_v3
from kio.schema.errors import ErrorCode

from diskless.wire import encode_request, parse_response, response_type

from .broker_process import BrokerProcess, wait_for_port

DEADLINE_S = 20.0
STARTUP_DEADLINE_S = 45.0  # 20,000 partitions from a restart to the first Metadata answer
FLOOD_RSS_BOUND_MIB = 150  # a broker under 2,000 idle connections (60 MiB measured)
PARTITIONS_RSS_BOUND_MIB = 400  # a broker of 20,000 partitions (about 200 MiB measured)


# --- helpers -----------------------------------------------------------------------------------


def new_name() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


def api_versions_frame(correlation_id: int = 7) -> bytes:
    return encode_request(correlation_id, "limits", api_versions_v3.ApiVersionsRequest(client_software_name="limits", client_software_version="1"))


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    out = bytearray()
    while len(out) < size:
        chunk = sock.recv(size - len(out))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {size} bytes")
        out += chunk
    return bytes(out)


def answers(sock: socket.socket, timeout_s: float = DEADLINE_S) -> bool:
    """Send ApiVersions; True if answered within `timeout_s`, False if not (then the
    connection is left with a request in flight)."""
    sock.sendall(api_versions_frame())
    sock.settimeout(timeout_s)
    try:
        size = struct.unpack(">i", recv_exactly(sock, 4))[0]
    except TimeoutError:
        return False
    correlation_id, response = parse_response(recv_exactly(sock, size), response_type(18, 3))
    return correlation_id == 7 and response.error_code == ErrorCode.none


def read_answer(sock: socket.socket, timeout_s: float = DEADLINE_S) -> ErrorCode:
    sock.settimeout(timeout_s)
    size = struct.unpack(">i", recv_exactly(sock, 4))[0]
    return parse_response(recv_exactly(sock, size), response_type(18, 3))[1].error_code


def closed_by_peer(sock: socket.socket, deadline_s: float = DEADLINE_S) -> bool:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            if sock.recv(65536) == b"":
                return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False
    return False


def connect(broker: BrokerProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", broker.port), timeout=DEADLINE_S)


def connect_answered(broker: BrokerProcess) -> socket.socket:
    """A connection the broker answers, once it has let go of the readiness probe's."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        sock = connect(broker)
        try:
            if answers(sock):
                return sock
        except ConnectionError:
            pass
        sock.close()
        if time.monotonic() > deadline:
            raise AssertionError("no answered connection")
        time.sleep(0.02)  # the broker closes the probe's connection on its own schedule


def wait_for(condition, what: str, deadline_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)  # polling a log file or a process with a deadline: nothing to wait on


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


class ClientLoop:
    """A normal client: confluent-kafka producing (acks=all) and consuming in a thread until
    stopped; every acknowledged value must come back."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.acked: list[bytes] = []
        self.errors: list[str] = []
        self.rounds = 0
        self._stop = threading.Event()
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": new_name(), "enable.auto.commit": False})
        self.consumer.assign([TopicPartition(topic, 0, 0)])
        self.consumed: list[bytes] = []
        self.one_round()  # connects everything before the test does anything hostile
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> ClientLoop:
        self._thread.start()
        return self

    def one_round(self) -> None:
        def delivered(err, msg):
            if err is not None:
                self.errors.append(str(err))
            else:
                self.acked.append(msg.value())

        value = f"v-{self.rounds}".encode()
        self.producer.produce(self.topic, value=value, partition=0, on_delivery=delivered)
        if self.producer.flush(DEADLINE_S) != 0:
            self.errors.append(f"round {self.rounds}: not delivered within {DEADLINE_S}s")
        deadline = time.monotonic() + DEADLINE_S
        while len(self.consumed) < len(self.acked) and time.monotonic() < deadline:
            msg = self.consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                self.consumed.append(msg.value())
        if len(self.consumed) < len(self.acked):
            self.errors.append(f"round {self.rounds}: consumed {len(self.consumed)} of {len(self.acked)}")
        self.rounds += 1

    def _run(self) -> None:
        while not self._stop.is_set() and not self.errors:
            self.one_round()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2 * DEADLINE_S)
        self.consumer.close()
        assert self.errors == []
        assert self.consumed == self.acked and self.rounds >= 2


def create(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=DEADLINE_S)[name].result(timeout=120)


class LimitedBrokerProcess(BrokerProcess):
    """A broker started with RLIMIT_NOFILE set to `nofile` for both soft and hard limits, so it
    cannot raise it."""

    def __init__(self, *args, nofile: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.nofile = nofile

    def start(self) -> LimitedBrokerProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        nofile = self.nofile

        def limit() -> None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "diskless.cli.main", "serve", "--listen", self.bootstrap, "--data-dir", str(self.data_dir), *self.extra_args],
                stdout=log, stderr=subprocess.STDOUT, env=self.env, preexec_fn=limit,
            )  # fmt: skip
        wait_for_port(self.port, process=self.process)
        return self


@pytest.fixture
def start_broker(tmp_path):
    started: list[BrokerProcess] = []

    def start(*args: str, nofile: int | None = None) -> BrokerProcess:
        data = tmp_path / f"data-{len(started)}"
        process = BrokerProcess(data, *args) if nofile is None else LimitedBrokerProcess(data, *args, nofile=nofile)
        started.append(process.start())
        return process

    yield start
    for process in started:
        process.close()


# --- connections ------------------------------------------------------------------------------


def test_max_connections_per_ip_closes_the_extra_connection(start_broker) -> None:
    broker = start_broker("--max-connections-per-ip", "2")
    first = connect_answered(broker)
    second = connect(broker)
    assert answers(second)
    with connect(broker) as third:
        assert closed_by_peer(third)
    assert answers(first) and answers(second)
    first.close()
    wait_for(lambda: "too many connections from 127.0.0.1 (max.connections.per.ip 2)" in broker.log_text(), "the refusal line")
    with connect(broker) as again:  # a slot is free again
        wait_for(lambda: answers(again, timeout_s=2), "an answer on a freed slot")
    second.close()


def test_max_connections_pauses_accepting_until_a_connection_closes(start_broker) -> None:
    broker = start_broker("--max-connections", "2")
    first = connect_answered(broker)
    second = connect(broker)
    assert answers(second)
    third = connect(broker)  # the kernel completes it; the broker does not accept it yet
    assert not answers(third, timeout_s=1.0)
    assert answers(first) and answers(second)
    first.close()
    assert read_answer(third) == ErrorCode.none  # accepted once a slot freed; its request answered
    assert answers(second) and answers(third)
    assert "accepting paused: 2 connections open, the limit is 2" in broker.log_text()
    second.close()
    third.close()


def test_an_idle_connection_is_closed_after_connections_max_idle_ms(start_broker) -> None:
    broker = start_broker("--connections-max-idle-ms", "1000")
    busy, idle = connect(broker), connect(broker)
    assert answers(busy) and answers(idle)
    idle_since = time.monotonic()
    busy_until = idle_since + 2.5
    while time.monotonic() < busy_until:  # a request every 200 ms: never idle for 1 s
        assert answers(busy)
        time.sleep(0.2)  # the client's own pace, not a wait for the broker
    assert closed_by_peer(idle, deadline_s=0.1)
    closed_after = time.monotonic() - idle_since
    assert 1.0 <= closed_after
    assert answers(busy)
    assert closed_by_peer(busy, deadline_s=5.0)  # idle now: closed in turn
    busy.close()
    idle.close()


def test_a_slow_sender_is_cut_after_the_deadline_while_a_client_works(start_broker) -> None:
    broker = start_broker("--request-arrival-timeout-ms", "1500")
    topic = new_name()
    create(broker.bootstrap, topic, 1)
    client = ClientLoop(broker.bootstrap, topic).start()
    try:
        frame = api_versions_frame()
        with connect(broker) as slow:
            started = time.monotonic()
            for byte in frame[:6]:  # the size prefix and two bytes of the header, 100 ms apart
                slow.sendall(bytes([byte]))
                time.sleep(0.1)  # the slow sender's pace
            assert closed_by_peer(slow, deadline_s=10.0)
            assert time.monotonic() - started >= 1.5
        wait_for(lambda: "request arrival timeout 1500 ms" in broker.log_text(), "the slow sender's log line")
    finally:
        client.stop()
    assert broker.process is not None and broker.process.poll() is None


def test_requests_past_queued_max_request_bytes_wait_and_all_are_answered(start_broker) -> None:
    """Five clients each send most of a 400 KiB request, then the rest, against a bound of
    1 MiB: the broker reads some while the others wait, and answers every one, then a new
    client too (counted in chunks, the five could hold the bound between them, all waiting,
    and no request would ever be answered again)."""
    broker = start_broker("--queued-max-request-bytes", str(2**20))
    frames = [
        encode_request(7, "limits", api_versions_v3.ApiVersionsRequest(client_software_name="a" * (400 * 1024), client_software_version="1"))
        for _ in range(5)
    ]  # fmt: skip
    head = 300 * 1024
    senders = [connect_answered(broker) for _ in frames]
    try:
        for sock, frame in zip(senders, frames, strict=True):
            sock.sendall(frame[:head])
        threads = [threading.Thread(target=sock.sendall, args=(frame[head:],), daemon=True) for sock, frame in zip(senders, frames, strict=True)]
        for thread in threads:
            thread.start()
        assert [read_answer(sock) for sock in senders] == [ErrorCode.none] * 5
        for thread in threads:
            thread.join(DEADLINE_S)
        with connect(broker) as late:
            assert answers(late)
    finally:
        for sock in senders:
            sock.close()
    assert broker.process is not None and broker.process.poll() is None


@pytest.mark.slow
def test_two_thousand_idle_connections_with_1024_descriptors(start_broker) -> None:
    broker = start_broker(nofile=1024)
    topic = new_name()
    create(broker.bootstrap, topic, 1)
    client = ClientLoop(broker.bootstrap, topic)  # connected before the flood
    lines_before = len(broker.log_text().splitlines())
    flood: list[socket.socket] = []
    try:
        for _ in range(2000):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", broker.port))  # completes, waits in the backlog or in SYN retries
            flood.append(sock)
        client.start()
        wait_for(lambda: client.rounds >= 10 or client.errors, "ten produce-and-consume rounds during the flood", 60.0)
        assert broker.process is not None and broker.process.poll() is None
        log_lines = broker.log_text().splitlines()[lines_before:]
        rss = rss_mib(broker.process.pid)
        print(f"\n{len(log_lines)} log lines during the flood, RSS {rss:.0f} MiB")
        assert rss < FLOOD_RSS_BOUND_MIB
        assert len(log_lines) <= 20, log_lines[:30]
        assert any("accepting paused" in line for line in log_lines)
    finally:
        for sock in flood:
            sock.close()
        client.stop()
    with connect(broker) as fresh:  # once the flood is gone, new connections are served
        wait_for(lambda: answers(fresh, timeout_s=2), "a new connection answered after the flood")


# --- partitions -------------------------------------------------------------------------------


def create_error(bootstrap: str, topic: NewTopic) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    with pytest.raises(KafkaException) as raised:
        admin.create_topics([topic], operation_timeout=DEADLINE_S)[topic.topic].result(timeout=DEADLINE_S)
    return raised.value.args[0].code()


def test_create_topics_over_max_partitions_per_request_is_refused(start_broker) -> None:
    broker = start_broker()
    name = new_name()
    # Kafka refuses a request over its partition limit with POLICY_VIOLATION.
    assert create_error(broker.bootstrap, NewTopic(name, 10_001, 1)) == ErrorCode.policy_violation.value
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert name not in admin.list_topics(timeout=DEADLINE_S).topics
    assert not (broker.data_dir / "logs" / f"{name}-0").exists()
    create(broker.bootstrap, name, 2)
    future = admin.create_partitions([NewPartitions(name, 10_003)], operation_timeout=DEADLINE_S)[name]
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=DEADLINE_S)
    assert raised.value.args[0].code() == ErrorCode.policy_violation.value
    assert len(admin.list_topics(timeout=DEADLINE_S).topics[name].partitions) == 2
    # validate_only answers what the request itself would be answered.
    dry = admin.create_topics([NewTopic(new_name(), 100_000, 1)], validate_only=True, operation_timeout=DEADLINE_S)
    with pytest.raises(KafkaException) as raised:
        next(iter(dry.values())).result(timeout=DEADLINE_S)
    assert raised.value.args[0].code() == ErrorCode.policy_violation.value
    future = admin.create_partitions([NewPartitions(name, 100_000)], validate_only=True, operation_timeout=DEADLINE_S)[name]
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=DEADLINE_S)
    assert raised.value.args[0].code() == ErrorCode.policy_violation.value
    admin.create_partitions([NewPartitions(name, 5)], validate_only=True, operation_timeout=DEADLINE_S)[name].result(timeout=DEADLINE_S)
    assert len(admin.list_topics(timeout=DEADLINE_S).topics[name].partitions) == 2


def test_a_creation_failing_half_way_is_rolled_back_and_the_broker_restarts(start_broker) -> None:
    broker = start_broker()
    name = new_name()
    logs = broker.data_dir / "logs"
    (logs / f"{name}-3").write_bytes(b"not a directory")  # partition 3 cannot be opened
    assert create_error(broker.bootstrap, NewTopic(name, 6, 1)) == ErrorCode.unknown_server_error.value
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert name not in admin.list_topics(timeout=DEADLINE_S).topics
    assert sorted(p.name for p in logs.iterdir() if p.name.startswith(name)) == [f"{name}-3"]
    assert "rolling it back" in broker.log_text()
    broker.restart()
    (logs / f"{name}-3").unlink()
    create(broker.bootstrap, name, 6)
    assert len(AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=DEADLINE_S).topics[name].partitions) == 6


@pytest.mark.slow
@pytest.mark.alone  # its start-up deadline is for the broker, not for a machine shared with other tests
def test_a_topic_of_20000_partitions_is_created_produced_to_and_restarted(start_broker) -> None:
    broker = start_broker()
    name = new_name()
    started = time.monotonic()
    create(broker.bootstrap, name, 10_000)  # max.partitions.per.request: 10,000 at a time, as Kafka
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_partitions([NewPartitions(name, 20_000)], operation_timeout=120)[name].result(timeout=120)
    created_s = time.monotonic() - started
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5})
    partitions = range(0, 20_000, 97)
    for partition in partitions:
        producer.produce(name, value=f"p{partition}".encode(), partition=partition)
    assert producer.flush(60) == 0
    assert broker.process is not None
    rss_before = rss_mib(broker.process.pid)
    broker.stop()
    started = time.monotonic()
    broker.start()
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": new_name()})
    metadata = consumer.list_topics(name, timeout=STARTUP_DEADLINE_S)
    startup_s = time.monotonic() - started
    assert len(metadata.topics[name].partitions) == 20_000
    assert broker.process is not None
    print(f"\n20,000 partitions: created in {created_s:.1f} s; restart to first Metadata answer {startup_s:.1f} s; "
          f"RSS {rss_before:.0f} MiB before, {rss_mib(broker.process.pid):.0f} MiB after the restart")
    assert startup_s < STARTUP_DEADLINE_S
    assert rss_before < PARTITIONS_RSS_BOUND_MIB and rss_mib(broker.process.pid) < PARTITIONS_RSS_BOUND_MIB
    for partition in (0, 9_991, 19_982):
        consumer.assign([TopicPartition(name, partition, 0)])
        msg = consumer.poll(DEADLINE_S)
        assert msg is not None and msg.error() is None and msg.value() == f"p{partition}".encode()
    consumer.close()
