"""GET /v1/responses/{id}, GET /v1/responses/{id}/input_items, DELETE /v1/responses/{id}.

Per organization: another organization's id, an unknown one, one created with `store: false`,
deleted or expired are all 404 `response_not_found`. `input_items` lists the context the
response was generated from — the chain's items (each earlier response's input and output),
then its own input, not `instructions` — as OpenAI's list envelope, paged by item id.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from gateway.web import Request, Response, json_response
from protocol.errors import APIError, invalid_request, not_found
from services.responses import ResponseStore, StoredResponse

DEFAULT_LIMIT, MAX_LIMIT = 20, 100


class InputItemList(msgspec.Struct):
    data: list[dict[str, Any]]
    first_id: str | None
    last_id: str | None
    has_more: bool
    object: Literal["list"] = "list"


class ResponseDeleted(msgspec.Struct):
    id: str
    object: Literal["response"] = "response"
    deleted: bool = True


def response_not_found(response_id: str) -> APIError:
    return not_found(
        f"Response with id {response_id[:128]!r} not found.",
        code="response_not_found",
        param="response_id",
    )


class ReadResponses:
    def __init__(self, store: ResponseStore) -> None:
        self._store = store

    async def _owned(self, request: Request) -> StoredResponse:
        assert request.principal is not None
        response_id = request.path_params["response_id"]
        stored = await self._store.load(request.principal.org_id, response_id)
        if stored is None:
            raise response_not_found(response_id)
        return stored

    async def retrieve(self, request: Request) -> Response:
        stored = await self._owned(request)
        return Response(stored.body)

    async def input_items(self, request: Request) -> Response:
        limit = request.query_int("limit", DEFAULT_LIMIT, minimum=1, maximum=MAX_LIMIT)
        order = request.query.get("order") or "desc"
        if order not in ("asc", "desc"):
            raise invalid_request("`order` is asc or desc.", param="order")
        after = request.query.get("after") or None
        before = request.query.get("before") or None
        stored = await self._owned(request)
        return json_response(page(stored.input, limit, order, after, before))

    async def delete(self, request: Request) -> Response:
        assert request.principal is not None
        response_id = request.path_params["response_id"]
        if not await self._store.delete(request.principal.org_id, response_id):
            raise response_not_found(response_id)
        return json_response(ResponseDeleted(id=response_id))


def page(
    items: list[dict[str, Any]], limit: int, order: str, after: str | None, before: str | None
) -> InputItemList:
    """One page in `order`: the items after `after` and/or before `before` (item ids; an id
    not in the list is a 400), at most `limit` of them, the nearest to `after` first (or,
    with only `before`, the nearest to it)."""
    ordered = items if order == "asc" else items[::-1]
    ids = [str(item.get("id")) for item in ordered]
    start, end = 0, len(ordered)
    if after is not None:
        start = _index(ids, after, "after") + 1
    if before is not None:
        end = _index(ids, before, "before")
    window = ordered[start:end]
    data = window[-limit:] if after is None and before is not None else window[:limit]
    return InputItemList(
        data=data,
        first_id=str(data[0]["id"]) if data else None,
        last_id=str(data[-1]["id"]) if data else None,
        has_more=len(window) > limit,
    )


def _index(ids: list[str], item_id: str, param: str) -> int:
    try:
        return ids.index(item_id)
    except ValueError:
        raise invalid_request(
            f"No input item with id {item_id[:128]!r} in this response.", param=param
        ) from None
