"""What the keyring holds and how a master key is checked against it. No I/O.

The credential pepper keys every API key hash. It was derived from the master key, so a new
master key would have invalidated every credential; instead the pepper is kept in the keyring
table sealed under the master key (purpose KEYRING), and rotating the master key re-seals it.
On the first start with an empty keyring the pepper is `derive_pepper(master key)`, the value
hashes were made with before the keyring existed, so no stored hash changes.

    key_id        a short, non-secret fingerprint of a master key: the keyring's check value,
                  so a wrong key is named in the error rather than found by a failed open
    seal_pepper   the pepper sealed under a master key, as the keyring stores it
    open_pepper   ... and opened again (SecretBoxError on a wrong key or a tampered row)
    reseal        one sealed value under the new key: re-sealed, or None when it already opens
                  under the new key (what makes an interrupted rotation safe to run again)
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence

from protocol.errors import SecretBoxError
from protocol.secretbox import SecretBox

KEYRING = "keyring"  # the SecretBox purpose of the keyring's own secrets
PEPPER_CONTEXT = ("credential-pepper",)
_KEY_ID_INFO = b"model-gateway/master-key-id/v1"
_KEY_ID_HEX = 16  # 64 bits: tells keys apart, reveals nothing usable about them
_PEPPER_BYTES = 32


def key_id(master_key: bytes) -> str:
    """HMAC-SHA256(master key, label), 16 hex digits. One-way, so it can be stored and shown;
    checking a guessed key against it is no easier than against the sealed pepper."""
    return hmac.new(master_key, _KEY_ID_INFO, hashlib.sha256).hexdigest()[:_KEY_ID_HEX]


def seal_pepper(master_key: bytes, pepper: bytes) -> str:
    return SecretBox.for_purpose(master_key, KEYRING).seal(pepper.hex(), PEPPER_CONTEXT)


def open_pepper(master_key: bytes, sealed: str) -> bytes:
    text = SecretBox.for_purpose(master_key, KEYRING).open(sealed, PEPPER_CONTEXT)
    try:
        pepper = bytes.fromhex(text)
    except ValueError:
        raise SecretBoxError("sealed pepper is not hex") from None
    if len(pepper) != _PEPPER_BYTES:
        raise SecretBoxError("sealed pepper has the wrong length")
    return pepper


def reseal(old: SecretBox, new: SecretBox, sealed: str, context: Sequence[str]) -> str | None:
    """`sealed` re-sealed by `new`; None if `new` opens it already (done by an earlier run).
    SecretBoxError if neither box opens it."""
    try:
        new.open(sealed, context)
        return None
    except SecretBoxError:
        pass
    return new.seal(old.open(sealed, context), context)
