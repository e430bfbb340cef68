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

from protocol.files.jsonl import JsonlValidator, decode_failure, line_error, quote, utf8

BATCH_URLS = ("/v1/chat/completions", "/v1/embeddings", "/v1/completions", "/v1/responses")
MAX_REQUESTS = 50_000

BatchURL = Literal["/v1/chat/completions", "/v1/embeddings", "/v1/completions", "/v1/responses"]


class BatchRequest(msgspec.Struct, forbid_unknown_fields=True):
    custom_id: str
    method: Literal["POST"]
    url: BatchURL
    body: msgspec.Raw


_decoder = msgspec.json.Decoder(BatchRequest)


class BatchValidator(JsonlValidator):
    """Validates a `batch` upload line by line as it streams."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: dict[bytes, int] = {}

    def _check(self, line: memoryview, number: int) -> bool:
        try:
            request = _decoder.decode(line)
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:
            failure = decode_failure(exc, line, number)
            if failure is None:
                return False
            raise failure from None
        utf8(line, number)
        if not request.custom_id:
            raise line_error(number, "custom_id is empty")
        if bytes(memoryview(request.body)[:1]) != b"{":
            raise line_error(number, "body must be a JSON object")
        if len(self._seen) >= MAX_REQUESTS:
            raise line_error(number, f"more than {MAX_REQUESTS:,} requests in one batch file")
        digest = hashlib.blake2b(request.custom_id.encode(), digest_size=16).digest()
        first = self._seen.setdefault(digest, number)
        if first != number:
            raise line_error(
                number, f"custom_id {quote(request.custom_id)} is already used on line {first}"
            )
        return True
