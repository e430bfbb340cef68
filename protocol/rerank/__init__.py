"""Rerank (`POST /v1/rerank`): the client's request and its limits (request.py), the checks and
shape of the answer (ranking.py), and one adapter per upstream wire format: Cohere's
(cohere.py) and the OpenAI-compatible rerank servers' (openai_compat.py). No I/O anywhere."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from protocol.rerank import cohere, openai_compat
from protocol.rerank.ranking import UpstreamAnswer
from protocol.rerank.request import Ranking


@dataclass(frozen=True, slots=True)
class Adapter:
    path: str  # under the provider's base_url
    request_body: Callable[[Ranking, str], bytes]
    parse_answer: Callable[[bytes, int], UpstreamAnswer]


COHERE = Adapter(cohere.PATH, cohere.request_body, cohere.parse_answer)
OPENAI_COMPATIBLE = Adapter(
    openai_compat.PATH, openai_compat.request_body, openai_compat.parse_answer
)


def adapter_for(kind: str) -> Adapter:
    """Cohere's format for kind `cohere`; every other kind that may rerank (openai, vllm,
    ollama: admission refuses anthropic) speaks the OpenAI-compatible one."""
    return COHERE if kind == "cohere" else OPENAI_COMPATIBLE
