"""The console's ASGI app and the dispatcher that puts it in front of the API at `/console`
(`WithConsole`).

Every page is server-rendered with Jinja2 (autoescaped) from the same storage, actors and
metrics the JSON routes use, in this process (no HTTP to itself). The console is not part of
the JSON API: it is not in the router, so not in /openapi.json; the request middleware still
wraps it (access log and metrics, route `/console/...`).

Who sees what: a session signed in with an organization's management key sees that
organization only, whatever a query or form says; the operator (GATEWAY_OPERATOR_KEY) sees
every organization (chosen with `?org=`) and the supervision page. Pages are GET and change
nothing; every change is a POST checked by security.py (CSRF token and origin) and answered
with a redirect (post/redirect/get), so reloading a page never repeats an action.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2

from gateway.auth.operator import OperatorKeys

# The page modules register their routes when imported.
from gateway.console import keys, overview, signin, usage, webhooks  # noqa: F401
from gateway.console.http import Page, PageError, parse_query, redirect, send_page
from gateway.console.routing import PREFIX, ROUTES, Route, usd
from gateway.console.security import cookie_value, same_origin, token_ok
from gateway.console.sessions import SessionStore
from gateway.errors import ClientDisconnected
from gateway.operations.routes import ALONE, Worker
from gateway.runtime import Runtime
from gateway.server.asgi import ASGIApp, Receive, Scope, Send
from gateway.web.context import context_of
from protocol.timefmt import to_iso
from storage.orgs import Org

_HERE = Path(__file__).parent
_STATIC_TYPES = {".css": b"text/css; charset=utf-8", ".js": b"text/javascript; charset=utf-8"}
_log = logging.getLogger("gateway.console")


class WithConsole:
    """`app` with `/console` and everything under it answered by `console` instead."""

    def __init__(self, app: ASGIApp, console: Console) -> None:
        self.app = app
        self.console = console

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and (path == PREFIX or path.startswith(PREFIX + "/")):
            await self.console(scope, receive, send)
        else:
            await self.app(scope, receive, send)


class Console:
    def __init__(self, runtime: Runtime, operator: OperatorKeys, worker: Worker = ALONE) -> None:
        self.runtime = runtime
        self.operator = operator
        self.worker = worker
        self.hostname = socket.gethostname()
        self.sessions = SessionStore(runtime.storage.console_sessions)
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(_HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.env.filters["usd"] = usd
        self.env.filters["iso"] = lambda v: to_iso(v) or "—"
        self.env.filters["seconds"] = lambda v: "—" if v is None else f"{v * 1000:.1f} ms"
        self.static = {
            p.name: (p.read_bytes(), _STATIC_TYPES[p.suffix])
            for p in (_HERE / "static").iterdir()
            if p.suffix in _STATIC_TYPES
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope["method"]
        path = scope["path"]
        ctx = context_of(scope)
        route: Route | None = None
        try:
            for candidate in ROUTES:
                found = candidate.pattern.match(path)
                if found and candidate.method == method:
                    route = candidate
                    break
            else:
                if ctx is not None:
                    ctx.route = PREFIX + "/*"
                if any(r.pattern.match(path) for r in ROUTES):
                    raise PageError(405, "That method is not allowed here.")
                raise PageError(404, "There is no such page.")
            if ctx is not None:
                ctx.route = route.template
            page = Page(
                scope,
                receive,
                method,
                path,
                found.groupdict(),
                parse_query(scope.get("query_string", b"")),
            )
            if route.signed_in:
                await self._authenticate(page)
                if page.session is None:
                    if method == "GET":
                        await redirect(send, PREFIX + "/sign-in")
                        return
                    raise PageError(403, "Sign in first.")
                if ctx is not None:
                    ctx.org_id = page.session.org_id
                if method == "POST":
                    await self._check_csrf(page)
                if route.operator_only and not page.session.operator:
                    raise PageError(403, "Only the operator may see this page.")
            await route.handler(self, page, send)
        except ClientDisconnected:
            return
        except PageError as exc:
            await self._error(send, exc.status, exc.message)
        except Exception:
            _log.exception("console page %s failed", path)
            await self._error(send, 500, "Something went wrong; see the gateway's log.")

    # -- sessions and CSRF ----------------------------------------------------------------

    async def _authenticate(self, page: Page) -> None:
        """The request's session, if live and its credential still valid: an organization's
        management key not revoked, the operator's key still in GATEWAY_OPERATOR_KEY. A session
        whose credential went is deleted, on whichever instance notices first."""
        session_id = cookie_value(page.header(b"cookie"))
        session = await self.sessions.get(session_id)
        if session is not None and session.operator:
            if session.operator_key is None or not self.operator.knows(session.operator_key):
                await self.sessions.end(session_id)
                session = None
        elif session is not None:
            key = None
            if session.key_hash is not None:
                key = await self.runtime.storage.orgs.find_management_key(session.key_hash)
            if key is None or key.revoked_at is not None or key.org_id != session.org_id:
                await self.sessions.end(session_id)
                session = None
        page.session, page.session_id = session, session_id

    async def _check_csrf(self, page: Page) -> None:
        self.check_origin(page)
        assert page.session is not None
        form = await page.form()
        if not token_ok(page.session.csrf, form.get("csrf")):
            raise PageError(403, "The form is stale or was not sent from this console.")

    def check_origin(self, page: Page) -> None:
        if not same_origin(
            page.header(b"origin"), page.header(b"sec-fetch-site"), page.header(b"host")
        ):
            raise PageError(403, "The request did not come from this console.")

    # -- rendering ------------------------------------------------------------------------

    def render(self, name: str, **values: Any) -> bytes:
        return self.env.get_template(name).render(**values).encode()

    async def _error(self, send: Send, status: int, message: str) -> None:
        body = self.render("error.html", status=status, message=message, session=None, nav="")
        await send_page(send, status, body)

    async def common(
        self, page: Page, nav: str, org: Org | None, *, take_flash: bool = True
    ) -> dict[str, Any]:
        """What every page's template needs; `take_flash`: show (and so drop) the messages
        of the last action (not for the live fragment, which may race the page)."""
        session = page.session
        assert session is not None
        orgs = await self.runtime.storage.orgs.list_all() if session.operator else []
        query = f"?{urlencode({'org': org.id})}" if session.operator and org else ""
        flash: list[tuple[str, str]] = []
        if take_flash:
            assert page.session_id is not None
            flash = await self.sessions.take_flash(page.session_id, session)
        return {
            "session": session,
            "nav": nav,
            "org": org,
            "orgs": orgs,
            "q": query,
            "csrf": session.csrf,
            "flash": flash,
        }

    async def flash(self, page: Page, kind: str, text: str) -> None:
        """Show `text` once on the session's next page (`kind`: "info", or "secret" for a
        value shown only then)."""
        assert page.session is not None and page.session_id is not None
        await self.sessions.add_flash(page.session_id, page.session, kind, text)

    async def org_of(self, page: Page, form: dict[str, str] | None = None) -> Org | None:
        """The organization a page is about: the session's own, or (operator) the one named by
        `org` in the query or form; None when the operator named none."""
        session = page.session
        assert session is not None
        storage = self.runtime.storage
        if not session.operator:
            assert session.org_id is not None
            return await storage.orgs.get(session.org_id)
        org_id = (form or {}).get("org") or page.query.get("org")
        if not org_id:
            return None
        org = await storage.orgs.get(org_id)
        if org is None:
            raise PageError(404, "There is no such organization.")
        return org

    def back(self, path: str, org: Org, page: Page) -> str:
        assert page.session is not None
        if page.session.operator:
            return f"{PREFIX}{path}?{urlencode({'org': org.id})}"
        return PREFIX + path
