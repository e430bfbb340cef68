"""What the client is told when the upstream fails: our status and error, never the
provider's raw body (only a short message from it where it helps the caller)."""

from __future__ import annotations

from actors.upstream import UpstreamError, UpstreamStatusError, UpstreamTimeout
from protocol.anthropic import upstream_error_message
from protocol.errors import APIError

_PASSED_THROUGH = {400, 404, 413, 422}


def to_api_error(exc: UpstreamError) -> APIError:
    provider = exc.provider
    if isinstance(exc, UpstreamTimeout):
        return APIError(
            504,
            f"The upstream provider {provider!r} did not answer in time.",
            type="upstream_error",
            code="upstream_timeout",
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
