"""GET /v1/images/content/{token}: a stored image, to anyone holding its URL while it lives
(the token is the capability; no credential is asked for or looked at). Unknown, malformed and
expired tokens all answer the same 404, so a URL tells nothing once it has expired."""

from __future__ import annotations

import logging

from gateway.web.request import Request
from gateway.web.responses import Response
from protocol.errors import APIError, BlobCorrupt, not_found
from protocol.timefmt import now_us
from services.images import ImageStore, token_hash, well_formed

log = logging.getLogger("gateway.images")


def _gone() -> APIError:
    return not_found("This image URL is unknown or has expired (image URLs live 1 hour).")


class ImageContent:
    def __init__(self, store: ImageStore) -> None:
        self._store = store

    async def __call__(self, request: Request) -> Response:
        token = request.path_params["token"]
        if not well_formed(token):
            raise _gone()
        now = now_us()
        record = await self._store.repo.by_token(token_hash(token), now=now)
        if record is None:
            raise _gone()
        try:
            png = await self._store.load(record)
        except BlobCorrupt as exc:
            log.error("image %s: content refused: %s", record.id, exc)
            raise APIError(
                500,
                "The stored image failed its integrity check and is not served.",
                type="server_error",
                code="image_corrupt",
            ) from None
        max_age = max(0, (record.expires_at - now) // 1_000_000)
        return Response(
            png,
            content_type=record.media_type.encode("ascii"),
            headers=[
                (b"x-content-type-options", b"nosniff"),
                (b"cache-control", b"private, max-age=%d" % max_age),
            ],
        )
