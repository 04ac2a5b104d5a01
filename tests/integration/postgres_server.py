"""A real PostgreSQL server of a test session's own: `initdb` into a fresh directory under
/tmp, `pg_ctl start` on a free port of 127.0.0.1, stopped and removed at the end.

PostgreSQL refuses to run as root. When the tests run as root, every server command runs as
the unprivileged `postgres` user (Debian's package creates it) through `runuser`, and the
directory is created by root and handed to that user: /tmp is reachable by everyone, and the
directory itself is mode 0700 as PostgreSQL insists.

Binaries: the first `initdb` on PATH, else the newest /usr/lib/postgresql/*/bin (Debian's
`postgresql` package, which `make test`'s system-deps target installs when it is missing).

The server trades durability for speed (fsync off, no full page writes; `durable=True` for
benchmarks keeps PostgreSQL's defaults): it lives for one test session. Clients reach it over TCP on 127.0.0.1 with a password (scram-sha-256), as a
broker would; the superuser is `diskless`.
"""

from __future__ import annotations

import asyncio
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SUPERUSER = "diskless"
PASSWORD = "diskless-test-password"
_SERVER_USER = "postgres"


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL binaries on this machine (install Debian's `postgresql`)."""


def find_bin_dir() -> Path:
    on_path = shutil.which("initdb")
    if on_path:
        return Path(os.path.realpath(on_path)).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if not candidates:
        raise PostgresUnavailable("no initdb on PATH nor in /usr/lib/postgresql/*/bin: apt-get install postgresql")
    return Path(candidates[-1]).parent


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """One server: `start()` once (initdb, then pg_ctl start), `stop()`/`restart()` for fault
    tests, `close()` to stop it and delete its files. Synchronous; one test process uses it."""

    def __init__(self, *, durable: bool = False) -> None:
        """`durable`: fsync and synchronous commit on, as in production (benchmarks)."""
        self.durable = durable
        self.bin_dir = find_bin_dir()
        self.as_root = os.geteuid() == 0
        self.root = Path(tempfile.mkdtemp(prefix="diskless-pg-", dir="/tmp"))
        self.data_dir = self.root / "data"
        self.log_file = self.root / "server.log"
        self.port = 0
        if self.as_root:
            user = pwd.getpwnam(_SERVER_USER)
            os.chown(self.root, user.pw_uid, user.pw_gid)
        os.chmod(self.root, 0o700)

    # --- commands --------------------------------------------------------------------------

    def _run(self, *args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
        command = [str(self.bin_dir / args[0]), *args[1:]]
        if self.as_root:
            command = ["runuser", "-u", _SERVER_USER, "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, cwd=self.root)
        if result.returncode != 0:
            log = self.log_file.read_text(errors="replace")[-3000:] if self.log_file.exists() else ""
            raise RuntimeError(f"{' '.join(args[:2])} failed ({result.returncode}): {result.stderr}{result.stdout}\n{log}")
        return result

    def start(self) -> PostgresServer:
        if not self.data_dir.exists():
            pwfile = self.root / "pwfile"
            pwfile.write_text(PASSWORD + "\n")
            if self.as_root:
                user = pwd.getpwnam(_SERVER_USER)
                os.chown(pwfile, user.pw_uid, user.pw_gid)
            self._run(
                "initdb", "-D", str(self.data_dir), "-U", SUPERUSER, f"--pwfile={pwfile}", "-E", "UTF8",
                "--locale=C.UTF-8", "--auth-local=trust", "--auth-host=scram-sha-256", "--no-sync",
            )  # fmt: skip
        for _ in range(5):  # the free port may be taken between probe and bind
            self.port = self.port or free_port()
            options = (
                f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c max_connections=300"
                " -c shared_buffers=64MB -c log_min_messages=warning"
            )
            if not self.durable:
                options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
            try:
                self._run("pg_ctl", "-D", str(self.data_dir), "-l", str(self.log_file), "-w", "-t", "60", "-o", options, "start")
                return self
            except RuntimeError:
                if "could not bind" not in self.log_file.read_text(errors="replace"):
                    raise
                self.port = 0
        raise RuntimeError("no free port for PostgreSQL after 5 tries")

    def stop(self, mode: str = "fast") -> None:
        """pg_ctl stop -m MODE: fast disconnects every client and shuts down cleanly."""
        self._run("pg_ctl", "-D", str(self.data_dir), "-m", mode, "-w", "-t", "60", "stop")

    def restart(self) -> None:
        """Start again on the same port, after `stop`."""
        self.start()

    def close(self) -> None:
        try:
            if (self.data_dir / "postmaster.pid").exists():
                self.stop("immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    # --- URLs and databases ------------------------------------------------------------------

    def url(self, database: str = "postgres", *, user: str = SUPERUSER, password: str = PASSWORD) -> str:
        return f"postgresql://{user}:{password}@127.0.0.1:{self.port}/{database}"

    def create_database(self, prefix: str = "t") -> str:
        """A new empty database with a random name; returns its URL."""
        database = f"{prefix}_{uuid.uuid4().hex[:12]}"
        self.execute(f'CREATE DATABASE "{database}" TEMPLATE template0 STRATEGY FILE_COPY')
        return self.url(database)

    def drop_database(self, url: str) -> None:
        database = url.rsplit("/", 1)[1].split("?", 1)[0]
        self.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')

    def execute(self, sql: str, database: str = "postgres") -> None:
        """Run one statement as the superuser. Synchronous, whatever event loop the caller is
        in: asyncpg runs on a loop of its own in a helper thread."""
        import asyncpg

        async def run() -> None:
            conn = await asyncpg.connect(self.url(database), timeout=30)
            try:
                await conn.execute(sql)
            finally:
                await conn.close()

        with ThreadPoolExecutor(max_workers=1) as pool:
            pool.submit(asyncio.run, run()).result(timeout=60)
