"""Small secrets encrypted at rest with AES-256-GCM (provider keys, webhook secrets).

No I/O. A box holds one 256-bit key derived from the master key for one purpose (HKDF-Expand
with SHA-256 and a label naming the purpose), so a key compromise in one use reveals nothing of
the others and a ciphertext of one purpose never opens in another.

Sealed form, stored as text: `v1:` + base64(nonce ‖ ciphertext ‖ tag), with a fresh random
96-bit nonce per secret. The `context` strings (for provider keys: the org id and the provider)
are the associated data: a ciphertext copied to another row does not open there. The version
prefix names the derivation and the cipher, so a later scheme (or a rotated master key) can be
introduced beside this one and rows re-sealed at leisure.

    wrap_data_key      a file's 256-bit data key sealed for the files table (purpose `file-keys`)
    unwrap_data_key    ... and opened again; rotation is unwrap under the old master key, wrap
                       under the new one (the content, sealed under the data key, is untouched)
    SecretBoxError     malformed, unknown version, or failed authentication (wrong key,
                       wrong context, tampered ciphertext) — never says which part was wrong
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

from protocol.errors import SecretBoxError

VERSION = "v1"
_PREFIX = VERSION + ":"
_KEY_BYTES = 32
_NONCE_BYTES = 12
_TAG_BYTES = 16
_LABEL = "model-gateway/secretbox/{purpose}/v1"

PROVIDER_KEYS = "provider-keys"
WEBHOOK_SECRETS = "webhook-secrets"  # context: (org id, webhook id)
FILE_KEYS = "file-keys"  # context: (org id, file id); see wrap_data_key
MIRROR_ANSWERS = "mirror-answers"  # a shadow model's answer; context: (org id, mirror result id)


def derive_key(master_key: bytes, purpose: str) -> bytes:
    """The box key for `purpose`: HKDF-Expand(SHA-256, master key, label), 32 bytes.

    The master key is 32 uniformly random bytes already, so it serves as the pseudorandom key
    directly (no Extract step), as the credential pepper does with its own label."""
    if len(master_key) != _KEY_BYTES:
        raise ValueError(f"the master key must be {_KEY_BYTES} bytes")
    info = _LABEL.format(purpose=purpose).encode()
    return HKDFExpand(algorithm=SHA256(), length=_KEY_BYTES, info=info).derive(master_key)


def associated_data(purpose: str, context: Sequence[str]) -> bytes:
    """The purpose and each context string, each length-prefixed: unambiguous for any input."""
    parts = [purpose.encode(), *(c.encode() for c in context)]
    return b"".join(len(p).to_bytes(4, "big") + p for p in parts)


class SecretBox:
    def __init__(self, key: bytes, purpose: str) -> None:
        if len(key) != _KEY_BYTES:
            raise ValueError(f"a box key must be {_KEY_BYTES} bytes")
        self._aead = AESGCM(key)
        self.purpose = purpose

    @classmethod
    def for_purpose(cls, master_key: bytes, purpose: str) -> SecretBox:
        return cls(derive_key(master_key, purpose), purpose)

    def __repr__(self) -> str:
        return f"SecretBox({self.purpose!r}, key=***)"

    def seal(self, plaintext: str, context: Sequence[str]) -> str:
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._aead.encrypt(
            nonce, plaintext.encode(), associated_data(self.purpose, context)
        )
        return _PREFIX + base64.b64encode(nonce + sealed).decode("ascii")

    def open(self, sealed: str, context: Sequence[str]) -> str:
        """The plaintext; SecretBoxError if `sealed` was not sealed by this box for `context`."""
        version, sep, encoded = sealed.partition(":")
        if not sep or version != VERSION:
            raise SecretBoxError(f"unknown sealed-secret version {version[:8]!r}")
        try:
            raw = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise SecretBoxError("sealed secret is not base64") from None
        if len(raw) < _NONCE_BYTES + _TAG_BYTES:
            raise SecretBoxError("sealed secret is too short")
        nonce, body = raw[:_NONCE_BYTES], raw[_NONCE_BYTES:]
        try:
            plaintext = self._aead.decrypt(nonce, body, associated_data(self.purpose, context))
        except InvalidTag:
            raise SecretBoxError("sealed secret failed authentication") from None
        try:
            return plaintext.decode()
        except UnicodeDecodeError:  # only reachable with a forged tag: authenticated bytes
            raise SecretBoxError("sealed secret is not text") from None


def wrap_data_key(box: SecretBox, data_key: bytes, context: Sequence[str]) -> str:
    """A file's data key sealed by `box` (a `FILE_KEYS` box) for `context`: what the files table
    stores. The key goes in as hex text, as the box seals text."""
    if len(data_key) != _KEY_BYTES:
        raise ValueError(f"a data key must be {_KEY_BYTES} bytes")
    return box.seal(data_key.hex(), context)


def unwrap_data_key(box: SecretBox, wrapped: str, context: Sequence[str]) -> bytes:
    """The data key `wrap_data_key` sealed; SecretBoxError if it does not open or is no key."""
    text = box.open(wrapped, context)
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise SecretBoxError("sealed data key is not hex") from None
    if len(key) != _KEY_BYTES:
        raise SecretBoxError("sealed data key has the wrong length")
    return key
