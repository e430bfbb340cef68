"""AES-256-GCM sealing of small secrets: round trip, binding to purpose, context and key,
tamper detection, the stored form, and the key derivation."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from protocol.credentials import derive_pepper
from protocol.errors import SecretBoxError
from protocol.secretbox import PROVIDER_KEYS, SecretBox, derive_key

MASTER = bytes(range(32))
CONTEXT = ("org_a", "openai")


def _box(master: bytes = MASTER, purpose: str = PROVIDER_KEYS) -> SecretBox:
    return SecretBox.for_purpose(master, purpose)


def test_round_trip() -> None:
    box = _box()
    for secret in ("sk-proj-abc123", "", "ключ-🔑", "x" * 4096):
        assert box.open(box.seal(secret, CONTEXT), CONTEXT) == secret


def test_sealed_form_is_versioned_base64_with_a_fresh_nonce() -> None:
    box = _box()
    first, second = box.seal("sk-secret", CONTEXT), box.seal("sk-secret", CONTEXT)
    assert first != second  # a new nonce each time
    for sealed in (first, second):
        assert sealed.startswith("v1:")
        raw = base64.b64decode(sealed[3:], validate=True)
        assert len(raw) == 12 + len("sk-secret") + 16  # nonce, ciphertext, tag
        assert b"sk-secret" not in raw
    assert base64.b64decode(first[3:])[:12] != base64.b64decode(second[3:])[:12]


@pytest.mark.parametrize(
    "context",
    [("org_b", "openai"), ("org_a", "anthropic"), ("org_aopenai",), ("org_a", "openai", "")],
)
def test_a_ciphertext_does_not_open_in_another_context(context: tuple[str, ...]) -> None:
    box = _box()
    sealed = box.seal("sk-secret", CONTEXT)
    with pytest.raises(SecretBoxError, match="authentication"):
        box.open(sealed, context)


def test_another_master_key_or_purpose_cannot_open_it() -> None:
    sealed = _box().seal("sk-secret", CONTEXT)
    for other in (_box(master=bytes(32)), _box(purpose="webhook-secrets")):
        with pytest.raises(SecretBoxError):
            other.open(sealed, CONTEXT)


def test_tampering_is_detected() -> None:
    box = _box()
    sealed = box.seal("sk-secret", CONTEXT)
    raw = bytearray(base64.b64decode(sealed[3:]))
    for index in (0, 12, len(raw) - 1):  # nonce, ciphertext, tag
        flipped = bytearray(raw)
        flipped[index] ^= 0x01
        with pytest.raises(SecretBoxError):
            box.open("v1:" + base64.b64encode(bytes(flipped)).decode(), CONTEXT)


@pytest.mark.parametrize(
    "sealed",
    ["", "sk-secret", "v2:AAAA", "v1:not base64!", "v1:" + base64.b64encode(b"short").decode()],
)
def test_malformed_values_are_refused(sealed: str) -> None:
    with pytest.raises(SecretBoxError):
        _box().open(sealed, CONTEXT)


def test_derivation_is_hkdf_expand_with_its_own_label() -> None:
    key = derive_key(MASTER, PROVIDER_KEYS)
    info = b"model-gateway/secretbox/provider-keys/v1"
    assert key == hmac.new(MASTER, info + b"\x01", hashlib.sha256).digest()
    assert len(key) == 32
    assert key != derive_pepper(MASTER)
    assert key != derive_key(MASTER, "webhook-secrets")
    with pytest.raises(ValueError):
        derive_key(b"short", PROVIDER_KEYS)


def test_repr_hides_the_key() -> None:
    box = _box()
    assert repr(box) == "SecretBox('provider-keys', key=***)"
