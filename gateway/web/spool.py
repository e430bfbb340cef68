"""A request part held until the handler can use it (a multipart file that arrived before the
field that says where it goes): in memory up to a small size, past it in an unlinked temporary
file, encrypted.

On disk the content is sealed with protocol/blobcrypt.py (AES-256-GCM in 64 KiB authenticated
chunks) under a random key made for this one spool and kept only in this process's memory, so
the bytes in `$TMPDIR` (and in swap, backups or a snapshot of that disk) are never a client's
upload in clear, and they are unreadable once the process lets go of the key. The file is
unlinked from its creation: nothing remains if the process dies. Encryption and disk I/O run
on a worker thread, batched to `DISK_WRITE_BYTES` a hop, so the event loop is never blocked
on a disk; memory holds at most the in-memory part plus one batch.

    spool = SpooledFile("file", "a.wav", "audio/wav", memory_bytes=1 << 20)
    with spool:                          # or: spool.close() when done
        async for data in part:
            await spool.write(data)
        await spool.finish()
        async for data in spool.chunks():
            ...                          # from the start, as often as needed

Cancellation: `write`, `finish` and `chunks` stop at their next thread hop, which runs to its
end first (a worker thread is never abandoned mid-write); `close` is synchronous, so it also
runs in a cancelled scope. This module does no HTTP and knows nothing of multipart.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from types import TracebackType
from typing import IO

import trio

from protocol.blobcrypt import Decryptor, Encryptor, new_data_key

DISK_WRITE_BYTES = 1024 * 1024  # plaintext encrypted and written per worker-thread hop
READ_BYTES = 1024 * 1024  # ciphertext read and decrypted per hop
# The associated data of every chunk: a spool's key is its own, so no more is needed.
_AD = "spool"


class SpooledFile:
    """One spooled part: `name`, `filename` and `content_type` as the client sent them, `size`
    bytes written so far. Written once (`write`... `finish`), then read any number of times
    (`chunks`)."""

    def __init__(
        self, name: str, filename: str | None, content_type: str | None, memory_bytes: int
    ) -> None:
        self.name = name
        self.filename = filename
        self.content_type = content_type
        self.size = 0
        self._memory_bytes = memory_bytes
        self._memory = bytearray()
        self._file: IO[bytes] | None = None
        self._key: bytes | None = None
        self._encryptor: Encryptor | None = None
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._finished = False
        self._closed = False

    @property
    def on_disk(self) -> bool:
        return self._file is not None

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        where = "disk" if self.on_disk else "memory"
        return f"<SpooledFile name={self.name!r} size={self.size} {where} closed={self.closed}>"

    def __enter__(self) -> SpooledFile:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Free the memory and the file, and forget the key. Idempotent."""
        self._closed = True
        self._memory = bytearray()
        self._pending = []
        self._key = None
        self._encryptor = None
        if self._file is not None:
            self._file.close()

    async def write(self, data: bytes) -> None:
        """Add `data` at the end (a write past `memory_bytes` moves the spool to disk)."""
        self._check_open()
        if self._finished:
            raise RuntimeError(f"{self!r} is finished: it cannot be written to")
        self.size += len(data)
        if self._file is None:
            if len(self._memory) + len(data) <= self._memory_bytes:
                self._memory += data  # no I/O while it fits in memory
                return
            await self._to_disk()
        self._pending.append(data)
        self._pending_bytes += len(data)
        if self._pending_bytes >= DISK_WRITE_BYTES:
            await self._flush(final=False)

    async def finish(self) -> None:
        """Everything was written: seal the last chunk. Then `chunks` may read it back."""
        self._check_open()
        if self._finished:
            return
        if self._file is not None:
            await self._flush(final=True)
        self._finished = True

    async def chunks(self, size: int = READ_BYTES) -> AsyncIterator[bytes]:
        """The content from the start: in memory, `size` bytes at a time; on disk, one
        decrypted 64 KiB chunk at a time, `size` bytes of the file read per thread hop."""
        self._check_open()
        if not self._finished:
            raise RuntimeError(f"{self!r} is not finished: it cannot be read yet")
        if self._file is None:
            for start in range(0, len(self._memory), size):
                yield bytes(memoryview(self._memory)[start : start + size])
            return
        assert self._key is not None
        file, decryptor = self._file, Decryptor(self._key, _AD)

        def read() -> tuple[list[bytes], bool]:
            data = file.read(size)
            if data:
                return decryptor.feed(data), False
            return [decryptor.finish()], True  # BlobCorrupt if the file was cut or altered

        await trio.to_thread.run_sync(file.seek, 0)
        last = False
        while not last:
            self._check_open()
            pieces, last = await trio.to_thread.run_sync(read)
            for piece in pieces:
                if piece:
                    yield piece

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")

    async def _to_disk(self) -> None:
        """Past the memory size: the content so far becomes the file's first pending batch."""
        # Mode 0600, unlinked at once (POSIX): no other user, and no name, ever sees it.
        self._file = await trio.to_thread.run_sync(tempfile.TemporaryFile)
        self._key = new_data_key()
        self._encryptor = Encryptor(self._key, _AD)
        if self._memory:
            self._pending.append(bytes(self._memory))
            self._pending_bytes += len(self._memory)
            self._memory = bytearray()

    async def _flush(self, *, final: bool) -> None:
        pending, self._pending, self._pending_bytes = self._pending, [], 0
        file, encryptor = self._file, self._encryptor
        assert file is not None and encryptor is not None

        def work() -> None:
            sealed: list[bytes] = []
            for piece in pending:
                sealed += encryptor.feed(piece)
            if final:
                sealed += encryptor.finish()
            file.writelines(sealed)
            if final:
                file.flush()

        await trio.to_thread.run_sync(work)
