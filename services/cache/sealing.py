"""Cache entries sealed at rest: AES-256-GCM under a key derived from the master key for the
cache's own purpose (protocol/secretbox.py `derive_key`, purpose `response-cache`). No I/O.

Byte strings in, byte strings out (`nonce ‖ ciphertext ‖ tag`, 28 bytes more than the
plaintext): an answer is bytes (SSE frames as sent), and the base64 text of SecretBox would
store a third more. The associated data names the purpose, the organization, the entry key
and the field (`body` also binds the kind), so a value copied to another row, another field
or another organization does not open: `open` raises CacheUnopenable, which the cache treats
as a miss. A master-key rotation leaves old entries unopenable on instances holding the new
key: they are misses until they expire or are evicted.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from protocol.secretbox import associated_data, derive_key

PURPOSE = "response-cache"
_NONCE = 12
_TAG = 16
OVERHEAD = _NONCE + _TAG


class CacheUnopenable(Exception):
    """A sealed value that does not open here (wrong key, org, entry, field, or damaged)."""


class CacheSealer:
    def __init__(self, master_key: bytes, *, retired: Callable[[], bool] = lambda: False) -> None:
        """`retired`: True once the master key is an old one (services/keyring.py
        KeyringWatch); the sealer then refuses both ways (the cache misses)."""
        self._aead = AESGCM(derive_key(master_key, PURPOSE))
        self._retired = retired

    def __repr__(self) -> str:
        return "CacheSealer(key=***)"

    def seal(self, plaintext: bytes, org_id: str, key: bytes, field: str) -> bytes:
        if self._retired():
            raise CacheUnopenable("the master key is retired")
        nonce = os.urandom(_NONCE)
        return nonce + self._aead.encrypt(nonce, plaintext, _context(org_id, key, field))

    def open(self, sealed: bytes, org_id: str, key: bytes, field: str) -> bytes:
        if self._retired():
            raise CacheUnopenable("the master key is retired")
        if len(sealed) < OVERHEAD:
            raise CacheUnopenable("sealed value too short")
        try:
            return self._aead.decrypt(
                sealed[:_NONCE], sealed[_NONCE:], _context(org_id, key, field)
            )
        except InvalidTag:
            raise CacheUnopenable("sealed value failed authentication") from None


def _context(org_id: str, key: bytes, field: str) -> bytes:
    return associated_data(PURPOSE, (org_id, key.hex(), field))
