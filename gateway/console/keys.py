"""The keys page: list with spend and budgets, create (the secret shown once), disable,
enable, budgets, delete."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from gateway.console import data
from gateway.console.http import Page, PageError, redirect
from gateway.console.routing import PREFIX, html, need_org, route
from gateway.keys.routes import key_settings
from gateway.server.asgi import Send
from protocol.credentials import CredentialKind
from protocol.errors import APIError
from protocol.keys import KeyCreate, KeyUpdate
from storage.errors import UniqueViolation

if TYPE_CHECKING:
    from gateway.console.app import Console


@route("GET", PREFIX + "/keys")
async def keys(console: Console, page: Page, send: Send) -> None:
    org = await console.org_of(page)
    values = await console.common(page, "keys", org)
    values["keys"] = (
        await data.keys_with_spend(console.runtime.storage, console.runtime.accountant, org.id)
        if org
        else []
    )
    await html(send, console.render("keys.html", **values))


_BUDGETS = ("daily_budget_usd", "monthly_budget_usd")


def _budget(form: dict[str, str], name: str) -> float | None:
    raw = form.get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise PageError(400, f"The {name.replace('_', ' ')} must be a number.") from None
    if not 0 <= value <= 1e9 or value != value:
        raise PageError(400, f"The {name.replace('_', ' ')} must be between 0 and 1e9.")
    return value


@route("POST", PREFIX + "/keys")
async def create_key(console: Console, page: Page, send: Send) -> None:
    form = await page.form()
    org = await need_org(console, page, form)
    try:
        body = msgspec.convert(
            {
                "name": form.get("name", "").strip(),
                **{field: _budget(form, field) for field in _BUDGETS},
            },
            KeyCreate,
        )
    except (msgspec.ValidationError, APIError) as exc:
        raise PageError(400, f"The key was not created: {exc}") from None
    runtime = console.runtime
    credential = runtime.hasher.generate(CredentialKind.SECRET)
    try:
        record = await runtime.storage.keys.create(org.id, credential, key_settings(body))
    except UniqueViolation:
        raise PageError(409, f"A key named {body.name!r} already exists.") from None
    assert page.session is not None
    await console.flash(page, "secret", f"{record.name}\0{credential.value}")
    await redirect(send, console.back("/keys", org, page))


@route("POST", PREFIX + "/keys/{key_id}/{action}")
async def change_key(console: Console, page: Page, send: Send) -> None:
    form = await page.form()
    org = await need_org(console, page, form)
    key_id, action = page.params["key_id"], page.params["action"]
    storage = console.runtime.storage
    assert page.session is not None
    if action == "delete":
        done = await storage.keys.delete(org.id, key_id)
        message = "Key deleted."
    elif action in ("disable", "enable"):
        changes: dict[str, Any] = {"is_active": action == "enable"}
        done = await storage.keys.update(org.id, key_id, changes) is not None
        message = f"Key {action}d."
    elif action == "budget":
        try:
            update = msgspec.convert({f: _budget(form, f) for f in _BUDGETS}, KeyUpdate)
        except (msgspec.ValidationError, APIError) as exc:
            raise PageError(400, f"The budgets were not saved: {exc}") from None
        changes = key_settings(update)
        done = await storage.keys.update(org.id, key_id, changes) is not None
        message = "Budgets saved."
    else:
        raise PageError(404, "There is no such action.")
    if not done:
        raise PageError(404, "There is no such key.")
    console.runtime.auth.invalidate_all()
    await console.flash(page, "info", message)
    await redirect(send, console.back("/keys", org, page))
