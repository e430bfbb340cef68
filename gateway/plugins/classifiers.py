"""A guardrail's classifier, called through the instance's upstream client for its provider:
an OpenAI-compatible `/v1/moderations`, or a guard model served as chat (Llama Guard style
answers, protocol/guardrails/moderation.py). A failure raises (an UpstreamError, or
UpstreamMalformed for an answer of the wrong shape): the guardrail's `on_error` decides."""

from __future__ import annotations

from typing import TYPE_CHECKING

from actors.upstream import Upstreams
from gateway.config.policies import GuardrailConfig
from protocol.guardrails.moderation import (
    guard_request,
    moderation_request,
    parse_guard_answer,
    parse_moderation,
)
from services.plugins.interface import Stage

if TYPE_CHECKING:  # the recognizers load only with a guardrail (build.py)
    from services.guardrails.plugin import Classify


def classifier(config: GuardrailConfig, upstreams: Upstreams) -> Classify | None:
    """The guardrail's classifier, or None when it has none (pii; injection by heuristic)."""
    if config.provider is None or config.upstream is None:
        return None
    client = upstreams.get(config.provider)
    upstream = config.upstream

    if config.format == "guard_chat":

        async def guard(text: str, stage: Stage, prompt: str) -> dict[str, float]:
            body = guard_request(upstream, text, stage=stage, prompt=prompt)
            content, _ = await client.post_json("chat/completions", body)
            return parse_guard_answer(content)

        return guard

    async def moderate(text: str, stage: Stage, prompt: str) -> dict[str, float]:
        content, _ = await client.post_json("moderations", moderation_request(upstream, [text]))
        return parse_moderation(content)

    return moderate
