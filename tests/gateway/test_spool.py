"""gateway/web/spool.py: a held part in memory up to its size, then in an unlinked, encrypted
temporary file; read back intact any number of times, memory bounded whatever the size, nothing
left once closed."""

from __future__ import annotations

import hashlib
import os
import tracemalloc

import pytest
import trio

from gateway.web.spool import DISK_WRITE_BYTES, SpooledFile
from protocol.blobcrypt import ciphertext_size
from protocol.errors import BlobCorrupt

MEMORY = 64 * 1024


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def fill(spool: SpooledFile, data: bytes, piece: int = 8192) -> None:
    for start in range(0, len(data), piece):
        await spool.write(data[start : start + piece])
    await spool.finish()


async def read(spool: SpooledFile, size: int = 100_000) -> bytes:
    return b"".join([data async for data in spool.chunks(size)])


@pytest.mark.parametrize("size", [0, 1, MEMORY - 1, MEMORY])
async def test_up_to_the_memory_size_nothing_touches_the_disk(size: int) -> None:
    data = os.urandom(size)
    fds = _open_fds()
    with SpooledFile("file", "a.wav", "audio/wav", MEMORY) as spool:
        await fill(spool, data)
        assert not spool.on_disk and spool.size == size and _open_fds() == fds
        assert await read(spool, 1000) == data
        assert await read(spool) == data  # again, from the start
    assert spool.closed


@pytest.mark.parametrize("size", [MEMORY + 1, 3 * DISK_WRITE_BYTES + 12345])
async def test_past_it_the_file_holds_only_ciphertext(size: int) -> None:
    # Text a reader of the disk would recognise, repeated (plaintext would show it anywhere).
    data = (b"the client's secret recording " * (size // 30 + 1))[:size]
    fds = _open_fds()
    spool = SpooledFile("file", "a.wav", None, MEMORY)
    with spool:
        await fill(spool, data, piece=7777)
        assert spool.on_disk and spool.size == size
        assert _open_fds() == fds + 1
        file = spool._file
        assert file is not None
        on_disk = os.pread(file.fileno(), ciphertext_size(size) + 1, 0)
        assert len(on_disk) == ciphertext_size(size)
        assert b"secret recording" not in on_disk
        assert os.fstat(file.fileno()).st_nlink == 0  # no name in any directory
        assert os.fstat(file.fileno()).st_mode & 0o777 == 0o600
        assert hashlib.sha256(await read(spool)).digest() == hashlib.sha256(data).digest()
        assert await read(spool, 4096) == data
    assert spool.closed and _open_fds() == fds
    with pytest.raises(RuntimeError):
        await read(spool)


async def test_a_spool_file_altered_on_disk_is_never_read_back() -> None:
    data = os.urandom(MEMORY * 3)
    with SpooledFile("file", None, None, MEMORY) as spool:
        await fill(spool, data)
        assert spool._file is not None
        fd = spool._file.fileno()
        byte = os.pread(fd, 1, 100)
        os.pwrite(fd, bytes([byte[0] ^ 1]), 100)
        with pytest.raises(BlobCorrupt):
            await read(spool)


async def test_memory_stays_bounded_whatever_the_size() -> None:
    memory = 1024 * 1024
    piece = os.urandom(64 * 1024)
    total = 24 * 1024 * 1024
    tracemalloc.start()
    try:
        with SpooledFile("file", None, None, memory) as spool:
            for _ in range(total // len(piece)):
                await spool.write(piece)
            await spool.finish()
            _, peak_writing = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            digest = hashlib.sha256()
            async for data in spool.chunks():
                digest.update(data)
            _, peak_reading = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert digest.digest() == hashlib.sha256(piece * (total // len(piece))).digest()
    # The in-memory part, one batch of plaintext and its ciphertext (reading: one read and its
    # plaintext, and the consumer's piece): far below the 24 MiB.
    assert peak_writing < memory + 3 * DISK_WRITE_BYTES, peak_writing
    assert peak_reading < 4 * DISK_WRITE_BYTES, peak_reading


async def test_misuse_is_a_programming_error() -> None:
    with SpooledFile("file", None, None, MEMORY) as spool:
        await spool.write(b"x")
        with pytest.raises(RuntimeError):
            await read(spool)  # not finished
        await spool.finish()
        with pytest.raises(RuntimeError):
            await spool.write(b"y")
    with pytest.raises(RuntimeError):
        await spool.write(b"z")


async def test_closing_while_reading_stops_the_reader() -> None:
    data = os.urandom(DISK_WRITE_BYTES * 2)
    spool = SpooledFile("file", None, None, MEMORY)
    await fill(spool, data)
    chunks = spool.chunks(64 * 1024)
    first = await anext(chunks)
    assert first == data[: len(first)]
    spool.close()
    with pytest.raises(RuntimeError):
        async for _ in chunks:
            await trio.lowlevel.checkpoint()
