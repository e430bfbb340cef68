"""The audio area: speech, transcriptions, translations, on the inference area's deps."""

from __future__ import annotations

from gateway.area import Area
from gateway.audio.routes import COMPLETION_ROUTES, routes
from gateway.core import Core
from gateway.inference.area import InferenceArea


def open_audio(core: Core, inference: InferenceArea) -> Area:
    return Area(
        routes=routes(inference.deps, core.config.server.max_audio_body_bytes),
        completion_routes=COMPLETION_ROUTES,
    )
