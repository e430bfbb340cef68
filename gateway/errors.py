"""Every error the app answers, in the OpenAI shape, with the request id header.

`APIError` is rendered as is; Werkzeug's HTTP exceptions (unknown route, 405, 413 from the
body limit...) are translated; anything else is logged here with its traceback and answered
as a plain 500 — never a stack trace or a driver message to the client.
"""

from __future__ import annotations

import logging

from quart import Quart, Response, request
from werkzeug.exceptions import HTTPException

from protocol.errors import APIError, server_error
from storage.errors import StorageUnavailable

log = logging.getLogger("gateway.errors")

_HTTP_ERRORS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "bad_request"),
    404: ("not_found_error", "unknown_url"),
    405: ("invalid_request_error", "method_not_allowed"),
    408: ("invalid_request_error", "request_timeout"),
    413: ("invalid_request_error", "request_too_large"),
    415: ("invalid_request_error", "unsupported_media_type"),
}


def error_response(error: APIError) -> Response:
    response = Response(error.body(), status=error.status, content_type="application/json")
    for name, value in error.headers.items():
        response.headers[name] = value
    return response


def from_http_exception(exc: HTTPException) -> APIError:
    status = exc.code or 500
    type_, code = _HTTP_ERRORS.get(status, ("invalid_request_error", "http_error"))
    if status == 404:
        message = f"Unknown request URL: {request.method} {request.path}."
    elif status == 405:
        message = f"Method {request.method} is not allowed on {request.path}."
    elif status == 413:
        message = "The request body is too large."
    else:
        message = exc.description or exc.name
    error = APIError(status, message, type=type_, code=code)
    if status == 413:
        # The rest of the body is never read: close the connection rather than leave the
        # client blocked writing into a full socket.
        error.headers["Connection"] = "close"
    if status == 405 and exc.get_headers():
        for name, value in exc.get_headers():
            if name.lower() == "allow":
                error.headers["Allow"] = value
    return error


def install(app: Quart) -> None:
    @app.errorhandler(APIError)
    async def _api_error(exc: APIError) -> Response:
        return error_response(exc)

    @app.errorhandler(HTTPException)
    async def _http_error(exc: HTTPException) -> Response:
        return error_response(from_http_exception(exc))

    @app.errorhandler(StorageUnavailable)
    async def _storage_down(exc: StorageUnavailable) -> Response:
        log.error("storage unavailable: %s", exc)
        return error_response(
            APIError(
                503,
                "The service is temporarily unavailable; retry shortly.",
                type="server_error",
                code="service_unavailable",
                headers={"Retry-After": "1"},
            )
        )

    @app.errorhandler(Exception)
    async def _unexpected(exc: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(server_error())
