"""The rerank request's decoding and limits, without I/O: documents as strings or `{text}`
objects, the document-count cap, the query and document token limits, top_n clamping."""

from __future__ import annotations

import msgspec
import pytest

from protocol.errors import APIError
from protocol.rerank.request import (
    DEFAULT_MAX_DOCUMENT_TOKENS,
    MAX_DOCUMENTS,
    check_request,
    decode_request,
    query_token_limit,
)


def request(**fields: object) -> bytes:
    body = {"model": "m", "query": "q", "documents": ["a", {"text": "b"}], **fields}
    return msgspec.json.encode(body)


def test_documents_become_plain_texts_and_top_n_is_clamped() -> None:
    ranking = check_request(decode_request(request(top_n=9)), None)
    assert ranking.texts == ["a", "b"]
    assert ranking.top_n == 2 and ranking.return_documents is True
    assert check_request(decode_request(request()), None).top_n == 2
    assert check_request(decode_request(request(top_n=1)), None).top_n == 1


def test_the_query_may_take_half_the_document_maximum() -> None:
    assert query_token_limit(DEFAULT_MAX_DOCUMENT_TOKENS) == 2048
    at_limit = "x" * (256 * 4)
    check_request(decode_request(request(query=at_limit)), 512)
    with pytest.raises(APIError) as caught:
        check_request(decode_request(request(query=at_limit + "x")), 512)
    assert (caught.value.status, caught.value.code) == (400, "query_too_long")


def test_a_document_over_the_maximum_is_413_naming_it() -> None:
    check_request(decode_request(request(documents=["x" * 2048])), 512)
    with pytest.raises(APIError) as caught:
        check_request(decode_request(request(documents=["ok", "x" * 2049])), 512)
    assert caught.value.status == 413 and caught.value.param == "documents[1]"


def test_tokens_are_counted_in_utf8_bytes() -> None:
    # 683 three-byte characters: 2049 bytes, 513 tokens by the estimate.
    with pytest.raises(APIError):
        check_request(decode_request(request(documents=["€" * 683])), 512)
    check_request(decode_request(request(documents=["€" * 682])), 512)


@pytest.mark.parametrize(
    ("fields", "status"),
    [
        ({"documents": []}, 400),
        ({"documents": ["x"] * (MAX_DOCUMENTS + 1)}, 400),
        ({"query": " "}, 400),
        ({"top_n": 0}, 400),
        ({"max_chunks_per_doc": 101}, 400),
    ],
)
def test_refused(fields: dict[str, object], status: int) -> None:
    with pytest.raises(APIError) as caught:
        check_request(decode_request(request(**fields)), None)
    assert caught.value.status == status


def test_deep_nesting_is_a_400_not_a_recursion_error() -> None:
    body = b'{"model": "m", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(APIError) as caught:
        decode_request(body)
    assert caught.value.status == 400
