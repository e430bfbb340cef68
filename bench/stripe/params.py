"""Reading a Stripe request's parameters as Stripe does: unknown names refused, strings,
integers, booleans ("true"/"false"), metadata's merge-and-delete rules, `created` range filters;
and who caused a change (`Origin`, for events' `request`). Pure."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from bench.stripe import errors

Obj = dict[str, Any]
Form = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Origin:
    """Who caused an event: an API request (its id and idempotency key) or nobody (None)."""

    request_id: str | None = None
    idempotency_key: str | None = None


AUTOMATIC = Origin()


def new_id(prefix: str) -> str:
    return prefix + "_" + secrets.token_urlsafe(18).replace("-", "x").replace("_", "y")


def check_params(form: Form, allowed: set[str]) -> None:
    for name in form:
        if name not in allowed:
            raise errors.unknown_parameter(name)


def text(form: Form, name: str, *, required: bool = False) -> str | None:
    value = form.get(name)
    if value is None:
        if required:
            raise errors.missing_parameter(name)
        return None
    if not isinstance(value, str):
        raise errors.invalid(f"Invalid string: {name}", name)
    return value


def integer(form: Form, name: str, *, required: bool = False) -> int | None:
    value = text(form, name, required=required)
    if value is None:
        return None
    if not value.isascii() or not value.lstrip("-").isdigit() or len(value) > 18:
        raise errors.invalid(f"Invalid integer: {value[:50]}", name)
    return int(value)


def boolean(form: Form, name: str) -> bool:
    value = text(form, name)
    if value is None:
        return False
    if value not in ("true", "false"):
        raise errors.invalid(f"Invalid boolean: {value[:50]}", name)
    return value == "true"


def metadata_update(current: dict[str, str], form: Form) -> dict[str, str]:
    """Stripe's metadata semantics: keys merged, an empty value deletes its key, an empty
    `metadata=` clears all. At most 50 keys, keys up to 40 and values up to 500 characters."""
    value = form.get("metadata")
    if value is None:
        return current
    if value == "":
        return {}
    if not isinstance(value, dict):
        raise errors.invalid("Invalid hash", "metadata")
    merged = dict(current)
    for key, item in value.items():
        if not isinstance(item, str):
            raise errors.invalid("Invalid metadata value: must be a string", f"metadata[{key}]")
        if len(key) > 40 or len(item) > 500:
            raise errors.invalid("Metadata keys up to 40 and values up to 500 characters", key)
        if item == "":
            merged.pop(key, None)
        else:
            merged[key] = item
    if len(merged) > 50:
        raise errors.invalid("You can specify up to 50 keys in metadata", "metadata")
    return merged


def in_range(created: int, bounds: object) -> bool:
    """`created` against `created=<ts>` or `created[gte|gt|lte|lt]=<ts>`."""
    if isinstance(bounds, str):
        return created == timestamp(bounds, "created")
    if not isinstance(bounds, dict):
        raise errors.invalid("Invalid created filter", "created")
    checks = {
        "gte": lambda v: created >= v,
        "gt": lambda v: created > v,
        "lte": lambda v: created <= v,
        "lt": lambda v: created < v,
    }
    for op, value in bounds.items():
        check = checks.get(op)
        if check is None:
            raise errors.unknown_parameter(f"created[{op}]")
        if not isinstance(value, str):
            raise errors.invalid("Invalid integer", f"created[{op}]")
        if not check(timestamp(value, f"created[{op}]")):
            return False
    return True


def timestamp(value: str, param: str) -> int:
    if not value.isascii() or not value.isdigit() or len(value) > 12:
        raise errors.invalid(f"Invalid timestamp: must be an integer: {value[:20]}", param)
    return int(value)
