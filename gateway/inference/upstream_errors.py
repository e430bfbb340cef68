"""What the client is told when the upstream fails: our status and error, never the
provider's raw body (only a short message from it where it helps the caller). A provider
refusing the org's own key (bring-your-own-key) is the org's problem, not the gateway's: 400
`invalid_provider_key`, and a `provider_key.invalid` event."""

from __future__ import annotations

import logging

from gateway.inference.call import Call
from gateway.inference.deps import InferenceDeps
from protocol.anthropic import upstream_error_message
from protocol.errors import (
    APIError,
    UpstreamError,
    UpstreamMalformed,
    UpstreamStatusError,
    UpstreamTimeout,
)
from protocol.provider_keys import REJECTED_STATUSES, rejected_by_provider

log = logging.getLogger("gateway.provider_keys")

_PASSED_THROUGH = {400, 404, 413, 422}
# What a route that calls a provider may answer because of it (for /openapi.json): refusals
# passed through, rate limiting, failures, silence. Admission adds 400, 402, 403, 404 and 429.
UPSTREAM_STATUSES = (*sorted(_PASSED_THROUGH), 429, 502, 504)


def to_api_error(exc: UpstreamError) -> APIError:
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
    if status in _PASSED_THROUGH:
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


async def upstream_failure(call: Call, deps: InferenceDeps, exc: UpstreamError) -> APIError:
    """The client's error for `exc`. When the provider refused the org's own key, that is
    recorded (`report_invalid`: one event per key per minute) and the answer is 400
    `invalid_provider_key` naming the provider; a failure to record it is logged, never the
    client's answer. Cancellation: nothing is recorded (the next refusal reports it)."""
    if not (
        call.own_key is not None
        and isinstance(exc, UpstreamStatusError)
        and exc.status in REJECTED_STATUSES
    ):
        return to_api_error(exc)
    assert call.principal is not None
    try:
        await deps.provider_keys.report_invalid(
            call.principal.org_id, exc.provider, status=exc.status
        )
    except Exception:
        log.exception("recording that %r rejected an organization's key failed", exc.provider)
    return rejected_by_provider(exc.provider, at_use=True)
