"""The OpenAI error shape, and the one exception class every layer above raises for the client.

`APIError` carries everything the HTTP layer needs (status, type, code, param, extra headers);
rendering it is pure. Lower layers (storage, upstream clients) have their own exceptions, mapped
to `APIError` at the gateway boundary — never leaked to clients with a driver message.

The upstream family is here, below every layer that raises or catches it: parsers in protocol/
raise `UpstreamMalformed`, the upstream client (actors/upstream.py) raises the others and names
the provider, and the gateway's boundary (gateway/web/errors.py `to_api_error`) maps them all:

    Exception
     ├── APIError                   answered to the client as it is
     └── UpstreamError              an upstream call failed; `provider` names it ("" until the
          │                         upstream client knows it: a parser does not)
          ├── UpstreamStatusError   the provider answered a non-2xx status (`status`, `body`,
          │                         `retry_after`)
          ├── UpstreamUnavailable   could not connect, or the connection broke or was reset
          ├── UpstreamTimeout       no answer (or no next chunk) within the read timeout
          └── UpstreamMalformed     the provider answered something unusable: broken HTTP/1.1
                                    framing or over a size limit, not JSON, the wrong shape,
                                    or an error reported mid-stream; the message says how

Types used on the wire:

    400 invalid_request_error   401 authentication_error   403 permission_error
    404 not_found_error         405 invalid_request_error  409 conflict_error
    413 invalid_request_error   429 rate_limit_error       5xx server_error / upstream_error
"""

from __future__ import annotations

from collections.abc import Mapping

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
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param
        self.headers: dict[str, str] = dict(headers or {})

    def body(self) -> bytes:
        detail = ErrorDetail(message=self.message, type=self.type, param=self.param, code=self.code)
        return msgspec.json.encode(ErrorBody(error=detail))

    def __repr__(self) -> str:
        return f"APIError({self.status}, {self.code or self.type!s}, param={self.param!r})"


class UpstreamError(Exception):
    def __init__(self, provider: str, message: str) -> None:
        super().__init__(f"{provider}: {message}" if provider else message)
        self.provider = provider


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
        self.detail = message

    def named(self, provider: str) -> UpstreamMalformed:
        return self if self.provider else UpstreamMalformed(self.detail, provider)


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
