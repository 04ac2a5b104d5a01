"""The broker's claim on its data directory: an exclusive lock and Kafka's `meta.properties`.

Two brokers writing one data directory both acknowledge writes and then lose one side's
records, so, as Kafka does with the `.lock` file of each log directory, a broker takes an
exclusive `flock` on `<data-dir>/.lock` before it touches anything else there, and holds it
for the life of the process. The kernel drops the lock when the descriptor closes, so any
death (SIGKILL, OOM, a power cut) releases it and no stale lock ever needs cleaning by hand.
The holder writes its pid into the lock file, only so that a refused second broker can name
it; the lock itself, not the pid, is what excludes. `flock` locks belong to the open file
description, so a second claim from the same process is refused too.

`meta.properties` is Kafka's file (KRaft's version 1, java.util.Properties syntax):

    version=1
    cluster.id=<22-character url-safe base64 uuid>
    node.id=<int>

It is written on first start (to a temporary file, then renamed, so a crash leaves either no
file or a whole one) and read, under the lock, on every later start. A directory that
belongs to another node id, or to another cluster id when the caller knows the cluster's id
(from a shared metadata store), is refused. Version 0 files (ZooKeeper-era Kafka) name the
node `broker.id`; they are read the same way.

Called once, from the broker's start-up, before any other file in the directory is opened.
"""

from __future__ import annotations

import base64
import errno
import fcntl
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

LOCK_FILE = ".lock"  # Kafka's name for it
META_PROPERTIES = "meta.properties"
META_VERSION = 1


class DataDirError(Exception):
    """The data directory cannot be used; `str()` is one line saying why and what to do."""


class DataDirLocked(DataDirError):
    def __init__(self, data_dir: Path, holder_pid: int | None) -> None:
        self.data_dir = data_dir
        self.holder_pid = holder_pid
        holder = f"process {holder_pid}" if holder_pid is not None else "another process"
        super().__init__(f"data directory {data_dir} is in use by {holder} (another broker); stop it or use another data directory")


class DataDirMismatch(DataDirError):
    """meta.properties names another node or cluster than this broker's."""

    def __init__(self, data_dir: Path, key: str, found: str, expected: str) -> None:
        self.data_dir = data_dir
        self.key = key
        self.found = found
        self.expected = expected
        super().__init__(
            f"data directory {data_dir} belongs to {key} {found}, not {expected} (see {data_dir / META_PROPERTIES}); "
            f"use that {key} or another data directory"
        )


class CorruptMetaProperties(DataDirError):
    def __init__(self, path: Path, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path} is not a valid meta.properties ({reason}); fix or remove it")


@dataclass(frozen=True, slots=True)
class MetaProperties:
    version: int
    cluster_id: str
    node_id: int
    # KIP-858's directory.id: names this directory for good. A broker restarted on the same
    # directory is the same broker (its old session may be taken over at once); one on a new
    # directory (a lost disk) waits for the old session to expire.
    directory_id: str = ""


def new_cluster_id() -> str:
    """A cluster id as Kafka makes them: a random UUID, url-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def parse_meta_properties(text: str) -> dict[str, str]:
    """The key=value pairs of a java.util.Properties text (comments and blank lines skipped)."""
    pairs = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            pairs[line] = ""
        else:
            pairs[line[:sep].strip()] = line[sep + 1 :].strip()
    return pairs


def meta_from_pairs(pairs: dict[str, str], path: Path) -> MetaProperties:
    try:
        version = int(pairs.get("version", "0"))
    except ValueError:
        raise CorruptMetaProperties(path, f"version {pairs['version']!r} is not a number") from None
    node_key = "node.id" if version >= 1 else "broker.id"
    if not pairs.get("cluster.id"):
        raise CorruptMetaProperties(path, "no cluster.id")
    if node_key not in pairs:
        raise CorruptMetaProperties(path, f"no {node_key}")
    try:
        node_id = int(pairs[node_key])
    except ValueError:
        raise CorruptMetaProperties(path, f"{node_key} {pairs[node_key]!r} is not a number") from None
    return MetaProperties(version=version, cluster_id=pairs["cluster.id"], node_id=node_id, directory_id=pairs.get("directory.id", ""))


def format_meta_properties(meta: MetaProperties) -> str:
    directory = f"directory.id={meta.directory_id}\n" if meta.directory_id else ""
    return f"version={meta.version}\ncluster.id={meta.cluster_id}\nnode.id={meta.node_id}\n{directory}"


def check_meta(meta: MetaProperties, data_dir: Path, node_id: int, cluster_id: str | None) -> None:
    """Refuse a directory that belongs to another node, or to another cluster when `cluster_id` is known."""
    if meta.node_id != node_id:
        raise DataDirMismatch(data_dir, "node.id", str(meta.node_id), str(node_id))
    if cluster_id is not None and meta.cluster_id != cluster_id:
        raise DataDirMismatch(data_dir, "cluster.id", meta.cluster_id, cluster_id)


class DataDirLock:
    """The exclusive lock on one data directory and the `meta.properties` read under it.

    Owned by the broker that claimed it; `release()` is idempotent. Not shared between
    processes: a forked child does not inherit the descriptor (Python opens it close-on-exec).
    """

    def __init__(self, data_dir: Path, fd: int, meta: MetaProperties, created: bool = False) -> None:
        self.data_dir = data_dir
        self.meta = meta
        self.created = created  # meta.properties was written by this claim (a new directory)
        self._fd: int | None = fd

    @property
    def cluster_id(self) -> str:
        return self.meta.cluster_id

    @property
    def held(self) -> bool:
        return self._fd is not None

    def adopt_cluster_id(self, cluster_id: str) -> None:
        """The metadata store names the cluster: a directory made by this claim takes its id;
        one that already belonged to another cluster is refused (DataDirMismatch)."""
        if cluster_id == self.meta.cluster_id:
            return
        if not self.created:
            raise DataDirMismatch(self.data_dir, "cluster.id", self.meta.cluster_id, cluster_id)
        self.meta = MetaProperties(self.meta.version, cluster_id, self.meta.node_id, self.meta.directory_id)
        _write_meta(self.data_dir / META_PROPERTIES, self.meta)

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        # The pid stays in the file: it is only read by a refused claimant, while the lock is held.
        os.close(fd)  # closing the last descriptor drops the flock

    def __del__(self) -> None:
        self.release()


def claim_data_dir(data_dir: Path, node_id: int, cluster_id: str | None = None) -> DataDirLock:
    """Lock `data_dir` for this process, then read (or, on first start, write) its meta.properties.

    Raises DataDirLocked if another process (or another claim in this one) holds it,
    DataDirMismatch if it belongs to another node id or cluster id, CorruptMetaProperties if
    its meta.properties cannot be read. `cluster_id` is the cluster's id when the caller knows
    it (from a shared metadata store); None adopts the directory's, or makes a new one.
    """
    data_dir = data_dir.absolute()
    data_dir.mkdir(parents=True, exist_ok=True)
    lock_path = data_dir / LOCK_FILE
    # O_CREAT without O_TRUNC: the holder's pid must survive our open for us to report it.
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise DataDirLocked(data_dir, _read_pid(lock_path)) from None
        raise
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        created = not (data_dir / META_PROPERTIES).exists()
        meta = _load_or_create_meta(data_dir, node_id, cluster_id)
    except BaseException:
        os.close(fd)
        raise
    return DataDirLock(data_dir, fd, meta, created)


def _read_pid(lock_path: Path) -> int | None:
    try:
        text = lock_path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # empty while the holder is between flock and write


def _load_or_create_meta(data_dir: Path, node_id: int, cluster_id: str | None) -> MetaProperties:
    path = data_dir / META_PROPERTIES
    try:
        text = path.read_text()
    except FileNotFoundError:
        meta = MetaProperties(version=META_VERSION, cluster_id=cluster_id or new_cluster_id(), node_id=node_id, directory_id=new_cluster_id())
        _write_meta(path, meta)
        return meta
    meta = meta_from_pairs(parse_meta_properties(text), path)
    check_meta(meta, data_dir, node_id, cluster_id)
    if not meta.directory_id:  # written before directory ids: give it one
        meta = MetaProperties(meta.version, meta.cluster_id, meta.node_id, new_cluster_id())
        _write_meta(path, meta)
    return meta


def _write_meta(path: Path, meta: MetaProperties) -> None:
    """Write meta.properties durably: a temporary file, fsynced, renamed over."""
    tmp = path.with_name(META_PROPERTIES + ".tmp")
    with open(tmp, "w") as f:
        f.write(format_meta_properties(meta))
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)
