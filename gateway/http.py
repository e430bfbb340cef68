"""Small request/response helpers shared by the routes: auth, JSON bodies, query params."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from quart import Response, request

from gateway.auth import Authenticator
from gateway.principal import Principal
from gateway.request_context import context_of
from protocol.decoding import decode_json
from protocol.errors import invalid_request

T = TypeVar("T")
_TRUE = frozenset({"true", "1", "yes"})
_FALSE = frozenset({"false", "0", "no"})


def note_route() -> None:
    ctx = context_of(request.scope)
    if ctx is not None and request.url_rule is not None:
        ctx.route = request.url_rule.rule


async def authenticate(auth: Authenticator, scope: str | None = None) -> Principal:
    """The caller, checked for `scope`; fills the access-log fields. 401/403 as APIError."""
    note_route()
    principal = await auth.authenticate(request.headers.get("Authorization"))
    ctx = context_of(request.scope)
    if ctx is not None:
        ctx.org_id = principal.org_id
        ctx.key_id = principal.key_id
    if scope is not None:
        principal.require_scope(scope)
    return principal


async def read_json(type: type[T]) -> T:
    """The body decoded into `type`; 413 past the body limit, 400 with `param` when invalid."""
    body = await request.get_data(cache=False, as_text=False)
    assert isinstance(body, bytes)
    return decode_json(body, type)


def json_response(value: Any, status: int = 200) -> Response:
    return Response(msgspec.json.encode(value), status=status, content_type="application/json")


def query_int(name: str, default: int, *, minimum: int, maximum: int) -> int:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise invalid_request(f"`{name}` must be an integer.", param=name) from None
    if not minimum <= value <= maximum:
        raise invalid_request(f"`{name}` must be between {minimum} and {maximum}.", param=name)
    return value


def query_bool(name: str) -> bool | None:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return None
    lowered = raw.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise invalid_request(f"`{name}` must be true or false.", param=name)
