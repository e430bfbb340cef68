"""`metadata.idempotency_key` on chat completions (docs/decisions.md).

The first request with a key (per organization, for 24 hours) runs; a retry with the same key
and the same body gets the stored response if the first one was a completed JSON request —
no second upstream call, no second charge — and 409 while it still runs or if it was a stream
(a stream is not resumed or replayed: a new request needs a new key). The same key with a
different body is 409 too. A request that failed releases its key, so a retry runs.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass

import trio

from protocol.errors import APIError
from protocol.labels import check_idempotency_key
from protocol.timefmt import now_us
from storage.idempotency import COMPLETED, IN_PROGRESS, STREAMED, IdempotencyRepository

log = logging.getLogger(__name__)

TTL_US = 24 * 3600 * 1_000_000
# One short write; past this the database is not answering, and a stopping server must not
# wait on a request's cleanup.
CLEANUP_S = 5.0


@dataclass
class IdempotentCall:
    repo: IdempotencyRepository
    org_id: str
    key: str
    replay: bytes | None = None  # set when the answer is a stored response


def _conflict(message: str, code: str) -> APIError:
    return APIError(
        409, message, type="conflict_error", code=code, param="metadata.idempotency_key"
    )


async def begin(
    repo: IdempotencyRepository, org_id: str, metadata: dict[str, str] | None, body: bytes
) -> IdempotentCall | None:
    """Claim the request's key; None when it has none. Raises APIError 409 as above."""
    key = (metadata or {}).get("idempotency_key")
    if key is None:
        return None
    check_idempotency_key(key, "metadata.idempotency_key")
    fingerprint = hashlib.sha256(body).hexdigest()
    claim = await repo.claim(org_id, key, fingerprint, now_us=now_us(), ttl_us=TTL_US)
    call = IdempotentCall(repo, org_id, key)
    if claim.won:
        return call
    if not claim.same_request:
        raise _conflict(
            "This idempotency key was used with a different request; use a new key.",
            "idempotency_key_reused",
        )
    if claim.state == IN_PROGRESS:
        raise _conflict(
            "A request with this idempotency key is still in progress.", "idempotency_in_progress"
        )
    if claim.state == COMPLETED and claim.response is not None:
        call.replay = claim.response.encode()
        return call
    raise _conflict(
        "A streamed request with this idempotency key already ran; streams are not replayed "
        "or resumed. Send a new request with a new key.",
        "idempotency_key_reused",
    )


async def end_failed(call: IdempotentCall, *, started: bool) -> None:
    """After a failed or cancelled request: a stream that began is marked STREAMED (never
    rerun), anything else releases the key so a retry runs. Shielded from cancellation and
    bounded by CLEANUP_S; a cleanup that gives up is logged (the key then stays in progress
    until it expires). Never raises but for bugs."""
    with trio.CancelScope(shield=True) as scope:
        scope.deadline = trio.current_time() + CLEANUP_S
        try:
            if started:
                await call.repo.finish(call.org_id, call.key, STREAMED, None)
            else:
                await call.repo.release(call.org_id, call.key)
            return
        except Exception:
            log.exception("could not end idempotency key %r of %s", call.key, call.org_id)
            return
    log.error("ending idempotency key %r of %s took over %s s", call.key, call.org_id, CLEANUP_S)
