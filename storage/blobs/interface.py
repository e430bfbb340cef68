"""The blob store interface (`BlobStore`, `BlobWriter`, `BlobReader`) and the key rules shared
by every backend (its errors are storage/errors.py's)."""

from __future__ import annotations

import abc
import re
from collections.abc import AsyncIterator, Sequence
from types import TracebackType

import trio

from storage.errors import BlobNotFound, InvalidBlobKey

READ_CHUNK = 1024 * 1024  # the largest chunk a reader yields: memory per download stays bounded
MAX_KEY_BYTES = 512  # well under S3's 1,024 and any filesystem's path limit
MAX_KEY_SEGMENTS = 8

# A segment starts with a letter or digit, so "." and ".." (and the local store's ".tmp"
# directory) can never be named; no "\\", no ":", nothing outside ASCII.
_SEGMENT = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}"
_KEY = re.compile(rf"{_SEGMENT}(?:/{_SEGMENT})*")


def validate_key(key: str) -> str:
    """Return `key` if it is a valid blob key, else raise `InvalidBlobKey`.

    Valid: 1 to 8 segments joined by "/", each 1 to 128 of `A-Za-z0-9_.-` starting with a
    letter or digit; 512 bytes at most. So no absolute path, no "." or ".." segment, no empty
    segment, no backslash or control character: a key names an object, never another path.
    """
    if (
        not isinstance(key, str)
        or len(key) > MAX_KEY_BYTES
        or not _KEY.fullmatch(key)
        or key.count("/") >= MAX_KEY_SEGMENTS
    ):
        raise InvalidBlobKey(f"invalid blob key {key!r:.80}")
    return key


class BlobWriter(abc.ABC):
    """One object being written. Use it as `async with`: leaving the block without `commit()`
    (an exception, a cancellation) aborts it, shielded, so nothing is left behind."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.bytes_written = 0
        self._state = "open"  # -> "committed" | "aborted"

    @property
    def committed(self) -> bool:
        return self._state == "committed"

    async def write(self, chunk: bytes) -> None:
        """Append `chunk`. Backends buffer and hand large batches to a worker thread."""
        self._require_open()
        if chunk:
            await self._write(chunk)
            self.bytes_written += len(chunk)

    async def commit(self) -> None:
        """Make the object visible under its key, whole, replacing any object there."""
        self._require_open()
        self._state = "committing"
        try:
            await self._commit()
        except BaseException:
            with trio.CancelScope(shield=True):
                await self._abort()
            self._state = "aborted"
            raise
        self._state = "committed"

    async def abort(self) -> None:
        """Drop what was written; idempotent, and a no-op after `commit()`."""
        if self._state != "open":
            return
        self._state = "aborted"
        with trio.CancelScope(shield=True):
            await self._abort()

    async def __aenter__(self) -> BlobWriter:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.abort()

    def _require_open(self) -> None:
        if self._state != "open":
            raise RuntimeError(f"blob writer for {self.key!r} is {self._state}")

    @abc.abstractmethod
    async def _write(self, chunk: bytes) -> None: ...

    @abc.abstractmethod
    async def _commit(self) -> None: ...

    @abc.abstractmethod
    async def _abort(self) -> None:
        """Release everything written so far; must not raise for a store that is down."""


class BlobReader(abc.ABC, AsyncIterator[bytes]):
    """A committed object opened for reading: its `size`, then its bytes in chunks of at most
    `READ_CHUNK`. Use it as `async with` (or call `aclose()`) to release the file or
    connection when not read to the end."""

    def __init__(self, key: str, size: int) -> None:
        self.key = key
        self.size = size

    def __aiter__(self) -> BlobReader:
        return self

    async def __anext__(self) -> bytes:
        chunk = await self._next()
        if not chunk:
            await self.aclose()
            raise StopAsyncIteration
        return chunk

    async def __aenter__(self) -> BlobReader:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    @abc.abstractmethod
    async def _next(self) -> bytes:
        """The next chunk, or b"" at the end."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release the file or connection; idempotent."""


class BlobStore(abc.ABC):
    """Where file content lives. Every method validates its key first."""

    @abc.abstractmethod
    async def open_writer(self, key: str) -> BlobWriter:
        """A writer for `key`; nothing is visible under `key` until its `commit()`."""

    @abc.abstractmethod
    async def read(self, key: str) -> BlobReader:
        """The committed object under `key`, opened; `BlobNotFound` if there is none."""

    @abc.abstractmethod
    async def size(self, key: str) -> int:
        """The object's size in bytes; `BlobNotFound` if there is none."""

    async def exists(self, key: str) -> bool:
        try:
            await self.size(key)
        except BlobNotFound:
            return False
        return True

    @abc.abstractmethod
    async def delete(self, key: str) -> None:
        """Remove the object; no error if there is none (idempotent)."""

    @abc.abstractmethod
    async def remove_stale(self, older_than_s: float) -> int:
        """Delete temporaries (unfinished writes) older than this, left by crashed processes;
        returns how many. Younger ones may belong to a write in progress elsewhere."""

    @abc.abstractmethod
    async def remove_unfinished(self, keys: Sequence[str], *, started_before: float) -> int:
        """Delete what an earlier, dead run of this process's instance slot left unfinished
        (storage/instance_slot.py), started before `started_before` (Unix seconds): the
        temporaries it marked (a store that marks them) and unfinished writes to `keys` (the
        blob keys of its leftover uploads). Returns how many."""

    @abc.abstractmethod
    def describe(self) -> str:
        """Where the blobs are, for logs and `gateway` output; never a credential."""

    async def aclose(self) -> None:  # noqa: B027 - optional for backends holding nothing
        """Release clients and threads."""
