"""The responses area: the Responses API on the inference area's deps, the stored
conversations and their janitor."""

from __future__ import annotations

from dataclasses import dataclass

from actors.responses_janitor import ResponsesJanitor
from actors.webhooks.clock import WallClock
from gateway.area import Area
from gateway.core import Core
from gateway.inference.area import InferenceArea
from gateway.responses.deps import ResponsesDeps
from gateway.responses.routes import COMPLETION_ROUTES, routes
from protocol.secretbox import FILE_KEYS
from services.responses import ResponseStore


@dataclass(frozen=True, kw_only=True)
class ResponsesArea(Area):
    store: ResponseStore  # stored responses (the conversation of `previous_response_id`)


async def open_responses(core: Core, inference: InferenceArea) -> ResponsesArea:
    # Wall time that moves with Trio's clock: a MockClock drives retention in tests.
    store = ResponseStore(core.storage.responses, core.box(FILE_KEYS), WallClock().now_us)
    await core.supervisor.start(ResponsesJanitor(core.storage.responses, store.clock))
    return ResponsesArea(
        routes=routes(ResponsesDeps(inference.deps, store)),
        completion_routes=COMPLETION_ROUTES,
        store=store,
    )
