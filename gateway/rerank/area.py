"""The rerank area: POST /v1/rerank, on the inference area's deps."""

from __future__ import annotations

from gateway.area import Area
from gateway.core import Core
from gateway.inference.area import InferenceArea
from gateway.rerank.routes import RERANK_PATH, routes


def open_rerank(core: Core, inference: InferenceArea) -> Area:
    return Area(routes=routes(inference.deps), completion_routes=frozenset({RERANK_PATH}))
