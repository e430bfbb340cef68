"""The context of a new response: the stored chain of `previous_response_id` (one row read:
each stored response holds its whole context), then this request's input. No upstream I/O.

Lookup failure (unknown, another organization's, `store: false`, deleted or expired) is 400
`previous_response_not_found` with param `previous_response_id`, as OpenAI answers it
(docs/decisions.md, "Responses").
"""

from __future__ import annotations

from typing import Any

from protocol.errors import APIError, invalid_request
from protocol.ids import new_id
from protocol.responses.request import ResponsesRequest
from protocol.responses.to_chat import check_call_ids
from services.responses import ResponseStore

MAX_CONTEXT_ITEMS = 10_000
_ID_PREFIXES = {"message": "msg", "function_call": "fc", "function_call_output": "fco"}


def previous_not_found(response_id: str) -> APIError:
    return invalid_request(
        f"Previous response with id {response_id[:128]!r} not found: it was never stored"
        " (`store: false`), was deleted, expired (30 days), or belongs to another organization.",
        param="previous_response_id",
        code="previous_response_not_found",
    )


async def build_context(
    store: ResponseStore, org_id: str, request: ResponsesRequest
) -> list[dict[str, Any]]:
    """The items to send upstream (and to store as this response's input): the chain, then
    this input, whose client-given ids are kept unless they repeat an earlier one."""
    prior: list[dict[str, Any]] = []
    if request.previous_response_id is not None:
        stored = await store.load(org_id, request.previous_response_id)
        if stored is None:
            raise previous_not_found(request.previous_response_id)
        prior = stored.context()
    check_call_ids(prior, request.input)
    if len(prior) + len(request.input) > MAX_CONTEXT_ITEMS:
        raise invalid_request(
            f"The conversation would hold more than {MAX_CONTEXT_ITEMS} items; start a new one.",
            param="previous_response_id",
            code="context_too_long",
        )
    seen = {str(item.get("id")) for item in prior}
    items = []
    for item in request.input:
        if item["id"] in seen:
            item = {**item, "id": new_id(_ID_PREFIXES[item["type"]])}
        seen.add(item["id"])
        items.append(item)
    return [*prior, *items]
