"""The simulated Stripe's HTTP/1.1 server and the handle tests drive it by.

Requests are read with the simulated upstream's reader (bench/upstream/http.py: keep-alive,
pipelining, body limits) and answered in order on each connection. Every `/v1` request needs
`Authorization: Bearer <secret_key>` (else 401). Form bodies and query strings are parsed as
Stripe reads them (bench/stripe/forms.py), routed (bench/stripe/routes.py) and answered with
pretty-printed JSON and Stripe's `Request-Id` / `Stripe-Version` headers.

Idempotency as Stripe: a POST's `Idempotency-Key` (the SDK sends one on every POST) is scoped to
the API key; the first answer is kept when the call did something (2xx, and a 402 decline which
made a charge), and the same key with the same method, path and parameters replays it exactly
with `Idempotent-Replayed: true`; with anything else it is 400 `idempotency_error`. A 400 from
validation, a 401 or a 500 is not kept (Stripe does not either), so a retry runs again. A
request is handled without awaiting, so two requests with one key never overlap: the second
always sees the first's kept answer (Stripe's 409 `idempotency_key_in_use` cannot happen here).

Test control: `outage` ("refuse": the connection is reset once the request was read, "500":
api_error, "hang": never answered), `hang_after_commit` (a matching POST /v1/payment_intents is
done, kept for idempotency and its events queued, then never answered), and `/_sim/...` routes
(JSON bodies, same bearer key; outages do not apply to them) for tests that drive a gateway in
another process.
"""

from __future__ import annotations

import json
import logging
import socket
import struct
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import unquote

import trio

from bench.stripe import errors, routes
from bench.stripe.errors import StripeFailure
from bench.stripe.forms import FormError, parse_form
from bench.stripe.store import API_VERSION, Account, Form, Obj, Origin, new_id
from bench.stripe.webhooks import (
    DEFAULT_ATTEMPT_TIMEOUT_S,
    DEFAULT_RETRY_SCHEDULE_S,
    Delivery,
    WebhookSender,
)
from bench.upstream.http import CONTINUE, HttpError, Request, RequestReader, json_response

log = logging.getLogger(__name__)

Outage = Literal["refuse", "500", "hang"] | None
RECEIVE_SIZE = 65536
REQUEST_LOG_LIMIT = 10_000
_LINGER_ZERO = struct.pack("ii", 1, 0)


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


def _encode(obj: object) -> bytes:
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
            return done(*self._control(method, path, request.body))
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
            status, body, commit = 200, _encode(obj), True
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

    def _control(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        """The test-control API over HTTP: `/_sim/<action>`, a JSON object in and out."""
        try:
            args: dict[str, Any] = json.loads(body) if body else {}
            if not isinstance(args, dict):
                raise ValueError("a JSON object is required")
        except ValueError as exc:
            return 400, _encode({"error": {"type": "invalid_request_error", "message": str(exc)}})
        action = path.removeprefix("/_sim/")
        try:
            result: object
            if method == "GET" and action == "events":
                result = {"data": self.events}
            elif method == "GET" and action == "deliveries":
                result = {"data": [vars_of(d) for d in self.deliveries]}
            elif method != "POST":
                raise errors.unrecognized_url(method, path)
            elif action == "config":
                result = self._configure(args)
            elif action == "complete_authentication":
                result = self.complete_authentication(
                    str(args["payment_intent"]), bool(args.get("succeed", True))
                )
            elif action == "confirm_setup_intent":
                result = self.confirm_setup_intent(
                    str(args["setup_intent"]), str(args.get("token", "pm_card_visa"))
                )
            elif action == "refund_from_dashboard":
                amount = args.get("amount")
                result = self.refund_from_dashboard(
                    str(args["payment_intent"]), None if amount is None else int(amount)
                )
            elif action == "create_dispute":
                result = self.create_dispute(str(args["payment_intent"]))
            elif action == "redeliver":
                self.redeliver(str(args["event"]))
                result = {"redelivered": args["event"]}
            else:
                raise errors.unrecognized_url(method, path)
        except StripeFailure as failure:
            return failure.status, _encode({"error": failure.error})
        except (KeyError, TypeError, ValueError) as exc:
            message = f"bad arguments: {exc!r}"
            return 400, _encode({"error": {"type": "invalid_request_error", "message": message}})
        return 200, _encode(result)

    def _configure(self, args: dict[str, Any]) -> dict[str, Any]:
        if "outage" in args:
            if args["outage"] not in (None, "refuse", "500", "hang"):
                raise ValueError("outage is null, refuse, 500 or hang")
            self.outage = args["outage"]
        if "webhook_url" in args:
            self.webhook_url = args["webhook_url"]
        if "webhook_secret" in args:
            self.webhook_secret = args["webhook_secret"]
        if "webhooks_paused" in args:
            self.webhooks_paused = bool(args["webhooks_paused"])
        return {
            "outage": self.outage,
            "webhook_url": self.webhook_url,
            "webhooks_paused": self.webhooks_paused,
        }

    async def _serve_connection(self, stream: trio.SocketStream) -> None:
        try:
            await _Connection(self, stream).serve()
        except Exception:
            log.exception("simulated stripe: a connection failed")


def _error_body(failure: StripeFailure, request_id: str) -> bytes:
    error = dict(failure.error)
    if failure.status != 401:
        error.setdefault("request_log_url", f"https://dashboard.stripe.com/test/logs/{request_id}")
    return _encode({"error": error})


def vars_of(delivery: Delivery) -> dict[str, Any]:
    return {
        "event_id": delivery.event_id,
        "event_type": delivery.event_type,
        "attempt": delivery.attempt,
        "status": delivery.status,
        "error": delivery.error,
    }


def _bearer(header: str | None) -> str | None:
    if header is None:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


class _Connection:
    def __init__(self, sim: StripeSim, stream: trio.SocketStream) -> None:
        self._sim = sim
        self._stream = stream
        self._reader = RequestReader()

    async def serve(self) -> None:
        try:
            await self._serve_requests()
        except HttpError as exc:
            body = _encode({"error": {"type": "invalid_request_error", "message": exc.message}})
            try:
                await self._stream.send_all(json_response(exc.status, body, close=True))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(self._stream)

    async def _serve_requests(self) -> None:
        reader = self._reader
        while True:
            request = reader.next_request()
            while request is None:
                if reader.take_continue():
                    await self._stream.send_all(CONTINUE)
                data = await self._stream.receive_some(RECEIVE_SIZE)
                if not data:
                    return
                reader.feed(data)
                request = reader.next_request()
            if not await self._answer(request) or not request.keep_alive:
                return

    async def _answer(self, request: Request) -> bool:
        sim = self._sim
        outage = sim.outage
        if outage is not None and not request.target.startswith("/_sim/"):
            path = request.target.partition("?")[0]
            sim._log(LoggedRequest(request.method, path, None, {}, None))
            if outage == "refuse":
                sim.counters.outage_refused += 1
                self._reset()
                return False
            if outage == "hang":
                sim.counters.outage_hung += 1
                await self._until_peer_leaves()
                return False
            sim.counters.outage_500 += 1
            body = _encode({"error": {"type": "api_error", "message": "An unknown error occurred"}})
            await self._stream.send_all(json_response(500, body, close=not request.keep_alive))
            return True
        answer = sim.answer(request)
        if answer is None:
            await self._until_peer_leaves()
            return False
        status, body, headers = answer
        await self._stream.send_all(
            json_response(status, body, headers=headers, close=not request.keep_alive)
        )
        return True

    def _reset(self) -> None:
        try:
            self._stream.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_ZERO)
        except OSError:
            pass

    async def _until_peer_leaves(self) -> None:
        try:
            while await self._stream.receive_some(RECEIVE_SIZE):
                pass
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


async def serve_stripe(
    *,
    secret_key: str,
    host: str = "127.0.0.1",
    port: int = 0,
    webhook_url: str | None = None,
    webhook_secret: str | None = None,
    retry_schedule_s: Sequence[float] = DEFAULT_RETRY_SCHEDULE_S,
    attempt_timeout_s: float = DEFAULT_ATTEMPT_TIMEOUT_S,
    now: Callable[[], float] = time.time,
    task_status: trio.TaskStatus[StripeSim] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled; `task_status.started` hands over the StripeSim once listening.
    `now` gives `created` fields and webhook signature timestamps (unix seconds)."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound_host, bound_port = listeners[0].socket.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    sender = WebhookSender(webhook_url, webhook_secret, now, retry_schedule_s, attempt_timeout_s)
    sim = StripeSim(f"http://{shown}:{bound_port}", secret_key, sender, now)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sender.run)
        task_status.started(sim)
        await trio.serve_listeners(sim._serve_connection, listeners)


@asynccontextmanager
async def running_stripe_sim(
    *,
    secret_key: str,
    webhook_url: str | None = None,
    webhook_secret: str | None = None,
    retry_schedule_s: Sequence[float] = DEFAULT_RETRY_SCHEDULE_S,
    attempt_timeout_s: float = DEFAULT_ATTEMPT_TIMEOUT_S,
    now: Callable[[], float] = time.time,
) -> AsyncIterator[StripeSim]:
    """`serve_stripe` on a free loopback port for the body of the `async with`."""
    async with trio.open_nursery() as nursery:
        sim: StripeSim = await nursery.start(
            lambda task_status: serve_stripe(
                secret_key=secret_key,
                webhook_url=webhook_url,
                webhook_secret=webhook_secret,
                retry_schedule_s=retry_schedule_s,
                attempt_timeout_s=attempt_timeout_s,
                now=now,
                task_status=task_status,
            )
        )
        try:
            yield sim
        finally:
            nursery.cancel_scope.cancel()
