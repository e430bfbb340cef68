"""File content encrypted at rest: a streaming, chunked AES-256-GCM format. No I/O.

Each file has its own random 256-bit data key (`new_data_key`); the files table keeps it sealed
under the master key (protocol/secretbox.py, purpose `file-keys`), never the blob, so a master-key
rotation re-wraps keys without touching content. The content is cut into fixed-size plaintext
chunks, each sealed on its own, so an upload encrypts as the bytes stream in and a download
decrypts chunk by chunk, with memory bounded by one chunk either way.

Blob layout (version 1)::

    header  16 bytes  magic b"MGFE" | version 1 | log2(chunk size) | 2 zero bytes | nonce prefix (8)
    chunk i           AES-256-GCM(data key, nonce = prefix ‖ i (u32 BE),
                                  AD = header ‖ i (u32 BE) ‖ final (u8) ‖ file id)
                      = plaintext ‖ 16-byte tag

Every chunk but the last holds exactly `chunk size` plaintext bytes; the last one (marked final
in its associated data) holds `n mod chunk size` bytes — between 0 and chunk size - 1, so a file
whose size is a multiple of the chunk size ends with an empty final chunk. Hence the blob size is
a function of the plaintext size and back (`ciphertext_size`, `plaintext_size`), and neither
side ever needs to look ahead: a full-length chunk is not final, a short one is.

What this detects (the STREAM construction of Hoang, Reyhanitabar, Rogaway and Vizár, as in
Tink's streaming AEAD and age): a flipped bit anywhere (the header is in every chunk's AD),
reordered or duplicated chunks (the index), a truncation at a chunk boundary (no final chunk)
or inside one (a short chunk not sealed as final), bytes appended after the final chunk (the
final chunk then has the wrong length or position), a chunk or blob of another file (the file
id, and another data key). All of them raise `BlobCorrupt`; no plaintext of a chunk is given
out before its tag checked. Some bindings are deliberately redundant: the index is in the nonce
and the AD, and since only the last chunk is ever short, its length already marks it final;
the flag and the header in the AD keep the format sound if a later version relaxes either.
A stream cut short is only known at its end, so a download that has already sent earlier
chunks must abort the response (not end it cleanly) when `finish` raises; checking the blob's
stored size against `ciphertext_size` first catches a truncated or extended blob before a
byte is sent.

The random nonce prefix is belt and braces: the data key is fresh per file, so counter nonces
alone would be unique, but a key reused by mistake still gets distinct nonces (birthday bound at
2^32 encryptions under one key).

    BlobCorrupt   the blob is not what this key sealed for this file id — never says which part
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from protocol.errors import BlobCorrupt

MAGIC = b"MGFE"
VERSION = 1
HEADER_BYTES = 16
TAG_BYTES = 16
KEY_BYTES = 32
CHUNK_SIZE = 64 * 1024  # plaintext bytes per chunk; see docs/decisions.md
MIN_CHUNK_SHIFT = 8  # 256 B: small chunks exercise many boundaries in tests
MAX_CHUNK_SHIFT = 20  # 1 MiB: the most a decryptor buffers for a hostile header
_PREFIX_BYTES = 8
_MAX_CHUNKS = 1 << 32  # the counter is 32 bits: 256 TiB at 64 KiB chunks
_INDEX = struct.Struct(">I")
_INDEX_FINAL = struct.Struct(">IB")


def new_data_key() -> bytes:
    """A fresh random 256-bit data key for one file."""
    return os.urandom(KEY_BYTES)


def _chunk_shift(chunk_size: int) -> int:
    shift = chunk_size.bit_length() - 1
    if chunk_size != 1 << shift or not MIN_CHUNK_SHIFT <= shift <= MAX_CHUNK_SHIFT:
        raise ValueError(
            f"chunk size must be a power of two from {1 << MIN_CHUNK_SHIFT} to"
            f" {1 << MAX_CHUNK_SHIFT} bytes"
        )
    return shift


def ciphertext_size(plaintext_size: int, chunk_size: int = CHUNK_SIZE) -> int:
    """The blob size for `plaintext_size` bytes: header, content, one tag per chunk."""
    _chunk_shift(chunk_size)
    if plaintext_size < 0:
        raise ValueError("a size is not negative")
    chunks = plaintext_size // chunk_size + 1
    return HEADER_BYTES + plaintext_size + chunks * TAG_BYTES


def plaintext_size(blob_size: int, chunk_size: int = CHUNK_SIZE) -> int:
    """The content size of a blob of `blob_size` bytes (a download's Content-Length).

    BlobCorrupt if no plaintext size gives that blob size: the blob was truncated or extended."""
    _chunk_shift(chunk_size)
    body = blob_size - HEADER_BYTES
    full, rest = divmod(body, chunk_size + TAG_BYTES)
    if body < 0 or rest < TAG_BYTES:
        raise BlobCorrupt("encrypted blob has an impossible size")
    return full * chunk_size + rest - TAG_BYTES


def _file_ad(file_id: str) -> bytes:
    if not file_id:
        raise ValueError("a file id is required")
    return file_id.encode()


def _aead(data_key: bytes) -> AESGCM:
    if len(data_key) != KEY_BYTES:
        raise ValueError(f"a data key must be {KEY_BYTES} bytes")
    return AESGCM(data_key)


class Encryptor:
    """Encrypts one file's content as it streams in.

    `feed` takes pieces of any size and returns the ciphertext of every chunk it completed,
    one bytes object a chunk (the header first); `finish` returns the final chunk. Between
    calls it holds less than one chunk of plaintext. Chunks are returned apart, not joined: a
    1 MiB join per piece costs glibc an mmap and page faults each time, and measured 500 MB/s
    for encrypt-then-decrypt against 2,800 MB/s as separate chunks (docs/decisions.md)."""

    def __init__(self, data_key: bytes, file_id: str, chunk_size: int = CHUNK_SIZE) -> None:
        shift = _chunk_shift(chunk_size)
        self._aead = _aead(data_key)
        self._file_ad = _file_ad(file_id)
        self._chunk = chunk_size
        self._prefix = os.urandom(_PREFIX_BYTES)
        self._header = MAGIC + bytes((VERSION, shift, 0, 0)) + self._prefix
        self._index = 0
        self._buffer = bytearray()
        self._pending_header = True
        self._finished = False

    def __repr__(self) -> str:
        return f"Encryptor(chunk={self._chunk}, index={self._index}, key=***)"

    def _seal(self, plaintext: bytes | memoryview, final: bool) -> bytes:
        if self._index >= _MAX_CHUNKS:
            raise ValueError("file too large for the chunk counter")
        nonce = self._prefix + _INDEX.pack(self._index)
        ad = self._header + _INDEX_FINAL.pack(self._index, final) + self._file_ad
        self._index += 1
        return self._aead.encrypt(nonce, plaintext, ad)

    def _take_header(self) -> list[bytes]:
        if self._pending_header:
            self._pending_header = False
            return [self._header]
        return []

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """The ciphertext of the chunks `data` completes, a bytes object each (possibly none)."""
        if self._finished:
            raise RuntimeError("encryptor already finished")
        out = self._take_header()
        view = memoryview(data).cast("B")
        out += _whole_chunks(self._buffer, view, self._chunk, self._seal_middle)
        return out

    def _seal_middle(self, chunk: bytes | memoryview) -> bytes:
        return self._seal(chunk, final=False)

    def finish(self) -> list[bytes]:
        """The final chunk (after the header, if no feed came first). The encryptor is then
        spent."""
        if self._finished:
            raise RuntimeError("encryptor already finished")
        out = self._take_header()
        out.append(self._seal(bytes(self._buffer), final=True))
        self._buffer.clear()
        self._finished = True
        return out


class Decryptor:
    """Decrypts one file's blob as it streams out of the store.

    `feed` takes ciphertext pieces of any size and returns the plaintext of every chunk that
    authenticated, one bytes object a chunk; `finish` checks the blob ended with its final
    chunk and returns that chunk's plaintext. Any failure raises BlobCorrupt and every later
    call raises it again. Between calls it holds less than one chunk of ciphertext (at most
    1 MiB + 16 bytes: the largest chunk size a header may name)."""

    def __init__(self, data_key: bytes, file_id: str) -> None:
        self._aead = _aead(data_key)
        self._file_ad = _file_ad(file_id)
        self._header = b""
        self._prefix = b""
        self._sealed_chunk = 0  # ciphertext bytes of a full chunk, once the header is read
        self._index = 0
        self._buffer = bytearray()
        self._failed = False
        self._finished = False

    def __repr__(self) -> str:
        return f"Decryptor(index={self._index}, key=***)"

    def _fail(self, message: str) -> BlobCorrupt:
        self._failed = True
        self._buffer = bytearray()
        return BlobCorrupt(message)

    def _check_usable(self) -> None:
        if self._failed:
            raise BlobCorrupt("encrypted blob already failed authentication")
        if self._finished:
            raise RuntimeError("decryptor already finished")

    def _read_header(self, header: bytes) -> None:
        magic, version, shift, reserved = header[:4], header[4], header[5], header[6:8]
        if magic != MAGIC:
            raise self._fail("not an encrypted blob")
        if version != VERSION:
            raise self._fail(f"unknown encrypted blob version {version}")
        if not MIN_CHUNK_SHIFT <= shift <= MAX_CHUNK_SHIFT or reserved != b"\0\0":
            raise self._fail("malformed encrypted blob header")
        self._header = header
        self._prefix = header[8:HEADER_BYTES]
        self._sealed_chunk = (1 << shift) + TAG_BYTES

    def _open(self, sealed: bytes | memoryview, final: bool) -> bytes:
        if self._index >= _MAX_CHUNKS:
            raise self._fail("encrypted blob has too many chunks")
        nonce = self._prefix + _INDEX.pack(self._index)
        ad = self._header + _INDEX_FINAL.pack(self._index, final) + self._file_ad
        try:
            plaintext = self._aead.decrypt(nonce, sealed, ad)
        except InvalidTag:
            raise self._fail("encrypted blob failed authentication") from None
        self._index += 1
        return plaintext

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """The plaintext of each chunk `data` completes and that authenticated (possibly none)."""
        self._check_usable()
        view = memoryview(data).cast("B")
        if not self._header:
            need = HEADER_BYTES - len(self._buffer)
            self._buffer += view[:need]
            view = view[need:]
            if len(self._buffer) < HEADER_BYTES:
                return []
            self._read_header(bytes(self._buffer))
            self._buffer.clear()
        # A full-length chunk is never the final one, so it opens as soon as it is whole.
        return _whole_chunks(self._buffer, view, self._sealed_chunk, self._open_middle)

    def _open_middle(self, sealed: bytes | memoryview) -> bytes:
        return self._open(sealed, final=False)

    def finish(self) -> bytes:
        """The final chunk's plaintext; BlobCorrupt if the blob ended anywhere else."""
        self._check_usable()
        if not self._header:
            raise self._fail("encrypted blob is truncated (no header)")
        if len(self._buffer) < TAG_BYTES:
            raise self._fail("encrypted blob is truncated (no final chunk)")
        plaintext = self._open(bytes(self._buffer), final=True)
        self._buffer.clear()
        self._finished = True
        return plaintext


def encrypt(data_key: bytes, file_id: str, plaintext: bytes, chunk_size: int = CHUNK_SIZE) -> bytes:
    """A whole blob at once (small content, tests)."""
    encryptor = Encryptor(data_key, file_id, chunk_size)
    return b"".join(encryptor.feed(plaintext) + encryptor.finish())


def decrypt(data_key: bytes, file_id: str, blob: bytes) -> bytes:
    """A whole blob's content at once (small content, tests); BlobCorrupt as the Decryptor."""
    decryptor = Decryptor(data_key, file_id)
    return b"".join([*decryptor.feed(blob), decryptor.finish()])


def _whole_chunks(
    buffer: bytearray,
    view: memoryview,
    size: int,
    transform: Callable[[bytes | memoryview], bytes],
) -> list[bytes]:
    """`transform` of every whole `size`-byte chunk that `buffer` (what is left of earlier
    pieces) followed by `view` completes, one bytes object each; the rest stays in `buffer`
    (always less than a chunk). Whole chunks inside `view` are transformed in place, uncopied."""
    out: list[bytes] = []
    if buffer:
        need = size - len(buffer)
        if len(view) < need:
            buffer += view
            return out
        buffer += view[:need]
        view = view[need:]
        out.append(transform(bytes(buffer)))
        buffer.clear()
    whole = len(view) - len(view) % size
    for start in range(0, whole, size):
        out.append(transform(view[start : start + size]))
    buffer += view[whole:]
    return out
