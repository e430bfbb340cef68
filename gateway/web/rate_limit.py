"""A secret key's `rate_limit_rpm`, applied by the request layer to every route it calls.

One admission per request, right after authentication and the scope check, before the body is
read: the inference routes, files, fine-tuning, responses reads, webhooks, keys, credits —
whatever the route, one request counts once against the key's limit (actors/ratelimit.py).
Management keys and keys without a limit are never counted; routes without a credential (the
health, metrics and image-URL routes) are not either.

The answer carries OpenAI's rate-limit headers (protocol/ratelimit_headers.py), errors
included; a refusal is 429 `rate_limit_exceeded` with `Retry-After`. When the shared limiter
store (Redis) cannot decide, the request is admitted without a limit and the outage logged
(throttled): an outage must not stop all traffic; budgets, which are money, do not depend on
this path (docs/decisions.md).
"""

from __future__ import annotations

import logging

from actors.errors import RedisUnavailable
from actors.ratelimit import RateLimiter
from actors.throttled_log import ThrottledWarning
from protocol.errors import APIError
from protocol.ratelimit_headers import decision_headers
from services.principal import Principal

Headers = list[tuple[bytes, bytes]]

log = logging.getLogger("gateway.ratelimit")
limiter_unavailable = ThrottledWarning(
    log, "rate limiter unavailable, admitting without a limit: %s"
)


async def admit(limiter: RateLimiter, principal: Principal, headers: Headers) -> None:
    """Count this request against the caller's `rate_limit_rpm`, if it has one; add the
    decision's headers to `headers`. APIError 429 with Retry-After when over the limit."""
    key = principal.key
    if key is None or key.rate_limit_rpm is None:
        return
    try:
        decision = await limiter.admit(key.id, key.rate_limit_rpm)
    except RedisUnavailable as exc:
        limiter_unavailable(exc)
        return
    headers += [(k.encode(), v.encode()) for k, v in decision_headers(decision)]
    if not decision.allowed:
        raise APIError(
            429,
            f"Rate limit of {key.rate_limit_rpm} requests per minute reached for this key.",
            type="rate_limit_error",
            code="rate_limit_exceeded",
        )
