"""Permission scopes a secret key may hold.

The API names five; the rest cover the other API areas (see docs/decisions.md). A key created
without `scopes` is stored with NULL and holds every scope, including ones added later.
"""

from __future__ import annotations

KEYS_MANAGE = "keys:manage"
BILLING_READ = "billing:read"
BILLING_WRITE = "billing:write"
CHAT_COMPLETIONS = "chat:completions"
EMBEDDINGS = "embeddings"
MODELS_READ = "models:read"
FILES = "files"
AUDIO = "audio"
IMAGES = "images"
RERANK = "rerank"
RESPONSES = "responses"
FINE_TUNING = "fine_tuning"
WEBHOOKS_MANAGE = "webhooks:manage"

ALL_SCOPES: tuple[str, ...] = (
    KEYS_MANAGE,
    BILLING_READ,
    BILLING_WRITE,
    CHAT_COMPLETIONS,
    EMBEDDINGS,
    MODELS_READ,
    FILES,
    AUDIO,
    IMAGES,
    RERANK,
    RESPONSES,
    FINE_TUNING,
    WEBHOOKS_MANAGE,
)
KNOWN_SCOPES = frozenset(ALL_SCOPES)
