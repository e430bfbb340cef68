"""The local blob store: one file per object under a directory (`<data_dir>/blobs/` by
default), for a single host.

A write goes to a new file in `<root>/.tmp/` (same filesystem, so the final rename is atomic),
is fsynced, renamed onto `<root>/<key>` and the directory entry fsynced: a reader sees the
whole object or none. Abort (and cancellation, through the writer's `async with`) unlinks the
temporary; a crash leaves one in `.tmp/`, unreachable by any key (segments start with a letter
or digit), for `remove_stale()`, or for `remove_unfinished()` at the owner's next start: a
temporary's name begins with the owner (the process's instance slot) when there is one.
Blocking calls run in Trio's worker threads, batched to at least `WRITE_BATCH` bytes per hop.
"""

from __future__ import annotations

import os
import secrets
import stat
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import trio

from storage.blobs.interface import READ_CHUNK, BlobReader, BlobStore, BlobWriter, validate_key
from storage.errors import BlobNotFound, BlobStoreUnavailable
from storage.private_paths import private_dir

WRITE_BATCH = 1024 * 1024
TMP_DIR = ".tmp"
T = TypeVar("T")


async def _in_thread(fn: Callable[[], T]) -> T:
    """Run blocking file I/O in a worker thread; disk errors become `BlobStoreUnavailable`."""
    try:
        return await trio.to_thread.run_sync(fn)
    except (BlobNotFound, FileNotFoundError):
        raise
    except OSError as exc:
        raise BlobStoreUnavailable(f"blob store I/O failed: {exc.strerror or exc}") from exc


def _write_all(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalBlobStore(BlobStore):
    def __init__(self, root: Path, *, owner: str = "") -> None:
        """Create `root` and its temporaries directory if missing (a blocking call: at start).
        `owner` (storage/instance_slot.py) begins the name of this store's temporaries."""
        self.root = Path(root)
        self._owner = owner
        self._tmp = self.root / TMP_DIR
        private_dir(self._tmp)  # the root too, and any parent it creates: 0700

    def describe(self) -> str:
        return f"local directory {self.root}"

    def _path(self, key: str) -> Path:
        return self.root / validate_key(key)

    async def open_writer(self, key: str) -> BlobWriter:
        path = self._path(key)
        token = secrets.token_hex(16)
        tmp = self._tmp / (f"{self._owner}.{token}.part" if self._owner else f"{token}.part")
        fd = await _in_thread(
            lambda: os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        )
        return _LocalWriter(key, self.root, path, tmp, fd)

    async def read(self, key: str) -> BlobReader:
        path = self._path(key)

        def open_file() -> tuple[int, int]:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except (FileNotFoundError, NotADirectoryError):
                raise BlobNotFound(key) from None
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                os.close(fd)
                raise BlobNotFound(key)
            return fd, info.st_size

        fd, size = await _in_thread(open_file)
        return _LocalReader(key, size, fd)

    async def size(self, key: str) -> int:
        path = self._path(key)

        def regular_size() -> int:
            try:
                info = os.stat(path)
            except (FileNotFoundError, NotADirectoryError):
                raise BlobNotFound(key) from None
            if not stat.S_ISREG(info.st_mode):
                raise BlobNotFound(key)
            return info.st_size

        return await _in_thread(regular_size)

    async def delete(self, key: str) -> None:
        path = self._path(key)

        def unlink() -> None:
            try:
                os.unlink(path)
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                return  # nothing stored under the key (a directory is not an object)
            _fsync_dir(path.parent)

        await _in_thread(unlink)

    async def remove_stale(self, older_than_s: float) -> int:
        def sweep() -> int:
            cutoff = time.time() - older_than_s
            removed = 0
            for entry in os.scandir(self._tmp):
                try:
                    if entry.stat().st_mtime < cutoff:
                        os.unlink(entry.path)
                        removed += 1
                except FileNotFoundError:
                    pass  # its writer finished or aborted meanwhile
            return removed

        return await _in_thread(sweep)

    async def remove_unfinished(self, keys: Sequence[str], *, started_before: float) -> int:
        """This owner's temporaries older than `started_before` (the keys need nothing more:
        an unfinished write is only a temporary here)."""
        if not self._owner:
            return 0
        prefix = self._owner + "."

        def sweep() -> int:
            removed = 0
            for entry in os.scandir(self._tmp):
                try:
                    if entry.name.startswith(prefix) and entry.stat().st_mtime < started_before:
                        os.unlink(entry.path)
                        removed += 1
                except FileNotFoundError:
                    pass
            return removed

        return await _in_thread(sweep)


class _LocalWriter(BlobWriter):
    def __init__(self, key: str, root: Path, path: Path, tmp: Path, fd: int) -> None:
        super().__init__(key)
        self._root = root
        self._path = path
        self._tmp = tmp
        self._fd: int | None = fd
        self._buffer = bytearray()

    async def _flush(self) -> None:
        if not self._buffer:
            return
        pending, self._buffer = self._buffer, bytearray()
        fd = self._fd
        assert fd is not None
        await _in_thread(lambda: _write_all(fd, pending))

    async def _write(self, chunk: bytes) -> None:
        self._buffer += chunk
        if len(self._buffer) >= WRITE_BATCH:
            await self._flush()

    async def _commit(self) -> None:
        await self._flush()
        fd = self._fd
        assert fd is not None

        def publish() -> None:
            os.fsync(fd)
            os.close(fd)
            self._fd = None
            created = []
            parent = self._path.parent
            while not parent.exists():
                created.append(parent)
                parent = parent.parent
            private_dir(self._path.parent)
            os.replace(self._tmp, self._path)
            _fsync_dir(self._path.parent)
            for directory in created:  # new directories' own entries, up to an existing one
                _fsync_dir(directory.parent)

        await _in_thread(publish)

    async def _abort(self) -> None:
        self._buffer = bytearray()
        fd, self._fd = self._fd, None

        def discard() -> None:
            if fd is not None:
                os.close(fd)
            try:
                os.unlink(self._tmp)
            except FileNotFoundError:
                pass

        try:
            await _in_thread(discard)
        except BlobStoreUnavailable:
            pass  # left for remove_stale(); a reader can never see it


class _LocalReader(BlobReader):
    def __init__(self, key: str, size: int, fd: int) -> None:
        super().__init__(key, size)
        self._fd: int | None = fd

    async def _next(self) -> bytes:
        fd = self._fd
        if fd is None:
            return b""
        return await _in_thread(lambda: os.read(fd, READ_CHUNK))

    async def aclose(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
