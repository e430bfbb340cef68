"""The Keys API wire types: request bodies (validated on decode) and response bodies.

The same structs validate requests and describe them in /openapi.json.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import msgspec
from msgspec import UNSET, Meta, UnsetType

from protocol.errors import invalid_request
from protocol.labels import Label
from protocol.scopes import KNOWN_SCOPES

Name = Annotated[Label, Meta(min_length=1, max_length=200)]
Scope = Annotated[str, Meta(min_length=1, max_length=64)]
ModelId = Annotated[Label, Meta(min_length=1, max_length=256)]
Rpm = Annotated[int, Meta(ge=1, le=1_000_000_000)]
Usd = Annotated[float, Meta(ge=0, le=1_000_000_000)]
_MAX_LIST = 1000


class KeyCreate(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    name: Name
    scopes: list[Scope] | None = None
    rate_limit_rpm: Rpm | None = None
    daily_budget_usd: Usd | None = None
    monthly_budget_usd: Usd | None = None
    allowed_models: Annotated[list[ModelId], Meta(max_length=_MAX_LIST)] | None = None
    expires_at: datetime | None = None
    cache: bool = True  # the gateway's own: false opts the key out of the response cache

    def __post_init__(self) -> None:
        _check_scopes(self.scopes)


class KeyUpdate(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Only included fields change; `null` clears an optional limit."""

    name: Name | UnsetType = UNSET
    scopes: list[Scope] | None | UnsetType = UNSET
    rate_limit_rpm: Rpm | None | UnsetType = UNSET
    daily_budget_usd: Usd | None | UnsetType = UNSET
    monthly_budget_usd: Usd | None | UnsetType = UNSET
    allowed_models: Annotated[list[ModelId], Meta(max_length=_MAX_LIST)] | None | UnsetType = UNSET
    expires_at: datetime | None | UnsetType = UNSET
    is_active: bool | UnsetType = UNSET
    cache: bool | UnsetType = UNSET

    def __post_init__(self) -> None:
        if not isinstance(self.scopes, UnsetType):
            _check_scopes(self.scopes)


def _check_scopes(scopes: list[str] | None) -> None:
    if scopes is None:
        return
    for i, scope in enumerate(scopes):
        if scope not in KNOWN_SCOPES:
            raise invalid_request(
                f"Unknown scope {scope!r}; known scopes: {', '.join(sorted(KNOWN_SCOPES))}.",
                param=f"scopes[{i}]",
                code="invalid_scope",
            )


class KeyCreated(msgspec.Struct, kw_only=True):
    """The create response: the only time `key` is ever returned."""

    id: str
    object: str = "api_key"
    key: str
    name: str
    key_prefix: str
    scopes: list[str]
    rate_limit_rpm: int | None
    daily_budget_usd: float | None
    monthly_budget_usd: float | None
    allowed_models: list[str] | None
    expires_at: str | None
    created_at: str
    is_active: bool
    cache: bool = True  # the response cache answers and stores this key's requests


class KeyItem(msgspec.Struct, kw_only=True):
    """A key as listed, retrieved or returned by PATCH: never the secret value."""

    id: str
    object: str = "api_key"
    name: str
    key_prefix: str
    scopes: list[str]
    rate_limit_rpm: int | None
    daily_budget_usd: float | None
    monthly_budget_usd: float | None
    usage_today_usd: float
    usage_month_usd: float
    allowed_models: list[str] | None
    expires_at: str | None
    is_active: bool
    created_at: str
    last_used_at: str | None
    cache: bool = True  # the response cache answers and stores this key's requests


class KeyList(msgspec.Struct, kw_only=True):
    object: str = "list"
    data: list[KeyItem]
    total: int
    limit: int
    offset: int
    has_more: bool


class KeyDeleted(msgspec.Struct, kw_only=True):
    id: str
    object: str = "api_key.deleted"
    deleted: bool
