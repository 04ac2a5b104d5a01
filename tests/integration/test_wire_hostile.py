"""Hostile frames over real connections to a real `diskless serve`: none may kill the broker.

- issue N's 25-byte lie (an array count of 2^32 - 2, or 2^31 - 2 classic) for every advertised
  API key and version: each closes its own connection; a bystander connection keeps working;
- size prefixes above socket.request.max.bytes (1 GiB among them) and negative ones: closed from
  the prefix alone; 100 MiB and 1 GiB claimed, 10 bytes sent, then close;
- unknown API keys and versions: closed as Kafka closes them; ApiVersions answers any version;
- one log line per refusal, rate-limited;
- the corpus of inputs that once crashed or hurt the broker (wire_hostile_corpus.txt), replayed;
- a Hypothesis fuzz test mutating valid requests of every advertised version while a
  confluent-kafka producer (acks=all) runs alongside: the broker stays up and answers
  ApiVersions, its RSS stays under RSS_BOUND_BYTES, every acknowledged record is read back.
"""

from __future__ import annotations

import re
import select
import socket
import struct
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v3 import request as api_versions_v3
from kio.schema.errors import ErrorCode

from diskless.wire import ProtocolError, encode_request, parse_request, request_type
from tests.unit.test_wire_roundtrip import bodies
from tests.wire_cases import ADVERTISED, LIES, REFUSED_VERSIONS, case_id, lie_frame, request_header

from .broker_process import BrokerProcess

DEADLINE_S = 10.0
MAX_REQUEST_BYTES = 104857600  # socket.request.max.bytes, Kafka's default and the broker's
# The broker idles at about 60 MiB RSS on this machine; one parse may hold a frame and its kio
# objects a few times over. A 32 GiB allocation is what this bound is about: anything in the
# hundreds of MiB is a leak or an allocation a length made the broker do.
RSS_BOUND_BYTES = 300 * 1024 * 1024
CORPUS = Path(__file__).with_name("wire_hostile_corpus.txt")


@pytest.fixture(scope="module")
def hostile_broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("hostile") / "data", "--group-initial-rebalance-delay-ms", "0").start()
    try:
        yield process
    finally:
        process.close()


def rss_bytes(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            value, unit = line.split()[1:3]
            assert unit == "kB"
            return int(value) * 1024
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def wait_for(condition, what: str, deadline_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)  # polling a log file with a deadline: nothing to wait on instead


def connect(broker: BrokerProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", broker.port), timeout=DEADLINE_S)


def closed_by_peer(sock: socket.socket, deadline_s: float = DEADLINE_S) -> bool:
    """True when the broker closes the connection (EOF or reset) within the deadline, reading
    and dropping whatever it answered before."""
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


def api_versions_answer(sock: socket.socket, correlation_id: int = 99) -> ErrorCode:
    """Send ApiVersions v3 and read its answer (header v0): the broker is serving."""
    from diskless.wire import parse_response, response_type

    sock.sendall(encode_request(correlation_id, "probe", api_versions_v3.ApiVersionsRequest(client_software_name="probe", client_software_version="1")))
    sock.settimeout(DEADLINE_S)
    size = struct.unpack(">i", recv_exactly(sock, 4))[0]
    got_id, response = parse_response(recv_exactly(sock, size), response_type(18, 3))
    assert got_id == correlation_id
    return response.error_code


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    out = bytearray()
    while len(out) < size:
        chunk = sock.recv(size - len(out))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {size} bytes")
        out += chunk
    return bytes(out)


def assert_serving(broker: BrokerProcess, bystander: socket.socket | None = None) -> None:
    assert broker.process is not None and broker.process.poll() is None, "the broker process died"
    if bystander is not None:
        assert api_versions_answer(bystander) == ErrorCode.none
    with connect(broker) as fresh:
        assert api_versions_answer(fresh) == ErrorCode.none
    assert rss_bytes(broker.process.pid) < RSS_BOUND_BYTES


@pytest.fixture(scope="module")
def bystander(hostile_broker):
    """A connection opened before any abuse: it must keep being served throughout."""
    sock = connect(hostile_broker)
    assert api_versions_answer(sock) == ErrorCode.none
    yield sock
    sock.close()


# --- the 25-byte lie ------------------------------------------------------------------------------


@pytest.mark.parametrize(("api_key", "api_version"), LIES, ids=[case_id(*case) for case in LIES])
def test_the_25_byte_lie_closes_only_its_connection(hostile_broker, bystander, api_key: int, api_version: int) -> None:
    frame = lie_frame(api_key, api_version)
    with connect(hostile_broker) as sock:
        sock.sendall(frame)
        assert closed_by_peer(sock)
    assert_serving(hostile_broker, bystander)


@pytest.mark.parametrize(("api_key", "api_version"), sorted(REFUSED_VERSIONS), ids=[case_id(*c) for c in sorted(REFUSED_VERSIONS)])
def test_advertised_but_refused_produce_versions_close_the_connection(hostile_broker, bystander, api_key: int, api_version: int) -> None:
    payload = request_header(api_key, api_version, flexible_header=False) + b"\xff\xff\x7f\xff\xff\xfe" + bytes(5)
    with connect(hostile_broker) as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        assert closed_by_peer(sock)
    assert_serving(hostile_broker, bystander)


def test_the_lie_is_logged_with_client_api_and_reason(hostile_broker) -> None:
    """One line per refused connection: client address, api key and version, reason. Lies of
    the same kind were refused just before (rate limit: one line per kind per second), so this
    sends lies until one of its own is logged, then checks that line exactly."""
    reason = "invalid frame: malformed MetadataRequest body: array MetadataRequest.topics claims 4294967294 entries of at least 18 bytes, 5 bytes remain"
    found: list[str] = []

    def one_is_logged() -> bool:
        with connect(hostile_broker) as sock:
            port = sock.getsockname()[1]
            sock.sendall(lie_frame(3, 12))
            assert closed_by_peer(sock)
        found[:] = [line for line in hostile_broker.log_text().splitlines() if f"127.0.0.1:{port} " in line]
        return bool(found)

    wait_for(one_is_logged, "a refusal of our own to be logged", deadline_s=5.0)
    (line,) = found
    assert re.fullmatch(
        r"\S+ \S+ WARNING diskless\.broker\.server: closing connection from 127\.0\.0\.1:\d+ \(api key 3 version 12\): "
        + re.escape(reason) + r"( \[\d+ similar closes since the last such line were not logged\])?",
        line,
    ), line
    assert "Traceback" not in hostile_broker.log_text()


def test_refusals_are_rate_limited_with_a_count_of_those_not_logged(hostile_broker, bystander) -> None:
    """Fifty lies of the same kind in a row give at most two lines (one per second); later lines
    of that kind say how many were held back, so every one of the fifty is accounted for."""
    line_of_kind = r"array OffsetFetchRequest\.topics claims [^\n]*"
    suppressed = line_of_kind + r"\[(\d+) similar closes since the last such line were not logged\]"
    log_start = len(hostile_broker.log_text())
    for _ in range(50):
        with connect(hostile_broker) as sock:
            sock.sendall(lie_frame(9, 1))
            assert closed_by_peer(sock)
    assert len(re.findall(line_of_kind, hostile_broker.log_text()[log_start:])) <= 2

    def all_fifty_accounted_for() -> bool:
        with connect(hostile_broker) as sock:  # one more of the kind: logged once a second has passed
            sock.sendall(lie_frame(9, 1))
            assert closed_by_peer(sock)
        new = hostile_broker.log_text()[log_start:]
        return sum(int(n) for n in re.findall(suppressed, new)) + len(re.findall(line_of_kind, new)) >= 50

    wait_for(all_fifty_accounted_for, "the suppressed refusals to be counted in a later line", deadline_s=5.0)
    assert_serving(hostile_broker, bystander)


# --- sizes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [MAX_REQUEST_BYTES + 1, 1 << 30, 2**31 - 1], ids=["max+1", "1GiB", "int32-max"])
def test_size_above_socket_request_max_bytes_is_closed_from_the_prefix(hostile_broker, bystander, size: int) -> None:
    rss_before = rss_bytes(hostile_broker.process.pid)
    with connect(hostile_broker) as sock:
        sock.sendall(struct.pack(">i", size))  # nothing of the body: the prefix alone decides
        assert closed_by_peer(sock)
    assert rss_bytes(hostile_broker.process.pid) < rss_before + 16 * 1024 * 1024
    assert_serving(hostile_broker, bystander)


@pytest.mark.parametrize("size", [-1, -2, -(2**31)])
def test_negative_size_is_closed(hostile_broker, bystander, size: int) -> None:
    with connect(hostile_broker) as sock:
        sock.sendall(struct.pack(">i", size) + bytes(16))
        assert closed_by_peer(sock)
    assert_serving(hostile_broker, bystander)


@pytest.mark.parametrize("size", [MAX_REQUEST_BYTES, 1 << 30], ids=["100MiB", "1GiB"])
def test_claim_much_send_10_bytes_and_close(hostile_broker, bystander, size: int) -> None:
    rss_before = rss_bytes(hostile_broker.process.pid)
    with connect(hostile_broker) as sock:
        sock.sendall(struct.pack(">i", size) + b"\x00\x03\x00\x0c\x00\x00\x00\x01\xff\xff")
        sock.shutdown(socket.SHUT_WR)
        assert closed_by_peer(sock)
    assert rss_bytes(hostile_broker.process.pid) < rss_before + 16 * 1024 * 1024
    assert_serving(hostile_broker, bystander)


def test_many_unfinished_100_mib_claims_cost_only_what_was_sent(hostile_broker, bystander) -> None:
    """Twenty connections each claiming a 100 MiB frame and sending 10 bytes of it: the broker
    buffers what arrived, not what was claimed."""
    rss_before = rss_bytes(hostile_broker.process.pid)
    socks = [connect(hostile_broker) for _ in range(20)]
    try:
        for sock in socks:
            sock.sendall(struct.pack(">i", MAX_REQUEST_BYTES) + b"\x00\x03\x00\x0c\x00\x00\x00\x01\xff\xff")
        assert_serving(hostile_broker, bystander)
        assert rss_bytes(hostile_broker.process.pid) < rss_before + 16 * 1024 * 1024
    finally:
        for sock in socks:
            sock.close()


# --- unknown APIs and versions --------------------------------------------------------------------


@pytest.mark.parametrize(("api_key", "api_version"), [(32767, 0), (-1, 0), (4, 0), (1, 3), (1, 13), (3, 13), (0, -1)], ids=lambda v: str(v))
def test_unknown_api_key_or_version_is_closed(hostile_broker, bystander, api_key: int, api_version: int) -> None:
    payload = struct.pack(">hhih", api_key, api_version, 5, -1) + bytes(8)
    with connect(hostile_broker) as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        assert closed_by_peer(sock)
    assert_serving(hostile_broker, bystander)


def test_api_versions_of_an_unknown_version_is_answered(hostile_broker) -> None:
    """Kafka answers ApiVersions of any version with v0 and UNSUPPORTED_VERSION, connection open."""
    payload = struct.pack(">hhih", 18, 77, 5, -1) + b"\x00garbage"
    with connect(hostile_broker) as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", recv_exactly(sock, 4))[0]
        frame = recv_exactly(sock, size)
        assert struct.unpack_from(">ih", frame) == (5, ErrorCode.unsupported_version.value)
        assert api_versions_answer(sock) == ErrorCode.none


# --- the corpus -----------------------------------------------------------------------------------


def corpus() -> list[tuple[str, bytes]]:
    """(name, frame with size prefix) of every entry of wire_hostile_corpus.txt."""
    entries = []
    for line in CORPUS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, hex_frame = line.split(maxsplit=1)
            entries.append((name, bytes.fromhex(hex_frame.replace(" ", ""))))
    return entries


@pytest.mark.parametrize(("name", "frame"), corpus(), ids=[name for name, _ in corpus()])
def test_corpus_entry_is_refused_or_answered_and_the_broker_stays_up(hostile_broker, bystander, name: str, frame: bytes) -> None:
    with connect(hostile_broker) as sock:
        sock.sendall(frame)
        sock.shutdown(socket.SHUT_WR)
        assert closed_by_peer(sock)
    assert_serving(hostile_broker, bystander)
    assert "Traceback" not in hostile_broker.log_text()


# --- fuzzing, with a well-behaved producer alongside -------------------------------------------------

FUZZ_VERSIONS = [case for case in ADVERTISED if case not in REFUSED_VERSIONS]
EXTREMES = [b"\xff\xff\xff\xff\x0f", b"\x7f\xff\xff\xfe", b"\xff\xff\xff\xff", b"\xff\xff", b"\x00", b"\x80\x80\x80\x80\x80", b"\x7f\xff", b"\x01"]


@st.composite
def mutated_frames(draw) -> bytes:
    """A valid request of an advertised version, encoded with kio, then broken 1-4 times: extreme
    length values written anywhere, bytes replaced, inserted, deleted, the frame cut short; the
    size prefix usually matches what is sent, sometimes claims more (then the sender closes)."""
    api_key, api_version = draw(st.sampled_from(FUZZ_VERSIONS))
    body = draw(bodies(request_type(api_key, api_version)))
    payload = bytearray(encode_request(draw(st.integers(0, 2**31 - 1)), draw(st.none() | st.text(max_size=8)), body)[4:])
    for _ in range(draw(st.integers(0, 4))):  # 0: a valid request with hostile values
        at = draw(st.integers(0, max(0, len(payload) - 1)))
        kind = draw(st.sampled_from(["extreme", "byte", "insert", "delete", "cut"]))
        if kind == "extreme":
            patch = draw(st.sampled_from(EXTREMES))
            payload[at : at + len(patch)] = patch
        elif kind == "byte" and payload:
            payload[at] = draw(st.integers(0, 255))
        elif kind == "insert":
            payload[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del payload[at : at + draw(st.integers(1, 8))]
        elif kind == "cut":
            del payload[at:]
    claimed = len(payload) + draw(st.sampled_from([0, 0, 0, 0, 1, 1000]))
    return struct.pack(">i", claimed) + bytes(payload)


def semantically_harmless(frame: bytes) -> bool:
    """False for the few well-formed requests that would ask the broker for unbounded *work*
    rather than unbounded parsing: topics or partitions by the thousand (bounded by the partition
    limits, but each creation costs seconds; test_broker_limits covers them), or long polls that
    would only slow the test down. Parsing limits are what this test is about."""
    try:
        request = parse_request(frame[4:])
    except ProtocolError:
        return True
    body = request.body
    name = type(body).__name__
    if name == "CreateTopicsRequest":
        return body.validate_only is True or all(0 < t.num_partitions <= 4 and not t.assignments for t in body.topics)
    if name == "CreatePartitionsRequest":
        return body.validate_only is True or all(t.count <= 4 for t in body.topics)
    return True


class WellBehavedProducer:
    """confluent-kafka, acks=all, idempotent, producing numbered values to one topic from a
    thread until stopped, 20 at a time; remembers every record the broker acknowledged, with its partition and offset."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.acked: dict[tuple[int, int], bytes] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked[(msg.partition(), msg.offset())] = msg.value()

    def _run(self) -> None:
        sequence = 0
        while not self._stop.is_set():
            for _ in range(20):
                self._producer.produce(self.topic, value=f"v-{sequence:08d}".encode(), callback=self._delivered)
                sequence += 1
            self._producer.flush(10)
            self._stop.wait(0.05)  # pacing: about 400 records a second, all read back at the end

    def __enter__(self) -> WellBehavedProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        assert self._producer.flush(10) == 0


def read_back(bootstrap: str, topic: str, partitions: int) -> dict[tuple[int, int], bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        records: dict[tuple[int, int], bytes] = {}
        deadline = time.monotonic() + 30
        while sum(1 for (p, o) in records if o < ends[p]) < sum(ends.values()):
            assert time.monotonic() < deadline, f"read {len(records)} of {sum(ends.values())} records"
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                records[(msg.partition(), msg.offset())] = msg.value()
        return records
    finally:
        consumer.close()


def send_and_wait(broker: BrokerProcess, frame: bytes) -> None:
    """Send one frame on a new connection; wait (briefly) for an answer or a close, then leave."""
    with connect(broker) as sock:
        claimed = struct.unpack_from(">i", frame)[0]
        try:
            sock.sendall(frame)
            if claimed != len(frame) - 4:
                sock.shutdown(socket.SHUT_WR)  # claimed more than it sent: leave mid-frame
            readable, _, _ = select.select([sock], [], [], 0.3)
            if readable:
                sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            pass


@pytest.fixture(scope="module")
def fuzz_topic(hostile_broker):
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"fuzz-{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": hostile_broker.bootstrap})
    admin.create_topics([NewTopic(name, 3, 1)], operation_timeout=10)[name].result(timeout=20)
    return name


FUZZ_EXAMPLES = 2000


def test_fuzzed_requests_do_not_hurt_the_broker_or_a_well_behaved_client(hostile_broker, bystander, fuzz_topic) -> None:
    pid = hostile_broker.process.pid
    sent: list[bytes] = []

    @settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None, derandomize=False,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])  # fmt: skip
    @given(frame=mutated_frames().filter(semantically_harmless))
    def fuzz(frame: bytes) -> None:
        sent.append(frame)
        send_and_wait(hostile_broker, frame)
        assert hostile_broker.process.poll() is None, f"the broker died on {frame.hex()}"

    started = time.monotonic()
    with WellBehavedProducer(hostile_broker.bootstrap, fuzz_topic) as producer:
        fuzz()
        assert_serving(hostile_broker, bystander)
    elapsed_s = time.monotonic() - started

    assert len(sent) >= FUZZ_EXAMPLES
    assert producer.errors == []
    assert len(producer.acked) > 0
    assert read_back(hostile_broker.bootstrap, fuzz_topic, 3) == producer.acked  # nothing else in the topic either
    assert rss_bytes(pid) < RSS_BOUND_BYTES
    assert rss_bytes(pid, "VmHWM") < RSS_BOUND_BYTES  # the peak, not only now
    assert elapsed_s < 90
    print(f"fuzz: {len(sent)} frames, {len(producer.acked)} records acknowledged and read back, "
          f"{elapsed_s:.1f}s, RSS {rss_bytes(pid) >> 20} MiB, peak {rss_bytes(pid, 'VmHWM') >> 20} MiB")  # fmt: skip
