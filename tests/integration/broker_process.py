"""Run a real `diskless serve` in a subprocess on 127.0.0.1, for integration tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, deadline_s: float = 30.0, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"broker exited with {process.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.02)  # polling a port with a deadline: nothing to wait on instead
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {deadline_s}s")


READY = " ready on "  # the broker's ready line: "diskless broker N ready on HOST:PORT ..."


class PortTaken(Exception):
    """The broker's port was taken by another process before the broker could bind it."""


class BrokerProcess:
    """A `diskless serve` subprocess; start, stop (SIGTERM), kill (SIGKILL) and restart it."""

    def __init__(self, data_dir: Path, *extra_args: str, port: int | None = None, env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        # A port free_port() found may be taken (another test's outgoing connection got it as
        # its ephemeral port) before the broker binds it: a first start then takes another.
        self._port_chosen_here = port is None
        self._started = False
        self.extra_args = list(extra_args)
        self.env = {**os.environ, **(env or {})}
        self.log_path = data_dir.parent / f"{data_dir.name}-broker.log"
        self.process: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> BrokerProcess:
        """Start it and wait until it is ready: its port answers and it logged its ready line
        (it binds its port before joining the cluster and opening its partitions)."""
        for _ in range(3):
            try:
                return self._start()
            except PortTaken:
                self.port = free_port()
        return self._start()

    def _start(self) -> BrokerProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        logged_before = len(self.log_text())
        readies = self.log_text().count(READY)
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "diskless.cli.main", "serve", "--listen", self.bootstrap, "--data-dir", str(self.data_dir), *self.extra_args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
        )
        log.close()

        def exited(what: str) -> Exception:
            # Taken by another process, or the very port free_port() also gave a listener of
            # the test's own (`--listeners`): either way, a first start takes another.
            logged = self.log_text()[logged_before:]
            if self._port_chosen_here and not self._started and ("Address already in use" in logged or "two listeners on one port" in logged):
                return PortTaken(self.port)
            return RuntimeError(f"broker exited with {self.process.returncode} before {what}")

        try:
            wait_for_port(self.port, process=self.process)
        except RuntimeError:
            raise exited("listening") from None
        deadline = time.monotonic() + 60
        while self.log_text().count(READY) <= readies:
            if self.process.poll() is not None:
                raise exited("it was ready")
            if time.monotonic() > deadline:
                raise TimeoutError(f"broker on port {self.port} logged no ready line within 60 s")
            time.sleep(0.02)  # polling its log file with a deadline: nothing to wait on instead
        self._started = True
        return self

    def stop(self) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=30)
        self.process = None
        return code

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=30)
        self.process = None

    def restart(self) -> BrokerProcess:
        if self.process is not None:
            self.stop()
        return self.start()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def close(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=30)
            self.process = None
