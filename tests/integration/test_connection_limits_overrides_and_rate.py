"""max.connections.per.ip.overrides and max.connection.creation.rate of a real `diskless serve`:

- an address with an override gets exactly its own limit (given as an address, or as a host
  name the broker resolves), the others max.connections.per.ip; the connection past a limit
  is closed at once while the earlier ones keep being served;
- at a creation rate of N/s, M connections opened at once are all served, none refused, and
  the broker spreads them as Kafka's acceptor does (KIP-612): a broker that saw no connections
  lets 10 x N through at once (Kafka's rate window counts as ten one-second samples while it
  is young), the rest wait the throttle time, so the last is served no sooner than the rate
  model allows (connection_limits.ConnectionCreationRate; 6 s for 60 at 5/s, against well
  under a second without the throttle); Kafka's connection-accept-throttle-time is exported;
- both are dynamic broker configs: set with IncrementalAlterConfigs, described back, applied
  to the next connection.

Connections come from 127.0.0.2 and 127.0.0.3 as well as 127.0.0.1 (Linux routes 127/8 to
loopback), so each address's count is known.
"""

from __future__ import annotations

import selectors
import socket
import struct
import time
import urllib.request

import pytest
from confluent_kafka.admin import AdminClient, ConfigSource, ResourceType
from kio.schema.errors import ErrorCode
from prometheus_client.parser import text_string_to_metric_families

from diskless.broker.connection_limits import ConnectionCreationRate
from diskless.wire import parse_response, response_type

from .broker_process import BrokerProcess, free_port
from .test_broker_dynamic_configs import described, set_broker
from .test_broker_limits import DEADLINE_S, answers, api_versions_frame, closed_by_peer, recv_exactly, wait_for


@pytest.fixture
def start_broker(tmp_path):
    started: list[BrokerProcess] = []

    def start(*args: str) -> BrokerProcess:
        process = BrokerProcess(tmp_path / f"data-{len(started)}", *args)
        started.append(process.start())
        return process

    yield start
    for process in started:
        process.close()


def connect_from(broker: BrokerProcess, source: str) -> socket.socket:
    return socket.create_connection(("127.0.0.1", broker.port), timeout=DEADLINE_S, source_address=(source, 0))


def served_up_to_its_limit(broker: BrokerProcess, source: str, limit: int) -> list[socket.socket]:
    """`limit` connections from `source`, each answered; the next one is closed by the broker."""
    admitted = [connect_from(broker, source) for _ in range(limit)]
    assert [answers(sock) for sock in admitted] == [True] * limit, f"{limit} connections from {source} served"
    with connect_from(broker, source) as extra:
        assert closed_by_peer(extra), f"connection {limit + 1} from {source} closed"
    return admitted


def test_an_address_with_an_override_gets_its_own_limit_and_the_others_the_default(start_broker) -> None:
    broker = start_broker("--max-connections-per-ip", "2", "--max-connections-per-ip-overrides", "127.0.0.2:4, localhost:3")
    second = served_up_to_its_limit(broker, "127.0.0.2", 4)  # its override, an address
    third = served_up_to_its_limit(broker, "127.0.0.3", 2)  # no override: max.connections.per.ip
    first = served_up_to_its_limit(broker, "127.0.0.1", 3)  # localhost's override, resolved to 127.0.0.1
    assert all(answers(sock) for sock in first + second + third)  # the earlier ones keep being served
    # One line per kind of refusal a second (RefusalLog: numbers, addresses too, do not make a
    # kind): 127.0.0.1's refusal, of 127.0.0.2's kind, is counted in the next line of its kind.
    for line in ("too many connections from 127.0.0.2 (max.connections.per.ip.overrides 127.0.0.2:4)",
                 "too many connections from 127.0.0.3 (max.connections.per.ip 2)"):  # fmt: skip
        wait_for(lambda line=line: line in broker.log_text(), line)
    second.pop().close()  # a slot of 127.0.0.2 frees: one more from it is served, and no other
    deadline = time.monotonic() + DEADLINE_S
    while True:
        again = connect_from(broker, "127.0.0.2")
        if answers(again, timeout_s=2):
            break
        again.close()  # closed before the broker saw the other close: try again
        assert time.monotonic() < deadline, "a freed slot of 127.0.0.2 served again"
    with connect_from(broker, "127.0.0.2") as extra:
        assert closed_by_peer(extra)
    for sock in first + second + third + [again]:
        sock.close()


def answer_times_s(socks: list[socket.socket], start: float, deadline_s: float) -> list[float]:
    """When each socket's ApiVersions answer arrived (seconds after `start`), in socket order;
    fails if one is closed, refused or unanswered by the deadline."""
    selector = selectors.DefaultSelector()
    for index, sock in enumerate(socks):
        selector.register(sock, selectors.EVENT_READ, index)
    times: dict[int, float] = {}
    deadline = start + deadline_s
    while len(times) < len(socks):
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"{len(socks) - len(times)} of {len(socks)} connections unanswered after {deadline_s} s"
        for key, _ in selector.select(timeout=remaining):
            at = time.monotonic() - start
            sock = key.fileobj
            sock.settimeout(DEADLINE_S)
            size = struct.unpack(">i", recv_exactly(sock, 4))[0]
            correlation_id, response = parse_response(recv_exactly(sock, size), response_type(18, 3))
            assert (correlation_id, response.error_code) == (7, ErrorCode.none)
            times[key.data] = at
            selector.unregister(sock)
    selector.close()
    return [times[i] for i in range(len(socks))]


def scrape(http: str) -> dict[tuple[str, frozenset], float]:
    with urllib.request.urlopen(f"http://{http}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_connections_over_the_creation_rate_are_delayed_not_refused(start_broker) -> None:
    rate, count = 5, 60
    http = f"127.0.0.1:{free_port()}"
    broker = start_broker("--max-connection-creation-rate", str(rate), "--http", http)
    # What Kafka's rate allows: served one after another, each after its wait. 60 at 5/s: 50
    # at once, four more by 800 ms, then one a second (the wait is bounded by the 1 s sample
    # window) while the burst is in the 11 s window: the last after 6 s. The readiness
    # probe's connection, counted before, only makes it later.
    model, now_ms, earliest_ms = ConnectionCreationRate(rate), 0, []
    for _ in range(count):
        now_ms += model.record(now_ms)
        earliest_ms.append(now_ms)
    assert earliest_ms[-1] == 6000

    start = time.monotonic()
    socks = [connect_from(broker, "127.0.0.2") for _ in range(count)]  # the kernel completes them; the broker accepts at its rate
    for sock in socks:
        sock.sendall(api_versions_frame())
    times = sorted(answer_times_s(socks, start, deadline_s=40))  # every one served: delayed, never refused
    assert len(times) == count
    # The throttle: the k-th answer never comes before the model's k-th acceptance, less 1 s (a
    # connection counted earlier, the probe's, shifts the sample windows: some acceptances come
    # up to 800 ms sooner, never the last); without it all 60 come within a second.
    early = [(k, round(at, 3), ms / 1000) for k, (at, ms) in enumerate(zip(times, earliest_ms)) if at < ms / 1000 - 1.0]
    assert early == [], f"answered before the rate allows: {early}"
    seen = f"answers at {[round(at, 2) for at in times]} s"
    assert times[-1] >= 5.5, seen
    assert sum(at < 1.0 for at in times) <= 11 * rate, seen  # at most 10 windows' worth plus one second's
    assert sum(at < 3.0 for at in times) >= 40, seen  # Kafka's burst: the first 10 x N are not held back
    wait_for(lambda: "accepting throttled: max.connection.creation.rate 5/s exceeded" in broker.log_text(), "the throttle line")
    # Kafka's connection-accept-throttle-time: the average non-zero wait, ms (200 ms and 1000 ms waits here).
    (throttle,) = [value for (name, _labels), value in scrape(http).items()
                   if name == "kafka_server_socket_server_metrics_connection_accept_throttle_time"]  # fmt: skip
    assert 200 <= throttle <= 1000
    for sock in socks:
        sock.close()


def test_both_are_dynamic_broker_configs_applied_to_the_next_connection(start_broker) -> None:
    broker = start_broker()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    entries = described(admin, ResourceType.BROKER, "1")
    assert (entries["max.connections.per.ip.overrides"].value, entries["max.connections.per.ip.overrides"].source) == (
        "", ConfigSource.DEFAULT_CONFIG.value)  # fmt: skip
    assert (entries["max.connection.creation.rate"].value, entries["max.connection.creation.rate"].source) == (
        "2147483647", ConfigSource.DEFAULT_CONFIG.value)  # fmt: skip

    set_broker(admin, max_connections_per_ip_overrides="127.0.0.3:2", max_connection_creation_rate="1000")
    entries = described(admin, ResourceType.BROKER, "1")
    assert (entries["max.connections.per.ip.overrides"].value, entries["max.connections.per.ip.overrides"].source) == (
        "127.0.0.3:2", ConfigSource.DYNAMIC_BROKER_CONFIG.value)  # fmt: skip
    assert (entries["max.connection.creation.rate"].value, entries["max.connection.creation.rate"].source) == (
        "1000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)  # fmt: skip
    limited = served_up_to_its_limit(broker, "127.0.0.3", 2)
    others = [connect_from(broker, "127.0.0.2") for _ in range(3)]  # no override, no per-ip limit
    assert all(answers(sock) for sock in others)

    set_broker(admin, max_connections_per_ip_overrides=None, max_connection_creation_rate=None)  # deleted: the defaults again
    entries = described(admin, ResourceType.BROKER, "1")
    assert entries["max.connections.per.ip.overrides"].source == ConfigSource.DEFAULT_CONFIG.value
    limited.append(connect_from(broker, "127.0.0.3"))
    assert answers(limited[-1])
    for sock in limited + others:
        sock.close()
