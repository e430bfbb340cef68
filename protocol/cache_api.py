"""The cache purge API's wire types (POST /v1/cache/purge; docs/cache.md, "Purge").

The same structs validate the request and describe it in /openapi.json. Every criterion is
optional and they combine (an entry goes when it matches all given); none purges everything of
the caller's organization.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from protocol.labels import Label

MAX_MODEL_CHARS = 256
MAX_KEY_ID_CHARS = 128
# Ten years: longer than any TTL worth having; a bound keeps the arithmetic in range.
MAX_OLDER_THAN_S = 10 * 366 * 86_400.0

ModelId = Annotated[Label, Meta(min_length=1, max_length=MAX_MODEL_CHARS)]
KeyId = Annotated[Label, Meta(min_length=1, max_length=MAX_KEY_ID_CHARS)]
OlderThan = Annotated[
    float,
    Meta(
        gt=0,
        le=MAX_OLDER_THAN_S,
        description="only entries stored more than this many seconds ago",
    ),
]


class CachePurge(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    model: ModelId | None = None  # only answers of this model id
    key_id: KeyId | None = None  # only answers stored by this key's requests
    older_than_s: OlderThan | None = None


class CachePurged(msgspec.Struct, kw_only=True):
    purged: int  # unexpired entries deleted
