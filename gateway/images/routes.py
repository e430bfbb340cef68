"""The images routes: generations (JSON), edits and variations (multipart), and the content
of a generated image's URL (no credential: the URL is the capability)."""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import UNSET, UnsetType

from gateway.images.content import ImageContent
from gateway.images.generations import Generations
from gateway.images.produce import ImagesDeps
from gateway.images.uploads import ImageUploads
from gateway.images.urls import CONTENT_PATH
from gateway.web import Operation, Routes
from gateway.web.errors import UPSTREAM_STATUSES
from gateway.web.routing import Auth
from protocol.images.generation import ImageGenerationRequest, ImageResult
from protocol.scopes import IMAGES

_TAG = "Images"
GENERATIONS_PATH = "/v1/images/generations"
EDITS_PATH = "/v1/images/edits"
VARIATIONS_PATH = "/v1/images/variations"
# Their failures are `completion.error` events (gateway/inference/completion_events.py).
COMPLETION_ROUTES = frozenset({GENERATIONS_PATH, EDITS_PATH, VARIATIONS_PATH})
_ERRORS = (*UPSTREAM_STATUSES, 402, 403)
_PNG = msgspec.Meta(
    extra_json_schema={"format": "binary"}, description="a square PNG, at most 4 MB"
)


# The content's body, for /openapi.json: the PNG's raw bytes.
ImagePng = Annotated[
    str, msgspec.Meta(extra_json_schema={"format": "binary"}, description="the PNG's bytes")
]


class ImageEditForm(msgspec.Struct, kw_only=True):
    """The multipart form of `POST /v1/images/edits`, for /openapi.json only."""

    image: Annotated[str, _PNG]
    mask: Annotated[str, _PNG] | None = None
    prompt: str
    model: str | UnsetType = UNSET  # optional: [images] default_model when omitted
    size: str = "1024x1024"
    n: int = 1
    response_format: str = "url"


class ImageVariationForm(msgspec.Struct, kw_only=True):
    """The multipart form of `POST /v1/images/variations`, for /openapi.json only."""

    image: Annotated[str, _PNG]
    model: str | UnsetType = UNSET  # optional: [images] default_model when omitted
    size: str = "1024x1024"
    n: int = 1
    response_format: str = "url"


def routes(deps: ImagesDeps) -> Routes:
    r = Routes()
    uploads = ImageUploads(deps)
    r.add(
        Operation(
            "POST",
            GENERATIONS_PATH,
            "Generate images from a prompt (billed per image)",
            _TAG,
            request=ImageGenerationRequest,
            response=ImageResult,
            scope=IMAGES,
            errors=_ERRORS,  # no 415: the route reads JSON whatever the Content-Type
        ),
        Generations(deps),
    )
    r.add(
        Operation(
            "POST",
            EDITS_PATH,
            "Edit (inpaint) an image: multipart `image`, `mask`, `prompt`, `model`, `size`",
            _TAG,
            request=ImageEditForm,
            request_content_type="multipart/form-data",
            response=ImageResult,
            scope=IMAGES,
            body_limit="vision",
            errors=(*_ERRORS, 415),
        ),
        uploads.edits,
    )
    r.add(
        Operation(
            "POST",
            VARIATIONS_PATH,
            "Variations of an image: multipart `image`, `model`, `n`, `size`",
            _TAG,
            request=ImageVariationForm,
            request_content_type="multipart/form-data",
            response=ImageResult,
            scope=IMAGES,
            body_limit="vision",
            errors=(*_ERRORS, 415),
        ),
        uploads.variations,
    )
    r.add(
        Operation(
            "GET",
            CONTENT_PATH,
            "A generated image by its URL (no credential; valid 1 hour by default)",
            _TAG,
            response=ImagePng,
            response_content_type="image/png",
            auth=Auth.NONE,
            errors=(404, 503),  # 503: the image's record is read from the database
        ),
        ImageContent(deps.store),
    )
    return r
