"""Provider key wire rules: the display hint, the create body, the refusal error."""

from __future__ import annotations

import pytest

from protocol.decoding import decode_json
from protocol.errors import APIError
from protocol.provider_keys import (
    ProviderKeyCreate,
    key_hint,
    rejected_by_provider,
    sealing_context,
    shown_hint,
)


def test_hint_keeps_the_last_four_of_long_keys_only() -> None:
    assert key_hint("sk-proj-0123456789abcd") == "abcd"
    assert key_hint("x" * 11) == "" and key_hint("abcdefghijkl") == "ijkl"
    assert shown_hint("abcd") == "…abcd" and shown_hint("") == "…"


def test_create_body_refuses_what_cannot_be_a_header_value() -> None:
    ok = decode_json(b'{"provider": "openai", "api_key": "sk-1"}', ProviderKeyCreate)
    assert (ok.provider, ok.api_key) == ("openai", "sk-1")
    bad_values = ('"sk-1 "', '"\\tsk-1"', '"sk\\u0000x"', '"sk\\nX: y"', '"sk\\u007f"')
    bad_values += ('"sk-\\u00e9"', '"sk-\\u0085x"', '"sk 1"', '"sk-\\ud83d\\ude00"')
    for bad in bad_values:
        with pytest.raises(APIError) as caught:
            decode_json(b'{"provider": "openai", "api_key": %b}' % bad.encode(), ProviderKeyCreate)
        assert caught.value.param == "api_key"


def test_refusals_are_400_naming_the_provider() -> None:
    at_create = rejected_by_provider("openai", at_use=False)
    at_use = rejected_by_provider("openai", at_use=True)
    for error in (at_create, at_use):
        assert error.status == 400 and error.code == "invalid_provider_key"
        assert "'openai'" in error.message
    assert at_create.param == "api_key" and at_use.param is None


def test_sealing_context_is_org_then_provider() -> None:
    assert sealing_context("org_a", "openai") == ("org_a", "openai")
