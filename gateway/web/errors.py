"""The one error mapping of every route, inference included: every layer's exceptions (drawn
in protocol/, storage/, services/, actors/ and gateway/errors.py) become the client's answer
here, and only here; handlers let them propagate.

    APIError              its status, body and headers
    StorageUnavailable    503 database_unavailable (server_error), Retry-After: 1; logged
                          (the database refused, failed, or did not answer in
                          `[database] statement_timeout_s`)
    UpstreamError         the provider's failure as ours (`upstream_error`): 504 upstream_timeout,
                          502 upstream_bad_response (UpstreamMalformed), 502
                          upstream_unavailable, and for a status: 429 upstream_rate_limited,
                          400/404/413/422 upstream_<status>, 502 upstream_auth_failed or
                          upstream_error; logged as a warning. Except when the request
                          used the organization's own key for that provider (`ctx.own_key`,
                          set by admission) and the provider answered 401/403: that is
                          recorded (`report_invalid`: the key is marked invalid and no longer
                          used, with one `provider_key.invalid` event; a failure to record is
                          logged, never answered) and answered 400 `invalid_provider_key`
                          naming the provider
    ActorBroken           503 actor_unavailable (server_error), Retry-After: 1; logged (an
                          actor the request needed did not answer: crashed, restarting, or
                          given up on)
    InboxFull             503 actor_overloaded (server_error), Retry-After: 1; an actor's
                          inbox with overflow "reject" was full
    ClientDisconnected    nothing (there is no one to answer); the request is logged 499
                          `client_disconnected` (gateway/errors.py: the server raises
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
from gateway.web.context import OwnKey, RequestContext
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
from protocol.provider_keys import REJECTED_STATUSES, rejected_by_provider
from storage.errors import StorageUnavailable

log = logging.getLogger("gateway.errors")
PASSED_THROUGH = {400, 404, 413, 422}  # an upstream's refusals answered with its own status
# What a route that calls a provider may answer because of it (for /openapi.json): refusals
# passed through, rate limiting, failures, silence. Admission adds 400, 402, 403, 404 and 429.
UPSTREAM_STATUSES = (*sorted(PASSED_THROUGH), 429, 502, 504)


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


def _unwrapped(exc: Exception) -> Exception:
    while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def own_key_refusal(exc: Exception, own_key: OwnKey | None) -> UpstreamStatusError | None:
    """`exc` if it is the provider of the org's own key refusing it (bring-your-own-key)."""
    exc = _unwrapped(exc)
    if (
        own_key is not None
        and isinstance(exc, UpstreamStatusError)
        and exc.status in REJECTED_STATUSES
        and exc.provider == own_key.provider
    ):
        return exc
    return None


def to_api_error(
    exc: Exception, method: str, route: str, own_key: OwnKey | None = None
) -> APIError | None:
    """The answer for `exc` (None: answer nothing), logging what must be logged. `own_key`:
    the org's own provider key the request used, if any."""
    exc = _unwrapped(exc)
    refusal = own_key_refusal(exc, own_key)
    if refusal is not None:
        log.info("%s refused an organization's own key on %s %s", refusal.provider, method, route)
        return rejected_by_provider(refusal.provider, at_use=True)
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
    is noted on `ctx` either way (what the request ended with). A refusal of the org's own
    provider key is recorded first (cancelled: nothing is; the next refusal reports it)."""
    own_key = ctx.own_key if ctx is not None else None
    refusal = own_key_refusal(exc, own_key)
    if refusal is not None:
        assert ctx is not None and own_key is not None
        try:
            await own_key.reporter.report_invalid(
                own_key.org_id, refusal.provider, status=refusal.status, started=ctx.started
            )
        except Exception:
            log.exception(
                "recording that %r rejected an organization's key failed", refusal.provider
            )
    error = to_api_error(exc, method, route, own_key)
    if error is not None and ctx is not None:
        ctx.note_error(error.type, error.code, error.message)
    if error is not None and not started:
        await send_error(send, error, headers)
