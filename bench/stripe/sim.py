"""The simulated Stripe's handle (`StripeSim`) and how it answers one API request.

Every request needs `Authorization: Bearer <secret_key>` (else 401). Form bodies and query
strings are parsed as Stripe reads them (forms.py), routed (routes.py) and answered with
pretty-printed JSON and Stripe's `Request-Id` / `Stripe-Version` headers.

Idempotency as Stripe: a POST's `Idempotency-Key` (the SDK sends one on every POST) is scoped to
the API key; the first answer is kept when the call did something (2xx, and a 402 decline which
made a charge), and the same key with the same method, path and parameters replays it exactly
with `Idempotent-Replayed: true`; with anything else it is 400 `idempotency_error`. A 400 from
validation, a 401 or a 500 is not kept (Stripe does not either), so a retry runs again. A
request is handled without awaiting, so two requests with one key never overlap: the second
always sees the first's kept answer (Stripe's 409 `idempotency_key_in_use` cannot happen here).

`hang_after_commit`: a matching POST /v1/payment_intents is done, kept for idempotency and its
events queued, then never answered (server.py holds the connection open).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import unquote

from bench.stripe import errors, routes
from bench.stripe.control import control
from bench.stripe.errors import StripeFailure
from bench.stripe.forms import FormError, parse_form
from bench.stripe.store import API_VERSION, Account, Form, Obj, Origin, new_id
from bench.stripe.webhooks import (
    Delivery,
    WebhookSender,
)
from bench.upstream.http import Request

Outage = Literal["refuse", "500", "hang"] | None
REQUEST_LOG_LIMIT = 10_000


@dataclass(frozen=True, slots=True)
class LoggedRequest:
    method: str
    path: str
    idempotency_key: str | None
    params: Form
    status: int | None  # None: not answered (outage, hang_after_commit)
    replayed: bool = False


@dataclass(slots=True)
class _Kept:
    method: str
    path: str
    params: Form
    status: int
    body: bytes
    request_id: str


@dataclass
class Counters:
    requests: int = 0
    replays: int = 0
    idempotency_errors: int = 0
    unauthorized: int = 0
    outage_refused: int = 0
    outage_500: int = 0
    outage_hung: int = 0
    hung_after_commit: int = 0
    by_status: dict[int, int] = field(default_factory=dict)


def encode(obj: object) -> bytes:
    return json.dumps(obj, indent=2).encode()


class StripeSim:
    """A running simulated Stripe. Objects: `payment_intents`, `charges`, `refunds`,
    `customers`, `payment_methods`, `setup_intents`, `disputes` (id -> the JSON Stripe would
    answer), `events` in emission order, `deliveries` (every webhook attempt), `requests`."""

    def __init__(
        self,
        url: str,
        secret_key: str,
        sender: WebhookSender,
        now: Callable[[], float],
    ) -> None:
        self.url = url
        self.secret_key = secret_key
        self.outage: Outage = None
        self.hang_after_commit: Callable[[Form], bool] | None = None
        self.requests: list[LoggedRequest] = []
        self.counters = Counters()
        self._sender = sender
        self._account = Account(on_event=sender.enqueue, now=now)
        self._account.pending_webhooks = 1 if sender.url else 0
        self._kept: dict[tuple[str, str], _Kept] = {}

    def __repr__(self) -> str:
        return f"<StripeSim {self.url} {len(self.events)} events>"

    # --- webhooks ---------------------------------------------------------------------------

    @property
    def webhook_url(self) -> str | None:
        return self._sender.url

    @webhook_url.setter
    def webhook_url(self, url: str | None) -> None:
        self._sender.configure(url, self._sender.secret)
        self._account.pending_webhooks = 1 if url else 0

    @property
    def webhook_secret(self) -> str | None:
        return self._sender.secret

    @webhook_secret.setter
    def webhook_secret(self, secret: str | None) -> None:
        self._sender.configure(self._sender.url, secret)

    @property
    def webhooks_paused(self) -> bool:
        return self._sender.paused

    @webhooks_paused.setter
    def webhooks_paused(self, paused: bool) -> None:
        self._sender.paused = paused

    @property
    def deliveries(self) -> list[Delivery]:
        return self._sender.deliveries

    @property
    def dropped_events(self) -> list[str]:
        """Ids of events whose every delivery attempt failed."""
        return self._sender.dropped

    def redeliver(self, event_id: str) -> None:
        """Send an event again (a duplicate delivery): same id and body, a fresh signature."""
        for event in self.events:
            if event["id"] == event_id:
                self._sender.enqueue(event)
                return
        raise KeyError(event_id)

    async def wait_webhooks_idle(self) -> None:
        """Until every queued event was delivered or dropped (waits for good while paused)."""
        await self._sender.wait_idle()

    # --- objects ----------------------------------------------------------------------------

    @property
    def account(self) -> Account:
        return self._account

    @property
    def customers(self) -> dict[str, Obj]:
        return self._account.customers

    @property
    def payment_methods(self) -> dict[str, Obj]:
        return self._account.payment_methods

    @property
    def payment_intents(self) -> dict[str, Obj]:
        return self._account.payment_intents

    @property
    def charges(self) -> dict[str, Obj]:
        return self._account.charges

    @property
    def refunds(self) -> dict[str, Obj]:
        return self._account.refunds

    @property
    def disputes(self) -> dict[str, Obj]:
        return self._account.disputes

    @property
    def setup_intents(self) -> dict[str, Obj]:
        return self._account.setup_intents

    @property
    def events(self) -> list[Obj]:
        return self._account.events

    def events_of(self, kind: str) -> list[Obj]:
        return [e for e in self.events if e["type"] == kind]

    # --- what happens outside the API -------------------------------------------------------

    def complete_authentication(self, pi_id: str, succeed: bool = True) -> Obj:
        """The customer finished 3-D Secure (or failed it): requires_action -> succeeded with
        a charge, or -> requires_payment_method; events either way."""
        return self._account.complete_authentication(pi_id, succeed)

    def confirm_setup_intent(self, seti_id: str, token: str = "pm_card_visa") -> Obj:
        """What Stripe.js does: a new pm_ from `token` attached to the SetupIntent's customer."""
        return self._account.confirm_setup_intent(seti_id, token)

    def refund_from_dashboard(self, pi_id: str, amount: int | None = None) -> Obj:
        return self._account.refund_from_dashboard(pi_id, amount)

    def create_dispute(self, pi_id: str) -> Obj:
        return self._account.create_dispute(pi_id)

    # --- requests ---------------------------------------------------------------------------

    def _log(self, entry: LoggedRequest) -> None:
        if len(self.requests) >= REQUEST_LOG_LIMIT:
            del self.requests[: len(self.requests) - REQUEST_LOG_LIMIT + 1]
        self.requests.append(entry)

    def _count(self, status: int) -> None:
        self.counters.by_status[status] = self.counters.by_status.get(status, 0) + 1

    def answer(self, request: Request) -> tuple[int, bytes, list[tuple[str, str]]] | None:
        """Status, body and extra headers for one API request; None: do not answer (hang)."""
        self.counters.requests += 1
        path, _, query = request.target.partition("?")
        method = request.method
        key = request.headers.get("idempotency-key") if method == "POST" else None
        request_id = new_id("req")
        headers = [
            ("request-id", request_id),
            ("stripe-version", request.headers.get("stripe-version", API_VERSION)),
        ]
        if key is not None:
            headers.append(("idempotency-key", key))
        form: Form = {}

        def done(status: int, body: bytes) -> tuple[int, bytes, list[tuple[str, str]]]:
            self._count(status)
            self._log(LoggedRequest(method, path, key, form, status))
            return status, body, headers

        def failed(failure: StripeFailure) -> tuple[int, bytes, list[tuple[str, str]]]:
            return done(failure.status, _error_body(failure, request_id))

        api_key = _bearer(request.headers.get("authorization"))
        if api_key != self.secret_key:
            self.counters.unauthorized += 1
            return failed(errors.bad_key(api_key))
        try:
            form = self._form(method, query, request)
        except FormError as exc:
            return failed(errors.invalid(exc.message, exc.param))
        path = unquote(path)
        if path.startswith("/_sim/"):
            return done(*control(self, method, path, request.body))
        if key is not None:
            kept = self._kept.get((api_key, key))
            if kept is not None:
                if (kept.method, kept.path, kept.params) != (method, path, form):
                    self.counters.idempotency_errors += 1
                    return failed(errors.idempotency_mismatch(key))
                self.counters.replays += 1
                self._count(kept.status)
                self._log(LoggedRequest(method, path, key, form, kept.status, replayed=True))
                headers[0] = ("request-id", kept.request_id)
                headers.append(("idempotent-replayed", "true"))
                headers.append(("original-request", kept.request_id))
                return kept.status, kept.body, headers
        origin = Origin(request_id, key)
        try:
            obj = routes.handle(self._account, method, path, form, origin)
            status, body, commit = 200, encode(obj), True
        except StripeFailure as failure:
            status, body, commit = failure.status, _error_body(failure, request_id), failure.commit
        if key is not None and commit:
            self._kept[(api_key, key)] = _Kept(method, path, form, status, body, request_id)
        hook = self.hang_after_commit
        if (
            hook is not None
            and commit
            and method == "POST"
            and path == "/v1/payment_intents"
            and hook(form)
        ):
            self.counters.hung_after_commit += 1
            self._log(LoggedRequest(method, path, key, form, None))
            return None
        return done(status, body)

    @staticmethod
    def _form(method: str, query: str, request: Request) -> Form:
        if method == "GET" or method == "DELETE":
            return parse_form(query)
        if request.target.startswith("/_sim/"):
            return {}
        try:
            text = request.body.decode("utf-8")
        except UnicodeDecodeError:
            raise FormError("Invalid request body: not UTF-8.") from None
        form = parse_form(text)
        if query:
            form.update(parse_form(query))
        return form


def _error_body(failure: StripeFailure, request_id: str) -> bytes:
    error = dict(failure.error)
    if failure.status != 401:
        error.setdefault("request_log_url", f"https://dashboard.stripe.com/test/logs/{request_id}")
    return encode({"error": error})


def _bearer(header: str | None) -> str | None:
    if header is None:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None
