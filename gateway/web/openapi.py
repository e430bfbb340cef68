"""The OpenAPI 3.1 document, built from the route declarations and their msgspec types."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from gateway.web.routing import Auth, Operation
from protocol.errors import ErrorBody

_REF = "#/components/schemas/{name}"
_STATUS_TEXT = {
    400: "Invalid request",
    401: "Missing or invalid credential",
    402: "Payment declined, insufficient credits, or a budget used up",
    403: "The credential lacks the needed scope",
    404: "Not found",
    409: "Conflict",
    413: "Request body too large",
    429: "Rate limit exceeded",
    502: "The upstream provider failed or could not be reached",
    503: "Unavailable",
    504: "The upstream provider did not answer in time",
}


def document(operations: Sequence[Operation]) -> dict[str, Any]:
    types: list[Any] = [ErrorBody]
    for op in operations:
        types += [t for t in (op.request, op.response, op.stream) if t is not None]
    unique = list(dict.fromkeys(types))
    schemas, components = msgspec.json.schema_components(
        unique, ref_template=_REF, schema_hook=_schema_hook
    )
    ref = dict(zip(unique, schemas, strict=True))
    paths: dict[str, dict[str, Any]] = {}
    for op in operations:
        paths.setdefault(op.path, {})[op.method.lower()] = _operation(op, ref)
    return {
        "openapi": "3.1.0",
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
    if op.auth is Auth.MANAGEMENT:
        out["description"] = "Needs a management key."
    elif op.scope:
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
            "required": True,
            "content": {op.request_content_type: {"schema": ref[op.request]}},
        }
    ok: dict[str, Any] = {"description": "OK"}
    content: dict[str, Any] = {}
    if op.response is not None:
        content[op.response_content_type] = {"schema": ref[op.response]}
    if op.stream is not None:
        # Each `data:` frame holds one of these; the stream ends with `data: [DONE]`.
        content["text/event-stream"] = {"schema": ref[op.stream]}
        ok["description"] = (
            "OK: JSON, or with `stream: true` server-sent events whose `data:` frames hold "
            "the schema given for text/event-stream, ending with `data: [DONE]`"
        )
    if content:
        ok["content"] = content
    responses: dict[str, Any] = {str(op.success_status): ok}
    errors = list(op.errors)
    if op.auth is not Auth.NONE and 503 not in errors:
        errors.append(503)  # a credential not cached needs the database
    if op.auth is Auth.ANY and 429 not in errors:
        errors.append(429)  # a secret key's rate limit, applied by the layer on every route
    for status in errors:
        responses[str(status)] = {
            "description": _STATUS_TEXT.get(status, "Error"),
            "content": {"application/json": {"schema": ref[ErrorBody]}},
        }
    out["responses"] = responses
    return out
