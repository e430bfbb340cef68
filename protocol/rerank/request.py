"""The client's `POST /v1/rerank` body: its types, and the checks made before any upstream call
(empty or too many documents, a query or document over the model's token limits). No I/O.

Token counts are estimated without a tokenizer (protocol/pricing.estimate_tokens: UTF-8 bytes
/ 4, rounded up): the gateway serves many providers, each with its own tokenizer, and must
answer 413 before calling any of them. See docs/rerank.md for the limits chosen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import msgspec

from protocol.decoding import decode_json
from protocol.errors import APIError, invalid_request
from protocol.pricing import estimate_tokens

MAX_DOCUMENTS = 1000  # Cohere's own cap per request
DEFAULT_MAX_DOCUMENT_TOKENS = 4096  # a model whose [[models]] entry sets no max_document_tokens
MAX_CHUNKS_PER_DOC = 100


class TextDocument(msgspec.Struct):
    """A document given as an object; only `text` is read (other fields are ignored)."""

    text: str


class RerankRequest(msgspec.Struct):
    """`documents` may mix strings and `{text}` objects. `top_n` larger than the number of
    documents is clamped to it (as Cohere does); `max_chunks_per_doc` is forwarded to Cohere
    only (OpenAI-compatible rerank servers have no such field)."""

    model: str
    query: str
    documents: list[str | TextDocument]
    top_n: Annotated[int, msgspec.Meta(ge=1)] | None = None
    return_documents: bool = True
    max_chunks_per_doc: Annotated[int, msgspec.Meta(ge=1, le=MAX_CHUNKS_PER_DOC)] | None = None


@dataclass(frozen=True, slots=True)
class Ranking:
    """A checked request: the documents as plain text, `top_n` clamped to their number."""

    model: str
    query: str
    texts: list[str]
    top_n: int
    return_documents: bool
    max_chunks_per_doc: int | None


def decode_request(body: bytes) -> RerankRequest:
    """The body as a RerankRequest; 400 for malformed JSON, wrong types or nesting too deep."""
    return decode_json(body, RerankRequest)


def check_request(request: RerankRequest, max_document_tokens: int | None) -> Ranking:
    """The request as a Ranking once its sizes are acceptable for a model whose per-document
    maximum is `max_document_tokens` (None: DEFAULT_MAX_DOCUMENT_TOKENS). 400 for an empty
    query, no documents, more than MAX_DOCUMENTS or a query over query_token_limit; 413
    `document_too_long` for a document over the maximum."""
    limit = max_document_tokens or DEFAULT_MAX_DOCUMENT_TOKENS
    if not request.query.strip():
        raise invalid_request("`query` must be a non-empty string.", param="query")
    if not request.documents:
        raise invalid_request("`documents` must list at least one document.", param="documents")
    if len(request.documents) > MAX_DOCUMENTS:
        raise invalid_request(
            f"`documents` lists {len(request.documents)} documents; at most {MAX_DOCUMENTS} "
            "are accepted in one request.",
            param="documents",
            code="too_many_documents",
        )
    query_limit = query_token_limit(limit)
    query_tokens = estimate_tokens(len(request.query.encode()))
    if query_tokens > query_limit:
        raise invalid_request(
            f"`query` is about {query_tokens} tokens; this model accepts at most {query_limit}.",
            param="query",
            code="query_too_long",
        )
    texts = [d if isinstance(d, str) else d.text for d in request.documents]
    for i, text in enumerate(texts):
        tokens = estimate_tokens(len(text.encode()))
        if tokens > limit:
            raise document_too_long(i, tokens, limit)
    top_n = len(texts) if request.top_n is None else min(request.top_n, len(texts))
    return Ranking(
        request.model,
        request.query,
        texts,
        top_n,
        request.return_documents,
        request.max_chunks_per_doc,
    )


def query_token_limit(max_document_tokens: int) -> int:
    """Half the document maximum: a reranker scores the query and each document together, so
    a query may take at most half of what one pair holds."""
    return max_document_tokens // 2


def document_too_long(index: int, tokens: int, limit: int) -> APIError:
    return APIError(
        413,
        f"`documents[{index}]` is about {tokens} tokens; this model accepts at most {limit} "
        "tokens per document.",
        type="invalid_request_error",
        code="document_too_long",
        param=f"documents[{index}]",
    )
