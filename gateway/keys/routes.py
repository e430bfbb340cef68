"""The Keys API: create, list, retrieve, update and delete an organization's secret keys.

Callers need a management key or a secret key holding `keys:manage`. A secret key may only
create, change or delete keys within its own limits (protocol/key_grants.py); the check of a
change runs in the transaction that makes it. A key of another organization is
indistinguishable from a missing one (404).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from msgspec import UNSET, UnsetType

from actors.accountant import Accountant
from gateway.web import Operation, Request, Response, Routes, json_response
from protocol import errors
from protocol.credentials import CredentialHasher, CredentialKind
from protocol.key_grants import KeyLimits, check_change, check_create, inherit
from protocol.keys import KeyCreate, KeyCreated, KeyDeleted, KeyItem, KeyList, KeyUpdate
from protocol.money import micros_to_usd, usd_to_micros
from protocol.scopes import ALL_SCOPES, KEYS_MANAGE
from protocol.timefmt import from_datetime, now_us, to_iso
from services.auth import Authenticator
from services.principal import Principal
from storage.errors import UniqueViolation
from storage.keys import KeyRecord
from storage.open import Storage

DEFAULT_LIMIT = 50
MAX_LIMIT = 1000
_AUTH_ERRORS = (401, 403)


def _usd(micros: int | None) -> float | None:
    return None if micros is None else micros_to_usd(micros)


def key_item(key: KeyRecord, spend: tuple[int, int] = (0, 0)) -> KeyItem:
    """`spend`: the key's micro-USD today and this month (UTC)."""
    return KeyItem(
        id=key.id,
        name=key.name,
        key_prefix=key.key_prefix,
        scopes=list(ALL_SCOPES if key.scopes is None else key.scopes),
        rate_limit_rpm=key.rate_limit_rpm,
        daily_budget_usd=_usd(key.daily_budget_micros),
        monthly_budget_usd=_usd(key.monthly_budget_micros),
        usage_today_usd=micros_to_usd(spend[0]),
        usage_month_usd=micros_to_usd(spend[1]),
        allowed_models=None if key.allowed_models is None else list(key.allowed_models),
        expires_at=to_iso(key.expires_at),
        is_active=key.is_active,
        created_at=to_iso(key.created_at) or "",
        last_used_at=to_iso(key.last_used_at),
        cache=key.cache,
    )


def key_settings(body: KeyCreate | KeyUpdate) -> dict[str, Any]:
    """The fields the body includes, in storage terms (micro-USD, epoch microseconds); the
    console's key forms use it too."""
    out: dict[str, Any] = {}
    for name in ("name", "scopes", "rate_limit_rpm", "allowed_models", "is_active", "cache"):
        value = getattr(body, name, UNSET)
        if not isinstance(value, UnsetType):
            out[name] = value
    for name in ("daily_budget_usd", "monthly_budget_usd"):
        value = getattr(body, name)
        if not isinstance(value, UnsetType):
            out[name.replace("_usd", "_micros")] = None if value is None else usd_to_micros(value)
    expires = body.expires_at
    if not isinstance(expires, UnsetType):
        out["expires_at"] = None if expires is None else from_datetime(expires)
        if out["expires_at"] is not None and out["expires_at"] <= now_us():
            raise errors.invalid_request("`expires_at` must be in the future.", param="expires_at")
    return out


def _name_taken(name: str) -> errors.APIError:
    return errors.conflict(
        f"A key named {name!r} already exists in this organization.",
        param="name",
        code="key_name_taken",
    )


def _key_not_found(key_id: str) -> errors.APIError:
    return errors.not_found(f"No key with id {key_id!r}.", code="key_not_found", param="key_id")


def _caller(request: Request) -> tuple[Principal, str]:
    assert request.principal is not None
    return request.principal, request.path_params["key_id"]


def _change_check(principal: Principal) -> Callable[[KeyRecord, KeyRecord | None], None] | None:
    """For a secret key: the check that it may change (or, with None, delete) a key. A key
    changing itself is bound by its row as read in the transaction, not by the cached copy
    it authenticated with (which may be a second old)."""
    caller = principal.key
    if caller is None:
        return None

    def check(current: KeyRecord, updated: KeyRecord | None) -> None:
        enables = updated is not None and updated.is_active and not current.is_active
        bound = current if current.id == caller.id else caller
        check_change(bound, current, updated, enables=enables)

    return check


def routes(
    storage: Storage, auth: Authenticator, hasher: CredentialHasher, accountant: Accountant
) -> Routes:
    r = Routes()

    async def spend_of(keys: list[KeyRecord]) -> dict[str, tuple[int, int]]:
        """Stored spend plus what this instance settled and has not written yet."""
        now = now_us()
        stored = await storage.ledger.key_spend([k.id for k in keys], now)
        return {key: accountant.key_spend(key, now, spend) for key, spend in stored.items()}

    @r.operation(
        Operation(
            "POST",
            "/v1/keys",
            "Create a secret key (its value is returned only here)",
            "Keys",
            request=KeyCreate,
            response=KeyCreated,
            scope=KEYS_MANAGE,
            errors=(400, *_AUTH_ERRORS, 409, 413),
        )
    )
    async def create_key(request: Request) -> Response:
        principal = request.principal
        assert principal is not None
        body = await request.json(KeyCreate)
        settings = key_settings(body)
        if principal.key is not None:  # a secret key: never more than it holds
            settings = inherit(principal.key, settings)
            check_create(principal.key, KeyLimits.of(settings))
        credential = hasher.generate(CredentialKind.SECRET)
        try:
            record = await storage.keys.create(principal.org_id, credential, settings)
        except UniqueViolation:
            raise _name_taken(body.name) from None
        item = key_item(record)
        created = KeyCreated(
            id=item.id,
            key=credential.value,
            name=item.name,
            key_prefix=item.key_prefix,
            scopes=item.scopes,
            rate_limit_rpm=item.rate_limit_rpm,
            daily_budget_usd=item.daily_budget_usd,
            monthly_budget_usd=item.monthly_budget_usd,
            allowed_models=item.allowed_models,
            expires_at=item.expires_at,
            created_at=item.created_at,
            is_active=item.is_active,
            cache=item.cache,
        )
        return json_response(created)

    @r.operation(
        Operation(
            "GET",
            "/v1/keys",
            "List the organization's keys, oldest first",
            "Keys",
            response=KeyList,
            scope=KEYS_MANAGE,
            errors=(400, *_AUTH_ERRORS),
            query=(
                ("active", "boolean", "only active (true) or inactive (false) keys"),
                ("limit", "integer", f"page size, default {DEFAULT_LIMIT}, max {MAX_LIMIT}"),
                ("offset", "integer", "keys to skip, default 0"),
            ),
        )
    )
    async def list_keys(request: Request) -> Response:
        principal = request.principal
        assert principal is not None
        active = request.query_bool("active")
        limit = request.query_int("limit", DEFAULT_LIMIT, minimum=1, maximum=MAX_LIMIT)
        offset = request.query_int("offset", 0, minimum=0, maximum=2**31 - 1)
        records, total = await storage.keys.list(
            principal.org_id, active=active, limit=limit, offset=offset
        )
        spend = await spend_of(records)
        return json_response(
            KeyList(
                data=[key_item(k, spend[k.id]) for k in records],
                total=total,
                limit=limit,
                offset=offset,
                has_more=offset + len(records) < total,
            )
        )

    @r.operation(
        Operation(
            "GET",
            "/v1/keys/{key_id}",
            "Retrieve a key (without its value)",
            "Keys",
            response=KeyItem,
            scope=KEYS_MANAGE,
            errors=(*_AUTH_ERRORS, 404),
        )
    )
    async def get_key(request: Request) -> Response:
        principal, key_id = _caller(request)
        record = await storage.keys.get(principal.org_id, key_id)
        if record is None:
            raise _key_not_found(key_id)
        return json_response(key_item(record, (await spend_of([record]))[record.id]))

    @r.operation(
        Operation(
            "PATCH",
            "/v1/keys/{key_id}",
            "Update a key: only the fields sent change",
            "Keys",
            request=KeyUpdate,
            response=KeyItem,
            scope=KEYS_MANAGE,
            errors=(400, *_AUTH_ERRORS, 404, 409, 413),
        )
    )
    async def update_key(request: Request) -> Response:
        principal, key_id = _caller(request)
        body = await request.json(KeyUpdate)
        changes = key_settings(body)
        try:
            record = await storage.keys.update(
                principal.org_id, key_id, changes, check=_change_check(principal)
            )
        except UniqueViolation:
            raise _name_taken(str(changes.get("name"))) from None
        if record is None:
            raise _key_not_found(key_id)
        auth.invalidate_all()
        return json_response(key_item(record, (await spend_of([record]))[record.id]))

    @r.operation(
        Operation(
            "DELETE",
            "/v1/keys/{key_id}",
            "Revoke a key permanently",
            "Keys",
            response=KeyDeleted,
            scope=KEYS_MANAGE,
            errors=(*_AUTH_ERRORS, 404),
        )
    )
    async def delete_key(request: Request) -> Response:
        principal, key_id = _caller(request)
        check = _change_check(principal)
        deleting = None if check is None else (lambda current: check(current, None))
        if not await storage.keys.delete(principal.org_id, key_id, check=deleting):
            raise _key_not_found(key_id)
        auth.invalidate_all()
        return json_response(KeyDeleted(id=key_id, deleted=True))

    return r
