"""Bring-your-own-key provider keys: wire types, the display hint and the sealing context.

No I/O. The key value itself is only ever in a create request; responses carry `key_hint`.
"""

from __future__ import annotations

from typing import Annotated, Literal

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
    # Once the provider refuses this key at use (it is then marked invalid): send the org's
    # requests with the gateway's own key, billed as usual, instead of refusing them.
    fallback_to_gateway_key: bool = False

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
    # "invalid" once the provider refused it on a request: no longer used until replaced.
    status: Literal["valid", "invalid"]
    invalidated_at: str | None  # when it was marked invalid
    invalid_reason: str | None  # why: the provider's HTTP status, explained
    fallback_to_gateway_key: bool  # while invalid, requests use the gateway's key (billed)


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
_REASONS = {
    401: "The provider answered 401 Unauthorized: it does not know the key (revoked, expired"
    " or mistyped).",
    403: "The provider answered 403 Forbidden: it knows the key but refuses it (a disabled"
    " account or project, missing billing or permissions).",
}


def refusal_reason(status: int | None) -> str:
    """Why a key is invalid, for `provider_key.invalid` and the key's `invalid_reason`."""
    if status in _REASONS:
        return _REASONS[status]
    shown = "an error" if status is None else str(status)
    return f"The provider answered {shown} to a request sent with the key."


INVALID_PROVIDER_KEY = "invalid_provider_key"  # the code of the two errors below


def rejected_by_provider(provider: str, *, at_use: bool) -> APIError:
    """The client's error when `provider` refuses the org's own key: 400, never 401 — the
    caller's credential for this gateway is fine, and SDKs treat 401 as "your key is wrong"."""
    if at_use:
        message = (
            f"The provider {provider!r} rejected this organization's own key for it. The key is"
            " now marked invalid and no longer used: replace it with POST /v1/provider_keys, or"
            " delete it to use the gateway's key."
        )
        param = None
    else:
        message = f"The provider {provider!r} rejected this key; nothing was stored."
        param = "api_key"
    return APIError(
        400, message, type="invalid_request_error", code=INVALID_PROVIDER_KEY, param=param
    )


def key_marked_invalid(provider: str, invalid_since: str | None, status: int | None) -> APIError:
    """The client's error for a request to `provider` while the org's own key for it is marked
    invalid (and the org did not opt in to the gateway's key): the same 400
    `invalid_provider_key` as the refusal that marked it — one condition, one code, whichever
    request found it out (docs/decisions.md, "Provider keys marked invalid")."""
    when = f" on {invalid_since}" if invalid_since else ""
    answered = f" with HTTP {status}" if status is not None else ""
    return APIError(
        400,
        f"This organization's own key for the provider {provider!r} was refused by the"
        f" provider{answered}{when} and is marked invalid, so it is no longer used. Replace it"
        " with POST /v1/provider_keys (the new key is checked with the provider first), or"
        " delete it to use the gateway's key.",
        type="invalid_request_error",
        code=INVALID_PROVIDER_KEY,
    )
