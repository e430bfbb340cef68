"""Sign-in and sign-out, and the console's static files."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.console.http import Page, PageError, redirect, send_page
from gateway.console.routing import PREFIX, html, route
from gateway.console.security import cleared_cookie, cookie_value, session_cookie
from gateway.console.sessions import Session
from gateway.server.asgi import Send
from protocol.credentials import OPERATOR_PREFIX, CredentialKind
from protocol.errors import APIError

if TYPE_CHECKING:
    from gateway.console.app import Console


@route("GET", PREFIX + "/", signed_in=False)
@route("GET", PREFIX, signed_in=False)
async def root(console: Console, page: Page, send: Send) -> None:
    await redirect(send, PREFIX + "/overview")


@route("GET", PREFIX + "/sign-in", signed_in=False)
async def sign_in_form(console: Console, page: Page, send: Send) -> None:
    await html(send, console.render("sign_in.html", error=None, session=None, nav=""))


@route("POST", PREFIX + "/sign-in", signed_in=False)
async def sign_in(console: Console, page: Page, send: Send) -> None:
    console.check_origin(page)
    form = await page.form()
    session = await _session_for(console, form.get("key", "").strip())
    if session is None:
        body = console.render(
            "sign_in.html",
            error="That key was not accepted: use an organization's management key or the"
            " operator key.",
            session=None,
            nav="",
        )
        await html(send, body, 401)
        return
    old = cookie_value(page.header(b"cookie"))
    await console.sessions.end(old)
    session_id = await console.sessions.create(session)
    await redirect(send, PREFIX + "/overview", [(b"set-cookie", session_cookie(session_id))])


async def _session_for(console: Console, key: str) -> Session | None:
    if not key or len(key) > 512:
        return None
    if key.startswith(OPERATOR_PREFIX):
        fingerprint = console.operator.match(key)
        if fingerprint is None:
            return None
        return Session(
            operator=True, org_id=None, key_hash=None, label="operator", operator_key=fingerprint
        )
    runtime = console.runtime
    try:
        principal = await runtime.auth.authenticate(f"Bearer {key}")
    except APIError:
        return None
    if principal.kind is not CredentialKind.MANAGEMENT:
        return None
    org = await runtime.storage.orgs.get(principal.org_id)
    label = org.name if org else principal.org_id
    return Session(
        operator=False, org_id=principal.org_id, key_hash=runtime.hasher.hash(key), label=label
    )


@route("POST", PREFIX + "/sign-out")
async def sign_out(console: Console, page: Page, send: Send) -> None:
    await console.sessions.end(page.session_id)
    await redirect(send, PREFIX + "/sign-in", [(b"set-cookie", cleared_cookie())])


@route("GET", PREFIX + "/static/{name}", signed_in=False)
async def static(console: Console, page: Page, send: Send) -> None:
    found = console.static.get(page.params["name"])  # only the files read at start
    if found is None:
        raise PageError(404, "There is no such file.")
    await send_page(send, 200, found[0], content_type=found[1])
