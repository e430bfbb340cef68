"""The Responses routes (docs/responses.md), scope `responses`: create (JSON or SSE), retrieve,
input items, delete. Declared here for the request layer and the OpenAPI document."""

from __future__ import annotations

import msgspec

from gateway.responses.create import CreateResponse
from gateway.responses.deps import ResponsesDeps
from gateway.responses.read import InputItemList, ReadResponses, ResponseDeleted
from gateway.web import Operation, Routes
from gateway.web.errors import UPSTREAM_STATUSES
from protocol.responses.objects import ResponseObject
from protocol.responses.request import RequestBody
from protocol.scopes import RESPONSES

_TAG = "Responses"
RESPONSES_PATH = "/v1/responses"
# The routes whose answers are `completion.*` events (gateway/inference/completion_events.py).
COMPLETION_ROUTES = frozenset({RESPONSES_PATH})
_UPSTREAM_ERRORS = (*UPSTREAM_STATUSES, 402, 403)


class StreamEvent(msgspec.Struct):
    """One event of a streamed response, for /openapi.json (docs/responses.md lists them all):
    its `type` (also the SSE `event:` name) and its place in the stream; the other fields are
    the type's own."""

    type: str
    sequence_number: int


_READ_ERRORS = (401, 403, 404)


def routes(deps: ResponsesDeps) -> Routes:
    r = Routes()
    read = ReadResponses(deps.store)
    r.add(
        Operation(
            "POST",
            RESPONSES_PATH,
            "Create a response, JSON or SSE (`stream: true`); stored for 30 days unless"
            " `store: false`",
            _TAG,
            request=RequestBody,
            response=ResponseObject,
            stream=StreamEvent,
            scope=RESPONSES,
            errors=_UPSTREAM_ERRORS,
        ),
        CreateResponse(deps),
    )
    r.add(
        Operation(
            "GET",
            RESPONSES_PATH + "/{response_id}",
            "A stored response",
            _TAG,
            response=ResponseObject,
            scope=RESPONSES,
            errors=_READ_ERRORS,
        ),
        read.retrieve,
    )
    r.add(
        Operation(
            "GET",
            RESPONSES_PATH + "/{response_id}/input_items",
            "The input items of a stored response's chain, paged",
            _TAG,
            response=InputItemList,
            scope=RESPONSES,
            errors=(400, *_READ_ERRORS),
            query=(
                ("limit", "integer", "page size, 1 to 100, default 20"),
                ("order", "string", "asc or desc (default)"),
                ("after", "string", "an item id: the items after it"),
                ("before", "string", "an item id: the items before it"),
            ),
        ),
        read.input_items,
    )
    r.add(
        Operation(
            "DELETE",
            RESPONSES_PATH + "/{response_id}",
            "Delete a stored response",
            _TAG,
            response=ResponseDeleted,
            scope=RESPONSES,
            errors=_READ_ERRORS,
        ),
        read.delete,
    )
    return r
