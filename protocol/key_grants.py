"""What a secret key holding `keys:manage` may grant: never more than it holds itself. No I/O.

A management key is its organization's administrator: it may give a key anything, and a key it
creates without `scopes` holds every scope. A *secret* key with `keys:manage` may create, change
and delete keys too, but only within its own limits, field by field. A key is *within* another
(its bound) when:

- `scopes`: the bound holds every scope, or the key's scopes are a subset of the bound's;
- `allowed_models`: the bound may use any model, or the key's list is a subset of its list;
- `rate_limit_rpm`, `daily_budget_usd`, `monthly_budget_usd`: the bound has no limit, or the
  key has one no higher;
- `expires_at`: the bound never expires, or the key expires no later.

So "no limit" (null) is the widest value of every field: a bound key cannot clear a limit it is
bound by, and a key created by it without a field takes the creator's value (`inherit`).
Model names are compared as written (`openai/gpt-4o-mini` is not `gpt-4o-mini` here, although
the gateway resolves both to one model): a key's list can only be narrower than it looks.

Creating: the new key, after inheriting, must be within the caller. Changing or deleting: the
key as it is must be within the caller (a key may not disable, narrow or delete a wider one,
e.g. the organization's production key), and a change must leave it within the caller, so no
key can widen itself. A secret key may disable a key within it, never enable one again.
Violations are 403 `privilege_escalation` (the new values exceed the caller) or
`key_wider_than_caller` (the key is out of the caller's reach), with `param` naming the first
field concerned. Reading keys is not restricted by this rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from protocol.errors import APIError
from protocol.money import micros_to_usd
from protocol.timefmt import to_iso

ESCALATION = "privilege_escalation"
WIDER_KEY = "key_wider_than_caller"

# Storage names of the limited fields, in the order they are checked, and their wire names.
_WIRE = {
    "scopes": "scopes",
    "allowed_models": "allowed_models",
    "rate_limit_rpm": "rate_limit_rpm",
    "daily_budget_micros": "daily_budget_usd",
    "monthly_budget_micros": "monthly_budget_usd",
    "expires_at": "expires_at",
}


class Limits(Protocol):
    """A key's limits in storage terms (None: unlimited). `storage.keys.KeyRecord` is one."""

    @property
    def scopes(self) -> tuple[str, ...] | None: ...
    @property
    def allowed_models(self) -> tuple[str, ...] | None: ...
    @property
    def rate_limit_rpm(self) -> int | None: ...
    @property
    def daily_budget_micros(self) -> int | None: ...
    @property
    def monthly_budget_micros(self) -> int | None: ...
    @property
    def expires_at(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class KeyLimits:
    scopes: tuple[str, ...] | None = None
    allowed_models: tuple[str, ...] | None = None
    rate_limit_rpm: int | None = None
    daily_budget_micros: int | None = None
    monthly_budget_micros: int | None = None
    expires_at: int | None = None

    @classmethod
    def of(cls, settings: Mapping[str, Any]) -> KeyLimits:
        """From a key's settings in storage terms (missing: unlimited)."""
        lists = {
            name: None if settings.get(name) is None else tuple(settings[name])
            for name in ("scopes", "allowed_models")
        }
        return cls(
            **lists,
            rate_limit_rpm=settings.get("rate_limit_rpm"),
            daily_budget_micros=settings.get("daily_budget_micros"),
            monthly_budget_micros=settings.get("monthly_budget_micros"),
            expires_at=settings.get("expires_at"),
        )


@dataclass(frozen=True, slots=True)
class Excess:
    """The first field in which a key is wider than its bound, and how, in words."""

    param: str  # the wire name of the field
    detail: str


def inherit(bound: Limits, settings: Mapping[str, Any]) -> dict[str, Any]:
    """A create's settings with every limited field it left out (or sent as null) taken from
    the creating key (`bound`)."""
    out = dict(settings)
    for name in _WIRE:
        if out.get(name) is None:
            out[name] = getattr(bound, name)
    return out


def excess(bound: Limits, key: Limits) -> Excess | None:
    """Where `key` is not within `bound` (see the module docstring), or None when it is."""
    for name, wire in _WIRE.items():
        limit, value = getattr(bound, name), getattr(key, name)
        if limit is None:
            continue
        if name in ("scopes", "allowed_models"):
            what = "scope" if name == "scopes" else "model"
            if value is None:
                return Excess(wire, f"every {what} (no list) is wider than {_listed(limit)}")
            extra = [item for item in value if item not in limit]
            if extra:
                return Excess(wire, f"{what} {extra[0]!r} is not in {_listed(limit)}")
            continue
        if value is None:
            return Excess(wire, f"none is wider than this key's own ({_shown(name, limit)})")
        if value > limit:
            later = "later" if name == "expires_at" else "more"
            return Excess(
                wire,
                f"{_shown(name, value)} is {later} than this key's own ({_shown(name, limit)})",
            )
    return None


def check_create(caller: Limits, key: Limits) -> None:
    """APIError 403 unless a key with limits `key` (inherited already) is within `caller`."""
    found = excess(caller, key)
    if found is not None:
        raise _escalation(found)


def check_change(
    caller: Limits, before: Limits, after: Limits | None, *, enables: bool = False
) -> None:
    """APIError 403 unless `caller` may change a key from `before` to `after` (None: delete).
    `enables`: the change turns a disabled key back on, which only a management key may do:
    a key disabled by an administrator (a leaked one) must not be revived by any secret key
    that happens to be as wide."""
    found = excess(caller, before)
    if found is not None:
        raise APIError(
            403,
            f"This key may not change or delete a key wider than itself (`{found.param}`:"
            f" {found.detail}); use a management key.",
            type="permission_error",
            code=WIDER_KEY,
            param=found.param,
        )
    if after is not None:
        found = excess(caller, after)
        if found is not None:
            raise _escalation(found)
    if enables:
        raise APIError(
            403,
            "Only a management key may enable a disabled key.",
            type="permission_error",
            code=ESCALATION,
            param="is_active",
        )


def _escalation(found: Excess) -> APIError:
    return APIError(
        403,
        f"A key may not grant more than it holds itself (`{found.param}`: {found.detail});"
        " use a management key.",
        type="permission_error",
        code=ESCALATION,
        param=found.param,
    )


def _listed(items: tuple[str, ...]) -> str:
    return f"this key's own list ({', '.join(items)})" if items else "this key's own empty list"


def _shown(name: str, value: int) -> str:
    if name == "rate_limit_rpm":
        return f"{value} requests per minute"
    if name == "expires_at":
        return str(to_iso(value))
    period = "day" if name.startswith("daily") else "month"
    return f"{micros_to_usd(value):g} USD a {period}"
