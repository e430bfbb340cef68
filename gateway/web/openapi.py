"""The OpenAPI 3.2 document, built from the route declarations and their msgspec types.

What every operation may answer besides its own errors is decided here, once, from what the
layers under the handlers do (so a route cannot forget one):

    400  malformed HTTP, a bad header or query value (the server and the request layer)
    405  another method on the path (the router, with `Allow`)
    408  a request head or body that stalls (the built-in server)
    431  a request head too large (the built-in server)
    500  a bug (the one error mapping; logged, never detailed)
    413  a body over the route's limit, on operations that take one (the request layer)
    401, 503  a credential, checked (cached) against the database, on operations that need one
    403  a credential without the route's scope, or of the wrong kind
    404  an unknown object, on operations whose path names one
    429  a secret key's `rate_limit_rpm`, on operations a secret key may call (the layer)

Server-sent events use OpenAPI 3.2's `itemSchema` (one schema per event of the sequential
media type): each event's `data` is `[DONE]` (the last one) or JSON of the operation's stream
type, or of the error shape when the stream breaks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from gateway.web.routing import Auth, Operation
from protocol.errors import ErrorBody

VERSION = "3.2.0"
_REF = "#/components/schemas/{name}"
_STATUS_TEXT = {
    400: "Invalid request: malformed HTTP, query, body or form",
    401: "Missing or invalid credential",
    402: "Payment declined, insufficient credits, or a budget used up",
    403: "The credential lacks the needed scope, or is of the wrong kind",
    404: "Not found",
    405: "The path does not take this method (`Allow` lists those it takes)",
    408: "The request head or body did not arrive in time",
    409: "Conflict",
    413: "Request body too large (the connection is closed)",
    415: "The body must be multipart/form-data",
    422: "The upstream provider refused the request (its status passed through)",
    429: "Rate limit exceeded (ours, or the provider's)",
    431: "Request head too large",
    500: "Internal error (logged; never detailed)",
    502: "The upstream provider failed or could not be reached",
    503: "Unavailable (the database or an internal queue); retry shortly",
    504: "The upstream provider did not answer in time",
}
# Statuses any operation may answer (see the module docstring).
ALWAYS = (400, 405, 408, 431, 500)
_BINARY = {"type": "string", "format": "binary"}
_HEADERS = {
    405: {"Allow": {"required": True, "schema": {"type": "string"}}},
    429: {"Retry-After": {"schema": {"type": "string"}}},
    503: {"Retry-After": {"schema": {"type": "string"}}},
}


def statuses(op: Operation) -> list[int]:
    """Every error status `op` may answer: its own and those of the layers around it."""
    found = {*ALWAYS, *op.errors}
    if op.request is not None:
        found.add(413)
    if op.auth is not Auth.NONE:
        found |= {401, 503}
        if op.auth is not Auth.ANY or op.scope is not None:
            found.add(403)
    if op.auth is Auth.ANY:
        found.add(429)  # a secret key's rate_limit_rpm, counted by the layer on every route
    if op.path_params:
        found.add(404)
    return sorted(found)


def document(operations: Sequence[Operation]) -> dict[str, Any]:
    types: list[Any] = [ErrorBody]
    for op in operations:
        types += [t for t in (op.request, op.response, op.stream) if t is not None]
        types += [t for _, t in op.alternatives if t is not None]
    unique = list(dict.fromkeys(types))
    schemas, components = msgspec.json.schema_components(
        unique, ref_template=_REF, schema_hook=_schema_hook
    )
    ref = dict(zip(unique, schemas, strict=True))
    paths: dict[str, dict[str, Any]] = {}
    for op in operations:
        paths.setdefault(op.path, {})[op.method.lower()] = _operation(op, ref)
    return {
        "openapi": VERSION,
        "info": {"title": "Model gateway", "version": "1"},
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _schema_hook(t: Any) -> dict[str, Any]:
    if t is object:  # any JSON value (actor statistics)
        return {"description": "any JSON value"}
    raise NotImplementedError


def _operation(op: Operation, ref: dict[Any, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"summary": op.summary, "tags": [op.tag]}
    if op.auth is not Auth.NONE:
        out["security"] = [{"bearer": []}]
    if op.auth is Auth.OPERATOR:
        out["description"] = (
            "Needs the operator key (GATEWAY_OPERATOR_KEY); organizations' keys get 403, and "
            "it is 403 for everyone when no operator key is configured."
        )
    elif op.auth is Auth.MANAGEMENT:
        out["description"] = "Needs a management key."
    elif op.auth is Auth.ANY and op.scope:
        out["description"] = f"Needs a management key or a secret key with `{op.scope}`."
    params = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in op.path_params
    ]
    params += [
        {
            "name": name,
            "in": "query",
            "required": False,
            "schema": {"type": kind},
            "description": text,
        }
        for name, kind, text in op.query
    ]
    if params:
        out["parameters"] = params
    if op.request is not None:
        out["requestBody"] = {
            "required": op.request_required,
            "content": {op.request_content_type: {"schema": ref[op.request]}},
        }
    ok = _success(op, ref)
    responses: dict[str, Any] = {str(op.success_status): ok}
    for status in op.other_success:
        responses[str(status)] = ok
    error = {"application/json": {"schema": ref[ErrorBody]}}
    for status in statuses(op):
        responses[str(status)] = {
            "description": _STATUS_TEXT.get(status, "Error"),
            "content": error,
        }
        if status in _HEADERS:
            responses[str(status)]["headers"] = _HEADERS[status]
    out["responses"] = responses
    return out


def _success(op: Operation, ref: dict[Any, Any]) -> dict[str, Any]:
    ok: dict[str, Any] = {"description": "OK"}
    content: dict[str, Any] = {}
    if op.response is not None:
        content[op.response_content_type] = {"schema": ref[op.response]}
    for media_type, kind in op.alternatives:
        content[media_type] = {"schema": _BINARY if kind is None else ref[kind]}
    if op.stream is not None:
        content["text/event-stream"] = {"itemSchema": _event(ref[op.stream], ref[ErrorBody])}
        ok["description"] = (
            "OK: JSON, or server-sent events (with `stream: true`, or `Accept: "
            "text/event-stream` where the route says so) whose `data` is JSON of the schema "
            "given for text/event-stream, the last one `data: [DONE]`"
        )
    if content:
        ok["content"] = content
    return ok


def _event(data: dict[str, Any], error: dict[str, Any]) -> dict[str, Any]:
    """One server-sent event: `event` names it where the stream does (the Responses API);
    `data` is `[DONE]` (the last event) or JSON: an item of the stream, or an error frame
    when the stream breaks. `: keepalive` comments are not events."""
    json_data = {
        "type": "string",
        "contentMediaType": "application/json",
        "contentSchema": {"anyOf": [data, error]},
    }
    return {
        "type": "object",
        "required": ["data"],
        "properties": {
            "event": {"type": "string"},
            "data": {"anyOf": [{"const": "[DONE]"}, json_data]},
        },
    }
