"""A chat call's answer back in the OpenAI chat shape, for each provider kind: the JSON answer
and the stream's frames. Shared by chat completions and responses (which translate to chat)."""

from __future__ import annotations

from actors.relay import FrameSource, OpenAIFrames
from gateway.inference.model_registry import ResolvedModel
from protocol import anthropic
from protocol.errors import UpstreamMalformed
from protocol.openai_chat import ChunkRelay, rewrite_model_in_object
from protocol.usage import Usage


def chat_answer(content: bytes, model: ResolvedModel) -> tuple[bytes, Usage]:
    """The `chat.completion` body (reporting `model.id`) and its usage for the upstream's
    answer; UpstreamMalformed when it is valid HTTP but not a chat answer (a JSON array,
    not JSON, nested thousands deep), so callers map it as any other upstream failure."""
    try:
        if model.provider.kind == "anthropic":
            return anthropic.from_messages_response(content, model=model.id)
        out, usage = rewrite_model_in_object(content, model.id)
    except UpstreamMalformed as exc:
        raise exc.named(model.provider.name) from None
    return out, usage or Usage()


def chat_frames(model: ResolvedModel, *, include_usage: bool) -> FrameSource:
    """The frame source turning the upstream's stream into `chat.completion.chunk` frames."""
    if model.provider.kind == "anthropic":
        return anthropic.StreamTranslator(model=model.id, include_usage=include_usage)
    return OpenAIFrames(ChunkRelay(model=model.id, include_usage=include_usage))
