"""The inference routes (the hot path): chat completions, embeddings, models (and deleting a
fine-tuned one). Declared once
here, dispatched by the same request layer as every other route (gateway/web/), which
authenticates and checks the scope before the handler runs."""

from __future__ import annotations

from gateway.inference.chat import ChatCompletions
from gateway.inference.deps import InferenceDeps
from gateway.inference.embeddings import Embeddings
from gateway.inference.fine_tuned import DeleteModel, ModelDeleted
from gateway.inference.models import ModelList, ModelObject, Models
from gateway.web import Operation, Routes
from gateway.web.errors import UPSTREAM_STATUSES
from protocol.openai_schema import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    EmbeddingList,
    EmbeddingsRequest,
)
from protocol.scopes import CHAT_COMPLETIONS, EMBEDDINGS, FINE_TUNING, MODELS_READ

_TAG = "Inference"
CHAT_COMPLETIONS_PATH, EMBEDDINGS_PATH = "/v1/chat/completions", "/v1/embeddings"
# The routes whose answers are `completion.*` events (gateway/inference/completion_events.py).
COMPLETION_ROUTES = frozenset({CHAT_COMPLETIONS_PATH, EMBEDDINGS_PATH})
_UPSTREAM_ERRORS = (*UPSTREAM_STATUSES, 402, 403)


def routes(deps: InferenceDeps) -> Routes:
    r = Routes()
    models = Models(deps)
    r.add(
        Operation(
            "POST",
            CHAT_COMPLETIONS_PATH,
            "Chat completion, JSON or SSE (`stream: true`)",
            _TAG,
            request=ChatCompletionRequest,
            response=ChatCompletion,
            stream=ChatCompletionChunk,
            scope=CHAT_COMPLETIONS,
            errors=(*_UPSTREAM_ERRORS, 409),  # 409: `metadata.idempotency_key`
        ),
        ChatCompletions(deps),
    )
    r.add(
        Operation(
            "POST",
            EMBEDDINGS_PATH,
            "Embeddings",
            _TAG,
            request=EmbeddingsRequest,
            response=EmbeddingList,
            scope=EMBEDDINGS,
            errors=_UPSTREAM_ERRORS,
        ),
        Embeddings(deps),
    )
    r.add(
        Operation(
            "GET",
            "/v1/models",
            "Models this key may use",
            _TAG,
            response=ModelList,
            scope=MODELS_READ,
            errors=(401, 403),
        ),
        models.list,
    )
    r.add(
        Operation(
            "GET",
            "/v1/models/{model_id}",
            "One model, by alias or canonical id (`<provider>/<upstream model>`)",
            _TAG,
            response=ModelObject,
            scope=MODELS_READ,
            errors=(401, 403, 404),
            slash_params=("model_id",),
        ),
        models.retrieve,
    )
    r.add(
        Operation(
            "DELETE",
            "/v1/models/{model_id}",
            "Delete one of the organization's fine-tuned models (here and at its provider)",
            _TAG,
            response=ModelDeleted,
            scope=FINE_TUNING,
            errors=(401, 403, 404, *UPSTREAM_STATUSES),  # the provider deletes it first
            slash_params=("model_id",),
        ),
        DeleteModel(deps),
    )
    return r
