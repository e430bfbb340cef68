"""`batch` files: JSONL against the batch request envelope, one request a line.

    {"custom_id": "req-1", "method": "POST", "url": "/v1/chat/completions", "body": {...}}

`custom_id` is a non-empty string, unique within the file; `method` is `POST`; `url` one of
`BATCH_URLS`; `body` an object, kept as raw bytes (its schema is the endpoint's, checked when
the batch runs; the model is not checked here). Other fields are refused, as OpenAI's batch
files allow none. At most `MAX_REQUESTS` requests a file (OpenAI's documented batch limit);
uniqueness is tracked by a 128-bit BLAKE2b digest of each id, so memory stays bounded (~10 MB
at the limit) whatever the ids' length.
"""

from __future__ import annotations

import hashlib
from typing import Literal

import msgspec

from protocol.files.jsonl import JsonlValidator, line_error, quote

BATCH_URLS = ("/v1/chat/completions", "/v1/embeddings", "/v1/completions", "/v1/responses")
MAX_REQUESTS = 50_000

BatchURL = Literal["/v1/chat/completions", "/v1/embeddings", "/v1/completions", "/v1/responses"]


class BatchRequest(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    custom_id: str
    method: Literal["POST"]
    url: BatchURL
    body: msgspec.Raw


def _digest(custom_id: str) -> bytes:
    return hashlib.blake2b(custom_id.encode(), digest_size=16).digest()


class BatchValidator(JsonlValidator):
    """Validates a `batch` upload line by line as it streams."""

    decoder = msgspec.json.Decoder(BatchRequest)

    def __init__(self) -> None:
        super().__init__()
        self._seen: dict[bytes, int] = {}

    def _accept(self, objs: list[BatchRequest]) -> bool:
        seen = self._seen
        if len(seen) + len(objs) > MAX_REQUESTS:
            return False
        digests = []
        for request in objs:
            if not request.custom_id or bytes(memoryview(request.body)[:1]) != b"{":
                return False
            digest = _digest(request.custom_id)
            if digest in seen:
                return False
            digests.append(digest)
        if len(set(digests)) != len(digests):
            return False
        number = self._line
        for digest in digests:
            number += 1
            seen[digest] = number
        return True

    def _example(self, request: BatchRequest, number: int) -> None:
        if not request.custom_id:
            raise line_error(number, "custom_id is empty")
        if bytes(memoryview(request.body)[:1]) != b"{":
            raise line_error(number, "body must be a JSON object")
        if len(self._seen) >= MAX_REQUESTS:
            raise line_error(number, f"more than {MAX_REQUESTS:,} requests in one batch file")
        first = self._seen.setdefault(_digest(request.custom_id), number)
        if first != number:
            raise line_error(
                number, f"custom_id {quote(request.custom_id)} is already used on line {first}"
            )
