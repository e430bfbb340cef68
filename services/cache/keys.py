"""What a cached answer is filed under, and whether a request may have one. Pure; no I/O.

Requests arrive here as their decoded JSON body (`msgspec.json.decode(body)`); routes are
"chat" (/v1/chat/completions), "responses" (/v1/responses) and "embeddings" (/v1/embeddings).

- `exact_key`: sha256 over the organization, the route, the model the client named, whether the
  answer streams, and the canonical JSON (services/cache/canonical.py) of every body field that
  can change the answer. `IGNORED` lists the fields left out; any other field, known or not, is
  in the key: an unknown field costs a miss at worst, leaving out one that matters would serve
  a wrong answer.
- `cacheable`: whether the request is deterministic enough for a stored answer to stand for a
  fresh one (the policy is spelled out on the function).
- `semantic_scope` and `query_text`: a semantic lookup compares only the last user turn's text
  (`query_text`, by embedding) among entries whose everything else is equal (`semantic_scope`):
  the same system prompt, tools, settings and earlier turns.

docs/cache.md explains each decision; docs/decisions.md records why.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from services.cache.canonical import canonical

ROUTES = ("chat", "responses", "embeddings")
KEY_VERSION = "v1"  # in every digest: a change of what goes into keys orphans the old entries

# Fields that never change the answer. `model` is hashed as given separately (the name the
# client asked for), `stream` likewise (exact keys only); `cache` is the gateway's own opt-in.
_NEVER_CHANGE_THE_ANSWER = frozenset(
    {
        "model",
        "stream",
        "stream_options",  # framing: the usage chunk is the replay's to add, as for a live one
        "user",  # an end-user id for the provider's abuse monitoring
        "safety_identifier",  # the same, under its newer name
        "metadata",  # labels stored with the answer, never shown to the model
        "store",  # whether the provider (or gateway) keeps a copy
        "service_tier",  # latency and price, not content
        "prompt_cache_key",  # the provider's prompt-cache routing hint
        "cache",  # the gateway's own opt-in (`explicit`)
    }
)
IGNORED: Mapping[str, frozenset[str]] = {
    "chat": _NEVER_CHANGE_THE_ANSWER,
    "responses": _NEVER_CHANGE_THE_ANSWER,
    "embeddings": frozenset({"model", "user", "cache"}),
}
# Responses' tools the provider runs itself; their answers follow the outside world.
_FUNCTION_TOOLS = frozenset({"function", "custom"})


def exact_key(
    org_id: str, route: str, model: str, body: Mapping[str, Any], *, stream: bool
) -> bytes:
    """The 32-byte key of a byte-for-byte identical request (up to key order, whitespace and
    number spelling). A body that is not an object is keyed whole (it never reaches a provider
    anyway, but keying it cannot fail)."""
    return _digest(["exact", KEY_VERSION, org_id, route, model, stream, _kept(route, body)])


def semantic_scope(org_id: str, route: str, model: str, body: Mapping[str, Any]) -> bytes:
    """The 32-byte digest of everything two requests must share for one's answer to serve the
    other's paraphrase: the key's fields, with the last user turn's text left out (`query_text`
    is compared by meaning instead). The stream flag is not in it: a semantic entry is matched
    by the question, and replayed in the shape this request asks for.

    Only meaningful when `query_text` is not None; otherwise it digests the whole body."""
    kept = _kept(route, body)
    where = _query_position(route, kept) if isinstance(kept, Mapping) else None
    if where is not None:
        kept = _without_query(kept, where)
    return _digest(["scope", KEY_VERSION, org_id, route, model, where and list(where), kept])


def query_text(route: str, body: Mapping[str, Any]) -> str | None:
    """The last user turn's text: chat's last `user` message, Responses' `input` string or its
    last user item; a content of text parts is their texts joined by newlines. None when there
    is no such turn, when it is empty or only whitespace, or when it holds anything but text (an
    image, audio, a file: two turns with the same words and different images are different
    questions, and the embedding would see only the words). Embeddings have none: an embedding
    is the answer for its exact input only."""
    if not isinstance(body, Mapping):
        return None
    where = _query_position(route, body)
    if where is None:
        return None
    return _text_of(_turn(body, where), route)


def cacheable(route: str, body: Mapping[str, Any], *, explicit: bool) -> bool:
    """Whether a stored answer may stand for a fresh one.

    Never, even when asked: a body that is not an object or a route not in ROUTES; a Responses
    request that runs in the `background` (its answer is a job to poll) or continues a
    `conversation` (the conversation's items change between two identical requests).

    Otherwise always when the client asked (`explicit`: `cache: true` or the Cache-Control header;
    it accepts a stored sample), and always for embeddings (a function of the input). Chat and
    Responses otherwise only when greedy: `temperature` given and 0 (absent means the provider's
    default, 1), `n` absent or 1 (one sample only), no log probabilities (asked for when measuring
    the model, run to run), and no tool the provider runs itself (web search, code interpreter...:
    the answer follows the world, not the request). `seed` alone is not enough: providers promise
    only best-effort reproducibility with it."""
    if not isinstance(body, Mapping) or route not in ROUTES:
        return False
    if route == "responses" and (
        body.get("background") is True or body.get("conversation") is not None
    ):
        return False
    if explicit or route == "embeddings":
        return True
    temperature = body.get("temperature")
    if type(temperature) not in (int, float) or temperature != 0:
        return False
    n = body.get("n")
    if n is not None and (type(n) is not int or n != 1):
        return False
    if body.get("logprobs") is True or body.get("top_logprobs") not in (None, 0):
        return False
    include = body.get("include")
    if isinstance(include, list) and any(isinstance(i, str) and "logprobs" in i for i in include):
        return False
    if body.get("web_search_options") is not None:
        return False
    tools = body.get("tools")
    if isinstance(tools, list):
        for tool in tools:
            if not isinstance(tool, Mapping) or tool.get("type") not in _FUNCTION_TOOLS:
                return False
    return True


# --- helpers ---------------------------------------------------------------------------------


def _digest(parts: list[Any]) -> bytes:
    # A JSON array frames the parts: no two different part lists share an encoding.
    return hashlib.sha256(canonical(parts)).digest()


def _kept(route: str, body: Any) -> Any:
    if not isinstance(body, Mapping):
        return body
    ignored = IGNORED.get(route, frozenset({"model"}))
    return {name: value for name, value in body.items() if name not in ignored}


Position = tuple[str, int | None]  # the field ("messages", "input") and the list index


def _query_position(route: str, body: Mapping[str, Any]) -> Position | None:
    """Where the last user turn is, when it is one `query_text` can read."""
    if route == "chat":
        field = "messages"
    elif route == "responses":
        field = "input"
        if isinstance(body.get(field), str):
            return (field, None) if _text_of(body[field], route) is not None else None
    else:
        return None
    turns = body.get(field)
    if not isinstance(turns, list):
        return None
    for index in range(len(turns) - 1, -1, -1):
        turn = turns[index]
        if isinstance(turn, Mapping) and turn.get("role") == "user":
            if route == "responses" and turn.get("type", "message") != "message":
                continue
            return (field, index) if _text_of(turn, route) is not None else None
    return None


def _turn(body: Mapping[str, Any], where: Position) -> Any:
    field, index = where
    return body[field] if index is None else body[field][index]


_TEXT_PARTS = {"chat": frozenset({"text"}), "responses": frozenset({"input_text", "text"})}


def _text_of(turn: Any, route: str) -> str | None:
    content = turn.get("content") if isinstance(turn, Mapping) else turn
    if isinstance(content, str):
        text = content
    elif isinstance(content, list) and content:
        texts = []
        for part in content:
            if not isinstance(part, Mapping) or part.get("type") not in _TEXT_PARTS[route]:
                return None
            piece = part.get("text")
            if not isinstance(piece, str):
                return None
            texts.append(piece)
        text = "\n".join(texts)
    else:
        return None
    return text if text.strip() else None


def _without_query(body: Mapping[str, Any], where: Position) -> dict[str, Any]:
    """The body with the last user turn's text taken out (its other fields stay)."""
    field, index = where
    copy = dict(body)
    if index is None:
        del copy[field]
        return copy
    turns = list(copy[field])
    turns[index] = {name: value for name, value in turns[index].items() if name != "content"}
    copy[field] = turns
    return copy
