"""`ObjectStore` over a local directory: the embedded default bucket (`file:///abs/path`).

Key `a/b/c` is the file `<root>/a/b/c`; the directories in between are created on demand and
never removed (a concurrent put could be about to use them).

Writes are atomic and durable. An object is first written in full to a temp file in the
object's own directory (`.diskless-tmp-*`, never listed, not a valid key), fsynced, then
published in one step: `os.replace` for a plain put (last writer wins), `os.link` for
`if_none_match` (fails with EEXIST if the key is taken, so two racing creators cannot both
win). The directory is fsynced after the publish and after every mkdir, so a published object
survives a crash. A crash before the publish leaves only a temp file, which no reader sees.

Known differences from S3: a key cannot be both an object and a "directory" of other keys
(`a/b` and `a/b/c`): that put raises `StoreRequestRejected(code="KeyConflict")`. The etag is
derived from the file's inode, mtime and size, not from its contents.

File I/O runs in worker threads (`asyncio.to_thread`), except `head` (one stat) and small
ranged reads, which are cheaper inline than a thread hop. Safe to share between the tasks of
one event loop.
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import suppress
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, Self

from .errors import ObjectNotFound, PreconditionFailed, StoreClosed, StoreRequestRejected, StoreUnavailable
from .store import (
    DEFAULT_PART_BYTES,
    TEMP_PREFIX,
    ObjectInfo,
    check_key,
    check_part_bytes,
    check_prefix,
    check_range,
)

_INLINE_READ_BYTES = 64 * 1024
_COPY_BUFFER_BYTES = 1024 * 1024


class LocalObjectStore:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self._root = Path(os.path.abspath(root))
        self._closed = False

    @property
    def root(self) -> Path:
        return self._root

    async def __aenter__(self) -> Self:
        self._check_open("open")
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        self._closed = True

    async def put(self, key: str, data: bytes, *, if_none_match: bool = False) -> None:
        self._check_open("put")
        check_key(key)

        def write(file: BinaryIO) -> None:
            file.write(data)

        await asyncio.to_thread(self._write_atomically, "put", key, write, if_none_match)

    async def put_file(
        self, key: str, path: str | os.PathLike[str], *, part_bytes: int = DEFAULT_PART_BYTES
    ) -> None:
        """`part_bytes` only matters to S3; here every file is one atomic copy."""
        self._check_open("put_file")
        check_key(key)
        check_part_bytes(part_bytes)

        def copy() -> None:
            # Opened before the write starts, so a missing source is the caller's
            # FileNotFoundError rather than a store failure.
            with open(path, "rb") as source:

                def write(file: BinaryIO) -> None:
                    shutil.copyfileobj(source, file, _COPY_BUFFER_BYTES)

                self._write_atomically("put_file", key, write, False)

        await asyncio.to_thread(copy)

    async def get(self, key: str, *, start: int | None = None, end: int | None = None) -> bytes:
        self._check_open("get")
        check_key(key)
        first, end = check_range(start, end)
        if end is not None and end - first <= _INLINE_READ_BYTES:
            return self._read(key, first, end)
        return await asyncio.to_thread(self._read, key, first, end)

    async def head(self, key: str) -> ObjectInfo | None:
        self._check_open("head")
        check_key(key)
        try:
            status = os.stat(self._path(key))
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as error:
            raise StoreUnavailable(str(error), operation="head", key=key) from error
        if not stat.S_ISREG(status.st_mode):
            return None
        return _info(key, status)

    async def list(self, prefix: str = "") -> list[ObjectInfo]:
        self._check_open("list")
        check_prefix(prefix)
        return await asyncio.to_thread(self._list, prefix)

    async def delete(self, key: str) -> None:
        self._check_open("delete")
        check_key(key)
        await asyncio.to_thread(self._delete, key)

    async def delete_many(self, keys: Iterable[str]) -> None:
        self._check_open("delete_many")
        unique = sorted({check_key(key) for key in keys})

        def delete_all() -> None:
            for key in unique:
                self._delete(key)

        await asyncio.to_thread(delete_all)

    def _write_atomically(
        self, operation: str, key: str, write: Callable[[BinaryIO], None], if_none_match: bool
    ) -> None:
        path = self._path(key)
        try:
            self._ensure_directory(path.parent)
            descriptor, temp_name = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=path.parent)
        except (FileExistsError, NotADirectoryError) as error:
            raise _key_conflict(operation, key, "a parent of the key is an object") from error
        except OSError as error:
            raise StoreUnavailable(str(error), operation=operation, key=key) from error
        published = False
        try:
            with os.fdopen(descriptor, "wb") as file:
                write(file)
                file.flush()
                os.fsync(file.fileno())
            if if_none_match:
                try:
                    os.link(temp_name, path)
                except FileExistsError:
                    if path.is_dir():
                        raise _key_conflict(operation, key, "the key is a prefix of other keys") from None
                    raise PreconditionFailed(key) from None
            else:
                try:
                    os.replace(temp_name, path)
                except IsADirectoryError:
                    raise _key_conflict(operation, key, "the key is a prefix of other keys") from None
                published = True
            _fsync_directory(path.parent)
        except OSError as error:
            raise StoreUnavailable(str(error), operation=operation, key=key) from error
        finally:
            if not published:
                with suppress(FileNotFoundError):
                    os.unlink(temp_name)

    def _ensure_directory(self, directory: Path) -> None:
        if directory.is_dir():
            return
        missing: list[Path] = []
        while not directory.exists():
            missing.append(directory)
            directory = directory.parent
        for directory in reversed(missing):
            with suppress(FileExistsError):  # a concurrent put made it first
                os.mkdir(directory)
            _fsync_directory(directory.parent)

    def _read(self, key: str, first: int, end: int | None) -> bytes:
        try:
            with open(self._path(key), "rb") as file:
                if first:
                    file.seek(first)
                return file.read() if end is None else file.read(end - first)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise ObjectNotFound(key) from None
        except OSError as error:
            raise StoreUnavailable(str(error), operation="get", key=key) from error

    def _list(self, prefix: str) -> list[ObjectInfo]:
        directory_key, _, name_prefix = prefix.rpartition("/")
        if directory_key:
            try:
                check_key(directory_key)
            except ValueError:
                return []  # no valid key lies under it
        directory = self._root.joinpath(*directory_key.split("/")) if directory_key else self._root
        key_prefix = directory_key + "/" if directory_key else ""
        infos: list[ObjectInfo] = []
        try:
            for key, status in _walk(directory, key_prefix, name_prefix):
                infos.append(_info(key, status))
        except OSError as error:
            raise StoreUnavailable(str(error), operation="list", key=prefix) from error
        infos.sort(key=lambda info: info.key)
        return infos

    def _delete(self, key: str) -> None:
        path = self._path(key)
        try:
            os.unlink(path)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return
        except PermissionError as error:
            if path.is_dir():  # some systems answer EPERM, not EISDIR, for a directory
                return
            raise StoreUnavailable(str(error), operation="delete", key=key) from error
        except OSError as error:
            raise StoreUnavailable(str(error), operation="delete", key=key) from error
        _fsync_directory(path.parent)

    def _path(self, key: str) -> Path:
        return self._root.joinpath(*key.split("/"))

    def _check_open(self, operation: str) -> None:
        if self._closed:
            raise StoreClosed(operation)


def _walk(directory: Path, key_prefix: str, name_prefix: str) -> Iterator[tuple[str, os.stat_result]]:
    """Yield (key, stat) for regular files under `directory` whose first-level name starts
    with `name_prefix`; files that vanish while we walk are skipped."""
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return
    for entry in entries:
        if not entry.name.startswith(name_prefix) or entry.name.startswith(TEMP_PREFIX):
            continue
        key = key_prefix + entry.name
        try:
            if entry.is_dir(follow_symlinks=False):
                yield from _walk(Path(entry.path), key + "/", "")
            elif entry.is_file(follow_symlinks=False):
                yield key, entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue


def _info(key: str, status: os.stat_result) -> ObjectInfo:
    etag = f"{status.st_ino:x}-{status.st_mtime_ns:x}-{status.st_size:x}"
    return ObjectInfo(key=key, size_bytes=status.st_size, etag=etag)


def _key_conflict(operation: str, key: str, reason: str) -> StoreRequestRejected:
    return StoreRequestRejected(operation=operation, key=key, code="KeyConflict", reason=reason)


def _fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    except OSError as error:
        if error.errno not in (errno.EINVAL, errno.EROFS):  # file systems that cannot fsync a directory
            raise
    finally:
        os.close(descriptor)
