"""The protocol layer's exceptions: the OpenAI error shape, the upstream family, and what the
pure parsers and codecs below every other layer raise.

`APIError` carries everything the HTTP layer needs (status, type, code, param, extra headers);
rendering it is pure. Lower layers' exceptions are mapped to `APIError` once, at the gateway
boundary (gateway/web/errors.py `to_api_error`) — never leaked to clients with a driver message.

The upstream family is here, below every layer that raises or catches it: parsers in protocol/
raise `UpstreamMalformed`, the connection pool (actors/errors.py: `ConnectFailed`,
`ConnectionBroken`, `ReadTimedOut` are members) and the upstream client raise the others, and
the upstream client names the provider (`named`):

    Exception
     ├── APIError                   answered to the client as it is
     ├── UpstreamError              an upstream call failed; `provider` names it ("" until the
     │    │                         upstream client knows it: a parser does not)
     │    ├── UpstreamStatusError   the provider answered a non-2xx status (`status`, `body`,
     │    │                         `retry_after`)
     │    ├── UpstreamUnavailable   could not connect, or the connection broke or was reset
     │    ├── UpstreamTimeout       no answer (or no next chunk) within the read timeout
     │    └── UpstreamMalformed     the provider answered something unusable: broken HTTP/1.1
     │                              framing or over a size limit, not JSON, the wrong shape, an
     │                              SSE event over its bound (protocol/sse.py), or an error
     │                              reported mid-stream; the message says how
     ├── InvalidFile                an upload is not acceptable for its purpose (protocol/files/):
     │                              `code`, `param`; `api_error()` is the client's 400
     ├── DatasetError               a fine-tuning dataset fails its job (`code`, `message`,
     │                              `param`: the job's `error`)
     ├── BlobCorrupt                an encrypted blob does not authenticate (protocol/blobcrypt.py)
     ├── SecretBoxError             a sealed value cannot be opened (protocol/secretbox.py)
     ├── PaymentDeclined            the payment processor refused the charge (402; `code`)
     ├── PaymentRequiresAction      the payment waits for the customer (3-D Secure; 402)
     ├── PaymentUnavailable         the payment processor cannot be reached (503)
     ├── UnknownPaymentMethod       no such payment method for the organization (400)
     └── ValueError
          └── SecretTooShort        a client-chosen webhook secret too short to resist guessing

Types used on the wire:

    400 invalid_request_error   401 authentication_error   403 permission_error
    404 not_found_error         405 invalid_request_error  409 conflict_error
    413 invalid_request_error   429 rate_limit_error       5xx server_error / upstream_error
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Self

import msgspec


class ErrorDetail(msgspec.Struct, frozen=True):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorBody(msgspec.Struct, frozen=True):
    error: ErrorDetail


class APIError(Exception):
    """An error answered to the client in the OpenAI shape."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str,
        code: str | None = None,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
        extra: Mapping[str, object] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param
        self.headers: dict[str, str] = dict(headers or {})
        # More fields of the error object, after the four (e.g. a payment's `client_secret`).
        self.extra = dict(extra or {})

    def body(self) -> bytes:
        detail = ErrorDetail(message=self.message, type=self.type, param=self.param, code=self.code)
        if self.extra:
            fields = msgspec.structs.asdict(detail)
            return msgspec.json.encode({"error": {**self.extra, **fields}})
        return msgspec.json.encode(ErrorBody(error=detail))

    def __repr__(self) -> str:
        return f"APIError({self.status}, {self.code or self.type!s}, param={self.param!r})"


class UpstreamError(Exception):
    def __init__(self, provider: str, message: str) -> None:
        super().__init__(f"{provider}: {message}" if provider else message)
        self.provider = provider
        self.detail = message

    def named(self, provider: str) -> Self:
        """Name the provider, when the raiser could not (a parser, the connection pool): in
        place (it keeps its class and attributes); returns itself."""
        if not self.provider:
            self.provider = provider
            self.args = (f"{provider}: {self.detail}",)
        return self


class UpstreamStatusError(UpstreamError):
    def __init__(self, provider: str, status: int, body: bytes, retry_after: str | None) -> None:
        super().__init__(provider, f"upstream answered {status}")
        self.status = status
        self.body = body
        self.retry_after = retry_after


class UpstreamUnavailable(UpstreamError):
    pass


class UpstreamTimeout(UpstreamError):
    pass


class UpstreamMalformed(UpstreamError):
    """Raised by parsers as `UpstreamMalformed(message)`; the upstream client adds the
    provider (`named`)."""

    def __init__(self, message: str, provider: str = "") -> None:
        super().__init__(provider, message)


class InvalidFile(Exception):
    """The upload is not acceptable for its purpose; `param` is the multipart field (`file`)."""

    def __init__(self, code: str, message: str, param: str = "file") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param

    def api_error(self) -> APIError:
        """The 400 answered to the client, in the OpenAI error shape."""
        return invalid_request(self.message, param=self.param, code=self.code)


class DatasetError(Exception):
    """What fails the job: its `error` {code, message, param}."""

    def __init__(self, code: str, message: str, param: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param


class BlobCorrupt(Exception):
    """An encrypted blob that does not authenticate (see protocol/blobcrypt.py)."""


class SecretBoxError(Exception):
    """A sealed value that cannot be opened (see protocol/secretbox.py)."""


class PaymentDeclined(Exception):
    """The processor refused the charge (402); nothing was taken. `code`: the processor's
    error code (card_declined, authentication_required, …); `decline_code`: the issuer's
    reason when there is one (generic_decline, insufficient_funds, …)."""

    def __init__(
        self, message: str, code: str = "card_declined", decline_code: str | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.decline_code = decline_code

    @property
    def reason(self) -> str:
        """The most specific of the two."""
        return self.decline_code or self.code


class PaymentRequiresAction(Exception):
    """The payment waits for the customer (3-D Secure): nothing is taken yet; it is credited
    when it succeeds (the processor's webhook, or the reconciler). `client_secret` lets the
    client finish it (Stripe.js `handleNextAction`)."""

    def __init__(self, payment_id: str, client_secret: str | None, status: str) -> None:
        super().__init__(f"payment {payment_id} is {status}")
        self.payment_id = payment_id
        self.client_secret = client_secret
        self.status = status


class PaymentUnavailable(Exception):
    """The processor could not be reached or failed (503). Whether a charge happened is unknown
    to the caller; a processor that reconciles credits any charge that did."""


class UnknownPaymentMethod(Exception):
    """No such payment method for this organization (400)."""


class SecretTooShort(ValueError):
    """A custom webhook secret with fewer than MIN_SECRET_CHARS characters after its prefix
    (protocol/webhooks.py)."""


def invalid_request(message: str, *, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, type="invalid_request_error", code=code, param=param)


def unauthenticated(message: str, *, code: str = "invalid_api_key") -> APIError:
    return APIError(401, message, type="authentication_error", code=code)


def forbidden(message: str, *, code: str = "insufficient_permissions") -> APIError:
    return APIError(403, message, type="permission_error", code=code)


def not_found(message: str, *, code: str = "not_found", param: str | None = None) -> APIError:
    return APIError(404, message, type="not_found_error", code=code, param=param)


def conflict(message: str, *, param: str | None = None, code: str = "conflict") -> APIError:
    return APIError(409, message, type="conflict_error", code=code, param=param)


def server_error(message: str = "The server had an error processing your request.") -> APIError:
    return APIError(500, message, type="server_error", code="internal_error")


def payment_required(message: str, *, code: str, param: str | None = None) -> APIError:
    """402: declined payments, insufficient credits, exhausted budgets."""
    return APIError(402, message, type="billing_error", code=code, param=param)
