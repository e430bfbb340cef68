"""Bring-your-own-key provider keys: wire types, the display hint and the sealing context.

No I/O. The key value itself is only ever in a create request; responses carry `key_hint`.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from protocol.errors import APIError, invalid_request

ProviderName = Annotated[str, Meta(min_length=1, max_length=64)]
ApiKeyValue = Annotated[str, Meta(min_length=1, max_length=1024)]

_HINT_CHARS = 4
_HINT_MIN_LENGTH = 12  # shorter keys show no characters: 4 of 8 would give half away
_ELLIPSIS = "…"


class ProviderKeyCreate(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    provider: ProviderName
    api_key: ApiKeyValue

    def __post_init__(self) -> None:
        # It travels in a header: visible ASCII, as providers issue keys. Refused here, before
        # it is sent anywhere: control characters would break the header, other characters
        # either could not be encoded (a 500) or would be refused by the provider anyway.
        if not sendable_as_header(self.api_key):
            raise invalid_request(
                "`api_key` must be visible ASCII characters only (no spaces or controls).",
                param="api_key",
            )


def sendable_as_header(api_key: str) -> bool:
    """Whether a provider key can be sent as a header value as it is: visible ASCII only."""
    return all("!" <= c <= "~" for c in api_key)


class ProviderKey(msgspec.Struct, kw_only=True):
    """A provider key as answered: never the value, only its last characters."""

    id: str
    object: str = "provider_key"
    provider: str
    key_hint: str
    created_at: str
    updated_at: str
    last_rejected_at: str | None  # the provider last refused it on a request


class ProviderKeyList(msgspec.Struct, kw_only=True):
    object: str = "list"
    data: list[ProviderKey]
    total: int


class ProviderKeyDeleted(msgspec.Struct, kw_only=True):
    id: str
    object: str = "provider_key.deleted"
    deleted: bool


def key_hint(api_key: str) -> str:
    """The last characters kept for display (stored); empty for short keys."""
    return api_key[-_HINT_CHARS:] if len(api_key) >= _HINT_MIN_LENGTH else ""


def shown_hint(stored: str) -> str:
    """`…abcd` as answered; `…` alone when nothing was kept."""
    return _ELLIPSIS + stored


def sealing_context(org_id: str, provider: str) -> tuple[str, str]:
    """What a provider key's ciphertext is bound to: it opens for this org and provider only."""
    return (org_id, provider)


# What a provider answers when it refuses a key (at creation, or on a request).
REJECTED_STATUSES = frozenset({401, 403})


def rejected_by_provider(provider: str, *, at_use: bool) -> APIError:
    """The client's error when `provider` refuses the org's own key: 400, never 401 — the
    caller's credential for this gateway is fine, and SDKs treat 401 as "your key is wrong"."""
    if at_use:
        message = (
            f"The provider {provider!r} rejected this organization's own key for it; replace it"
            " with POST /v1/provider_keys or delete it to use the gateway's key."
        )
        param = None
    else:
        message = f"The provider {provider!r} rejected this key; nothing was stored."
        param = "api_key"
    return APIError(
        400, message, type="invalid_request_error", code="invalid_provider_key", param=param
    )
