"""The images area: generations, edits, variations, and the images kept for their `url` (in
the files area's blob store; the files janitor expires them)."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.area import Area
from gateway.core import Core
from gateway.files.area import FilesArea
from gateway.images.produce import ImagesDeps
from gateway.images.routes import COMPLETION_ROUTES, routes
from gateway.inference.area import InferenceArea
from protocol.secretbox import FILE_KEYS
from services.images import ImageStore


@dataclass(frozen=True, kw_only=True)
class ImagesArea(Area):
    store: ImageStore


def open_images(core: Core, inference: InferenceArea, files: FilesArea) -> ImagesArea:
    config = core.config
    store = ImageStore(
        core.storage.images,
        files.store.blobs,
        core.box(FILE_KEYS),
        lifetime_us=config.images.url_lifetime_s * 1_000_000,
    )
    deps = ImagesDeps(inference.deps, store, config.public_base_url, config.images.default_model)
    return ImagesArea(routes=routes(deps), completion_routes=COMPLETION_ROUTES, store=store)
