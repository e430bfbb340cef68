"""The cache purge API: `POST /v1/cache/purge` deletes the organization's cached answers
(all of them, or those of a model, of a key, older than an age) and writes one `cache.purged`
event with them (docs/cache.md, "Purge").

Management keys only: a purge changes what every key of the organization is answered from (and
what it pays: a hit is priced apart), as the organization's administration does, like its
provider keys. A secret key gets 403 whatever its scopes.
"""

from __future__ import annotations

from gateway.web import Auth, Operation, Request, Response, Routes, json_response
from protocol.cache_api import CachePurge, CachePurged
from protocol.decoding import decode_json
from services.cache.store import ResponseCache

_TAG = "Cache"


def routes(cache: ResponseCache) -> Routes:
    """`cache`: the instance's store, also when the cache is off (entries stored while it was
    on can still be purged)."""
    r = Routes()

    @r.operation(
        Operation(
            "POST",
            "/v1/cache/purge",
            "Delete the organization's cached answers: all of them, or those matching every"
            " criterion given (model, key, age). The body is optional.",
            _TAG,
            request=CachePurge,
            request_required=False,
            response=CachePurged,
            auth=Auth.MANAGEMENT,
            errors=(400, 401, 403, 413),
        )
    )
    async def purge_cache(request: Request) -> Response:
        principal = request.principal
        assert principal is not None
        raw = await request.body()
        body = decode_json(raw, CachePurge) if raw.strip() else CachePurge()
        purged = await cache.purge(
            principal.org_id,
            model=body.model,
            key_id=body.key_id,
            older_than_s=body.older_than_s,
            by_key_id=principal.key_id,
        )
        return json_response(CachePurged(purged=purged))

    return r
