"""The OpenAPI 3.1 document, built from the route declarations and their msgspec types."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import msgspec

from gateway.routing import Operation
from protocol.errors import ErrorBody

_PATH_PARAM = re.compile(r"<(?:[a-z]+:)?([a-z_]+)>")
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
        types += [t for t in (op.request, op.response) if t is not None]
    unique = list(dict.fromkeys(types))
    schemas, components = msgspec.json.schema_components(unique, ref_template=_REF)
    ref = dict(zip(unique, schemas, strict=True))
    paths: dict[str, dict[str, Any]] = {}
    for op in operations:
        path = _PATH_PARAM.sub(r"{\1}", op.path)
        paths.setdefault(path, {})[op.method.lower()] = _operation(op, ref)
    return {
        "openapi": "3.1.0",
        "info": {"title": "Model gateway", "version": "1"},
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _operation(op: Operation, ref: dict[Any, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"summary": op.summary, "tags": [op.tag]}
    if op.auth:
        out["security"] = [{"bearer": []}]
    if op.scope:
        out["description"] = f"Needs a management key or a secret key with `{op.scope}`."
    params = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in _PATH_PARAM.findall(op.path)
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
            "content": {"application/json": {"schema": ref[op.request]}},
        }
    ok: dict[str, Any] = {"description": "OK"}
    if op.response is not None:
        ok["content"] = {op.response_content_type: {"schema": ref[op.response]}}
    responses: dict[str, Any] = {str(op.success_status): ok}
    for status in op.errors:
        responses[str(status)] = {
            "description": _STATUS_TEXT.get(status, "Error"),
            "content": {"application/json": {"schema": ref[ErrorBody]}},
        }
    out["responses"] = responses
    return out
