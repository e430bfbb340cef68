"""The one error mapping of every route, inference included, and the layer's own exceptions.

    APIError              its status, body and headers
    StorageUnavailable    503 database_unavailable (server_error), Retry-After: 1; logged
                          (the database refused, failed, or did not answer in
                          `[database] statement_timeout_s`)
    UpstreamError         the provider's failure as ours (`upstream_error`): 504 upstream_timeout,
                          502 upstream_bad_response (UpstreamMalformed), 502
                          upstream_unavailable, and for a status: 429 upstream_rate_limited,
                          400/404/413/422 upstream_<status>, 502 upstream_auth_failed or
                          upstream_error; logged as a warning
    ActorBroken           503 actor_unavailable (server_error), Retry-After: 1; logged (an
                          actor the request needed did not answer: crashed, restarting, or
                          given up on)
    InboxFull             503 actor_overloaded (server_error), Retry-After: 1; an actor's
                          inbox with overflow "reject" was full
    ClientDisconnected    nothing (there is no one to answer); the request is logged 499
                          `client_disconnected` (gateway/server/asgi.py: the server raises
                          it when a write fails, the request layer when the body stops)
    any other Exception   500 internal_error; the traceback is logged, never sent

Once a response has started nothing more is sent: the stream just ends. An `ExceptionGroup`
of one exception (a handler's nursery) is mapped as that exception. Cancellation is never
caught here (it is not an `Exception`).
"""

from __future__ import annotations

import logging

from actors.errors import ActorBroken, InboxFull
from gateway.errors import ClientDisconnected
from gateway.server.asgi import Send
from gateway.web.context import RequestContext
from gateway.web.responses import Headers, encode_headers, send_json
from protocol.anthropic import upstream_error_message
from protocol.errors import (
    APIError,
    UpstreamError,
    UpstreamMalformed,
    UpstreamStatusError,
    UpstreamTimeout,
    server_error,
)
from storage.errors import StorageUnavailable

log = logging.getLogger("gateway.errors")
PASSED_THROUGH = {400, 404, 413, 422}  # an upstream's refusals answered with its own status


def request_too_large() -> APIError:
    return APIError(
        413,
        "The request body is too large.",
        type="invalid_request_error",
        code="request_too_large",
        headers={"Connection": "close"},  # the rest of the body is never read
    )


def database_unavailable() -> APIError:
    return APIError(
        503,
        "The service is temporarily unavailable (its database is not answering); retry shortly.",
        type="server_error",
        code="database_unavailable",
        headers={"Retry-After": "1"},
    )


def actor_overloaded(exc: InboxFull) -> APIError:
    return APIError(
        503,
        f"The service is overloaded ({exc}); retry shortly.",
        type="server_error",
        code="actor_overloaded",
        headers={"Retry-After": str(exc.retry_after_s)},
    )


def upstream_error(exc: UpstreamError) -> APIError:
    """Our status and error for an upstream failure, never the provider's raw body (only a
    short message from it where it helps the caller)."""
    provider = exc.provider
    if isinstance(exc, UpstreamTimeout):
        return APIError(
            504,
            f"The upstream provider {provider!r} did not answer in time.",
            type="upstream_error",
            code="upstream_timeout",
        )
    if isinstance(exc, UpstreamMalformed):
        return APIError(
            502,
            f"The upstream provider {provider!r} sent a malformed or oversized response.",
            type="upstream_error",
            code="upstream_bad_response",
        )
    if not isinstance(exc, UpstreamStatusError):
        return APIError(
            502,
            f"The upstream provider {provider!r} could not be reached.",
            type="upstream_error",
            code="upstream_unavailable",
        )
    status = exc.status
    detail = upstream_error_message(status, exc.body)
    if status == 429:
        headers = {"Retry-After": exc.retry_after} if exc.retry_after else {}
        return APIError(
            429,
            f"The upstream provider {provider!r} is rate limiting requests: {detail}",
            type="rate_limit_error",
            code="upstream_rate_limited",
            headers=headers,
        )
    if status in PASSED_THROUGH:
        return APIError(
            status,
            f"The upstream provider {provider!r} refused the request: {detail}",
            type="invalid_request_error",
            code=f"upstream_{status}",
        )
    if status in (401, 403):
        return APIError(
            502,
            f"The upstream provider {provider!r} rejected the gateway's credentials.",
            type="upstream_error",
            code="upstream_auth_failed",
        )
    if status == 408:
        return APIError(
            504,
            f"The upstream provider {provider!r} timed out.",
            type="upstream_error",
            code="upstream_timeout",
        )
    return APIError(
        502,
        f"The upstream provider {provider!r} failed ({status}).",
        type="upstream_error",
        code="upstream_error",
    )


def to_api_error(exc: Exception, method: str, route: str) -> APIError | None:
    """The answer for `exc` (None: answer nothing), logging what must be logged."""
    while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, ClientDisconnected):
        return None
    if isinstance(exc, StorageUnavailable):
        log.error("storage unavailable on %s %s: %s", method, route, exc)
        return database_unavailable()
    if isinstance(exc, UpstreamError):
        log.warning("upstream failed on %s %s: %s", method, route, exc)
        return upstream_error(exc)
    if isinstance(exc, InboxFull):
        log.warning("actor overloaded on %s %s: %s", method, route, exc)
        return actor_overloaded(exc)
    if isinstance(exc, ActorBroken):
        log.error("actor unavailable on %s %s: %s", method, route, exc)
        return APIError(
            503,
            "The service is temporarily unavailable (a part of it is restarting); retry shortly.",
            type="server_error",
            code="actor_unavailable",
            headers={"Retry-After": "1"},
        )
    log.error("unhandled error on %s %s", method, route, exc_info=exc)
    return server_error()


async def send_error(send: Send, error: APIError, headers: Headers | None = None) -> None:
    extra = [*(headers or ()), *encode_headers(error.headers.items())]
    await send_json(send, error.status, error.body(), extra)


async def answer(
    send: Send,
    exc: Exception,
    *,
    method: str,
    route: str,
    started: bool,
    headers: Headers,
    ctx: RequestContext | None = None,
) -> None:
    """Answer `exc` on `send`, unless the response has started (then only log it). The error
    is noted on `ctx` either way (what the request ended with)."""
    error = to_api_error(exc, method, route)
    if error is not None and ctx is not None:
        ctx.note_error(error.type, error.code, error.message)
    if error is not None and not started:
        await send_error(send, error, headers)
