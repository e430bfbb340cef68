"""Stripe's error answers: the statuses and the `{"error": {...}}` shapes the SDK maps to its
exceptions (400/404 InvalidRequestError, 401 AuthenticationError, 402 CardError, 500 APIError,
`type: idempotency_error` IdempotencyError). Pure."""

from __future__ import annotations

from typing import Any

DECLINE_MESSAGES = {
    "generic_decline": "Your card was declined.",
    "insufficient_funds": "Your card has insufficient funds.",
    "authentication_required": (
        "Your card was declined. This transaction requires authentication."
    ),
}


class StripeFailure(Exception):
    """An API error: answer `status` with `{"error": error}`. `commit` says the request did
    something before failing (a decline made a charge): its answer is kept for idempotency."""

    def __init__(self, status: int, error: dict[str, Any], *, commit: bool = False) -> None:
        super().__init__(error.get("message", ""))
        self.status = status
        self.error = error
        self.commit = commit


def invalid(message: str, param: str | None = None, code: str | None = None) -> StripeFailure:
    error: dict[str, Any] = {"type": "invalid_request_error", "message": message}
    if param is not None:
        error["param"] = param
    if code is not None:
        error["code"] = code
        error["doc_url"] = f"https://stripe.com/docs/error-codes/{code.replace('_', '-')}"
    return StripeFailure(400, error)


def missing(kind: str, object_id: str, param: str | None = None) -> StripeFailure:
    """No such object: 404 when it is the URL's, 400 when a parameter names it (as Stripe)."""
    error: dict[str, Any] = {
        "type": "invalid_request_error",
        "code": "resource_missing",
        "doc_url": "https://stripe.com/docs/error-codes/resource-missing",
        "message": f"No such {kind}: '{object_id}'",
    }
    if param is not None:
        error["param"] = param
    return StripeFailure(400 if param is not None else 404, error)


def unknown_parameter(name: str) -> StripeFailure:
    return invalid(f"Received unknown parameter: {name}", name, "parameter_unknown")


def missing_parameter(name: str) -> StripeFailure:
    return invalid(f"Missing required param: {name}.", name, "parameter_missing")


def card_declined(code: str, decline_code: str, **extra: Any) -> dict[str, Any]:
    """The error object of a decline; `extra` adds payment_intent, charge, payment_method."""
    return {
        "type": "card_error",
        "code": code,
        "decline_code": decline_code,
        "message": DECLINE_MESSAGES[decline_code],
        "doc_url": f"https://stripe.com/docs/error-codes/{code.replace('_', '-')}",
        **extra,
    }


def bad_key(key: str | None) -> StripeFailure:
    if not key:
        message = (
            "You did not provide an API key. You need to provide your API key in the "
            "Authorization header, using Bearer auth (e.g. 'Authorization: Bearer "
            "YOUR_SECRET_KEY')."
        )
    else:
        shown = key[:8] + "*" * max(0, len(key) - 12) + key[-4:] if len(key) > 12 else "***"
        message = f"Invalid API Key provided: {shown}"
    return StripeFailure(401, {"type": "invalid_request_error", "message": message})


def api_error(message: str = "An unknown error occurred") -> StripeFailure:
    return StripeFailure(500, {"type": "api_error", "message": message})


def idempotency_mismatch(key: str) -> StripeFailure:
    return StripeFailure(
        400,
        {
            "type": "idempotency_error",
            "message": (
                "Keys for idempotent requests can only be used with the same parameters they "
                f"were first used with. Try using a key other than '{key}' if you meant to "
                "execute a different request."
            ),
        },
    )


def unrecognized_url(method: str, path: str) -> StripeFailure:
    return StripeFailure(
        404,
        {
            "type": "invalid_request_error",
            "message": (
                f"Unrecognized request URL ({method}: {path}). Please see "
                "https://stripe.com/docs or we can help at https://support.stripe.com/."
            ),
        },
    )
