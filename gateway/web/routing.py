"""Routes declared once, and the router that finds them.

An `Operation` says everything the request layer and /openapi.json need to know about a route:
method, path (OpenAPI form, `/v1/keys/{key_id}`), who may call it, which body limit applies, the
msgspec types of its body and its answer. A `Route` is an operation plus its handler.

`Router.match` routes on the raw path as the client sent it (ASGI `raw_path`): segments are
split on a literal `/` only and each segment is percent-decoded afterwards, so `%2F` inside a
segment is part of it and never a separator (`/v1%2Fadmin%2Factors` is no route, and
`/v1/files/<id>%2Fcontent` asks for a file whose id holds a `/`). It looks static paths up in a
dict first (the hot path, `/v1/chat/completions`, is one dict lookup), then tries the templated
ones in declaration order. A path parameter holding a control character or invalid UTF-8 after
decoding can name nothing: 404 `not_found` naming it, before a handler (or storage) sees it. It
raises that, the 404 `unknown_url` and the 405 `method_not_allowed` (with `Allow`) errors; it
does no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import unquote_to_bytes

from gateway.server.asgi import Receive, Scope, Send
from protocol.errors import APIError, not_found
from protocol.labels import CONTROL_CHARACTERS

if TYPE_CHECKING:
    from gateway.web.request import Request
    from gateway.web.responses import Response, StreamResponse

_PARAM = re.compile(r"\{([a-z_][a-z0-9_]*)\}")
# In a canonical path (see `canonical_path`), the two escapes a decoded segment may hold.
_ESCAPE = re.compile("%(25|2F)")
# What no id can hold: C0 and C1 controls, DEL, and the lone surrogates that stand for bytes
# that were not UTF-8.
_UNUSABLE = re.compile(f"[{CONTROL_CHARACTERS}\ud800-\udfff]")


class Auth(Enum):
    NONE = "none"  # anyone
    ANY = "any"  # a management key or a secret key (holding `scope`, when set)
    MANAGEMENT = "management"  # a management key only: 403 for secret keys
    # The instance operator's key only (GATEWAY_OPERATOR_KEY; gateway/auth/operator.py): for
    # instance-wide routes (`/v1/admin/*`), 403 for every organization's credential.
    OPERATOR = "operator"


# Which `[server]` body limit applies to a route (docs/operations.md): json
# (max_request_body_bytes, 1 MiB), audio (25 MB), file (512 MB), vision (20 MB). Plain strings:
# the layer looks the limit up per request, and a str's hash is cached (an Enum's is not).
BodyLimit = Literal["json", "audio", "file", "vision"]


@dataclass(frozen=True)
class Operation:
    method: str
    path: str  # OpenAPI form: /v1/keys/{key_id}
    summary: str
    tag: str
    request: Any = None  # the msgspec type the body decodes into (None: no body)
    request_content_type: str = "application/json"
    response: Any = None  # the msgspec type of the success answer
    response_content_type: str = "application/json"
    stream: Any = None  # the type of each `data:` frame when the answer may be text/event-stream
    success_status: int = 200
    auth: Auth = Auth.ANY
    scope: str | None = None  # the scope a secret key needs
    body_limit: BodyLimit = "json"
    errors: tuple[int, ...] = ()
    query: tuple[tuple[str, str, str], ...] = ()  # (name, JSON type, description)
    # Path parameters that may contain `/` (a model id such as `sim/sim-small`); only the
    # last parameter of a path can.
    slash_params: tuple[str, ...] = ()
    # For /openapi.json only (gateway/web/openapi.py): whether a body must be sent (False: it
    # may be omitted), other success statuses with the same answer, and other media types of
    # the success answer (media type, msgspec type; None: binary).
    request_required: bool = True
    other_success: tuple[int, ...] = ()
    alternatives: tuple[tuple[str, Any], ...] = ()

    @property
    def path_params(self) -> list[str]:
        return _PARAM.findall(self.path)

    @cached_property
    def query_names(self) -> frozenset[str]:
        return frozenset(name for name, _, _ in self.query)


Handler = Callable[["Request"], Awaitable["Response | StreamResponse | None"]]
WebSocketHandler = Callable[[Scope, Receive, Send], Awaitable[None]]
H = TypeVar("H", bound=Handler)
W = TypeVar("W", bound=WebSocketHandler)


@dataclass(frozen=True, slots=True)
class Route:
    """A handler returns the response to send, or None when it sent one itself (a stream)."""

    operation: Operation
    handler: Handler


@dataclass(frozen=True, slots=True)
class WebSocketRoute:
    """A route for the ASGI `websocket` scope type: the handler gets the raw ASGI channels."""

    path: str
    handler: WebSocketHandler


@dataclass
class Routes:
    """One API area's routes, collected with decorators."""

    routes: list[Route | WebSocketRoute] = field(default_factory=list)

    def operation(self, op: Operation) -> Callable[[H], H]:
        def register(handler: H) -> H:
            self.routes.append(Route(op, handler))
            return handler

        return register

    def websocket(self, path: str) -> Callable[[W], W]:
        def register(handler: W) -> W:
            self.routes.append(WebSocketRoute(path, handler))
            return handler

        return register

    def add(self, op: Operation, handler: Handler) -> None:
        self.routes.append(Route(op, handler))

    def __iter__(self) -> Iterator[Route | WebSocketRoute]:
        return iter(self.routes)


Methods = dict[str, Route]


@dataclass(frozen=True, slots=True)
class _Template:
    pattern: re.Pattern[str]
    methods: Methods


class Router:
    def __init__(self, routes: Iterable[Route | WebSocketRoute]) -> None:
        self._static: dict[str, Methods] = {}
        self._static_raw: dict[bytes, Methods] = {}  # the same, by the path's bytes
        self._templates: list[_Template] = []
        self._by_template: dict[str, Methods] = {}
        self._websockets: dict[str, WebSocketHandler] = {}
        self.operations: list[Operation] = []
        for route in routes:
            if isinstance(route, WebSocketRoute):
                self._websockets[route.path] = route.handler
                continue
            op = route.operation
            if "{" not in op.path:
                methods = self._static.setdefault(op.path, {})
                self._static_raw[op.path.encode()] = methods
            elif op.path in self._by_template:
                methods = self._by_template[op.path]
            else:
                methods = self._by_template[op.path] = {}
                self._templates.append(_Template(_compile(op), methods))
            if op.method in methods:
                raise ValueError(f"{op.method} {op.path} is declared twice")
            methods[op.method] = route
            self.operations.append(op)

    def __repr__(self) -> str:
        return (
            f"<Router static={len(self._static)} templated={len(self._templates)} "
            f"websocket={len(self._websockets)} operations={len(self.operations)}>"
        )

    def match(self, method: str, raw_path: bytes) -> tuple[Route, dict[str, str] | None]:
        """The route and its path parameters (None for a static path) for the raw path (no
        query); APIError 404/405. HEAD is served by the GET route (the server sends no body
        for HEAD)."""
        methods = self._static_raw.get(raw_path)  # the hot path: no decoding at all
        if methods is not None:
            route = methods.get(method)
            if route is not None:
                return route, None
        path = canonical_path(raw_path)
        try:
            return self._match(method, path, raw_path)
        except APIError:
            if method != "HEAD":
                raise
            return self._match("GET", path, raw_path)

    def _match(
        self, method: str, path: str, raw_path: bytes
    ) -> tuple[Route, dict[str, str] | None]:
        methods = self._static.get(path)
        if methods is not None:
            route = methods.get(method)
            if route is not None:
                return route, None
        allowed: list[str] = list(methods or ())
        for template in self._templates:
            found = template.pattern.fullmatch(path)
            if found is None:
                continue
            route = template.methods.get(method)
            if route is not None:
                return route, _params(found.groupdict())
            allowed += template.methods
        shown = raw_path.decode("ascii", "backslashreplace")
        if allowed:
            raise method_not_allowed(method, shown, allowed)
        raise unknown_url(method, shown)

    def websocket(self, raw_path: bytes) -> WebSocketHandler | None:
        return self._websockets.get(canonical_path(raw_path))


def canonical_path(raw_path: bytes) -> str:
    """The path routes are matched against: each `/`-separated segment of the raw path
    percent-decoded, with a `%` or `/` it decodes to written back as `%25` / `%2F`, so a decoded
    slash never separates segments and `%61` still matches a literal `a` (RFC 3986 6.2.2.2).
    Bytes that are not UTF-8 become lone surrogates: they match no literal segment, and a
    parameter holding one is refused (`_params`)."""
    if b"%" not in raw_path:  # the usual case: nothing to decode
        return raw_path.decode("utf-8", "surrogateescape")
    return "/".join(
        unquote_to_bytes(segment)
        .decode("utf-8", "surrogateescape")
        .replace("%", "%25")
        .replace("/", "%2F")
        for segment in raw_path.split(b"/")
    )


def _params(found: dict[str, str]) -> dict[str, str]:
    """The decoded path parameters; 404 for one no object can have as its id."""
    for name, value in found.items():
        if "%" in value:
            value = found[name] = _ESCAPE.sub(_unescape, value)
        if _UNUSABLE.search(value) is not None:
            raise not_found(
                f"Nothing matches this `{name}`: it holds a control character or bytes that "
                "are not UTF-8.",
                param=name,
            )
    return found


def _unescape(escape: re.Match[str]) -> str:
    return "%" if escape.group(1) == "25" else "/"


def _compile(op: Operation) -> re.Pattern[str]:
    params = op.path_params
    for name in op.slash_params:
        if not params or name != params[-1]:
            raise ValueError(f"{op.path}: only the last path parameter may contain '/'")
    out, last = [], 0
    for found in _PARAM.finditer(op.path):
        out.append(re.escape(op.path[last : found.start()]))
        name = found.group(1)
        out.append(f"(?P<{name}>.+)" if name in op.slash_params else f"(?P<{name}>[^/]+)")
        last = found.end()
    out.append(re.escape(op.path[last:]))
    return re.compile("".join(out))


def unknown_url(method: str, path: str) -> APIError:
    return APIError(
        404,
        f"Unknown request URL: {method} {path}.",
        type="not_found_error",
        code="unknown_url",
    )


def method_not_allowed(method: str, path: str, allowed: Iterable[str]) -> APIError:
    return APIError(
        405,
        f"Method {method} is not allowed on {path}.",
        type="invalid_request_error",
        code="method_not_allowed",
        headers={"Allow": ", ".join(sorted(set(allowed)))},
    )
