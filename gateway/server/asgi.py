"""The ASGI types the server and the request layer share (the interface between them), and
the one exception for "the client left", which both raise."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[..., Awaitable[None]]  # Hypercorn's wrapper wants a narrower signature


class ClientDisconnected(Exception):
    """The client left: it closed or reset the connection before its answer was complete.

    The server raises it from `send` (a write failed) and the request layer from reading the
    body; the error mapping (gateway/web/errors.py) answers nothing, and the request is logged
    as 499 `client_disconnected`.
    """
