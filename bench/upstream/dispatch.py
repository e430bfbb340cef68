"""Which route answers a request, and the failures that pre-empt every route.

`/v1/messages` speaks Anthropic, paths under `/cohere/` Cohere (rerank), every other path
OpenAI (`GET /v1/models` both: Anthropic when the request carries `x-api-key`); rejected keys
(401), `fail_status` and the 404/405 answers are shaped for the provider the path belongs to.
Files, fine-tuning jobs and `/v1/models/{id}` go to fine_tuning_routes with the server's
`FineTuning` state; a chat completion naming an `ft:` model is checked against it first.
Pure: no I/O, no waiting (hang and latency are the server's).
"""

from __future__ import annotations

from collections.abc import Callable

from bench.upstream import (
    anthropic_routes,
    audio_routes,
    fine_tuning_routes,
    image_routes,
    moderation_routes,
    openai_routes,
    rerank_routes,
    responses_routes,
)
from bench.upstream.behavior import RecordedRequest, UpstreamBehavior
from bench.upstream.fine_tuning import FineTuning
from bench.upstream.replies import JsonReply, Reply

Route = Callable[[RecordedRequest, UpstreamBehavior], Reply]

ANTHROPIC_PATHS = frozenset({"/v1/messages"})

ROUTES: dict[str, dict[str, Route]] = {
    "/v1/chat/completions": {"POST": openai_routes.chat_completions},
    "/v1/embeddings": {"POST": openai_routes.embeddings},
    "/v1/models": {"GET": openai_routes.models},
    "/v1/messages": {"POST": anthropic_routes.messages},
    "/v1/responses": {"POST": responses_routes.responses},
    rerank_routes.OPENAI_PATH: {"POST": rerank_routes.openai_rerank},
    rerank_routes.COHERE_PATH: {"POST": rerank_routes.cohere_rerank},
    rerank_routes.COHERE_MODELS_PATH: {"GET": rerank_routes.cohere_models},
    "/v1/audio/speech": {"POST": audio_routes.speech},
    "/v1/audio/transcriptions": {"POST": audio_routes.transcriptions},
    "/v1/audio/translations": {"POST": audio_routes.translations},
    "/v1/images/generations": {"POST": image_routes.generations},
    "/v1/images/edits": {"POST": image_routes.edits},
    "/v1/images/variations": {"POST": image_routes.variations},
    moderation_routes.PATH: {"POST": moderation_routes.moderations},
}


def route(
    request: RecordedRequest, behavior: UpstreamBehavior, fine_tuning: FineTuning | None = None
) -> Reply:
    """The reply to `request`. `fine_tuning` is the server's state for the fine-tuning routes
    (files, jobs, fine-tuned models); without one they see an empty provider."""
    try:
        return _route(request, behavior, fine_tuning)
    except (UnicodeDecodeError, RecursionError):
        # msgspec's two failures outside DecodeError, which the routes catch: a string that
        # is not UTF-8, and nesting deeper than its stack. Refused like any malformed body.
        return _error(_provider(request), 400, "The request body is not valid UTF-8 JSON.")


def _route(
    request: RecordedRequest, behavior: UpstreamBehavior, fine_tuning: FineTuning | None
) -> Reply:
    path = request.path.partition("?")[0]
    provider = _provider(request)
    anthropic = provider == "anthropic"
    if _rejected(_presented_key(request, anthropic), behavior):
        message = {
            "cohere": "invalid api token",
            "anthropic": "invalid x-api-key",
            "openai": "Incorrect API key provided.",
        }[provider]
        return _error(provider, 401, message)
    if behavior.fail_status is not None:
        if provider == "cohere":
            return rerank_routes.cohere_fail_reply(behavior.fail_status, behavior.retry_after)
        if anthropic:
            return anthropic_routes.fail_reply(behavior.fail_status, behavior.retry_after)
        return openai_routes.fail_reply(behavior.fail_status, behavior.retry_after)
    if anthropic and path == "/v1/models" and request.method == "GET":
        return anthropic_routes.models(request, behavior)
    if fine_tuning is None:
        fine_tuning = FineTuning()
    if path == "/v1/chat/completions":
        refused = fine_tuning_routes.refuse_unknown_model(request, fine_tuning)
        if refused is not None:
            return refused
    elif (handled := fine_tuning_routes.answer(request, behavior, fine_tuning)) is not None:
        return handled
    methods = ROUTES.get(path)
    if methods is None:
        return openai_routes.error_reply(404, f"Invalid URL ({request.method} {path})")
    handler = methods.get(request.method)
    if handler is None:
        allow = [("allow", ", ".join(methods))]
        message = f"method {request.method} not allowed on {path}"
        if anthropic:
            return anthropic_routes.error_reply(405, message, headers=allow)
        return openai_routes.error_reply(405, message, headers=allow)
    return handler(request, behavior)


def _provider(request: RecordedRequest) -> str:
    """Whose API the request speaks: "anthropic", "cohere" or "openai"."""
    path = request.path.partition("?")[0]
    # `GET /v1/models` is both providers' route: Anthropic clients send `x-api-key`.
    if path in ANTHROPIC_PATHS or (path == "/v1/models" and "x-api-key" in request.headers):
        return "anthropic"
    if path.startswith(rerank_routes.COHERE_PREFIX):
        return "cohere"
    return "openai"


def _error(provider: str, status: int, message: str) -> JsonReply:
    if provider == "cohere":
        return rerank_routes.cohere_error(status, message)
    if provider == "anthropic":
        return anthropic_routes.error_reply(status, message)
    return openai_routes.error_reply(status, message)


def _presented_key(request: RecordedRequest, anthropic: bool) -> str:
    if anthropic:
        return request.headers.get("x-api-key", "")
    scheme, _, credential = request.headers.get("authorization", "").partition(" ")
    return credential.strip() if scheme.lower() == "bearer" else ""


def _rejected(key: str, behavior: UpstreamBehavior) -> bool:
    if not key:
        return False  # a missing key is each route's own 401
    prefix = behavior.reject_key_prefix
    return (prefix is not None and key.startswith(prefix)) or key in behavior.rejected_keys


def stream_error_frame(request: RecordedRequest, status: int) -> bytes | None:
    """The provider's in-stream error event for a stream of `request`, typed by `status`; None
    for streams that have none here (Responses, speech)."""
    path = request.path.partition("?")[0]
    if path == "/v1/chat/completions":
        return openai_routes.stream_error_frame(status)
    if path in ANTHROPIC_PATHS:
        return anthropic_routes.stream_error_frame(status)
    return None


def protocol_error(status: int, message: str) -> JsonReply:
    """The answer to a request we could not parse (its path, hence provider, is unknown)."""
    return openai_routes.error_reply(status, message)
