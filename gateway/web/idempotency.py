"""The `Idempotency-Key` header's answers once the key is held by an earlier request (top-ups,
uploads; chat's `metadata.idempotency_key` has its own, gateway/inference/idempotency.py):
409 `idempotency_key_reused` for another request, 409 `idempotency_in_progress` while the
first runs, else the first request's stored response to replay."""

from __future__ import annotations

from protocol import errors
from storage.idempotency import IN_PROGRESS, Claim

PARAM = "Idempotency-Key"


def stored_response(claim: Claim, what: str) -> str:
    """The response to replay for a claim this request did not win; `what` names the kind of
    request ("top-up", "upload") in the 409s."""
    if not claim.same_request:
        raise errors.conflict(
            f"This Idempotency-Key was used with a different {what}; use a new key.",
            param=PARAM,
            code="idempotency_key_reused",
        )
    if claim.state == IN_PROGRESS or claim.response is None:
        raise errors.conflict(
            f"A {what} with this Idempotency-Key is still in progress.",
            param=PARAM,
            code="idempotency_in_progress",
        )
    return claim.response
