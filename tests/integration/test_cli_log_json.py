"""`diskless serve --log-format json`: every line the broker writes, from start to a SIGTERM
shutdown, is one JSON object with time, level, logger and message (and a connection that sent
garbage is logged as such a line too)."""

from __future__ import annotations

import json
import socket
import time
from datetime import datetime

from confluent_kafka import Producer

from .broker_process import READY, BrokerProcess

DEADLINE_S = 30.0


def test_every_line_is_a_json_object(tmp_path, create_topic) -> None:
    broker = BrokerProcess(tmp_path / "data", "--log-format", "json").start()
    try:
        topic = create_topic(broker.bootstrap, partitions=1)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        for i in range(10):
            producer.produce(topic, value=b"v%d" % i)
        assert producer.flush(DEADLINE_S) == 0
        with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as sock:
            sock.sendall((-5).to_bytes(4, "big", signed=True))  # a negative frame size: the broker closes and logs it
            assert sock.recv(1) == b""
        deadline = time.monotonic() + DEADLINE_S
        while "closing connection" not in broker.log_text():
            assert time.monotonic() < deadline, "the refused connection was not logged"
            time.sleep(0.05)  # polling the log file with a deadline: nothing to wait on instead
        assert broker.stop() == 0
    finally:
        broker.close()

    lines = broker.log_text().splitlines()
    assert lines
    entries = []
    for line in lines:
        entry = json.loads(line)  # every line, not only the broker's own
        assert set(entry) - {"exception", "stack"} == {"time", "level", "logger", "message"}, line
        assert entry["level"] in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
        assert datetime.fromisoformat(entry["time"]).tzinfo is not None
        entries.append(entry)
    assert sum(READY in e["message"] for e in entries) == 1
    assert any(e["message"].startswith("closing connection from 127.0.0.1") and e["level"] == "WARNING" for e in entries)
    assert any(e["message"] == "shutting down" for e in entries)
    assert entries[-1]["logger"] == "diskless.broker.app" and entries[-1]["message"].endswith(" stopped")
