"""The console's ASGI app and the dispatcher that puts it in front of the API at `/console`.

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

import csv
import io
import logging
import os
import re
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
import msgspec

from actors.supervisor import ActorSnapshot
from actors.webhooks.secrets import secret_context
from gateway.auth.operator import OperatorKeys
from gateway.console import data
from gateway.console.charts import bar_chart
from gateway.console.figures import instance_figures
from gateway.console.http import Page, PageError, parse_query, redirect, send_page
from gateway.console.security import (
    cleared_cookie,
    cookie_value,
    same_origin,
    session_cookie,
    token_ok,
)
from gateway.console.sessions import Session, SessionStore
from gateway.errors import ClientDisconnected
from gateway.inference.deployments import deployment_statistics
from gateway.operations.routes import ALONE, Worker
from gateway.runtime import Runtime
from gateway.server.asgi import ASGIApp, Receive, Scope, Send
from gateway.usage.routes import usage_range
from gateway.web.context import context_of
from gateway.webhooks.area import WebhooksArea
from protocol.credentials import OPERATOR_PREFIX, CredentialKind
from protocol.errors import APIError
from protocol.keys import KeyCreate
from protocol.money import micros_to_usd, usd_to_micros
from protocol.secretbox import WEBHOOK_SECRETS
from protocol.timefmt import from_datetime, now_us, to_iso
from protocol.webhook_samples import sample_data
from protocol.webhooks import EVENT_TYPES, generate_secret, secret_hint
from storage.errors import UniqueViolation
from storage.orgs import Org

PREFIX = "/console"
_HERE = Path(__file__).parent
_STATIC_TYPES = {".css": b"text/css; charset=utf-8", ".js": b"text/javascript; charset=utf-8"}
_log = logging.getLogger("gateway.console")

Handler = Callable[["Console", Page, Send], Awaitable[None]]


@dataclass(frozen=True)
class _Route:
    method: str
    pattern: re.Pattern[str]
    template: str  # the route as logged and counted
    handler: Handler
    signed_in: bool = True
    operator_only: bool = False


_ROUTES: list[_Route] = []


def _route(
    method: str, path: str, *, signed_in: bool = True, operator_only: bool = False
) -> Callable[[Handler], Handler]:
    regex = re.sub(r"\{(\w+)\}", r"(?P<\1>[A-Za-z0-9_.\-]{1,80})", path)

    def add(handler: Handler) -> Handler:
        _ROUTES.append(
            _Route(
                method,
                re.compile(f"^{regex}$"),
                path,
                handler,
                signed_in=signed_in,
                operator_only=operator_only,
            )
        )
        return handler

    return add


def with_console(app: ASGIApp, console: Console) -> ASGIApp:
    """`app` with `/console` and everything under it answered by `console`."""

    async def dispatch(scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and (path == PREFIX or path.startswith(PREFIX + "/")):
            await console(scope, receive, send)
        else:
            await app(scope, receive, send)

    return dispatch


class Console:
    def __init__(self, runtime: Runtime, operator: OperatorKeys, worker: Worker = ALONE) -> None:
        self.runtime = runtime
        self.operator = operator
        self.worker = worker
        self.hostname = socket.gethostname()
        self.sessions = SessionStore()
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(_HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.env.filters["usd"] = _usd
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
        route: _Route | None = None
        try:
            for candidate in _ROUTES:
                found = candidate.pattern.match(path)
                if found and candidate.method == method:
                    route = candidate
                    break
            else:
                if ctx is not None:
                    ctx.route = PREFIX + "/*"
                if any(r.pattern.match(path) for r in _ROUTES):
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
            await self._error(send, exc.status, exc.message, scope)
        except Exception:
            _log.exception("console page %s failed", path)
            await self._error(send, 500, "Something went wrong; see the gateway's log.", scope)

    # -- sessions and CSRF ----------------------------------------------------------------

    async def _authenticate(self, page: Page) -> None:
        session_id = cookie_value(page.header(b"cookie"))
        session = self.sessions.get(session_id)
        if session is not None and session.key_hash is not None:
            key = await self.runtime.storage.orgs.find_management_key(session.key_hash)
            if key is None or key.revoked_at is not None or key.org_id != session.org_id:
                self.sessions.end(session_id)
                session = None
        page.session, page.session_id = session, session_id

    async def _check_csrf(self, page: Page) -> None:
        self._check_origin(page)
        assert page.session is not None
        form = await page.form()
        if not token_ok(page.session.csrf, form.get("csrf")):
            raise PageError(403, "The form is stale or was not sent from this console.")

    def _check_origin(self, page: Page) -> None:
        if not same_origin(
            page.header(b"origin"), page.header(b"sec-fetch-site"), page.header(b"host")
        ):
            raise PageError(403, "The request did not come from this console.")

    # -- rendering ------------------------------------------------------------------------

    def render(self, name: str, **values: Any) -> bytes:
        return self.env.get_template(name).render(**values).encode()

    async def _error(self, send: Send, status: int, message: str, scope: Scope) -> None:
        body = self.render("error.html", status=status, message=message, session=None, nav="")
        await send_page(send, status, body)

    async def common(self, page: Page, nav: str, org: Org | None) -> dict[str, Any]:
        session = page.session
        assert session is not None
        orgs = await self.runtime.storage.orgs.list_all() if session.operator else []
        query = f"?{urlencode({'org': org.id})}" if session.operator and org else ""
        flash, session.flash = session.flash, []
        return {
            "session": session,
            "nav": nav,
            "org": org,
            "orgs": orgs,
            "q": query,
            "csrf": session.csrf,
            "flash": flash,
        }

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


def _usd(value: float) -> str:
    """Cents for amounts from a dollar (and zero), micro-dollars below: a request costs
    fractions of a cent."""
    amount = float(value)
    return f"${amount:,.2f}" if amount >= 1 or amount == 0 else f"${amount:.6f}"


async def _html(send: Send, body: bytes, status: int = 200) -> None:
    await send_page(send, status, body)


# -- sign-in ------------------------------------------------------------------------------


@_route("GET", PREFIX, signed_in=False)
async def root(console: Console, page: Page, send: Send) -> None:
    await redirect(send, PREFIX + "/overview")


@_route("GET", PREFIX + "/sign-in", signed_in=False)
async def sign_in_form(console: Console, page: Page, send: Send) -> None:
    await _html(send, console.render("sign_in.html", error=None, session=None, nav=""))


@_route("POST", PREFIX + "/sign-in", signed_in=False)
async def sign_in(console: Console, page: Page, send: Send) -> None:
    console._check_origin(page)
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
        await _html(send, body, 401)
        return
    old = cookie_value(page.header(b"cookie"))
    console.sessions.end(old)
    session_id = console.sessions.create(session)
    await redirect(send, PREFIX + "/overview", [(b"set-cookie", session_cookie(session_id))])


async def _session_for(console: Console, key: str) -> Session | None:
    if not key or len(key) > 512:
        return None
    if key.startswith(OPERATOR_PREFIX):
        if console.operator.match(key) is None:
            return None
        return Session(operator=True, org_id=None, key_hash=None, label="operator")
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


@_route("POST", PREFIX + "/sign-out")
async def sign_out(console: Console, page: Page, send: Send) -> None:
    console.sessions.end(page.session_id)
    await redirect(send, PREFIX + "/sign-in", [(b"set-cookie", cleared_cookie())])


@_route("GET", PREFIX + "/static/{name}", signed_in=False)
async def static(console: Console, page: Page, send: Send) -> None:
    found = console.static.get(page.params["name"])  # only the files read at start
    if found is None:
        raise PageError(404, "There is no such file.")
    await send_page(send, 200, found[0], content_type=found[1])


# -- overview -----------------------------------------------------------------------------


async def _overview_values(console: Console, page: Page) -> dict[str, Any]:
    org = await console.org_of(page)
    values = await console.common(page, "overview", org)
    values["figures"] = await data.overview(console.runtime.storage, org.id) if org else None
    assert page.session is not None
    values["instance"] = (
        instance_figures(console.runtime.metrics.render()) if page.session.operator else None
    )
    values["updated"] = to_iso(now_us())
    return values


@_route("GET", PREFIX + "/overview")
async def overview(console: Console, page: Page, send: Send) -> None:
    await _html(send, console.render("overview.html", **await _overview_values(console, page)))


@_route("GET", PREFIX + "/overview/live")
async def overview_live(console: Console, page: Page, send: Send) -> None:
    values = await _overview_values(console, page)
    await _html(send, console.render("overview_live.html", **values))


# -- keys ---------------------------------------------------------------------------------


async def _need_org(console: Console, page: Page, form: dict[str, str] | None = None) -> Org:
    org = await console.org_of(page, form)
    if org is None:
        raise PageError(400, "Choose an organization first.")
    return org


@_route("GET", PREFIX + "/keys")
async def keys(console: Console, page: Page, send: Send) -> None:
    org = await console.org_of(page)
    values = await console.common(page, "keys", org)
    values["keys"] = (
        await data.keys_with_spend(console.runtime.storage, console.runtime.accountant, org.id)
        if org
        else []
    )
    await _html(send, console.render("keys.html", **values))


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


@_route("POST", PREFIX + "/keys")
async def create_key(console: Console, page: Page, send: Send) -> None:
    form = await page.form()
    org = await _need_org(console, page, form)
    try:
        body = msgspec.convert(
            {
                "name": form.get("name", "").strip(),
                "daily_budget_usd": _budget(form, "daily_budget_usd"),
                "monthly_budget_usd": _budget(form, "monthly_budget_usd"),
            },
            KeyCreate,
        )
    except (msgspec.ValidationError, APIError) as exc:
        raise PageError(400, f"The key was not created: {exc}") from None
    settings: dict[str, Any] = {"name": body.name}
    for field in ("daily_budget_usd", "monthly_budget_usd"):
        value = getattr(body, field)
        settings[field.replace("_usd", "_micros")] = None if value is None else usd_to_micros(value)
    runtime = console.runtime
    credential = runtime.hasher.generate(CredentialKind.SECRET)
    try:
        record = await runtime.storage.keys.create(org.id, credential, settings)
    except UniqueViolation:
        raise PageError(409, f"A key named {body.name!r} already exists.") from None
    assert page.session is not None
    page.session.flash.append(("secret", f"{record.name}\0{credential.value}"))
    await redirect(send, console.back("/keys", org, page))


@_route("POST", PREFIX + "/keys/{key_id}/{action}")
async def change_key(console: Console, page: Page, send: Send) -> None:
    form = await page.form()
    org = await _need_org(console, page, form)
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
        changes = {}
        for field in ("daily_budget_usd", "monthly_budget_usd"):
            value = _budget(form, field)
            changes[field.replace("_usd", "_micros")] = (
                None if value is None else usd_to_micros(value)
            )
        done = await storage.keys.update(org.id, key_id, changes) is not None
        message = "Budgets saved."
    else:
        raise PageError(404, "There is no such action.")
    if not done:
        raise PageError(404, "There is no such key.")
    console.runtime.auth.invalidate_all()
    page.session.flash.append(("info", message))
    await redirect(send, console.back("/keys", org, page))


# -- usage --------------------------------------------------------------------------------


def _range(page: Page) -> tuple[int, int, str, str]:
    """[start, end) from `start` and `end` (dates, both included); default the last 7 days."""
    today = datetime.now(UTC).date()
    try:
        first = date.fromisoformat(page.query.get("start") or str(today - timedelta(days=6)))
        last = date.fromisoformat(page.query.get("end") or str(today))
    except ValueError:
        raise PageError(400, "Dates are written YYYY-MM-DD.") from None
    start = from_datetime(datetime(first.year, first.month, first.day, tzinfo=UTC))
    end = from_datetime(datetime(last.year, last.month, last.day, tzinfo=UTC) + timedelta(1))
    try:
        start, end = usage_range(start, end, now_us())
    except APIError as exc:
        raise PageError(400, exc.message) from None
    return start, end, first.isoformat(), last.isoformat()


@_route("GET", PREFIX + "/usage")
async def usage(console: Console, page: Page, send: Send) -> None:
    org = await console.org_of(page)
    values = await console.common(page, "usage", org)
    start, end, first, last = _range(page)
    values.update(start=first, end=last, chart=None, cost_chart=None)
    if org is not None:
        storage = console.runtime.storage
        names = await data.key_names(storage, org.id)
        by_day = await storage.usage.grouped(org.id, start, end, ["day"])
        days = {(to_iso(r.day) or "")[:10]: r for r in by_day}
        points = []
        cursor = datetime.fromisoformat(first).date()
        while cursor.isoformat() <= last:
            points.append((cursor.isoformat(), days.get(cursor.isoformat())))
            cursor += timedelta(days=1)
        values["chart"] = bar_chart(
            "Requests per day", [(d, float(r.requests) if r else 0.0) for d, r in points], "{:.0f}"
        )
        values["cost_chart"] = bar_chart(
            "Spend per day (USD)",
            [(d, micros_to_usd(r.cost_micros) if r else 0.0) for d, r in points],
            "{:.4f}",
        )
        values["days"] = [(d, data.Totals.of([r] if r else [])) for d, r in points]
        by_key = await storage.usage.grouped(org.id, start, end, ["key_id"])
        by_model = await storage.usage.grouped(org.id, start, end, ["model"])
        values["by_key"] = [
            (names.get(r.key_id or "", r.key_id or "(none)"), data.Totals.of([r])) for r in by_key
        ]
        values["by_model"] = [(r.model or "(unknown)", data.Totals.of([r])) for r in by_model]
        values["total"] = data.Totals.of(by_day)
        query = {"start": first, "end": last}
        assert page.session is not None
        if page.session.operator:
            query["org"] = org.id
        values["csv_url"] = f"{PREFIX}/usage.csv?{urlencode(query)}"
    await _html(send, console.render("usage.html", **values))


_CSV_RISKY = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: object) -> str:
    """A CSV cell a spreadsheet will not run as a formula."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(_CSV_RISKY) else text


@_route("GET", PREFIX + "/usage.csv")
async def usage_csv(console: Console, page: Page, send: Send) -> None:
    org = await _need_org(console, page)
    start, end, first, last = _range(page)
    storage = console.runtime.storage
    names = await data.key_names(storage, org.id)
    rows = await storage.usage.grouped(org.id, start, end, ["day", "key_id", "model"])
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(
        ["day", "key_id", "key_name", "model", "requests", "input_tokens", "output_tokens"]
        + ["cost_usd", "errors"]
    )
    for r in rows:
        writer.writerow(
            [
                _cell((to_iso(r.day) or "")[:10]),
                _cell(r.key_id),
                _cell(names.get(r.key_id or "", "")),
                _cell(r.model),
                r.requests,
                r.input_tokens,
                r.output_tokens,
                f"{micros_to_usd(r.cost_micros):.6f}",
                r.errors,
            ]
        )
    filename = f"usage-{first}-{last}.csv"
    await send_page(
        send,
        200,
        out.getvalue().encode(),
        [(b"content-disposition", f'attachment; filename="{filename}"'.encode())],
        content_type=b"text/csv; charset=utf-8",
    )


# -- webhooks -----------------------------------------------------------------------------


@_route("GET", PREFIX + "/webhooks")
async def webhooks(console: Console, page: Page, send: Send) -> None:
    org = await console.org_of(page)
    values = await console.common(page, "webhooks", org)
    values["webhooks"] = (
        (await console.runtime.storage.webhooks.list_for_org(org.id, limit=100, after=None)).items
        if org
        else []
    )
    await _html(send, console.render("webhooks.html", **values))


async def _webhook(console: Console, org: Org, webhook_id: str) -> Any:
    record = await console.runtime.storage.webhooks.get(org.id, webhook_id)
    if record is None:
        raise PageError(404, "There is no such webhook.")
    return record


@_route("GET", PREFIX + "/webhooks/{webhook_id}")
async def webhook(console: Console, page: Page, send: Send) -> None:
    org = await _need_org(console, page)
    record = await _webhook(console, org, page.params["webhook_id"])
    values = await console.common(page, "webhooks", org)
    deliveries = await console.runtime.storage.webhooks.deliveries(
        org.id, record.id, limit=50, after=None
    )
    values.update(webhook=record, deliveries=deliveries.items, event_types=EVENT_TYPES)
    await _html(send, console.render("webhook.html", **values))


def _wake(console: Console, webhook_id: str) -> None:
    console.runtime.area(WebhooksArea).dispatcher.wake(webhook_id)


@_route("POST", PREFIX + "/webhooks/{webhook_id}/{action}")
async def webhook_action(console: Console, page: Page, send: Send) -> None:
    form = await page.form()
    org = await _need_org(console, page, form)
    record = await _webhook(console, org, page.params["webhook_id"])
    action = page.params["action"]
    repo = console.runtime.storage.webhooks
    assert page.session is not None
    if action == "test":
        event_type = form.get("type", "")
        if event_type not in EVENT_TYPES:
            raise PageError(400, "Choose an event type.")
        if not record.enabled:
            raise PageError(409, "The webhook is disabled.")
        await repo.append_test_event(org.id, record.id, event_type, sample_data(event_type))
        page.session.flash.append(("info", f"Test event {event_type} queued."))
    elif action == "rotate":
        secret = generate_secret()
        now = now_us()
        box = console.runtime.box(WEBHOOK_SECRETS)
        overlap = console.runtime.config.webhooks.secret_rotation_overlap_s
        rotated = await repo.rotate_secret(
            org.id,
            record.id,
            now,
            secret_sealed=box.seal(secret, secret_context(org.id, record.id)),
            secret_hint=secret_hint(secret),
            previous_secret_sealed=record.secret_sealed,
            previous_expires_at=now + int(overlap * 1_000_000),
        )
        if rotated is None:
            raise PageError(404, "There is no such webhook.")
        page.session.flash.append(("secret", f"{record.url}\0{secret}"))
    else:
        raise PageError(404, "There is no such action.")
    _wake(console, record.id)
    await redirect(send, console.back(f"/webhooks/{record.id}", org, page))


@_route("POST", PREFIX + "/webhooks/{webhook_id}/deliveries/{event_id}/redeliver")
async def redeliver(console: Console, page: Page, send: Send) -> None:
    form = await page.form()
    org = await _need_org(console, page, form)
    record = await _webhook(console, org, page.params["webhook_id"])
    if not record.enabled:
        raise PageError(409, "The webhook is disabled.")
    event_id = page.params["event_id"]
    found = await console.runtime.storage.webhooks.redeliver(org.id, record.id, event_id, now_us())
    if found is None:
        raise PageError(404, "There is no such event for this webhook.")
    _wake(console, record.id)
    assert page.session is not None
    page.session.flash.append(("info", f"Event {event_id} queued again."))
    await redirect(send, console.back(f"/webhooks/{record.id}", org, page))


# -- supervision --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Node:
    depth: int
    node: ActorSnapshot


def _flatten(node: ActorSnapshot, depth: int = 0) -> list[_Node]:
    out = [_Node(depth, node)]
    for child in node.children:
        out += _flatten(child, depth + 1)
    return out


@_route("GET", PREFIX + "/supervision", operator_only=True)
async def supervision(console: Console, page: Page, send: Send) -> None:
    runtime = console.runtime
    values = await console.common(page, "supervision", None)
    values.update(
        nodes=_flatten(runtime.supervisor.snapshot()),
        pid=os.getpid(),
        worker=console.worker,
        hostname=console.hostname,
        upstreams=runtime.upstreams.statistics(),
        deployments=deployment_statistics(runtime.registry),
        gauges=instance_figures(
            runtime.metrics.render(), ("gateway_cache", "gateway_guardrail")
        ).gauges,
    )
    await _html(send, console.render("supervision.html", **values))
