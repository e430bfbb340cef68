"""Chunked AES-256-GCM file encryption: every way a stored blob can be damaged or swapped is
refused with BlobCorrupt (and no unauthenticated plaintext is given out), round trips at the
chunk boundaries fed in random pieces, the size arithmetic, bounded holding, and the data key
wrapped under the master key across a rotation."""

from __future__ import annotations

import random

import pytest

from protocol.blobcrypt import (
    CHUNK_SIZE,
    HEADER_BYTES,
    TAG_BYTES,
    Decryptor,
    Encryptor,
    ciphertext_size,
    decrypt,
    encrypt,
    new_data_key,
    plaintext_size,
)
from protocol.errors import BlobCorrupt, SecretBoxError
from protocol.secretbox import FILE_KEYS, SecretBox, unwrap_data_key, wrap_data_key

KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))
FILE = "file-abc123"
SMALL = 256  # the smallest chunk size: many chunk boundaries in a few hundred bytes


def _content(size: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(size)


def _chunks(blob: bytes, chunk_size: int) -> tuple[bytes, list[bytes]]:
    """The header and the sealed chunks of a well-formed blob."""
    sealed = chunk_size + TAG_BYTES
    body = blob[HEADER_BYTES:]
    return blob[:HEADER_BYTES], [body[i : i + sealed] for i in range(0, len(body), sealed)]


def _decrypt_in_pieces(blob: bytes, seed: int, key: bytes = KEY, file_id: str = FILE) -> bytes:
    rng = random.Random(seed)
    decryptor = Decryptor(key, file_id)
    out: list[bytes] = []
    at = 0
    while at < len(blob):
        step = rng.choice((1, 2, 15, 16, 17, rng.randrange(1, 3 * SMALL), rng.randrange(1, 70_000)))
        out += decryptor.feed(blob[at : at + step])
        at += step
    out.append(decryptor.finish())
    return b"".join(out)


def _encrypt_in_pieces(content: bytes, seed: int, chunk_size: int) -> bytes:
    rng = random.Random(seed)
    encryptor = Encryptor(KEY, FILE, chunk_size)
    out: list[bytes] = []
    at = 0
    while at < len(content):
        step = rng.choice((1, 7, rng.randrange(1, 2 * chunk_size + 2)))
        out += encryptor.feed(content[at : at + step])
        at += step
    out += encryptor.finish()
    return b"".join(out)


# --- tampering: every case is BlobCorrupt -------------------------------------------------


def test_every_truncation_is_refused() -> None:
    blob = encrypt(KEY, FILE, _content(3 * SMALL + 40), SMALL)
    for cut in range(len(blob)):
        with pytest.raises(BlobCorrupt):
            decrypt(KEY, FILE, blob[:cut])


@pytest.mark.parametrize("size", [SMALL, 2 * SMALL, 3 * SMALL + 5])
def test_a_missing_final_chunk_is_refused(size: int) -> None:
    blob = encrypt(KEY, FILE, _content(size), SMALL)
    header, chunks = _chunks(blob, SMALL)
    assert len(chunks[-1]) < SMALL + TAG_BYTES  # the final chunk is the short one
    with pytest.raises(BlobCorrupt):
        decrypt(KEY, FILE, header + b"".join(chunks[:-1]))


def test_every_flipped_bit_is_refused() -> None:
    blob = encrypt(KEY, FILE, _content(2 * SMALL + 30), SMALL)
    for position in range(len(blob)):
        for bit in range(8):
            damaged = bytearray(blob)
            damaged[position] ^= 1 << bit
            with pytest.raises(BlobCorrupt):
                decrypt(KEY, FILE, bytes(damaged))


def test_reordered_and_repeated_chunks_are_refused() -> None:
    blob = encrypt(KEY, FILE, _content(4 * SMALL + 9), SMALL)
    header, c = _chunks(blob, SMALL)
    assert len(c) == 5
    for order in ([c[1], c[0], c[2], c[3], c[4]], [c[0], c[2], c[1], c[3], c[4]]):
        with pytest.raises(BlobCorrupt):
            decrypt(KEY, FILE, header + b"".join(order))
    for body in ([c[0], c[0], c[1], c[2], c[3], c[4]], [c[0], c[1], c[2], c[3], c[3], c[4]]):
        with pytest.raises(BlobCorrupt):
            decrypt(KEY, FILE, header + b"".join(body))
    with pytest.raises(BlobCorrupt):  # a chunk dropped from the middle
        decrypt(KEY, FILE, header + b"".join([c[0], c[2], c[3], c[4]]))


def test_a_chunk_from_another_blob_is_refused() -> None:
    content = _content(3 * SMALL + 1)
    mine = encrypt(KEY, FILE, content, SMALL)
    sources = [
        encrypt(KEY, FILE, content, SMALL),  # same key, file and content: another nonce prefix
        encrypt(KEY, "file-other", content, SMALL),  # same key, another file
        encrypt(OTHER_KEY, "file-other", content, SMALL),  # another file's key
    ]
    header, chunks = _chunks(mine, SMALL)
    for source in sources:
        other_header, other_chunks = _chunks(source, SMALL)
        for i in range(len(chunks)):
            spliced = chunks[:i] + [other_chunks[i]] + chunks[i + 1 :]
            with pytest.raises(BlobCorrupt):
                decrypt(KEY, FILE, header + b"".join(spliced))
        with pytest.raises(BlobCorrupt):  # my chunks under the other blob's header
            decrypt(KEY, FILE, other_header + b"".join(chunks))


@pytest.mark.parametrize("size", [0, 5, SMALL, 2 * SMALL + 3])
def test_bytes_after_the_final_chunk_are_refused(size: int) -> None:
    blob = encrypt(KEY, FILE, _content(size), SMALL)
    _, chunks = _chunks(blob, SMALL)
    extras = [b"\0", b"x" * TAG_BYTES, b"y" * (SMALL + TAG_BYTES), chunks[-1], chunks[0]]
    for extra in extras:
        with pytest.raises(BlobCorrupt):
            decrypt(KEY, FILE, blob + extra)
    # Two whole blobs back to back are not one blob either.
    with pytest.raises(BlobCorrupt):
        decrypt(KEY, FILE, blob + encrypt(KEY, FILE, _content(size), SMALL))


def test_the_wrong_key_or_file_id_is_refused() -> None:
    for size in (0, 1, SMALL + 1):
        blob = encrypt(KEY, FILE, _content(size), SMALL)
        with pytest.raises(BlobCorrupt):
            decrypt(OTHER_KEY, FILE, blob)
        for file_id in ("file-abc124", "file-abc12", FILE + "\0", "FILE-ABC123"):
            with pytest.raises(BlobCorrupt):
                decrypt(KEY, file_id, blob)


def test_a_malformed_header_is_refused_before_any_output() -> None:
    blob = encrypt(KEY, FILE, _content(SMALL + 1), SMALL)
    for damaged in (
        b"",
        blob[: HEADER_BYTES - 1],
        b"XXXX" + blob[4:],  # magic
        blob[:4] + b"\x02" + blob[5:],  # an unknown version
        blob[:5] + b"\x1e" + blob[6:],  # 1 GiB chunks: would have to be buffered
        blob[:5] + b"\x07" + blob[6:],  # below the smallest chunk size
        blob[:6] + b"\x00\x01" + blob[8:],  # reserved bytes
        b"not an encrypted blob at all, plain text content",
    ):
        decryptor = Decryptor(KEY, FILE)
        with pytest.raises(BlobCorrupt):
            assert decryptor.feed(damaged) == []
            decryptor.finish()


def test_no_plaintext_before_its_chunk_authenticated() -> None:
    content = _content(4 * SMALL + 7)
    blob = bytearray(encrypt(KEY, FILE, content, SMALL))
    blob[HEADER_BYTES + 2 * (SMALL + TAG_BYTES) + SMALL + 3] ^= 0x01  # the tag of chunk 2
    decryptor = Decryptor(KEY, FILE)
    given: list[bytes] = []
    with pytest.raises(BlobCorrupt):
        for byte in range(len(blob)):
            given += decryptor.feed(blob[byte : byte + 1])
    assert b"".join(given) == content[: 2 * SMALL]  # chunks 0 and 1 only, each once whole
    with pytest.raises(BlobCorrupt):  # spent: later calls fail again, never resume
        decryptor.feed(bytes(blob[byte + 1 :]))
    with pytest.raises(BlobCorrupt):
        decryptor.finish()


def test_a_truncated_stream_fails_at_finish() -> None:
    content = _content(3 * SMALL)
    blob = encrypt(KEY, FILE, content, SMALL)
    decryptor = Decryptor(KEY, FILE)
    given = decryptor.feed(blob[:-TAG_BYTES])  # every full chunk authenticated
    assert given == [content[i : i + SMALL] for i in range(0, len(content), SMALL)]
    with pytest.raises(BlobCorrupt):
        decryptor.finish()  # but the empty final chunk is missing


# --- round trips ----------------------------------------------------------------------------


@pytest.mark.parametrize("chunk_size", [SMALL, CHUNK_SIZE])
@pytest.mark.parametrize("shape", ["0", "1", "c-1", "c", "c+1", "3c", "5c+77"])
def test_round_trip_in_random_pieces(chunk_size: int, shape: str) -> None:
    c = chunk_size
    size = {"0": 0, "1": 1, "c-1": c - 1, "c": c, "c+1": c + 1, "3c": 3 * c, "5c+77": 5 * c + 77}
    content = _content(size[shape], seed=len(shape))
    for seed in range(3):
        blob = _encrypt_in_pieces(content, seed, chunk_size)
        assert len(blob) == ciphertext_size(len(content), chunk_size)
        assert plaintext_size(len(blob), chunk_size) == len(content)
        assert _decrypt_in_pieces(blob, seed + 100) == content
        assert decrypt(KEY, FILE, blob) == content


def test_each_encryption_is_fresh_and_hides_the_content() -> None:
    content = b"a line of a known upload\n" * 100
    first, second = encrypt(KEY, FILE, content, SMALL), encrypt(KEY, FILE, content, SMALL)
    assert first[:8] == second[:8] == b"MGFE\x01\x08\x00\x00"
    assert first[8:HEADER_BYTES] != second[8:HEADER_BYTES]  # a new nonce prefix
    assert first != second
    for blob in (first, second):
        assert b"a line of" not in blob and b"known upload" not in blob


def test_no_nonce_repeats_within_a_blob_or_across_blobs_under_one_key() -> None:
    """GCM under a repeated nonce leaks the XOR of plaintexts and the authentication key: equal
    plaintext chunks must give unequal ciphertext, in one blob and in two blobs of one key."""
    content = bytes(4 * SMALL)
    bodies = []
    for _ in range(2):
        _, chunks = _chunks(encrypt(KEY, FILE, content, SMALL), SMALL)
        bodies += [chunk[:SMALL] for chunk in chunks[:-1]]
    assert len(bodies) == 8 and len(set(bodies)) == 8


def test_new_data_keys_are_random_and_256_bits() -> None:
    keys = {new_data_key() for _ in range(100)}
    assert len(keys) == 100 and all(len(k) == 32 for k in keys)


# --- sizes and bounded holding --------------------------------------------------------------


def test_sizes_are_inverse_and_impossible_sizes_are_corrupt() -> None:
    for chunk_size in (SMALL, CHUNK_SIZE):
        sizes = []
        for blob_size in range(3 * (chunk_size + TAG_BYTES) + HEADER_BYTES + 40):
            try:
                size = plaintext_size(blob_size, chunk_size)
            except BlobCorrupt:
                continue
            sizes.append(size)
            assert ciphertext_size(size, chunk_size) == blob_size
        # Every plaintext size has exactly one blob size, in order (a bijection), and the
        # impossible ones are those whose last chunk would be shorter than a tag.
        assert sizes == list(range(3 * chunk_size + 24))
    assert ciphertext_size(0) == HEADER_BYTES + TAG_BYTES
    assert ciphertext_size(512 * 10**6) == HEADER_BYTES + 512 * 10**6 + 7813 * TAG_BYTES
    with pytest.raises(ValueError):
        ciphertext_size(-1)


def test_the_encryptor_emits_every_whole_chunk_at_once() -> None:
    """It holds less than one chunk: all it can emit after a feed, it emitted."""
    encryptor = Encryptor(KEY, FILE, SMALL)
    fed, emitted = 0, []
    for piece in (1, SMALL - 2, 1, 1, 10 * SMALL + 3, 5, 1 << 20):
        emitted += encryptor.feed(_content(piece))
        fed += piece
        sealed = SMALL + TAG_BYTES
        assert [len(c) for c in emitted] == [HEADER_BYTES, *[sealed] * (fed // SMALL)]
    (final,) = encryptor.finish()
    assert len(final) == fed % SMALL + TAG_BYTES


def test_the_decryptor_emits_every_whole_chunk_at_once() -> None:
    content = _content(40 * SMALL + 100)
    blob = encrypt(KEY, FILE, content, SMALL)
    decryptor = Decryptor(KEY, FILE)
    fed, given = 0, []
    for piece in (3, HEADER_BYTES, SMALL + 2, 1, 5 * SMALL, 17 * (SMALL + TAG_BYTES) + 9):
        given += decryptor.feed(blob[fed : fed + piece])
        fed += piece
        whole = max(0, fed - HEADER_BYTES) // (SMALL + TAG_BYTES)
        assert given == [content[i * SMALL : (i + 1) * SMALL] for i in range(whole)]
    given += decryptor.feed(blob[fed:])
    assert b"".join([*given, decryptor.finish()]) == content


def test_misuse_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        Encryptor(KEY[:16], FILE)
    with pytest.raises(ValueError):
        Decryptor(KEY + b"x", FILE)
    for chunk_size in (0, 100, 128, 3 * 1024, 2 << 20):
        with pytest.raises(ValueError):
            Encryptor(KEY, FILE, chunk_size)
    with pytest.raises(ValueError):
        Encryptor(KEY, "")
    encryptor = Encryptor(KEY, FILE)
    blob = b"".join(encryptor.finish())
    with pytest.raises(RuntimeError):
        encryptor.feed(b"more")
    with pytest.raises(RuntimeError):
        encryptor.finish()
    decryptor = Decryptor(KEY, FILE)
    assert decryptor.feed(blob) == [] and decryptor.finish() == b""
    with pytest.raises(RuntimeError):
        decryptor.feed(b"")
    assert "key=***" in repr(encryptor) and "key=***" in repr(decryptor)


# --- the data key wrapped under the master key ----------------------------------------------

MASTER = bytes(range(100, 132))
NEW_MASTER = bytes(range(200, 232))
CONTEXT = ("org_a", FILE)


def test_a_wrapped_data_key_opens_under_its_master_key_and_context_only() -> None:
    box = SecretBox.for_purpose(MASTER, FILE_KEYS)
    data_key = new_data_key()
    wrapped = wrap_data_key(box, data_key, CONTEXT)
    assert wrapped.startswith("v1:") and data_key.hex() not in wrapped
    assert unwrap_data_key(box, wrapped, CONTEXT) == data_key
    for other_box, context in (
        (SecretBox.for_purpose(NEW_MASTER, FILE_KEYS), CONTEXT),
        (SecretBox.for_purpose(MASTER, "provider-keys"), CONTEXT),
        (box, ("org_b", FILE)),
        (box, ("org_a", "file-other")),
    ):
        with pytest.raises(SecretBoxError):
            unwrap_data_key(other_box, wrapped, context)
    with pytest.raises(ValueError):
        wrap_data_key(box, data_key[:16], CONTEXT)


def test_a_sealed_value_that_is_not_a_data_key_is_refused() -> None:
    box = SecretBox.for_purpose(MASTER, FILE_KEYS)
    for text in ("", "zz" * 32, "ab" * 16, "ab" * 33, "ab " * 21 + "a"):
        with pytest.raises(SecretBoxError):
            unwrap_data_key(box, box.seal(text, CONTEXT), CONTEXT)


def test_rotation_rewraps_the_key_and_the_content_still_decrypts() -> None:
    old_box = SecretBox.for_purpose(MASTER, FILE_KEYS)
    new_box = SecretBox.for_purpose(NEW_MASTER, FILE_KEYS)
    content = _content(3 * SMALL + 11)
    data_key = new_data_key()
    blob = encrypt(data_key, FILE, content, SMALL)
    wrapped = wrap_data_key(old_box, data_key, CONTEXT)

    rewrapped = wrap_data_key(new_box, unwrap_data_key(old_box, wrapped, CONTEXT), CONTEXT)

    assert rewrapped != wrapped
    assert decrypt(unwrap_data_key(new_box, rewrapped, CONTEXT), FILE, blob) == content
    with pytest.raises(SecretBoxError):
        unwrap_data_key(new_box, wrapped, CONTEXT)  # the old wrapping is dead under the new key
    with pytest.raises(SecretBoxError):
        unwrap_data_key(old_box, rewrapped, CONTEXT)
