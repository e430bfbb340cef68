"""The one request layer every API area is served through: routing, authentication and scopes,
per-route body limits, request bodies (JSON, streamed, multipart), responses, the one error
mapping, the request middleware and the OpenAPI document. This module only re-exports; the
work lives in the modules beside it:

    routing.py    Operation (a route's declaration), Routes, Router (404/405)
    app.py        WebApp: the ASGI app (route ▸ auth ▸ scopes ▸ handler ▸ errors), BodyLimits
    request.py    Request: params, query, headers, caller, body under the route's limit
    responses.py  Response, StreamResponse, json_response, send_json
    errors.py     the one error mapping (`to_api_error`: every layer's exceptions)
    middleware.py request id, access log, metrics (outermost)
    context.py    RequestContext: per-request facts for the log
    openapi.py    /openapi.json from the operations
    multipart.py  multipart/form-data parsed as a stream (python-multipart)
"""

from gateway.web.app import BodyLimits, WebApp
from gateway.web.request import Request
from gateway.web.responses import Response, StreamResponse, json_response
from gateway.web.routing import Auth, BodyLimit, Operation, Route, Routes, WebSocketRoute

__all__ = [
    "Auth",
    "BodyLimit",
    "BodyLimits",
    "Operation",
    "Request",
    "Response",
    "Route",
    "Routes",
    "StreamResponse",
    "WebApp",
    "WebSocketRoute",
    "json_response",
]
