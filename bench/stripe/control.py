"""The simulated Stripe's test-control API over HTTP, for tests that drive a gateway in another
process: `POST /_sim/<action>` with a JSON object (config, complete_authentication,
confirm_setup_intent, refund_from_dashboard, create_dispute, redeliver), `GET /_sim/events` and
`GET /_sim/deliveries`. Same bearer key as the API; outages do not apply to it."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from bench.stripe import errors
from bench.stripe.errors import StripeFailure
from bench.stripe.webhooks import Delivery

if TYPE_CHECKING:
    from bench.stripe.sim import StripeSim


def _encode(obj: object) -> bytes:
    return json.dumps(obj, indent=2).encode()


def control(sim: StripeSim, method: str, path: str, body: bytes) -> tuple[int, bytes]:
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
            result = {"data": sim.events}
        elif method == "GET" and action == "deliveries":
            result = {"data": [vars_of(d) for d in sim.deliveries]}
        elif method != "POST":
            raise errors.unrecognized_url(method, path)
        elif action == "config":
            result = _configure(sim, args)
        elif action == "complete_authentication":
            result = sim.complete_authentication(
                str(args["payment_intent"]), bool(args.get("succeed", True))
            )
        elif action == "confirm_setup_intent":
            result = sim.confirm_setup_intent(
                str(args["setup_intent"]), str(args.get("token", "pm_card_visa"))
            )
        elif action == "refund_from_dashboard":
            amount = args.get("amount")
            result = sim.refund_from_dashboard(
                str(args["payment_intent"]), None if amount is None else int(amount)
            )
        elif action == "create_dispute":
            result = sim.create_dispute(str(args["payment_intent"]))
        elif action == "redeliver":
            sim.redeliver(str(args["event"]))
            result = {"redelivered": args["event"]}
        else:
            raise errors.unrecognized_url(method, path)
    except StripeFailure as failure:
        return failure.status, _encode({"error": failure.error})
    except (KeyError, TypeError, ValueError) as exc:
        message = f"bad arguments: {exc!r}"
        return 400, _encode({"error": {"type": "invalid_request_error", "message": message}})
    return 200, _encode(result)


def _configure(sim: StripeSim, args: dict[str, Any]) -> dict[str, Any]:
    if "outage" in args:
        if args["outage"] not in (None, "refuse", "500", "hang"):
            raise ValueError("outage is null, refuse, 500 or hang")
        sim.outage = args["outage"]
    if "webhook_url" in args:
        sim.webhook_url = args["webhook_url"]
    if "webhook_secret" in args:
        sim.webhook_secret = args["webhook_secret"]
    if "webhooks_paused" in args:
        sim.webhooks_paused = bool(args["webhooks_paused"])
    return {
        "outage": sim.outage,
        "webhook_url": sim.webhook_url,
        "webhooks_paused": sim.webhooks_paused,
    }


def vars_of(delivery: Delivery) -> dict[str, Any]:
    return {
        "event_id": delivery.event_id,
        "event_type": delivery.event_type,
        "attempt": delivery.attempt,
        "status": delivery.status,
        "error": delivery.error,
    }
