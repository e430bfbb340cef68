"""One HTTP request as the handlers see it: path parameters, query, headers, the caller, the
request context, and the body under the route's limit (whole, JSON, streamed or multipart).

The body is read at most once, from the ASGI `receive` channel: whole (`body`, `json`) or as a
stream of chunks (`stream`). A declared `Content-Length` over the limit is refused before any of
it is read; a chunked body as soon as the running count passes the limit. Both are APIError 413
`request_too_large` with `Connection: close` (the rest of the body is never read).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import date, datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, TypeVar

from gateway.errors import ClientDisconnected
from gateway.server.asgi import Receive, Scope, Send
from gateway.web.context import RequestContext
from gateway.web.errors import request_too_large
from gateway.web.multipart import DEFAULT_LIMITS, Form, MultipartLimits, open_multipart
from gateway.web.query import parse_query
from gateway.web.responses import Headers
from protocol.decoding import decode_json
from protocol.errors import APIError, invalid_request
from protocol.timefmt import from_datetime
from services.principal import Principal

if TYPE_CHECKING:
    from gateway.web.routing import Operation

T = TypeVar("T")
_NO_PARAMS: Mapping[str, str] = MappingProxyType({})
# Header fields the gateway reads that carry one value (RFC 9110: not a list).
SINGLE_VALUED = frozenset(
    (b"authorization", b"content-type", b"content-length", b"host", b"idempotency-key")
)
_TRUE = frozenset({"true", "1", "yes"})
_FALSE = frozenset({"false", "0", "no"})


class Request:
    __slots__ = (
        "_body_read",
        "_query",
        "ctx",
        "headers",
        "limit",
        "operation",
        "path_params",
        "principal",
        "receive",
        "scope",
        "send",
        "started",
    )

    def __init__(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        ctx: RequestContext,
        operation: Operation,
        path_params: dict[str, str] | None,
        limit: int,
    ) -> None:
        self.scope = scope
        self.receive = receive
        self.send = send
        self.ctx = ctx
        self.operation = operation
        self.path_params: Mapping[str, str] = path_params or _NO_PARAMS
        self.limit = limit  # the route's body limit, in bytes
        self.principal: Principal | None = None  # set by the layer when the route needs auth
        self.headers: Headers = []  # added to every response, errors included (rate limits)
        self.started = False  # the response has begun: an error can no longer be answered
        self._query: dict[str, str] | None = None
        self._body_read = False

    def __repr__(self) -> str:
        return f"<Request {self.operation.method} {self.scope['path']} started={self.started}>"

    @property
    def method(self) -> str:
        return str(self.scope["method"])

    @property
    def path(self) -> str:
        return str(self.scope["path"])

    def header(self, name: bytes) -> str | None:
        """A request header's value; `name` lower-case. A field sent more than once is
        combined with ", " as RFC 9110 5.3 defines for list-valued fields (`Accept`), except
        the single-valued ones the gateway reads (`SINGLE_VALUED`): a second copy of those is
        400 `duplicate_header`, since which copy a proxy in front of us acted on is unknowable.
        """
        found: bytes | None = None
        for key, value in self.scope["headers"]:
            if key == name:
                if found is None:
                    found = value
                elif name in SINGLE_VALUED:
                    raise duplicate_header(name)
                else:
                    found += b", " + value
        return None if found is None else str(found.decode("latin-1"))

    # -- query ----------------------------------------------------------------------------

    @property
    def query(self) -> dict[str, str]:
        """The query parameters, parsed on first use by gateway/web/query.py: 400 for invalid
        UTF-8 or a control character anywhere, and for an empty or repeated parameter the
        route declares (`Operation.query`); a declared parameter is therefore absent or a
        non-empty value."""
        if self._query is None:
            raw = self.scope.get("query_string", b"")
            self._query = parse_query(raw, self.operation.query_names) if raw else {}
        return self._query

    def query_int(self, name: str, default: int, *, minimum: int, maximum: int) -> int:
        raw = self.query.get(name)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise invalid_request(f"`{name}` must be an integer.", param=name) from None
        if not minimum <= value <= maximum:
            raise invalid_request(f"`{name}` must be between {minimum} and {maximum}.", param=name)
        return value

    def query_time(self, name: str) -> int | None:
        """An ISO 8601 date (`2026-11-01`, midnight UTC) or date-time (naive = UTC), in µs."""
        raw = self.query.get(name)
        if not raw:
            return None
        try:
            if "T" in raw or " " in raw:
                return from_datetime(datetime.fromisoformat(raw.replace("Z", "+00:00")))
            day = date.fromisoformat(raw)
            return from_datetime(datetime(day.year, day.month, day.day))
        except ValueError:
            raise invalid_request(
                f"`{name}` must be an ISO 8601 date or date-time, e.g. 2026-11-01.", param=name
            ) from None

    def query_bool(self, name: str) -> bool | None:
        raw = self.query.get(name)
        if raw is None:
            return None
        lowered = raw.lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise invalid_request(f"`{name}` must be true or false.", param=name)

    # -- body -----------------------------------------------------------------------------

    @property
    def content_length(self) -> int | None:
        """The declared body length (None: chunked, or none); 400 when not an integer."""
        declared = self.header(b"content-length")
        if declared is None:
            return None
        try:
            return int(declared)
        except ValueError:
            raise invalid_request("Content-Length is not an integer.") from None

    def _check_declared_length(self) -> None:
        if self._body_read:
            raise RuntimeError("the request body was already read")
        self._body_read = True
        length = self.content_length
        if length is not None and length > self.limit:
            raise request_too_large()

    async def body(self) -> bytes:
        """The whole body. APIError 413 past the limit; ClientDisconnected if the client left.
        Cancellation: stops between chunks, the rest of the body unread."""
        self._check_declared_length()
        receive, limit = self.receive, self.limit
        message = await receive()
        chunk: bytes = message.get("body", b"")
        if not message.get("more_body", False) and message["type"] == "http.request":
            if len(chunk) > limit:
                raise request_too_large()
            return chunk  # one message: the common case, no copy
        chunks = [chunk]
        size = len(chunk)
        while True:
            if message["type"] == "http.disconnect":
                raise ClientDisconnected
            if size > limit:
                raise request_too_large()
            if not message.get("more_body", False):
                return b"".join(chunks)
            message = await receive()
            chunk = message.get("body", b"")
            size += len(chunk)
            chunks.append(chunk)

    def stream(self) -> AsyncIterator[bytes]:
        """The body chunk by chunk, as the client sends it (back-pressure: nothing is read
        ahead). APIError 413 at once for a declared length over the limit, else once the
        running count passes it; ClientDisconnected if the client left. Cancellation: stops
        between chunks, the rest of the body unread."""
        self._check_declared_length()
        return self._chunks()

    async def _chunks(self) -> AsyncGenerator[bytes, None]:
        size = 0
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                raise ClientDisconnected
            chunk: bytes = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                raise request_too_large()
            if chunk:
                yield chunk
            if not message.get("more_body", False):
                return

    @asynccontextmanager
    async def multipart(self, limits: MultipartLimits = DEFAULT_LIMITS) -> AsyncIterator[Form]:
        """The body as multipart/form-data parts, parsed as it streams in under the route's
        limit (`async with request.multipart() as form: async for part in form: ...`; 415
        when it is not multipart, 400 `invalid_multipart` when malformed). Spooled parts are
        deleted when the block is left, and the body stream is closed (the parser stops at
        the closing boundary, before the stream's own end). See gateway/web/multipart.py."""
        self._check_declared_length()
        chunks = self._chunks()
        try:
            async with open_multipart(self.header(b"content-type"), chunks, limits) as form:
                yield form
        finally:
            await chunks.aclose()

    async def json(self, type: type[T]) -> T:
        """The body decoded into `type`: 413 past the limit, 400 naming `param` when invalid."""
        return decode_json(await self.body(), type)


def duplicate_header(name: bytes) -> APIError:
    shown = "-".join(word.capitalize() for word in name.decode("latin-1").split("-"))
    return invalid_request(
        f"The {shown} header is sent more than once; send it once.", code="duplicate_header"
    )
