"""What the client is told when the upstream fails, where the answer depends on the request
(the mapping itself is the boundary's: gateway/web/errors.py `upstream_error`). A provider
refusing the org's own key (bring-your-own-key) is the org's problem, not the gateway's: 400
`invalid_provider_key`, and a `provider_key.invalid` event."""

from __future__ import annotations

import logging

from gateway.inference.call import Call
from gateway.inference.deps import InferenceDeps
from gateway.web.errors import PASSED_THROUGH, upstream_error
from protocol.errors import (
    APIError,
    UpstreamError,
    UpstreamStatusError,
)
from protocol.provider_keys import REJECTED_STATUSES, rejected_by_provider

log = logging.getLogger("gateway.provider_keys")

# What a route that calls a provider may answer because of it (for /openapi.json): refusals
# passed through, rate limiting, failures, silence. Admission adds 400, 402, 403, 404 and 429.
UPSTREAM_STATUSES = (*sorted(PASSED_THROUGH), 429, 502, 504)


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
        return upstream_error(exc)
    assert call.principal is not None
    try:
        await deps.provider_keys.report_invalid(
            call.principal.org_id, exc.provider, status=exc.status
        )
    except Exception:
        log.exception("recording that %r rejected an organization's key failed", exc.provider)
    return rejected_by_provider(exc.provider, at_use=True)
