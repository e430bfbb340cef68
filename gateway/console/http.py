"""The console's request and response plumbing: one `Page` per request (path, query, headers,
session, a bounded body), and the HTML, redirect and file answers, every one with the security
headers of security.py."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import parse_qsl

from gateway.console.security import MAX_FORM_BYTES, PAGE_HEADERS, FormError, parse_form
from gateway.console.sessions import Session
from gateway.errors import ClientDisconnected
from gateway.server.asgi import Receive, Scope, Send

Headers = Sequence[tuple[bytes, bytes]]


class PageError(Exception):
    """Answer with the error page: `status` and a message safe to show."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Page:
    scope: Scope
    receive: Receive
    method: str
    path: str
    params: Mapping[str, str]  # from the path pattern
    query: dict[str, str]
    session: Session | None = None
    session_id: str | None = None
    _form: dict[str, str] | None = field(default=None, repr=False)

    def header(self, name: bytes) -> str | None:
        for key, value in self.scope["headers"]:
            if key == name:
                return str(value.decode("latin-1"))
        return None

    async def form(self) -> dict[str, str]:
        """The urlencoded body (read once); PageError 413 past MAX_FORM_BYTES, 400 when it
        is not a form."""
        if self._form is None:
            chunks: list[bytes] = []
            size = 0
            more = True
            while more:
                message = await self.receive()
                if message["type"] == "http.disconnect":
                    raise ClientDisconnected
                chunk: bytes = message.get("body", b"")
                size += len(chunk)
                if size > MAX_FORM_BYTES:
                    raise PageError(413, "The form is too large.")
                chunks.append(chunk)
                more = bool(message.get("more_body", False))
            try:
                self._form = parse_form(self.header(b"content-type"), b"".join(chunks))
            except FormError as exc:
                raise PageError(400, str(exc)) from None
        return self._form


def parse_query(raw: bytes) -> dict[str, str]:
    """The query string, first value of each name; PageError 400 when not UTF-8."""
    if not raw:
        return {}
    try:
        pairs = parse_qsl(raw.decode("utf-8"), keep_blank_values=True, max_num_fields=50)
    except (UnicodeDecodeError, ValueError):
        raise PageError(400, "The query string is not valid.") from None
    out: dict[str, str] = {}
    for name, value in pairs:
        out.setdefault(name, value)
    return out


async def send_page(
    send: Send, status: int, body: bytes, headers: Headers = (), content_type: bytes = b""
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type or b"text/html; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                *PAGE_HEADERS,
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def redirect(send: Send, location: str, headers: Headers = ()) -> None:
    await send_page(send, 303, b"", [(b"location", location.encode()), *headers])
