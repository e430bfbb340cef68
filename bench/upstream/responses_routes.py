"""OpenAI's Responses API (`POST /v1/responses`), JSON and SSE, for the gateway's native path.

A pure function of the request and the behavior snapshot, as the other routes. With a
`web_search` (or `web_search_preview`) tool the answer is a `web_search_call` item then a
message whose text cites a page (`url_citation` annotation), as OpenAI answers; with
`behavior.tool_call` and a function tool, a `function_call`; otherwise the usual words.
Requests are recorded like every other, so tests read what the gateway sent.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from bench.upstream.behavior import RecordedRequest, UpstreamBehavior
from bench.upstream.completion import (
    PER_MESSAGE_TOKENS,
    TOOL_ARGUMENTS,
    TOOL_NAME,
    answer_id,
    count_words,
    plan_completion,
)
from bench.upstream.openai_routes import error_reply
from bench.upstream.replies import JsonReply, Reply, SseFrame, StreamReply

SEARCH_TOOLS = frozenset({"web_search", "web_search_preview"})
CITED_URL = "https://example.com/paris-weather"
CITED_TITLE = "Paris weather"


class _Request(msgspec.Struct):
    model: str
    input: str | list[dict[str, Any]]
    tools: list[dict[str, Any]] = []
    stream: bool = False
    max_output_tokens: int | None = None


_decoder = msgspec.json.Decoder(_Request)
_encode = msgspec.json.encode


def _input_words(asked: _Request) -> int:
    if isinstance(asked.input, str):
        return count_words([asked.input]) + PER_MESSAGE_TOKENS
    texts: list[str] = []
    for item in asked.input:
        content = item.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
        elif isinstance(item.get("output"), str):
            texts.append(item["output"])
    return count_words(texts) + PER_MESSAGE_TOKENS * len(asked.input)


def _output(asked: _Request, behavior: UpstreamBehavior) -> tuple[list[dict[str, Any]], int]:
    kinds = {tool.get("type") for tool in asked.tools}
    plan = plan_completion(behavior, asked.max_output_tokens)
    items: list[dict[str, Any]] = []
    if kinds & SEARCH_TOOLS:
        items.append(
            {
                "id": answer_id("ws_"),
                "type": "web_search_call",
                "status": "completed",
                "action": {"type": "search", "query": "weather"},
            }
        )
    if plan.tool_call and "function" in kinds:
        items.append(
            {
                "id": answer_id("fc_"),
                "type": "function_call",
                "status": "completed",
                "call_id": answer_id("call_"),
                "name": TOOL_NAME,
                "arguments": TOOL_ARGUMENTS,
            }
        )
        return items, plan.completion_tokens
    text = plan.text or "tok0 "
    annotations = []
    if kinds & SEARCH_TOOLS:
        annotations.append(
            {
                "type": "url_citation",
                "start_index": 0,
                "end_index": len(text),
                "url": CITED_URL,
                "title": CITED_TITLE,
            }
        )
    part = {"type": "output_text", "text": text, "annotations": annotations, "logprobs": []}
    items.append(
        {
            "id": answer_id("msg_"),
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [part],
        }
    )
    return items, plan.completion_tokens


def responses(request: RecordedRequest, behavior: UpstreamBehavior) -> Reply:
    if not request.headers.get("authorization", "").lower().startswith("bearer "):
        return error_reply(401, "missing or malformed Authorization: Bearer header")
    try:
        asked = _decoder.decode(request.body)
    except msgspec.DecodeError as exc:
        return error_reply(400, str(exc))
    output, output_tokens = _output(asked, behavior)
    input_tokens = _input_words(asked)
    response: dict[str, Any] = {
        "id": answer_id("resp_"),
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "model": asked.model,
        "output": output,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
        },
    }
    if not asked.stream:
        return JsonReply(200, _encode(response))
    return StreamReply(_stream(response))


def _stream(response: dict[str, Any]) -> list[SseFrame]:
    frames: list[SseFrame] = []

    def event(payload: dict[str, Any], counted: bool = False) -> None:
        payload["sequence_number"] = len(frames)
        kind = payload["type"].encode()
        frames.append((b"event: %b\ndata: %b\n\n" % (kind, _encode(payload)), counted))

    opening = {**response, "status": "in_progress", "output": [], "usage": None}
    event({"type": "response.created", "response": opening})
    event({"type": "response.in_progress", "response": opening})
    for index, item in enumerate(response["output"]):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            event(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "status": "in_progress", "content": []},
                }
            )
            empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            event({"type": "response.content_part.added", **where, "part": empty})
            for word in text.split(" "):
                if word:
                    delta = {"type": "response.output_text.delta", **where, "delta": word + " "}
                    event({**delta, "logprobs": []}, counted=True)
            event({"type": "response.output_text.done", **where, "text": text, "logprobs": []})
            event({"type": "response.content_part.done", **where, "part": item["content"][0]})
        else:
            event({"type": "response.output_item.added", "output_index": index, "item": item})
        event({"type": "response.output_item.done", "output_index": index, "item": item})
    event({"type": "response.completed", "response": response})
    return frames
