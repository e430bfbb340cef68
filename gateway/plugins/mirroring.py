"""Mirroring as a plugin: once the client has a whole answer to a request of a model with
`[[models.mirrors]]`, its sampled share is offered to the shadow models in the background
(gateway/mirror/, docs/mirroring.md). A cache hit is not mirrored (nothing went upstream)."""

from __future__ import annotations

from typing import Literal, cast

from gateway.mirror.area import MirrorArea
from services.plugins.interface import Exchange, Hook, OnError, Outcome, OutputCheck, Stored

MIRRORED_ROUTES = frozenset({"chat", "embeddings", "responses"})


class MirrorPlugin:
    name = "mirror"
    on_error: OnError = "fail_open"
    timeout_s: float | None = None  # its one hook queues a job: no I/O
    hooks: frozenset[Hook] = frozenset({"finished"})

    def __init__(self, area: MirrorArea) -> None:
        self._area = area

    def applies(self, route: str, model: str) -> bool:
        return route in MIRRORED_ROUTES and bool(self._area.mirrors_of(model))

    async def before(self, exchange: Exchange) -> Stored | None:
        return None

    def output_check(self, exchange: Exchange) -> OutputCheck | None:
        return None

    async def after(self, exchange: Exchange, answer: bytes) -> bytes:
        return answer

    def finished(self, exchange: Exchange, outcome: Outcome) -> None:
        self._area.offer_mirrors(
            org_id=exchange.org_id,
            key_id=exchange.key_id,
            request_id=exchange.request_id,
            route=cast(Literal["chat", "embeddings", "responses"], exchange.route),
            model=exchange.model,
            body=exchange.body,
            latency_ms=outcome.latency_s * 1000,
            prompt_tokens=outcome.prompt_tokens,
            completion_tokens=outcome.completion_tokens,
            cost_usd=outcome.cost_usd,
            answer=outcome.body if outcome.kind == "json" else None,
        )
